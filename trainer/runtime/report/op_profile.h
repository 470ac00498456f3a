// Per-operator profile of training batches (mnemo train --profile FILE):
// LibTorch's profiler records every operator call of a range of batches, and
// the report lists each operator's calls and self time per batch (time in
// the operator itself, not in the operators it calls), its inclusive time
// and the input shapes of its most expensive calls, with the batches' wall
// time split into forward, backward and optimizer. On a GPU it records
// the device's activity instead (CUPTI, through LibTorch's Kineto): each
// kernel's launches and device time per batch, and how busy the batches
// kept the GPU: the union of kernel, copy and memset intervals over every
// stream, over the batches' wall time.
#ifndef MNEMO_TRAINER_RUNTIME_REPORT_OP_PROFILE_H_
#define MNEMO_TRAINER_RUNTIME_REPORT_OP_PROFILE_H_

#include <cstdint>
#include <iosfwd>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"

namespace mnemo::runtime {

// Seconds covered by the union of [begin, end) intervals in nanoseconds
// (overlapping kernels on several streams count once).
double CoveredSeconds(std::vector<std::pair<uint64_t, uint64_t>> intervals);

class OpProfile {
 public:
  // Records batches [first_batch, first_batch + batches) of the first
  // training epoch: the CPU's operators, or with `cuda` (a run on a GPU)
  // the GPU's kernels.
  OpProfile(std::string path, int64_t first_batch, int64_t batches,
            bool cuda = false);
  ~OpProfile();
  OpProfile(const OpProfile&) = delete;
  OpProfile& operator=(const OpProfile&) = delete;

  // Called at the start and end of every training batch of the first epoch
  // (by the thread that runs it); starts and stops recording.
  void BeginBatch(int64_t batch);
  // `phase_seconds`: this batch's forward, backward and optimizer seconds.
  void EndBatch(int64_t batch, double forward_s, double backward_s,
                double optimizer_s);
  // Writes the report (if anything was recorded). Called once, at the end of
  // the first epoch.
  absl::Status Finish();

 private:
  struct State;
  // Ends the recording (if on) and keeps what it recorded.
  void StopRecording();
  // The report of what was recorded: the CPU's operators, or the GPU's
  // kernels, copies and memsets.
  void WriteCpuReport(std::ostream& out) const;
  void WriteCudaReport(std::ostream& out) const;

  std::string path_;
  int64_t first_, count_;
  bool cuda_;
  std::unique_ptr<State> state_;
};

}  // namespace mnemo::runtime

#endif  // MNEMO_TRAINER_RUNTIME_REPORT_OP_PROFILE_H_
