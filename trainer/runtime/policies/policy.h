// The TrainingPolicy seam (docs/design.md "A training step"): how a worker
// of a cluster keeps the node states it reads fresh. Every policy runs the
// same way, its hooks named after the stage of the step
// (step/train_step.h) they run in:
//
//   Plan(b)              plan: boundary decisions, refreshes, pruning
//   (sample)             targets + negatives, replayed events, neighbours
//   Fetch(b, nodes)      fetch: the states the batch reads current (pulls,
//                        or a pipeline's handoff from the worker before)
//   (update)
//   Handoff(b, advanced) after update: a pipeline hands the states on
//   (embed, backward, reduce; ReceiveParameters where the parameters
//   travel down a pipeline instead of the gradients being all-reduced)
//   Push(b, advanced)    push: e.g. start pushing the batch's states
//   (step; then PassParameters)
//   Report(b, outcome)   report: pushes done, report to the coordinator
//
// and EndEpoch() before the epoch-end barrier after which rank 0 pulls the
// complete memory for evaluation. Policies execute the plans trainer/plan/
// makes; they own no model code.
#ifndef MNEMO_TRAINER_RUNTIME_POLICIES_POLICY_H_
#define MNEMO_TRAINER_RUNTIME_POLICIES_POLICY_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "coordinator/policy_spec.h"
#include "trainer/data/event_log.h"
#include "trainer/memory/store_exchange.h"
#include "trainer/plan/batch_plan.h"
#include "trainer/plan/working_set.h"
#include "trainer/runtime/cluster/distributed.h"
#include "trainer/runtime/report/progress.h"
#include "trainer/runtime/train.h"

