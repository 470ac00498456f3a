#include "trainer/runtime/depbloom_sizes.h"

#include <algorithm>

#include "absl/strings/str_format.h"

namespace mnemo::runtime {

namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

DepBloomSizes DeriveDepBloomSizes(int64_t train_events, int workers,
                                  int64_t window_events, int64_t batch_size) {
  const int64_t n = std::max<int64_t>(train_events, 0);
  const int64_t w = std::max(workers, 1);
  DepBloomSizes s;
  s.window_derived = window_events <= 0;
  s.batch_derived = batch_size <= 0;
  s.window_events =
      s.window_derived
          ? std::min(kPaperWindowEvents,
                     std::max(kLrReferenceBatch, CeilDiv(n, kMinWindows)))
          : window_events;
  s.batch_size =
      s.batch_derived
          ? std::min(kPaperBatchPerWorker,
                     std::max(CeilDiv(kLrReferenceBatch, w),
                              CeilDiv(s.window_events, kBatchesPerWindow * w)))
          : batch_size;
  // Every window but the last is full; each worker's share of a window is
  // about window / W (the partition balances the parts).
  s.windows = std::max<int64_t>(1, CeilDiv(n, s.window_events));
  const int64_t full = n / s.window_events;
  const int64_t rest = n - full * s.window_events;
  s.steps = full * CeilDiv(CeilDiv(s.window_events, w), s.batch_size) +
            (rest > 0 ? CeilDiv(CeilDiv(rest, w), s.batch_size) : 0);
  return s;
}

std::string DescribeDepBloomSizes(const DepBloomSizes& s, int64_t train_events,
                                  int workers) {
  return absl::StrFormat(
      "depbloom sizes: %d training events, %d %s: windows of %d events (%s), "
      "%d windows; batches of %d events per worker (%s); about %d optimizer "
      "steps an epoch",
      train_events, workers, workers == 1 ? "worker" : "workers",
      s.window_events,
      s.window_derived
          ? absl::StrFormat("derived: min(%d, max(%d, N / %d))",
                            kPaperWindowEvents, kLrReferenceBatch, kMinWindows)
          : "--window-events",
      s.windows, s.batch_size,
      s.batch_derived
          ? absl::StrFormat("derived: min(%d, max(%d / W, window / (%d W)))",
                            kPaperBatchPerWorker, kLrReferenceBatch,
                            kBatchesPerWindow)
          : "--batch-size",
      s.steps);
}

std::vector<std::string> DepBloomSizeWarnings(const DepBloomSizes& s,
                                              int64_t train_events,
                                              int workers) {
  std::vector<std::string> out;
  if (!s.window_derived && workers > 1 && s.window_events >= train_events) {
    out.push_back(absl::StrFormat(
        "warning: --window-events %d holds all %d training events in one "
        "window: the workers never see each other's updates within an "
        "epoch (leave it unset to derive it from the data, or give at most "
        "%d for %d windows)",
        s.window_events, train_events,
        std::max<int64_t>(1, CeilDiv(train_events, kMinWindows)), kMinWindows));
  }
  if ((!s.window_derived || !s.batch_derived) && s.steps < kMinStepsPerEpoch) {
    // The window named with the batch it was given with (by hand, or the
    // paper's); a batch by hand with derived windows names itself.
    const std::string flags =
        s.window_derived
            ? absl::StrFormat("--batch-size %d", s.batch_size)
            : absl::StrFormat(
                  "--window-events %d with batches of %d events per worker",
                  s.window_events, s.batch_size);
    out.push_back(absl::StrFormat(
        "warning: %s leaves each of the %d workers about %d optimizer steps "
        "an epoch on %d training events (fewer than %d: too few to train "
        "well; leave them unset to derive them from the data)",
        flags, workers, s.steps, train_events, kMinStepsPerEpoch));
  }
  return out;
}

}  // namespace mnemo::runtime
