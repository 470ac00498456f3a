#include <cmath>
#include <cstdint>
#include <initializer_list>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "trainer/model/model_kind.h"
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
           {"--threads", o.threads, 0, " (0: every usable CPU)"},
           {"--epochs", o.epochs, 1, ""},
           {"--batch-size", o.batch_size, 1, ""},
           {"--eval-batch-size", o.eval_batch_size, 0, " (0: the default)"},
           {"--max-events", o.max_events, 0, " (0: all)"},
           {"--patience", o.patience, 0, " (0: off)"},
           {"--memory-dim", o.memory_dim, 1, ""},
           {"--time-dim", o.time_dim, 1, ""},
           {"--embedding-dim", o.embedding_dim, 1, ""},
           {"--neighbors", o.neighbors, 1, ""},
           {"--heads", o.heads, 1, ""},
           {"--refine-chunks", o.refine_chunks, 0,
            " (0: the policy's default)"},
           {"--tgb-negatives", o.tgb_negatives, -1,
            " (0: every other destination; -1: the data set's)"},
           {"--tgb-seed", o.tgb_seed, 0, ""}}) {
    if (c.value < c.min) {
      return absl::InvalidArgumentError(absl::StrCat(
          c.flag, " must be >= ", c.min, c.meaning, ", got ", c.value));
    }
  }
  // Far above any CPU count: a typo, which would start that many threads
  // and hang the run in thread creation.
  constexpr int kMaxThreads = 1024;
  if (o.threads > kMaxThreads) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--threads must be <= ", kMaxThreads, ", got ", o.threads));
  }
  if (!(o.lr > 0) || !std::isfinite(o.lr)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--lr must be > 0, got ", o.lr));
  }
  if (!(o.dropout >= 0 && o.dropout < 1) && o.dropout != -1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--dropout must be in [0, 1) (or -1: the model's default), got ",
        o.dropout));
  }
  // What each model's shapes need.
  if (o.model == model::ModelKind::kTgn &&
      (o.memory_dim + o.time_dim) % o.heads != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--memory-dim + --time-dim (%d) must be divisible by --heads (%d)",
        o.memory_dim + o.time_dim, o.heads));
  }
  if (o.model == model::ModelKind::kApan) {
    if (o.memory_dim % o.heads != 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("--memory-dim (%d) must be divisible by --heads "
                          "(%d) for apan",
                          o.memory_dim, o.heads));
    }
    if (o.mailbox < 2) {
      return absl::InvalidArgumentError(
          absl::StrCat("--mailbox must be >= 2 for apan, got ", o.mailbox));
    }
  }
  if (o.model == model::ModelKind::kTgat ||
      o.model == model::ModelKind::kDysat) {
    const std::string name(model::ModelName(o.model));
    if (o.embedding_dim % o.heads != 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("--embedding-dim (%d) must be divisible by --heads "
                          "(%d) for %s",
                          o.embedding_dim, o.heads, name));
    }
    if (o.layers != 1 && o.layers != 2) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--layers must be 1 or 2 for ", name, ", got ", o.layers));
    }
  }
  if (o.model == model::ModelKind::kDysat) {
    if (o.snapshots < 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--snapshots must be >= 1 for dysat, got ", o.snapshots));
    }
    if (!(o.snapshot_span > 0) || !std::isfinite(o.snapshot_span)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--snapshot-span must be > 0 for dysat, got ", o.snapshot_span));
    }
  }
  return absl::OkStatus();
}

TrainOptions WithModelDefaults(const TrainOptions& options) {
  TrainOptions o = options;
  // TGL's configurations: TGAT and DySAT sample uniformly; TGAT, DySAT
  // and APAN use dropout 0.1.
  const bool sampled =
      o.model == model::ModelKind::kTgat || o.model == model::ModelKind::kDysat;
  if (!o.neighbor_strategy.has_value()) {
    o.neighbor_strategy = sampled ? data::NeighborStrategy::kUniform
                                  : data::NeighborStrategy::kRecent;
  }
  if (o.dropout == -1) {
    o.dropout = sampled || o.model == model::ModelKind::kApan ? 0.1 : 0.2;
  }
  return o;
}

}  // namespace mnemo::runtime
