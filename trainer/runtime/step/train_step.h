// One training batch of one worker, in named stages (docs/design.md "A
// training step"). Each stage is one function of TrainStep; what they read
// and write, and where they run:
//
//   plan      the policy's plan of the batch (DepTGL's refresh and pruning),
//             then `sample`: targets, negatives, neighbours      host
//   fetch     the policy makes the batch's states current (pulls), node
//             memory holds them (Ready), then `build`: the batch's
//             tensors from node memory's times, staged to the device  host
//   update    the memory update of the batch's nodes, written into node
//             memory (Advance): the critical path          compute stream
//   embed     embeddings, link scores, the loss over this worker's
//             targets                                      compute stream
//   backward  gradients, each bucket's all-reduce started as soon as its
//             gradients are done (a cluster)               compute stream
//   reduce    the wait for the gradient all-reduce         gradient group
//   push      the policy's write-back of the batch's states (a push of
//             its own thread may start here)                     host
//   step      gradient norm and optimizer step             compute stream
//   finish    the batch's one wait for the device, its checks, and the
//             policy's report                                    host
//
// All on the training thread. Nothing here times, profiles or checks:
// StepObservers hang off every stage (step_observer.h). The look-ahead loop
// that runs batches through the stages, preparing the next batch (plan,
// fetch) while one computes, is trainer/batch/lookahead.h's; TrainPass
// (train_pass.h) drives it.
#ifndef MNEMO_TRAINER_RUNTIME_STEP_TRAIN_STEP_H_
#define MNEMO_TRAINER_RUNTIME_STEP_TRAIN_STEP_H_

#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "trainer/batch/batch.h"
#include "trainer/batch/builder.h"
#include "trainer/data/neighbor_sampler.h"
#include "trainer/memory/worker_memory.h"
#include "trainer/model/model.h"
#include "trainer/platform/autocast.h"
#include "trainer/runtime/policies/policy.h"
#include "trainer/runtime/step/step_observer.h"
#include "trainer/runtime/train.h"

namespace mnemo::platform {
class CudaPhaseClock;
}  // namespace mnemo::platform

namespace mnemo::runtime {

class GradientBuckets;  // cluster/grad_buckets.h

// One batch on its way through the stages: a slot of the look-ahead loop
// (two alternate, so that the next batch is planned and fetched while one
// computes). The stages fill it in order.
struct TrainBatch {
  // plan
  BatchContext b;
  std::vector<int64_t> targets;    // this worker's target events
  std::vector<int32_t> negatives;  // one per target
  // fetch
  batch::BatchTensors tensors;
  batch::PositiveUpdate update;
  // update, embed
  model::UpdatedMemory updated;
  torch::Tensor loss;  // undefined: no target here (nothing to predict)
  // step, finish
  torch::Tensor grad_norm_on_device;  // a GPU's, read at finish
  std::function<torch::Tensor()> read_scalars;
  double loss_value = 0, grad_norm = 0;
  // This worker's own compute on the batch (waits and transfers excluded:
  // what DepTGL's load test reads), each stage's seconds (the observers'
  // timer fills both: on a GPU the device's time, added at the wait), and
  // the batch's start.
  double compute_seconds = 0;
  double stage_seconds[kStages] = {};
  double start_seconds = 0;

  int64_t mine() const { return static_cast<int64_t>(targets.size()); }
};

// What a step works with. Pointers are not owned and outlive the step.
struct StepParts {
  const TrainOptions* options = nullptr;
  model::Model model;
  torch::optim::Optimizer* optimizer = nullptr;
  memory::WorkerMemory* memory = nullptr;
  batch::BatchBuilder* builder = nullptr;
  TrainingPolicy* policy = nullptr;
  GradientBuckets* gradients = nullptr;  // null: one process
  int world = 1;
  torch::Device device = torch::kCPU;
  bool bf16 = false;
  // The time-gap normalization (JODIE; null: the model reads none).
  const batch::TimeGapStats* time_gaps = nullptr;
  // Position in the training split of each log event, and the epoch's
  // negatives per position.
  const std::vector<int64_t>* train_pos = nullptr;
  const std::vector<int32_t>* negatives = nullptr;
  int refine_chunks = 1;                   // IMR(k) micro-batches per batch
  CollectiveStats* collectives = nullptr;  // the all-reduce's seconds
};

class TrainStep {
 public:
  // `observers` (not owned) see every stage, in their order.
  TrainStep(const StepParts& parts, std::vector<StepObserver*> observers)
      : p_(parts), observers_(std::move(observers)) {}

