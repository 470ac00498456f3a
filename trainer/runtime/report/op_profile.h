// Per-operator profile of training batches (mnemo train --profile FILE):
// LibTorch's profiler records every operator call of a range of batches, and
// the report lists each operator's calls and self time per batch (time in
// the operator itself, not in the operators it calls), its inclusive time
// and the input shapes of its most expensive calls, with the batches' wall
// time split into forward, backward and optimizer.
#ifndef MNEMO_TRAINER_RUNTIME_REPORT_OP_PROFILE_H_
#define MNEMO_TRAINER_RUNTIME_REPORT_OP_PROFILE_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"

namespace mnemo::runtime {

class OpProfile {
 public:
  // Records batches [first_batch, first_batch + batches) of the first
  // training epoch.
  OpProfile(std::string path, int64_t first_batch, int64_t batches);
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
  std::string path_;
  int64_t first_, count_;
  std::unique_ptr<State> state_;
};

}  // namespace mnemo::runtime

#endif  // MNEMO_TRAINER_RUNTIME_REPORT_OP_PROFILE_H_
