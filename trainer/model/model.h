// The model interface: what the engine, evaluator, checkpoints, policies and
// launcher know of a temporal graph model, whichever runs.
//
// A model reads one batch (BatchTensors: index tensors prepared by the
// runtime's batch builder) and the node memory (trainer/memory/), and
// returns the batch's updated memory rows and its link logits; the runtime
// applies the update. It declares what it keeps per node (layout()) and what
// its batches must carry (needs()). Implementations: memory_models.h (TGN,
// JODIE), apan.h (APAN), tgat.h (TGAT), dysat.h (DySAT).
#ifndef MNEMO_TRAINER_MODEL_MODEL_H_
#define MNEMO_TRAINER_MODEL_MODEL_H_

#include <torch/torch.h>

#include <memory>

#include "trainer/memory/node_memory.h"
#include "trainer/model/model_kind.h"

namespace mnemo::model {

struct ModelOptions {
  ModelKind kind = ModelKind::kTgn;
  int64_t memory_dim = 100;     // node memory width
  int64_t time_dim = 100;       // time encoding width
  int64_t embedding_dim = 100;  // output embedding width (TGN)
  int64_t edge_dim = 0;         // edge feature width (0: none)
  int64_t heads = 2;            // attention heads (TGN, TGAT)
  double dropout = 0.2;         // attention dropout (TGN, TGAT)
  int64_t layers = 2;           // attention layers (TGAT: 1 or 2)
  int64_t mailbox = 10;         // mails kept per node (APAN)
  int64_t num_nodes = 0;        // node id range (DySAT's node embeddings)
  int64_t snapshots = 3;        // graph snapshots read (DySAT)
  double snapshot_span = 1e4;   // time span of a snapshot (DySAT)
  // DepBloom intra-batch memory refinement: the memory updater applied to a
  // node's message from an earlier micro-batch (REFINE) and a learned gate
  // between the refined and the plain update (COMB), Eq. 3.
  bool refine = false;
};

// What the batch builder must put into a model's batches.
struct BatchNeeds {
  // Temporal neighbours of each target (BatchTensors::nbr_*).
  bool neighbors = false;
  // 2: also the neighbours of each neighbour before its edge time
  // (BatchTensors::nbr2_*).
  int neighbor_hops = 1;
  // The mail of a batch's events also goes to the endpoints' temporal
  // neighbours (APAN): the builder samples them for the positive events.
  bool mail_to_neighbors = false;
  // Each target's normalized time since its memory's last update
  // (BatchTensors::target_dt, with TimeGapStats).
  bool target_time_deltas = false;
  // > 0 (DySAT): instead of nbr_* and nbr2_*, the neighbours (and with
  // neighbor_hops 2 theirs) in each of `snapshots` windows of
  // `snapshot_span` before the target's time (BatchTensors::snap_*), by
  // node id: the model reads no node state of theirs.
  int snapshots = 0;
  double snapshot_span = 0;
};

// Normalization of the time since a node's last memory update: sources with
// the source statistics, destinations and negatives with the destination
// statistics (as the TGN reference does for JODIE).
struct TimeGapStats {
  double src_mean = 0, src_std = 1;
  double dst_mean = 0, dst_std = 1;
};

// Index tensors of one batch of B positive events with B negatives.
// Targets are [sources; destinations; negatives] (3B rows). The batch's
// distinct nodes are its slots (unique_rows); every other index refers to a
// slot.
struct BatchTensors {
  int64_t batch_size = 0;  // B
  // [U] int64 rows (memory::NodeMemory::Row) of the distinct nodes, in the
  // memory the batch was built against.
  torch::Tensor unique_rows;
  torch::Tensor target_slot;  // [3B] int64
  // Pending messages to apply before the batch (memory update).
  torch::Tensor mail_slot;  // [Mu] int64 slots with mail
  torch::Tensor mail_node;  // [Mu] int64 their rows in node memory
  torch::Tensor mail_dt;    // [Mu] float: mail time - last update
  // BatchNeeds::neighbors: k neighbour slots per target (padding: slot 0
  // and mask false).
  int64_t k = 0;
  torch::Tensor nbr_slot;       // [3B*k] int64
  torch::Tensor nbr_dt;         // [3B*k] float: target time - edge time
  torch::Tensor nbr_mask;       // [3B, k] bool
  torch::Tensor nbr_edge_feat;  // [3B*k, edge_dim] float (when edge_dim > 0)
  // BatchNeeds::neighbor_hops 2: k neighbours of each neighbour slot before
  // that slot's edge time (padding slots have none).
  torch::Tensor nbr2_dt;         // [3B*k*k] float: edge time - edge time
  torch::Tensor nbr2_mask;       // [3B*k, k] bool
  torch::Tensor nbr2_edge_feat;  // [3B*k*k, edge_dim] (edge_dim > 0)
  // BatchNeeds::snapshots H: for snapshot h (0 the oldest), each target's
  // k neighbours with time in [t - (H - h) span, t - (H - h - 1) span),
  // and with neighbor_hops 2 each of those slots' k neighbours in the same
  // window (the target's time, not the edge time, bounds it). The nodes
  // are rows of `snap_nodes`, the distinct node ids these read (targets
  // and neighbours; no node state of theirs is read). Padding: row 0, mask
  // false.
  torch::Tensor snap_nodes;       // [V] int64 node ids
  torch::Tensor snap_target;      // [3B] int64 row of each target
  torch::Tensor snap_node;        // [H, 3B*k] int64 rows
  torch::Tensor snap_mask;        // [H, 3B, k] bool
  torch::Tensor snap_edge_feat;   // [H, 3B*k, edge_dim] (edge_dim > 0)
  torch::Tensor snap2_node;       // [H, 3B*k*k] int64 rows
  torch::Tensor snap2_mask;       // [H, 3B*k, k] bool
  torch::Tensor snap2_edge_feat;  // [H, 3B*k*k, edge_dim] (edge_dim > 0)
  // A mailbox (RecordLayout::mailbox_slots k > 1): R query rows with their
  // mailboxes' slots: the 3B targets (whose first 2B rows are the positive
  // events' endpoints at their times), then, only when the positives are
  // replayed apart from the targets, both endpoints of each positive event
  // (source, then destination).
  torch::Tensor query_slot;    // [R] int64 slot in `unique`
  torch::Tensor mailbox_dt;    // [R, k] float: query time - mail time
  torch::Tensor mailbox_mask;  // [R, k] bool: the slot holds a mail
  // BatchNeeds::target_time_deltas: normalized time since each target's
  // last memory update.
  torch::Tensor target_dt;  // [3B] float
  // DepBloom intra-batch memory refinement (Eq. 3): R replicas of nodes read
  // in a later micro-batch than one of their events. Replica r refines the
  // memory of slot replica_self[r] with the message of that earlier event
  // (with slot replica_other[r] as the other endpoint); it is slot U + r of
  // the batch's memory, and target/neighbour slots may point to it.
  torch::Tensor replica_self;       // [R] int64
  torch::Tensor replica_other;      // [R] int64
  torch::Tensor replica_dt;         // [R] float: event time - memory time
  torch::Tensor replica_edge_feat;  // [R, edge_dim] (edge_dim > 0)
};

struct ModelOutput {
  // [U (+ R replicas), memory_dim]: updated memory of the unique nodes
  // (then the refined replicas).
  torch::Tensor memory;
  torch::Tensor pos_logits;  // [B]
  torch::Tensor neg_logits;  // [B]
  // A mailbox model's updated memory of each query row [R, memory_dim]
  // (BatchTensors::query_slot); NodeMemory::Apply reads it.
  torch::Tensor rows;
};

class ModelImpl : public torch::nn::Module {
 public:
  const ModelOptions& options() const { return options_; }
  ModelKind kind() const { return options_.kind; }
  // What this model keeps per node.
  memory::RecordLayout layout() const {
    return LayoutOf(options_.kind, options_.memory_dim, options_.edge_dim,
                    options_.mailbox);
  }
  virtual BatchNeeds needs() const = 0;

