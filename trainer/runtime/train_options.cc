#include <cmath>
#include <cstdint>
#include <initializer_list>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "trainer/model/model_spec.h"
#include "trainer/runtime/train.h"
#include "util/status_macros.h"

namespace mnemo::runtime {

namespace {

// The integer flags' lower bounds, one flag per message, named, with what
// it must be. A flat table: another bound is another row.
absl::Status CheckLowerBounds(const TrainOptions& o) {
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
  return absl::OkStatus();
}

// The other bounds: --threads' upper one, --lr, --dropout.
absl::Status CheckRanges(const TrainOptions& o) {
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
  return absl::OkStatus();
}

// What each model's shapes need.
absl::Status CheckModelShapes(const model::ModelOptions& m) {
  if (m.kind == model::ModelKind::kTgn &&
      (m.memory_dim + m.time_dim) % m.heads != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--memory-dim + --time-dim (%d) must be divisible by --heads (%d)",
        m.memory_dim + m.time_dim, m.heads));
  }
  if (m.kind == model::ModelKind::kApan) {
    if (m.memory_dim % m.heads != 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("--memory-dim (%d) must be divisible by --heads "
                          "(%d) for apan",
                          m.memory_dim, m.heads));
    }
    if (m.mailbox < 2) {
      return absl::InvalidArgumentError(
          absl::StrCat("--mailbox must be >= 2 for apan, got ", m.mailbox));
    }
  }
  if (m.kind == model::ModelKind::kTgat || m.kind == model::ModelKind::kDysat) {
    const std::string name(model::ModelName(m.kind));
    if (m.embedding_dim % m.heads != 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("--embedding-dim (%d) must be divisible by --heads "
                          "(%d) for %s",
                          m.embedding_dim, m.heads, name));
    }
    if (m.layers != 1 && m.layers != 2) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--layers must be 1 or 2 for ", name, ", got ", m.layers));
    }
  }
  if (m.kind == model::ModelKind::kDysat) {
    if (m.snapshots < 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--snapshots must be >= 1 for dysat, got ", m.snapshots));
    }
    if (!(m.snapshot_span > 0) || !std::isfinite(m.snapshot_span)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--snapshot-span must be > 0 for dysat, got ", m.snapshot_span));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateTrainOptions(const TrainOptions& o) {
  RETURN_IF_ERROR(CheckLowerBounds(o));
  RETURN_IF_ERROR(CheckRanges(o));
  return CheckModelShapes(o.model);
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