namespace mnemo::runtime {

class Collectives;  // cluster/collectives.h

// What the engine lends a policy. Pointers are not owned and outlive it.
struct PolicyEnv {
  const TrainOptions* options = nullptr;
  const DistributedContext* dist = nullptr;
  int rank = 0, world = 1;
  const data::EventLog* log = nullptr;
  const std::vector<int64_t>* train = nullptr;  // training events, ascending
  const data::TemporalGraph* train_graph = nullptr;  // neighbours
  // The model reads the memory of its targets' temporal neighbours.
  bool model_reads_neighbors = false;
  // Position in `train` of each log event (-1: not a training event).
  const std::vector<int64_t>* train_pos = nullptr;
  // This epoch's training negatives, one per position in `train` (drawn at
  // the epoch's start: every rank draws the same).
  const std::vector<int32_t>* negatives = nullptr;
  memory::StoreExchange* exchange = nullptr;  // the memory's (WorkerMemory)
  CommStats* comm = nullptr;
  Progress* progress = nullptr;
  std::function<int(int64_t)> owner;
  // A policy that runs pipelines: the group for its point-to-point
  // handoffs (ClusterWorker::pipeline), the model's parameters, and which
  // temporal neighbours a batch's targets read (known ahead only for the
  // most recent ones; empty otherwise).
  Collectives* pipeline = nullptr;
  std::vector<torch::Tensor> parameters;
  plan::NeighborReads neighbor_reads;
};

// One global batch as this worker runs it.
struct BatchContext {
  int epoch = 0;              // 1-based
  int64_t epoch_batch = 0;    // index within the epoch
  int64_t num_batches = 0;    // batches per epoch
  int64_t global_batch = 0;   // index within the run (coordinator boundary)
  int64_t global_events = 0;  // events of the global batch
  plan::BatchView view;       // this worker's planned mixed batch
  // The mixed batch to execute (time order) and its target mask; a policy
  // may drop auxiliary events (DepTGL Eq. 10-11).
  std::vector<int64_t> events;
  std::vector<uint8_t> target;
  memory::StateVersions versions;
  bool last_of_epoch() const { return epoch_batch + 1 == num_batches; }
};

// What a batch did.
struct BatchOutcome {
  double grad_norm = 0;  // of the all-reduced gradient
  double loss = 0;       // this worker's mean loss over its targets
  int64_t targets = 0, auxiliaries = 0;  // executed
  double compute_seconds = 0;  // own compute, waits and transfers excluded
  double batch_seconds = 0;    // wall time of the whole batch
  const std::vector<int32_t>* advanced = nullptr;  // nodes whose state moved
};

class TrainingPolicy {
 public:
  virtual ~TrainingPolicy() = default;
  virtual std::string name() const = 0;
  // How the engine plans this worker's batches.
  virtual plan::PlanOptions PlanOptions() const = 0;
  // A pipeline policy plans one chain for a group of workers: the engine
  // plans as worker PlanRank(rank) of PlanOptions().world_size (one
  // process's plan when that is 1), then DealPlan gives this worker its
  // part of that chain (plan::DealToGroup). By default the plan is this
  // worker's own.
  virtual int PlanRank(int rank) const { return rank; }
  virtual plan::WorkerPlan DealPlan(plan::WorkerPlan chain) { return chain; }
  // The plan made for this worker (kept by the engine for the whole run).
  virtual void SetPlan(const plan::WorkerPlan* plan) { plan_ = plan; }
  virtual void BeginEpoch(int epoch) {}
  virtual absl::Status Plan(BatchContext* b) = 0;
  virtual absl::Status Fetch(const BatchContext& b,
                             const std::vector<int64_t>& nodes) = 0;
  // After the batch's memory update and gradient all-reduce, before the
  // optimizer step: the states of `advanced` (the nodes whose state moved)
  // are what the batch leaves, and every worker has read the states it
  // reads in this batch (all reached the all-reduce), so a state pushed
  // from here on cannot reach another worker's reads of this batch, as one
  // pushed before could (a worker still pulling would read a state from
  // its future). On a GPU the update and the all-reduce may still be
  // queued; a push started here copies the states after them (StoreExchange::
  // Pack with rows_later), and it is over by Report's end.
  virtual absl::Status Push(const BatchContext& b,
                            const std::vector<int32_t>& advanced) {
    return absl::OkStatus();
  }
  virtual absl::Status Report(const BatchContext& b,
                              const BatchOutcome& outcome) = 0;
  // Right after the batch's memory update was written into node memory
  // (`advanced`: the nodes whose state moved): a pipeline hands the states
  // the next batch needs to the worker that runs it.
  virtual absl::Status Handoff(const BatchContext& b,
                               const std::vector<int32_t>& advanced) {
    return absl::OkStatus();
  }
  // Whether the workers all-reduce their gradients every step (true) or
  // each batch steps the parameters alone, the parameters travelling from
  // worker to worker (PipeTGL): then the reduce stage is
  // ReceiveParameters (the parameters as the batch before left them,
  // replacing this worker's), a batch without targets takes no step, and
  // PassParameters follows the step.
  virtual bool CombinesGradients() const { return true; }
  // Which negatives this worker draws: 0, every rank the same epoch's (its
  // targets' share of them); k > 0, a stream of its own (DistTGL's epoch
  // parallelism, where workers train the same events with different
  // negatives).
  virtual int NegativeStream() const { return 0; }
  virtual absl::Status ReceiveParameters(const BatchContext& b) {
    return absl::OkStatus();
  }
  virtual absl::Status PassParameters(const BatchContext& b) {
    return absl::OkStatus();
  }
  // Makes the store hold this worker's part of the complete memory.
  virtual absl::Status EndEpoch(const memory::StateVersions& versions) = 0;
  // Whether the policy pulls every state a batch reads from the store
  // before the batch (and pushes every state it advances after it), so
  // that a bounded working set needs to spill nothing it drops.
  virtual bool PullsEveryRead() const { return false; }
  // Whether the next batch's Plan may run before this batch's
  // Report: it reads nothing a batch's outcome sets and waits for no
  // other worker. Then the engine prepares the next batch (its targets and
  // sampled neighbours) while this one computes.
  virtual bool PlanIsLocal() const { return false; }
  // What this worker's policy carries from one epoch into the next besides
  // node memory (which restarts every epoch), e.g. DepTGL's gradient-norm
  // and compute-time EMAs: saved in cluster checkpoints, restored on
  // --resume of the same job shape. (Traffic counters are not: a resumed
  // job's policy_stats count its own epochs.)
  virtual std::vector<double> SaveState() const { return {}; }
  // Takes what SaveState gave (INVALID_ARGUMENT for anything else).
  virtual absl::Status RestoreState(const std::vector<double>& state) {
    if (state.empty()) return absl::OkStatus();
    return absl::InvalidArgumentError(
        "checkpointed policy state for a policy that keeps none");
  }

 protected:
  const plan::WorkerPlan* plan_ = nullptr;
};

// The policy of a cluster worker.
absl::StatusOr<std::unique_ptr<TrainingPolicy>> MakeTrainingPolicy(
    const coordinator::PolicySpec& spec, const PolicyOptions& options,
    const PolicyEnv& env);

// The single-process engine's policy: every event is a target, nothing to
// refresh or push.
std::unique_ptr<TrainingPolicy> MakeSingleProcessPolicy();

}  // namespace mnemo::runtime

#endif  // MNEMO_TRAINER_RUNTIME_POLICIES_POLICY_H_
