// DepBloom's window and batch on data of any size. The paper's 80,000-event
// windows and 2,400-event batches per worker assume millions of training
// events; on a few thousand they make the whole training set one window
// and leave each worker a handful of optimizer steps an epoch. Where the
// user sets neither --window-events (or sets 0) nor --batch-size, both are
// derived from the training events N and the workers W
// (docs/models-and-policies.md, "DepBloom's sizes"):
//
//   window = min(80000, max(600, ceil(N / 8)))       at least 8 windows
//   batch  = min(2400, max(ceil(600 / W),            vanilla's global batch
//                          ceil(window / (4 W))))    4 batches per window
//
// so that an epoch has about 8 windows of up to 4 steps each and no global
// batch is smaller than vanilla's 600; from 640,000 training events on (up
// to 8 workers) the paper's values stand. A window given alone keeps the
// paper's batch (the CLI's choice); a batch given alone gets derived
// windows. Values the user gives are kept; where they cannot work (one
// window holding every training event, or fewer than 8 optimizer steps an
// epoch) a warning names the flag, the value and why. Torch-free.
#ifndef MNEMO_TRAINER_RUNTIME_DEPBLOOM_SIZES_H_
#define MNEMO_TRAINER_RUNTIME_DEPBLOOM_SIZES_H_

#include <cstdint>
#include <string>
#include <vector>

namespace mnemo::runtime {

// The paper's values: the caps of the derived ones.
inline constexpr int64_t kPaperWindowEvents = 80000;
inline constexpr int64_t kPaperBatchPerWorker = 2400;
// The global batch the default learning rate is tuned for (vanilla's
// default batch; --lr-scaling's reference).
inline constexpr int64_t kLrReferenceBatch = 600;
// The rule's targets: windows per epoch, batches per worker per window.
inline constexpr int64_t kMinWindows = 8;
inline constexpr int64_t kBatchesPerWindow = 4;
// Below this many optimizer steps per worker an epoch, values set by hand
// are warned about.
inline constexpr int64_t kMinStepsPerEpoch = 8;

struct DepBloomSizes {
  int64_t window_events = 0;
  int64_t batch_size = 0;  // per worker
  bool window_derived = false, batch_derived = false;
  int64_t windows = 0;  // windows an epoch: ceil(N / window)
  // Optimizer steps per worker an epoch if every worker's sub-chain held
  // its share of each window: windows x ceil(window share / batch).
  int64_t steps = 0;
};

// `window_events` 0: derived; `batch_size` 0: derived (else kept).
// train_events >= 0, workers >= 1.
DepBloomSizes DeriveDepBloomSizes(int64_t train_events, int workers,
                                  int64_t window_events, int64_t batch_size);

// The progress line that states the rule and the values a run trains with.
std::string DescribeDepBloomSizes(const DepBloomSizes& s, int64_t train_events,
                                  int workers);

// Warnings for values set by hand that cannot work (empty: none).
std::vector<std::string> DepBloomSizeWarnings(const DepBloomSizes& s,
                                              int64_t train_events,
                                              int workers);

}  // namespace mnemo::runtime

#endif  // MNEMO_TRAINER_RUNTIME_DEPBLOOM_SIZES_H_
