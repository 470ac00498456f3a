#include <cmath>
#include <cstdint>
#include <initializer_list>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "trainer/model/model_spec.h"
#include "trainer/runtime/train.h"

namespace mnemo::runtime {

absl::Status ValidateTrainOptions(const TrainOptions& o) {
  // One flag per message, named, with what it must be.
  struct AtLeast {
    const char* flag;
    int64_t value, min;
    const char* meaning;
  };
  for (const AtLeast& c : std::initializer_list<AtLeast>{
           {"--threads", o.compute.threads, 0, " (0: every usable CPU)"},
           {"--epochs", o.optim.epochs, 1, ""},
           {"--batch-size", o.optim.batch_size, 1, ""},
           {"--eval-batch-size", o.eval.batch_size, 0, " (0: the default)"},
           {"--max-events", o.data.max_events, 0, " (0: all)"},
           {"--patience", o.optim.patience, 0, " (0: off)"},
           {"--memory-dim", o.model.memory_dim, 1, ""},
           {"--time-dim", o.model.time_dim, 1, ""},
           {"--embedding-dim", o.model.embedding_dim, 1, ""},
           {"--neighbors", o.model.neighbors, 1, ""},
           {"--heads", o.model.heads, 1, ""},
           {"--refine-chunks", o.policy.depbloom.refine_chunks, 0,
            " (0: the policy's default)"},
           {"--tgb-negatives", o.eval.tgb_negatives, -1,
            " (0: every other destination; -1: the data set's)"},
           {"--tgb-seed", o.eval.tgb_seed, 0, ""}}) {
    if (c.value < c.min) {
      return absl::InvalidArgumentError(absl::StrCat(
          c.flag, " must be >= ", c.min, c.meaning, ", got ", c.value));
    }
  }
  // Far above any CPU count: a typo, which would start that many threads
  // and hang the run in thread creation.
  constexpr int kMaxThreads = 1024;
  if (o.compute.threads > kMaxThreads) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--threads must be <= ", kMaxThreads, ", got ", o.compute.threads));
  }
  if (!(o.optim.lr > 0) || !std::isfinite(o.optim.lr)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--lr must be > 0, got ", o.optim.lr));
  }
  if (!(o.model.dropout >= 0 && o.model.dropout < 1) && o.model.dropout != -1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--dropout must be in [0, 1) (or -1: the model's default), got ",
        o.model.dropout));
  }
  // What each model's shapes need.
  if (o.model.kind == model::ModelKind::kTgn &&
      (o.model.memory_dim + o.model.time_dim) % o.model.heads != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--memory-dim + --time-dim (%d) must be divisible by --heads (%d)",
        o.model.memory_dim + o.model.time_dim, o.model.heads));
  }
  if (o.model.kind == model::ModelKind::kApan) {
    if (o.model.memory_dim % o.model.heads != 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("--memory-dim (%d) must be divisible by --heads "
                          "(%d) for apan",
                          o.model.memory_dim, o.model.heads));
    }
    if (o.model.mailbox < 2) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--mailbox must be >= 2 for apan, got ", o.model.mailbox));
    }
  }
  if (o.model.kind == model::ModelKind::kTgat ||
      o.model.kind == model::ModelKind::kDysat) {
    const std::string name(model::ModelName(o.model.kind));
    if (o.model.embedding_dim % o.model.heads != 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("--embedding-dim (%d) must be divisible by --heads "
                          "(%d) for %s",
                          o.model.embedding_dim, o.model.heads, name));
    }
    if (o.model.layers != 1 && o.model.layers != 2) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--layers must be 1 or 2 for ", name, ", got ", o.model.layers));
    }
  }
  if (o.model.kind == model::ModelKind::kDysat) {
    if (o.model.snapshots < 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--snapshots must be >= 1 for dysat, got ", o.model.snapshots));
    }
    if (!(o.model.snapshot_span > 0) || !std::isfinite(o.model.snapshot_span)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--snapshot-span must be > 0 for dysat, got ",
                       o.model.snapshot_span));
    }
  }
  return absl::OkStatus();
}

TrainOptions WithModelDefaults(const TrainOptions& options) {
  TrainOptions o = options;
  // TGL's configurations: TGAT and DySAT sample uniformly; TGAT, DySAT
  // and APAN use dropout 0.1.
  const bool sampled = o.model.kind == model::ModelKind::kTgat ||
                       o.model.kind == model::ModelKind::kDysat;
  if (!o.model.neighbor_strategy.has_value()) {
    o.model.neighbor_strategy = sampled ? data::NeighborStrategy::kUniform
                                        : data::NeighborStrategy::kRecent;
  }
  if (o.model.dropout == -1) {
    o.model.dropout =
        sampled || o.model.kind == model::ModelKind::kApan ? 0.1 : 0.2;
  }
  return o;
}

}  // namespace mnemo::runtime