  // The epoch's neighbour sampler (null: the model reads no neighbours).
  void set_sampler(data::NeighborSampler* sampler) { sampler_ = sampler; }

  // The batch starts: its gradients start empty, and observers see it
  // (after its plan and fetch when they ran ahead).
  void Begin(TrainBatch* t);
  // plan: the policy's Plan of `t->b` (whose epoch fields and plan view
  // are set), then this worker's targets and negatives and the builder's
  // sampling (Prepare). Reads the plan and the epoch's negatives; writes
  // `t` and the builder's prepared batch.
  absl::Status Plan(TrainBatch* t);
  // fetch: the policy's Fetch (pulls), node memory's Ready for every state
  // the prepared batch reads or writes, then the tensors built from node
  // memory's times and flags and staged (on a GPU over the copy stream,
  // which the compute stream waits for; the host does not).
  absl::Status Fetch(TrainBatch* t);
  // update: the model's memory update of the batch's nodes from node
  // memory, written into it (Advance; a batch with no target of this
  // worker's but replayed events still updates memory, without gradient),
  // then the policy's Handoff (a pipeline hands the states on).
  absl::Status Update(TrainBatch* t);
  // embed: embeddings, link scores and this worker's mean loss over its
  // targets (DepTGL Eq. 12-13). No-op without targets.
  void Embed(TrainBatch* t);
  // backward: the gradients of the loss scaled so that the mean of the
  // ranks' gradients is the gradient of the global batch's mean loss (1 in
  // one process); parameters outside the batch's graph get zeros. In a
  // cluster each gradient bucket's all-reduce starts as soon as the pass
  // has produced it, the rest when the pass ends (grad_buckets.h).
  void Backward(TrainBatch* t);
  // reduce: waits for the all-reduce (a cluster): the gradients are the mean
  // of every rank's. Its time is the all-reduce's exposed time. Where the
  // parameters travel down a pipeline instead (the policy's
  // CombinesGradients), the wait for the parameters the batch before left.
  absl::Status Reduce(TrainBatch* t);
  // Whether reduce blocks the host (gloo, or a pipeline's parameters), so
  // that the look-ahead loop runs it, push and step after preparing the
  // next batch (the all-reduce in flight meanwhile); false in one process
  // and on NCCL, where the device waits and the host only queues.
  bool ReducesOnHost() const;
  // push: the policy's Push of the batch's states: every worker has read
  // its states for this batch, so a push may start (vanilla's, beside the
  // step); on a GPU, work queued from here on follows the all-reduce.
  absl::Status Push(TrainBatch* t);
  // step: the gradient norm and the optimizer step, queued (a non-finite
  // step is caught at finish, before anything reads the parameters); then
  // the policy's PassParameters where the parameters travel.
  absl::Status Step(TrainBatch* t);
  // finish: the batch's one wait for the device (its loss and gradient
  // norm), the observers' checks (a non-finite loss, ...), the policy's
  // Report, then the observers' end of the batch.
  absl::Status Finish(TrainBatch* t);

 private:
  // Runs `f` as stage `s` of `t` for the observers.
  template <typename F>
  auto Staged(Stage s, TrainBatch* t, F&& f) {
    for (StepObserver* o : observers_) o->BeginStage(s, *t);
    struct End {
      TrainStep* step;
      Stage s;
      TrainBatch* t;
      ~End() {
        for (StepObserver* o : step->observers_) o->EndStage(s, *t);
      }
    } end{this, s, t};
    return f();
  }

  StepParts p_;
  std::vector<StepObserver*> observers_;
  data::NeighborSampler* sampler_ = nullptr;
  // bf16: one autocast region from the update through the embedding (its
  // weight casts cached once), paused while node memory is written.
  platform::AutocastRegion autocast_;
};

}  // namespace mnemo::runtime

#endif  // MNEMO_TRAINER_RUNTIME_STEP_TRAIN_STEP_H_
