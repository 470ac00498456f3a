#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>

#include "absl/strings/str_cat.h"
#include "trainer/model/model_spec.h"
#include "trainer/runtime/train.h"
#include "util/status_macros.h"

namespace mnemo::runtime {

namespace {

// Every integer flag's range, a flat table kept whole. The upper bounds lie
// far above any real run: a larger value is a typo that would allocate
// gigabytes (an evaluation batch of 2e9 events), start that many threads
// or run for ever, not a setting.
absl::Status CheckRanges(const TrainOptions& o) {
  constexpr int64_t kUnbounded = std::numeric_limits<int64_t>::max();
  constexpr int64_t kMaxBatch = 1000000;
  struct Range {
    const char* flag;
    int64_t value, min, max;
    const char* meaning;
  };
  for (const Range& c : std::initializer_list<Range>{
           {"--threads", o.compute.threads, 0, 1024, " (0: every usable CPU)"},
           {"--epochs", o.optim.epochs, 1, 100000, ""},
           {"--batch-size", o.optim.batch_size, 1, kMaxBatch, ""},
           {"--eval-batch-size", o.eval.batch_size, 0, kMaxBatch,
            " (0: the default)"},
           {"--max-events", o.data.max_events, 0, kUnbounded, " (0: all)"},
           {"--patience", o.optim.patience, 0, 100000, " (0: off)"},
           {"--refine-chunks", o.policy.depbloom.refine_chunks, 0, 1024,
            " (0: the policy's default)"},
           {"--tgb-negatives", o.eval.tgb_negatives, -1, kMaxBatch,
            " (0: every other destination; -1: the data set's)"},
           {"--tgb-seed", o.eval.tgb_seed, 0, kUnbounded, ""},
           {"--profile-batches", o.run.profile_batches, 1, 100000, ""},
           {"--sync-every", o.policy.deptgl.sync_every, 1, kMaxBatch, ""},
           {"--urgent-batches", o.policy.depbloom.urgent_batches, 0, kMaxBatch,
            ""}}) {
    if (c.value >= c.min && c.value <= c.max) continue;
    return absl::InvalidArgumentError(
        c.max == kUnbounded
            ? absl::StrCat(c.flag, " must be >= ", c.min, c.meaning, ", got ",
                           c.value)
            : absl::StrCat(c.flag, " must be in [", c.min, ", ", c.max, "]",
                           c.meaning, ", got ", c.value));
  }
  if (!((o.gradients.bucket_mb >= 0 && o.gradients.bucket_mb <= 1024) ||
        o.gradients.bucket_mb == GradientOptions::kAuto)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--bucket-mb must be in [0, 1024] (0: one bucket), or -1 (the "
        "device's default), got ",
        o.gradients.bucket_mb));
  }
  if (!(o.optim.lr > 0) || !std::isfinite(o.optim.lr)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--lr must be > 0, got ", o.optim.lr));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateTrainOptions(const TrainOptions& o) {
  RETURN_IF_ERROR(CheckRanges(o));
  // The widths, heads, dropout and what each model's shapes need: the
  // model's row of the spec table (model_spec.h).
  return model::ValidateModelOptions(o.model);
}

int64_t EvalBatchSize(const TrainOptions& o) {
  if (o.eval.batch_size > 0) return o.eval.batch_size;
  return o.eval.protocol == Protocol::kTgnReference ||
                 o.eval.protocol == Protocol::kTgb
             ? 200
             : o.optim.batch_size;
}

TrainOptions WithModelDefaults(const TrainOptions& options) {
  TrainOptions o = options;
  o.model = model::WithDefaults(o.model);  // the model's row (model_spec.h)
  return o;
}

}  // namespace mnemo::runtime
