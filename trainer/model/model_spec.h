// The models mnemo trains, one row each (ModelSpec): the name flags use, the
// node state the model keeps, its defaults, the checks its shapes need,
// whether DepBloom's intra-batch refinement is defined for it, and its
// factory. Torch-free header: flag parsing, the launcher and the summary
// read it before any model exists; the table itself is compiled with the
// models (model_spec.cc).
#ifndef MNEMO_TRAINER_MODEL_MODEL_SPEC_H_
#define MNEMO_TRAINER_MODEL_MODEL_SPEC_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "trainer/data/neighbor_sampler.h"
#include "trainer/memory/record_layout.h"

namespace mnemo::model {

enum class ModelKind { kTgn, kJodie, kApan, kTgat, kDysat };

// APAN's mailbox (--apan-mailbox): kMnemo attends over the filled slots only
// and gives a node the mail of the latest event that reaches it (its own
// winning a tie with a neighbour's); kTgl does what TGL does: every slot is
// attended (an empty one is a zero mail of time 0), and a node's mail and
// memory are those listed last in TGL's order (the sources' mails, then the
// destinations', then the neighbours' by root in that order).
enum class ApanMailbox { kMnemo, kTgl };

// How a model is built and what its batches sample (the flags of `mnemo
// train`; the defaults follow TGL's TGN configuration).
struct ModelOptions {
  ModelKind kind = ModelKind::kTgn;  // --model
  int64_t memory_dim = 100;          // node memory width
  int64_t time_dim = 100;            // time encoding width
  int64_t embedding_dim = 100;       // output embedding width (TGN)
  int heads = 2;                     // attention heads (TGN, TGAT, APAN, DySAT)
  // Attention dropout (TGN, TGAT, APAN, DySAT); -1: the model's default
  // (ModelSpec::default_dropout).
  double dropout = -1;
  int layers = 2;    // attention layers (TGAT, DySAT: 1 or 2)
  int mailbox = 10;  // mails kept per node (APAN)
  ApanMailbox apan_mailbox = ApanMailbox::kMnemo;  // --apan-mailbox
  int snapshots = 3;           // graph snapshots read (DySAT)
  double snapshot_span = 1e4;  // time span of a snapshot (DySAT)
  // Temporal neighbours sampled per target, and how (unset: the model's
  // default, ModelSpec::default_strategy).
  int neighbors = 10;
  std::optional<data::NeighborStrategy> neighbor_strategy;

  // Set from the data and the policy when the model is made.
  int64_t edge_dim = 0;   // edge feature width (0: none)
  int64_t num_nodes = 0;  // node id range (DySAT's node embeddings)
  // DepBloom intra-batch memory refinement: the memory updater applied to a
  // node's message from an earlier micro-batch (REFINE) and a learned gate
  // between the refined and the plain update (COMB), Eq. 3.
  bool refine = false;
};

class ModelImpl;  // model.h
using Model = std::shared_ptr<ModelImpl>;

struct ModelSpec {
  ModelKind kind;
  std::string_view name;  // "tgn", ... (--model)
  // The node state it keeps (memory and mails; none: only times).
  memory::RecordLayout (*layout)(const ModelOptions& options);
  data::NeighborStrategy default_strategy;
  double default_dropout;
  // INVALID_ARGUMENT naming the flag when `options` gives shapes the model
  // cannot build (heads that do not divide a width, ...).
  absl::Status (*validate)(const ModelOptions& options);
  // DepBloom's refinement (REFINE, COMB) is defined for its memory updater.
  bool refines;
  // The model, initialized from torch's generator (defaults resolved).
  Model (*make)(const ModelOptions& options);
};

// The row of `kind`.
const ModelSpec& SpecOf(ModelKind kind);
// The row named `name`; INVALID_ARGUMENT naming the known models otherwise.
absl::StatusOr<ModelKind> ParseModelKind(std::string_view name);
std::string_view ModelName(ModelKind kind);
// "mnemo" or "tgl" (--apan-mailbox); INVALID_ARGUMENT otherwise.
absl::StatusOr<ApanMailbox> ParseApanMailbox(std::string_view name);
std::string_view ApanMailboxName(ApanMailbox mailbox);

// `options` with the model's defaults where they are left open (the
// neighbour strategy, the dropout).
ModelOptions WithDefaults(const ModelOptions& options);

// The largest widths, neighbours, heads, DySAT snapshots, APAN mailbox
// slots and layers a run accepts.
inline constexpr int64_t kMaxWidth = 8192;
inline constexpr int64_t kMaxNeighbors = 1024;
inline constexpr int64_t kMaxHeads = 64;
inline constexpr int64_t kMaxSnapshots = 1024;
inline constexpr int64_t kMaxMailbox = 1024;
inline constexpr int64_t kMaxLayers = 16;

// The range checks every model shares and the model's own (INVALID_ARGUMENT
// naming one flag and what it must be).
absl::Status ValidateModelOptions(const ModelOptions& options);

// The node state a model of `options.kind` keeps (SpecOf(kind).layout).
inline memory::RecordLayout LayoutOf(const ModelOptions& options) {
  return SpecOf(options.kind).layout(options);
}
// The same with edge features `edge_dim` wide (the data's).
inline memory::RecordLayout LayoutOf(ModelOptions options, int64_t edge_dim) {
  options.edge_dim = edge_dim;
  return LayoutOf(options);
}

}  // namespace mnemo::model

#endif  // MNEMO_TRAINER_MODEL_MODEL_SPEC_H_
