// What a run is made of: set up once (Engine::Setup) and shared by the
// parts that run it: the training pass (step/train_pass.h), evaluation
// (eval/epoch_eval.h) and checkpoints (checkpoint/run_checkpoints.h). Each
// takes what it needs from here; none of them owns another.
#ifndef MNEMO_TRAINER_RUNTIME_RUN_PARTS_H_
#define MNEMO_TRAINER_RUNTIME_RUN_PARTS_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "trainer/batch/builder.h"
#include "trainer/data/neighbor_sampler.h"
#include "trainer/memory/record_codec.h"
#include "trainer/memory/worker_memory.h"
#include "trainer/model/model.h"
#include "trainer/plan/batch_plan.h"
#include "trainer/plan/working_set.h"
#include "trainer/platform/cuda_device.h"
#include "trainer/runtime/cluster/worker.h"
#include "trainer/runtime/optim/fused_adam.h"
#include "trainer/runtime/policies/policy.h"
#include "trainer/runtime/record.h"
#include "trainer/runtime/report/progress.h"
#include "trainer/runtime/task.h"
#include "trainer/runtime/train.h"

namespace mnemo::runtime {

struct RunParts {
  RunParts(const TrainOptions& options, const TrainCallbacks& callbacks)
      : o(WithModelDefaults(options)), cb(callbacks), progress(o, cb) {}

  // Constant after setup, which derives depbloom's window and batch where
  // they were left to the data (Engine::SetUpDepBloomSizes).
  TrainOptions o;  // with the model's defaults (WithModelDefaults)
  const TrainCallbacks& cb;
  Progress progress;
  // Counted into from every part (declared before the parts that hold a
  // pointer to it, so that it outlives them).
  CommStats comm;
  std::vector<int64_t> train_pos;        // log index -> position in split.train
  std::vector<int32_t> epoch_negatives;  // the epoch's, per split.train

  std::unique_ptr<Task> task;  // the data, split and negatives
  // --device, resolved (cuda: this rank's GPU): the model, node memory
  // and batch tensors live there; on a GPU the clock times the step's
  // device stages (null on the CPU).
  torch::Device device = torch::kCPU;
  std::unique_ptr<platform::CudaPhaseClock> clock;
  bool bf16 = false;
  int refine_chunks = 1;        // IMR(k) micro-batches per training batch
  int64_t eval_batch_size = 0;  // resolved (EvalOptions::batch_size)
  std::string derived_sizes;    // SummaryInfo's
  std::string onednn_isa_cap, malloc;  // SummaryInfo's
  model::Model model;
  std::unique_ptr<FusedAdam> optimizer;
  std::unique_ptr<batch::BatchBuilder> builder;
  memory::WorkerMemory memory;
  std::unique_ptr<ClusterWorker> cluster;  // null: one process
  std::unique_ptr<TrainingPolicy> policy;
  plan::WorkerPlan plan;  // this worker's batches
  plan::PlanStats plan_stats;

  // The run's state.
  double load_seconds = 0, evaluation_seconds = 0;
  TrainingRecord record;  // history and early stopping (checkpointed)
  // The run this process belongs to (rank 0's; kept across --resume).
  std::string run_id;
  int64_t global_batch = 0;  // batches run so far (the coordinator's index)

  bool distributed() const { return cluster != nullptr; }
  int rank() const { return cluster ? cluster->rank() : 0; }
  int world() const { return cluster ? cluster->world() : 1; }
  bool leader() const { return rank() == 0; }
  memory::StateVersions Versions(int epoch) const {
    return memory::StateVersions{task->log.num_events(), epoch};
  }
  // Ends this worker's training with `s` (a cluster's failure reaches the
  // coordinator). Returns `s`.
  absl::Status Fail(absl::Status s) const {
    return cluster ? cluster->Fail(std::move(s)) : s;
  }
  // The time-gap normalization, for models that read it (JODIE).
  const batch::TimeGapStats* TimeGaps() const {
    return model->needs().target_time_deltas ? &task->time_gaps : nullptr;
  }
  // The neighbour strategy (WithModelDefaults always sets one).
  data::NeighborStrategy SamplingStrategy() const {
    return o.model.neighbor_strategy.value_or(data::NeighborStrategy::kRecent);
  }
  // The temporal neighbour sampler over `graph` (none for a model that
  // reads no neighbours).
  std::optional<data::NeighborSampler> MakeSampler(
      const data::TemporalGraph* graph, uint64_t seed) const;
  // The temporal neighbours over `graph` whose states this model's batches
  // read or write, as plan::PredictReads predicts them: the most recent
  // ones (another sampling strategy draws, and snapshots read no neighbour
  // state), through embeddings (TGN) or mails (APAN).
  plan::NeighborReads NeighborReads(const data::TemporalGraph* graph) const;
};

}  // namespace mnemo::runtime

#endif  // MNEMO_TRAINER_RUNTIME_RUN_PARTS_H_
