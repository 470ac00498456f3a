// The training flags shared by `mnemo train` (embedded default and local
// launcher) and `mnemo trainer` (one worker of a cluster).
#ifndef MNEMO_SERVICES_CLI_TRAIN_FLAGS_H_
#define MNEMO_SERVICES_CLI_TRAIN_FLAGS_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "coordinator/policy_spec.h"
#include "services/cli/flags.h"
#include "trainer/runtime/checkpoint/resume_point.h"
#include "trainer/runtime/depbloom_sizes.h"
#include "trainer/runtime/train.h"

namespace mnemo {

// --progress: how progress shows on the terminal.
enum class ProgressMode {
  kAuto,   // "auto": a bar when stderr is a terminal, else lines
  kBar,    // "bar": a \r progress bar
  kLines,  // "lines": a plain line every 10 s
  kNone,   // "none": per-epoch lines only
};
absl::StatusOr<ProgressMode> ParseProgressMode(std::string_view name);
std::string_view ProgressModeName(ProgressMode mode);

// --lr-scaling: how --lr follows the run's global batch.
enum class LrScaling {
  kAuto,    // "auto": under --policy depbloom unless --lr is given, linear
            // for JODIE and sqrt for the other models; else none
  kNone,    // "none": --lr as given
  kSqrt,    // "sqrt": --lr x sqrt(global batch / kLrReferenceBatch)
  kLinear,  // "linear": --lr x global batch / kLrReferenceBatch
};
absl::StatusOr<LrScaling> ParseLrScaling(std::string_view name);
std::string_view LrScalingName(LrScaling scaling);
// The global batch the default --lr is tuned for (vanilla's default batch).
inline constexpr int64_t kLrReferenceBatch = runtime::kLrReferenceBatch;

struct TrainFlags {
  runtime::TrainOptions options;
  std::string data = "wikipedia";
  std::vector<std::string> data_dirs;
  ProgressMode progress = ProgressMode::kAuto;
  LrScaling lr_scaling = LrScaling::kAuto;
  std::string policy = "vanilla";
  coordinator::PolicySpec spec;  // --policy, parsed
  // CPUs to run on (affinity), e.g. "0" or "2-3"; empty: unrestricted.
  std::string cpus;
};

void AddTrainFlags(FlagSet* flags, TrainFlags* f);
// Maps the parsed flags onto f->options and applies --cpus to this process.
// INVALID_ARGUMENT on bad values.
absl::Status ResolveTrainFlags(TrainFlags* f);
// Policy-dependent defaults of flags the user did not set (depbloom:
// --window-events and --batch-size per worker left to the engine, which
// derives them from the training events: trainer/runtime/depbloom_sizes.h)
// and --lr scaled to the global batch of a job of `world_size` workers
// (--lr-scaling; options.optim.lr becomes the rate trained with,
// options.optim.lr_scale the factor applied; where the batch is derived,
// the engine scales by options.optim.lr_scale_power once it knows it). Call
// after ResolveTrainFlags, once the world size is known.
void ApplyPolicyDefaults(const FlagSet& flags, int world_size, TrainFlags* f);

// The flags that change a run's result, as text, and its hash: every worker
// of a job must agree on them.
std::string RunConfigText(const runtime::TrainOptions& o,
                          const std::string& policy);
std::string RunConfigHash(const std::string& config_text);

// The flags of the run whose RunConfigText is `config` that define its
// data, model and evaluation (the others keep their defaults), resolved,
// its dataset looked up in `data_dirs` (DataSearchDirs adds the usual
// places); `data`, when not empty, replaces the dataset it names (the same
// data elsewhere). INVALID_ARGUMENT naming the key of a value that is not
// valid.
absl::StatusOr<TrainFlags> FlagsOfRun(
    const std::string& config, const std::string& data,
    const std::vector<std::string>& data_dirs);

// Before anything starts (options.run.run_config set): with `own_out` (`mnemo
// train`), --out locked for this process (exit 1 when another run holds
// it) and every file of the checkpoint verified; --out not another run's
// (exit 2); the checkpoint --resume continues found (exit 2 when there is
// none, 1 when it is damaged) and trained with this
// run's flags (exit 2 naming each difference; --resume-override). Prints
// the error as "<who>: ..."; returns the exit code (0: go on) and the
// resume point in `point` (may be null).
int PrecheckRun(const TrainFlags& f, bool own_out, const std::string& who,
                runtime::ResumePoint* point);

}  // namespace mnemo

#endif  // MNEMO_SERVICES_CLI_TRAIN_FLAGS_H_
