#include <cmath>
#include <cstdint>
#include <initializer_list>

#include "absl/strings/str_cat.h"
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

// The other bounds: --threads' upper one, --lr.
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
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateTrainOptions(const TrainOptions& o) {
  RETURN_IF_ERROR(CheckLowerBounds(o));
  RETURN_IF_ERROR(CheckRanges(o));
  // The widths, heads, dropout and what each model's shapes need: the
  // model's row of the spec table (model_spec.h).
  return model::ValidateModelOptions(o.model);
}

TrainOptions WithModelDefaults(const TrainOptions& options) {
  TrainOptions o = options;
  o.model = model::WithDefaults(o.model);  // the model's row (model_spec.h)
  return o;
}

}  // namespace mnemo::runtime
