// One training epoch of one worker: its batches through the step's stages
// (train_step.h), the next prepared while one computes (the look-ahead loop
// of trainer/batch/lookahead.h), with the step's observers.
#ifndef MNEMO_TRAINER_RUNTIME_STEP_TRAIN_PASS_H_
#define MNEMO_TRAINER_RUNTIME_STEP_TRAIN_PASS_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "trainer/batch/lookahead.h"
#include "trainer/runtime/report/op_profile.h"
#include "trainer/runtime/run_parts.h"
#include "trainer/runtime/step/observers.h"
#include "trainer/runtime/step/train_step.h"

namespace mnemo::runtime {

class TrainPass {
 public:
  // `parts` (set up) outlives the pass.
  explicit TrainPass(RunParts* parts);

  // Trains epoch `epoch` over this worker's plan (docs/design.md data
  // flow): node memory restarts, the epoch's negatives and samplers are
  // drawn from (seed, epoch), then every batch runs through the stages.
  // The first failing batch's error ends it.
  absl::StatusOr<PassStats> Run(int epoch);

  // How far the pass prepares the next batch while one computes: not at
  // all where the policy's plan reads this batch's outcome (DepTGL's load
  // test), its plan and sampling in a cluster (its tensors follow the
  // policy's pulls, after this batch's push) or with a bounded working set
  // (which admits the next batch's states after this one's update), its
  // tensors too in one process.
  batch::Ahead ChooseAhead() const;

 private:
  // Starts the epoch: memory, negatives, sampler, policy, progress.
  void BeginEpoch(int epoch);
  // The look-ahead loop's calls for epoch `epoch`.
  batch::LookaheadCalls<TrainBatch> Calls(int epoch);
  // reduce, push and step of `t`.
  absl::Status ReduceAndStep(TrainBatch* t);
  // --profile: the first epoch's pass records its operators.
  void BeginProfile();
  absl::Status EndProfile();

  RunParts& p_;
  std::optional<data::NeighborSampler> sampler_;  // the epoch's
  // The step's observers, in their order (some absent).
  StageTimer timer_;
  std::unique_ptr<OpProfile> profile_;
  std::unique_ptr<ProfileObserver> profile_observer_;
  bool profiled_ = false;
  DeviceSyncObserver sync_check_;
  DivergenceCheck divergence_;
  std::unique_ptr<ParameterCheck> parameter_check_;
  std::unique_ptr<BatchCallback> callback_;
  PassStats stats_;  // the pass's, counted by counter_
  PassCounter counter_;
  PassProgress progress_;
  std::unique_ptr<TrainStep> step_;
};

}  // namespace mnemo::runtime

#endif  // MNEMO_TRAINER_RUNTIME_STEP_TRAIN_PASS_H_
