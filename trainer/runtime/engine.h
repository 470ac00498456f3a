// The training engine behind Train() (train.h): one process, or one worker
// of a cluster (`mnemo train`, `mnemo trainer`). It sets up a run's parts
// (run_parts.h) and runs its epochs: each a training pass (step/), the
// epoch-end synchronization, validation (eval/) and a checkpoint
// (checkpoint/), then the best epoch's test and the run's result. Internal
// to trainer/runtime.
#ifndef MNEMO_TRAINER_RUNTIME_ENGINE_H_
#define MNEMO_TRAINER_RUNTIME_ENGINE_H_

#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "trainer/runtime/checkpoint/run_checkpoints.h"
#include "trainer/runtime/eval/epoch_eval.h"
#include "trainer/runtime/run_parts.h"
#include "trainer/runtime/step/train_pass.h"
#include "trainer/runtime/train.h"

namespace mnemo::runtime {

class Engine {
 public:
  Engine(const TrainOptions& options, const TrainCallbacks& callbacks)
      : p_(options, callbacks) {}

  // Checks the options, loads the task, makes the model, joins the cluster
  // and plans this worker's batches (engine_setup.cc).
  absl::Status Setup();
  // Trains to the last epoch or early stopping, tests the best epoch and
  // writes the run's outputs.
  absl::StatusOr<TrainResult> Run();

 private:
  // Setup's parts, in order.
  absl::Status SetUpDevice();
  void SetUpDepBloomSizes();
  absl::Status SetUpModel();
  absl::Status SetUpCluster();
  absl::Status SetUpWorkingSet();
  absl::Status SetUpPlan();
  // One epoch: the training pass, the epoch's end in the store, its
  // validation; the figures in `r`.
  absl::Status TrainEpoch(int epoch, EpochResult* r);
  // In a cluster: the global batches' mean loss over the pass, every
  // update in the store (the policy's final push), then a barrier.
  absl::Status EndEpochInCluster(int epoch, const PassStats& pass,
                                 EpochResult* r);
  // The epoch's line, and whether early stopping ends the run after it.
  bool LogEpoch(const EpochResult& r);
  // After the last epoch: the best epoch's test and the run's result.
  absl::StatusOr<TrainResult> Finish();
  // The run's statistics into `result` (every rank's in a cluster).
  absl::Status Gather(TrainResult* result);
  // The seconds of each stage of time_breakdown_seconds (kStageNames), the
  // sessions before this one (a resumed checkpoint's) and this one's.
  std::vector<double> StageSeconds() const;

  RunParts p_;
  std::vector<double> earlier_stage_seconds_;  // resumed from a checkpoint
  std::unique_ptr<TrainPass> pass_;
  std::unique_ptr<EpochEvaluation> eval_;
  std::unique_ptr<RunCheckpoints> checkpoints_;
};

}  // namespace mnemo::runtime

#endif  // MNEMO_TRAINER_RUNTIME_ENGINE_H_
