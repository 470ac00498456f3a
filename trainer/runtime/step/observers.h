// The observers of a training step (step_observer.h): what times its
// stages, profiles its operators, checks that it never makes the host wait
// for the device, stops it when it diverges or the workers' parameters
// part, and reports each batch to the caller.
#ifndef MNEMO_TRAINER_RUNTIME_STEP_OBSERVERS_H_
#define MNEMO_TRAINER_RUNTIME_STEP_OBSERVERS_H_

#include <functional>
#include <string>

#include "absl/status/status.h"
#include "trainer/model/model.h"
#include "trainer/runtime/step/step_observer.h"
#include "trainer/runtime/train.h"

namespace mnemo::platform {
class CudaPhaseClock;
}  // namespace mnemo::platform

namespace mnemo::runtime {

class ControlChannel;  // cluster/control.h
class OpProfile;       // report/op_profile.h
class Progress;        // report/progress.h

// What a training pass computed.
struct PassStats {
  double loss_sum = 0;  // sum of this worker's batch losses
  // Sum over batches of this worker's share of the global batch's mean
  // loss (its loss times its share of the targets); summed over workers,
  // the global batches' mean losses.
  double global_loss_sum = 0;
  int64_t batches = 0;
  double grad_norm_sum = 0;
};

// Times every stage into the batch (TrainBatch::stage_seconds) and this
// worker's own compute (sample, build, update, embed, backward, step:
// TrainBatch::compute_seconds), and into the run's totals: `phases`
// (sample and build as preparation, update as memory management, embed as
// forward, backward and step as backward) and the all-reduce's seconds.
// Host stages by the wall clock; on a GPU the device stages by CUDA events
// on the compute stream (`clock`, not owned), added at the batch's wait,
// so that timing never makes the host wait for the device.
class StageTimer : public StepObserver {
 public:
  StageTimer(platform::CudaPhaseClock* clock, PhaseSeconds* phases,
             CollectiveStats* collectives)
      : clock_(clock), phases_(phases), collectives_(collectives) {}
  void BeginPass() override;
  void BeginStage(Stage stage, TrainBatch& batch) override;
  void EndStage(Stage stage, TrainBatch& batch) override;

 private:
  // The run's total a stage's time goes to (null: none).
  double* TotalOf(Stage stage) const;
  platform::CudaPhaseClock* clock_;
  PhaseSeconds* phases_;
  CollectiveStats* collectives_;
  double started_[kStages] = {};  // wall clock at each stage's start
};

// --profile: LibTorch's profiler records `profile`'s batches (not owned;
// its report is written by the pass).
class ProfileObserver : public StepObserver {
 public:
  explicit ProfileObserver(OpProfile* profile) : profile_(profile) {}
  void BeginBatch(TrainBatch& batch) override;
  void EndBatch(const TrainBatch& batch, const BatchOutcome& outcome) override;

 private:
  OpProfile* profile_;
};

// One process on a GPU (TrainOptions::checks.check_device_syncs): from a
// batch's start to its one wait, a CUDA call that makes the host wait for
// the device throws, naming the call (platform::SetCudaSyncCheck).
class DeviceSyncObserver : public StepObserver {
 public:
  void BeginBatch(TrainBatch& batch) override;
  void BeginStage(Stage stage, TrainBatch& batch) override;
  void EndPass() override { Release(); }

 private:
  void Release();
  bool on_ = false;
};

// Stops the run at a batch whose loss or gradient norm is not finite,
// naming where, what to try and the last good checkpoint. The all-reduced
// gradient is the same everywhere, so every rank stops at the same batch (a
// rank that stopped alone would leave the others waiting in the next
// collective); one process names its loss first.
class DivergenceCheck : public StepObserver {
 public:
  DivergenceCheck(const TrainOptions* options, bool distributed)
      : options_(options), distributed_(distributed) {}
  absl::Status Check(const TrainBatch& batch) override;

 private:
  absl::Status NonFinite(const std::string& what, double value,
                         const TrainBatch& batch) const;
  const TrainOptions* options_;
  bool distributed_;
};

// --check-parameters in a cluster: after every step the workers'
// parameters are identical (a collective over `control`, not owned).
class ParameterCheck : public StepObserver {
 public:
  ParameterCheck(model::Model model, ControlChannel* control, int rank,
                 int world)
      : model_(std::move(model)),
        control_(control),
        rank_(rank),
        world_(world) {}
  absl::Status Check(const TrainBatch& batch) override;

 private:
  model::Model model_;
  ControlChannel* control_;
  int rank_, world_;
};

// Counts every batch into the pass's sums (`stats`, restarted with every
// pass) and this worker's executed events (`comm`). Not owned.
class PassCounter : public StepObserver {
 public:
  PassCounter(PassStats* stats, CommStats* comm) : stats_(stats), comm_(comm) {}
  void BeginPass() override { *stats_ = PassStats(); }
  void EndBatch(const TrainBatch& batch, const BatchOutcome& outcome) override;

 private:
  PassStats* stats_;
  CommStats* comm_;
};

// The progress line's events and mean loss after every batch (`stats`:
// the pass's, counted before; not owned).
class PassProgress : public StepObserver {
 public:
  PassProgress(Progress* progress, const PassStats* stats)
      : progress_(progress), stats_(stats) {}
  void EndBatch(const TrainBatch& batch, const BatchOutcome& outcome) override;

 private:
  Progress* progress_;
  const PassStats* stats_;
};

// TrainCallbacks::batch after every batch, with this worker's traffic so
// far (`comm`, not owned).
class BatchCallback : public StepObserver {
 public:
  BatchCallback(std::function<void(const TrainCallbacks::Batch&)> callback,
                const CommStats* comm)
      : callback_(std::move(callback)), comm_(comm) {}
  void EndBatch(const TrainBatch& batch, const BatchOutcome& outcome) override;

 private:
  std::function<void(const TrainCallbacks::Batch&)> callback_;
  const CommStats* comm_;
};

}  // namespace mnemo::runtime

#endif  // MNEMO_TRAINER_RUNTIME_STEP_OBSERVERS_H_
