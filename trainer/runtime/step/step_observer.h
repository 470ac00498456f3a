// What watches a training step: the stages of TrainStep (train_step.h) and
// one interface that timing, profiling, device-sync checks, divergence
// checks and progress implement (observers.h), so that no stage times,
// profiles or checks anything itself.
#ifndef MNEMO_TRAINER_RUNTIME_STEP_STEP_OBSERVER_H_
#define MNEMO_TRAINER_RUNTIME_STEP_STEP_OBSERVER_H_

#include <string_view>

#include "absl/status/status.h"

namespace mnemo::runtime {

struct TrainBatch;    // train_step.h
struct BatchOutcome;  // policies/policy.h

// The stages of a step, in order, with the parts of plan and fetch that
// are this worker's own compute (sample, build) apart from the policy's
// share (which may wait for other workers).
enum class Stage {
  kPlan,      // the policy's plan of the batch
  kSample,    // targets, negatives, sampled neighbours
  kFetch,     // the policy's pulls, node memory's Ready
  kBuild,     // the batch's tensors, staged to the device
  kUpdate,    // memory update, written into node memory
  kEmbed,     // embeddings, link scores, loss
  kBackward,  // gradients
  kReduce,    // gradient all-reduce (a cluster)
  kPush,      // the policy's push of the batch's states
  kStep,      // gradient norm, optimizer step
  kWait,      // the batch's one wait for the device
  kReport,    // the policy's report of the batch
};
inline constexpr int kStages = static_cast<int>(Stage::kReport) + 1;
std::string_view StageName(Stage stage);

// Called on the training thread. A batch's plan and fetch stages may come
// before its BeginBatch (prepared while the batch before computed), and
// before the batch before's EndBatch.
class StepObserver {
 public:
  virtual ~StepObserver() = default;
  // A pass over the epoch's batches starts.
  virtual void BeginPass() {}
  // The batch starts (its plan and fetch may have run already).
  virtual void BeginBatch(TrainBatch& batch) {}
  virtual void BeginStage(Stage stage, TrainBatch& batch) {}
  virtual void EndStage(Stage stage, TrainBatch& batch) {}
  // After the batch's wait, its loss and gradient norm known, before the
  // policy's report: a non-OK status fails the batch, and the run with it.
  virtual absl::Status Check(const TrainBatch& batch) {
    return absl::OkStatus();
  }
  // After the policy's report: the batch is over.
  virtual void EndBatch(const TrainBatch& batch, const BatchOutcome& outcome) {}
  // The pass is over, or stopped at a failed batch.
  virtual void EndPass() {}
};

}  // namespace mnemo::runtime

#endif  // MNEMO_TRAINER_RUNTIME_STEP_STEP_OBSERVER_H_