  // Memory update, embedding and link prediction for one batch, reading
  // (not changing) `state`.
  virtual ModelOutput Forward(const memory::NodeMemory& state,
                              const BatchTensors& batch) = 0;

 protected:
  explicit ModelImpl(const ModelOptions& options) : options_(options) {}
  ModelOptions options_;
};

using Model = std::shared_ptr<ModelImpl>;

// The model `options.kind` names, initialized from torch's generator.
Model MakeModel(const ModelOptions& options);

// A time encoder cos(w dt + b) (TGN Sec. 3.1) as TGN initializes it:
// w = 10^-linspace(0, 9, time_dim), b = 0. Apply as cos(encoder(dt)).
torch::nn::Linear MakeTimeEncoder(int64_t time_dim);

// The link predictor: `emb` [3B, d] holds the sources', destinations' and
// negatives' embeddings; `pred1` (Linear(2d, d), its weight the [source |
// destination] parts) and `pred2` (Linear(d, 1)) score (source,
// destination) and (source, negative): out->pos_logits, neg_logits [B].
void PredictLinks(const torch::Tensor& emb, int64_t batch_size,
                  torch::nn::Linear& pred1, torch::nn::Linear& pred2,
                  ModelOutput* out);

// The output of a model that keeps no node memory (TGAT, DySAT): an empty
// [U, 0] float memory on the batch's device and the links `emb` scores
// (PredictLinks).
ModelOutput MemorylessOutput(const torch::Tensor& emb, const BatchTensors& b,
                             torch::nn::Linear& pred1,
                             torch::nn::Linear& pred2);

// Attention of n queries over k slots each, as TGL's attention layers and
// APAN's memory updater compute it: per head, scores LeakyReLU_0.2(q . k),
// softmax over the slots `mask` [n, k] marks valid (a query with none
// aggregates nothing), dropout on the weights, the weighted sum of values.
// `q` [n, heads, dh], `key` and `value` [n, k, heads, dh]; returns
// [n, heads * dh].
torch::Tensor SlotAttention(const torch::Tensor& q, const torch::Tensor& key,
                            const torch::Tensor& value,
                            const torch::Tensor& mask, double dropout,
                            bool training);

// BCE-with-logits on positives (label 1) and negatives (label 0), as the
// TGN reference: mean over positives + mean over negatives.
torch::Tensor Loss(const ModelOutput& out);

// Parameter checksum (sum of all parameters, double precision).
double ParameterChecksum(torch::nn::Module& module);

}  // namespace mnemo::model

#endif  // MNEMO_TRAINER_MODEL_MODEL_H_
