// The training engine's class, shared by the files that implement it:
// engine_setup.cc (the task, the model, the cluster wiring and the plan),
// engine.cc (the loop and the run), engine_eval.cc (evaluation and the best
// epoch), engine_checkpoint.cc (cluster checkpoints and resume). Internal to
// trainer/runtime; the public entry point is Train() (train.h).
#ifndef MNEMO_TRAINER_RUNTIME_ENGINE_H_
#define MNEMO_TRAINER_RUNTIME_ENGINE_H_

#include <ATen/autocast_mode.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <numeric>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "trainer/data/event_log.h"
#include "trainer/data/negative_sampler.h"
#include "trainer/data/neighbor_sampler.h"
#include "trainer/data/split.h"
#include "trainer/memory/node_memory.h"
#include "trainer/memory/record_codec.h"
#include "trainer/model/model.h"
#include "trainer/plan/batch_plan.h"
#include "trainer/plan/subchain_plan.h"
#include "trainer/runtime/batch_builder.h"
#include "trainer/runtime/batch_staging.h"
#include "trainer/runtime/checkpoint.h"
#include "trainer/runtime/collectives.h"
#include "trainer/runtime/comm_stats.h"
#include "trainer/runtime/control.h"
#include "trainer/runtime/cpu_setup.h"
#include "trainer/runtime/cuda_device.h"
#include "trainer/runtime/distributed.h"
#include "trainer/runtime/engine_util.h"
#include "trainer/runtime/evaluator.h"
#include "trainer/runtime/fused_adam.h"
#include "trainer/runtime/metrics.h"
#include "trainer/runtime/op_profile.h"
#include "trainer/runtime/policies/policy.h"
#include "trainer/runtime/progress.h"
#include "trainer/runtime/resume_point.h"
#include "trainer/runtime/state_sync.h"
#include "trainer/runtime/summary.h"
#include "trainer/runtime/task.h"
#include "trainer/runtime/train.h"
#include "util/proc.h"
#include "util/status_macros.h"

namespace mnemo::runtime {

// TrainingRecord::best_test (kBestTestFields figures) from and into the
// best epoch's test and new-node test results: one field order for both.
std::vector<double> PackBestTest(const EvalResult& test,
                                 const EvalResult& nn_test);
void UnpackBestTest(const std::vector<double>& f, EvalResult* test,
                    EvalResult* nn_test);

class Engine {
 public:
  Engine(const TrainOptions& o, const TrainCallbacks& cb)
      : o_(WithModelDefaults(o)), cb_(cb), progress_(o_, cb) {}

  absl::Status Setup();
  absl::StatusOr<TrainResult> Run();

 private:
  // One pass over `events` in batches. Training when `optimizer_step`.
  struct PassStats {
    double loss_sum = 0;  // sum of this worker's batch losses
    // Sum over batches of this worker's share of the global batch's mean
    // loss (its loss times its share of the targets); summed over workers,
    // the global batches' mean losses.
    double global_loss_sum = 0;
    int64_t batches = 0;
    double grad_norm_sum = 0;
  };
  // The error for a non-finite `what` (value `value`) in batch `batch` of
  // epoch `epoch`: names where, what to try, and the last good checkpoint.
  absl::Status NonFinite(const std::string& what, double value, int epoch,
                         int64_t batch) const;
  // One training epoch over this worker's plan (docs/design.md data flow): per
  // global batch, the policy's refresh, the mixed batch (targets with
  // negatives, auxiliary replay events), forward, loss over the targets,
  // backward, memory update, gradient all-reduce, the policy's
  // AfterAllReduce (vanilla starts its push), step, the policy's push and
  // report.
  PassStats TrainPass(int epoch);
  // One training batch on its way through TrainPass: its context, targets
  // and negatives and, once finished, its tensors and memory update. Two
  // alternate, so that the next batch can be prepared while one computes.
  struct BatchSlot {
    BatchContext b;
    std::vector<int64_t> targets;
    std::vector<int32_t> negatives;
    model::BatchTensors batch;
    PositiveUpdate update;
    int64_t prepared = -1;     // the epoch's batch Prepare ran for
    bool finished = false;     // its tensors are built (and staged)
    double ahead_seconds = 0;  // compute spent on it while another ran
  };
  // How far TrainPass prepares the next batch while one computes.
  enum class Lookahead {
    kNone,     // not at all: the policy's BeforeBatch reads the outcome
    kPrepare,  // BeforeBatch and the builder's Prepare (sampling)
    kFinish,   // also its tensors, staged to the device (one process)
  };
  Lookahead ChooseLookahead() const;
  static const char* LookaheadName(Lookahead l) {
    return l == Lookahead::kFinish    ? "prepare+stage"
           : l == Lookahead::kPrepare ? "prepare"
                                      : "none";
  }
  // Starts the epoch's batch `r` in `s` (whose context holds the epoch's
  // fields): the policy's BeforeBatch, targets and negatives, the
  // builder's Prepare. Its compute time goes to `*compute`.
  absl::Status PrepareBatch(int64_t r, data::NeighborSampler* sampler,
                            BatchSlot* s, double* compute);
  // Finishes the batch Prepare last ran for, in `s`: the policy's
  // BeforeForward, a bounded working set's Acquire, its tensors built from
  // node memory's host state and staged to the device.
  absl::Status FinishBatch(BatchSlot* s, double* compute);
  // Checks (with --check-parameters) that every worker holds the same
  // parameters after `global_batch`'s step.
  absl::Status CheckParameters();
  // Epoch end: every update in the store (the policy's final push), then a
  // barrier.
  absl::Status FinalSync(int epoch);
  absl::Status PullAllForEvaluation(int epoch);
  // Moves the store traffic since `before` from training's counters to
  // evaluation's (CommStats::eval_*).
  void CountAsEvaluation(const CommStats& before);
  // With a bounded working set (--memory-cache-bytes) the leader evaluates
  // through it: no step holds the complete memory. One pass over `events`
  // starting from the memory the shards hold (epoch `epoch`'s); what it
  // changes stays in this worker (held or spilled).
  absl::StatusOr<EvalResult> BoundedEvalPass(int epoch,
                                             const std::vector<int64_t>& events,
                                             const EvalNegatives& negatives,
                                             const std::string& label);
  // The leader's evaluation of epoch `r->epoch` with a bounded working set:
  // new-node validation and validation from the memory training left in
  // the shards and, when the epoch is the best so far, the test passes from
  // the post-validation memory (pushed to the shards first) at once, into
  // record_.best_test: nothing keeps a copy of the best epoch's memory.
  absl::Status EvaluateBounded(EpochResult* r);
  // What each batch of an evaluation pass over `events` reads
  // (plan::EventReads with the pass's negatives).
  plan::ReadPredictor PredictEvalReads(const std::vector<int64_t>& events,
                                       const EvalNegatives& negatives);
  // Before training: INVALID_ARGUMENT when a validation or test batch
  // reads more states than the working set holds (the leader's
  // evaluation would stop there after a whole epoch).
  absl::Status CheckEvalFitsWorkingSet();
  // The best-epoch criterion of the protocol, and whether `score` improves
  // on the best so far.
  double Score(const EpochResult& r) const;
  bool Improves(double score) const;
  StateVersions Versions(int epoch) const {
    return StateVersions{task_->log.num_events(), epoch};
  }
  bool distributed() const { return dist_ != nullptr; }
  bool leader() const { return rank_ == 0; }
  // Sets the same value on every rank (rank 0's).
  absl::Status ShareFromLeader(std::vector<double>* values);
  // What an evaluation pass of this engine runs on.
  EvalSetup MakeEvalSetup();
  // --protocol tgb: the one-vs-many ranking pass.
  absl::StatusOr<RankResult> RankPass(const std::vector<int64_t>& events,
                                      const data::RankingNegatives& negatives,
                                      const std::string& label);
  absl::StatusOr<EvalResult> EvalPass(const std::vector<int64_t>& events,
                                      const EvalNegatives& negatives,
                                      const std::string& label);
  // Rank 0 (the leader) evaluates; the others wait for it. Every rank ends
  // with the leader's figures (or the leader's failure).
  absl::Status EvaluateEpoch(EpochResult* r);
  // Ends a distributed run's training: the failure is reported to the
  // coordinator (the job fails everywhere).
  absl::Status Fail(absl::Status s) {
    if (distributed() && !s.ok()) {
      dist_->cluster->ReportError(std::string(s.message()));
    }
    return s;
  }
  // The neighbour strategy (WithModelDefaults always sets one).
  data::NeighborStrategy SamplingStrategy() const {
    return o_.neighbor_strategy.value_or(data::NeighborStrategy::kRecent);
  }
  // The temporal neighbour sampler over `graph` (none for a model that
  // reads no neighbours).
  std::optional<data::NeighborSampler> MakeSampler(
      const data::TemporalGraph* graph, uint64_t seed) const {
    if (!model_->needs().neighbors && !model_->needs().mail_to_neighbors) {
      return std::nullopt;
    }
    return data::NeighborSampler(graph, o_.neighbors, SamplingStrategy(), seed);
  }

  // The temporal neighbours over `graph` whose states this model's batches
  // read or write, as plan::PredictReads predicts them: the most recent ones
  // (another sampling strategy draws, and snapshots read no neighbour
  // state), through embeddings (TGN) or mails (APAN).
  plan::NeighborReads NeighborReads(const data::TemporalGraph* graph) const {
    const model::BatchNeeds needs = model_->needs();
    plan::NeighborReads r;
    if (SamplingStrategy() != data::NeighborStrategy::kRecent) return r;
    if (needs.neighbors && needs.snapshots == 0) {
      r.graph = graph;
    } else if (needs.mail_to_neighbors) {
      r.graph = graph;
      r.endpoints_only = true;
    }
    r.neighbors = o_.neighbors;
    return r;
  }

  void SnapshotBest();
  void RestoreBest();
  // Epoch end in a cluster: every rank writes its file of the epoch's
  // checkpoint, then (after a collective that every rank enters once its
  // file is written) rank 0 the manifest that makes the set complete.
  absl::Status SaveClusterCheckpoint(int epoch);
  // --resume in a cluster: rank 0 picks the last complete checkpoint, every
  // rank restores its file of it. Returns the epoch it had finished.
  absl::StatusOr<int> ResumeCluster();

  // The options with the model's defaults filled in (WithModelDefaults).
  const TrainOptions o_;
  const TrainCallbacks& cb_;
  Progress progress_;
  Timers timers_;
  // --profile: the first epoch this run trains records its operators.
  std::unique_ptr<OpProfile> profile_;
  bool profiled_ = false;
  std::vector<int64_t>
      train_pos_;  // log index -> position in task_->split.train
  std::vector<int32_t> epoch_negatives_;  // per position in task_->split.train
  int refine_chunks_ = 1;       // IMR(k) micro-batches per training batch
  std::string onednn_isa_cap_;  // SummaryInfo::onednn_isa_cap
  std::string malloc_;          // SummaryInfo::malloc
  // The data, split and negatives (task.h).
  std::unique_ptr<Task> task_;
  // The time-gap normalization, for models that read it (JODIE).
  const model::TimeGapStats* TimeGaps() const {
    return model_->needs().target_time_deltas ? &task_->time_gaps : nullptr;
  }
  model::ModelKind model_kind_ = model::ModelKind::kTgn;
  bool bf16_ = false;
  // --device, resolved (cuda: this rank's GPU). The model, node memory and
  // batch tensors live there.
  torch::Device device_ = torch::kCPU;
  // Resolves --device into device_ and makes a GPU current.
  absl::Status SetUpDevice();
  // On a GPU: times the phases of a training batch on the device (the
  // phase timers and the compute time policies read, DepTGL's load test,
  // hold the GPU's time, not its launch time), read where the batch waits
  // for its loss and gradient norm. Null on the CPU.
  std::unique_ptr<CudaPhaseClock> clock_;
  int64_t eval_batch_size_ = 0;

  model::Model model_;
  std::unique_ptr<FusedAdam> optimizer_;
  memory::NodeMemory state_;
  std::unique_ptr<BatchBuilder> builder_;

  // History and early stopping (saved in checkpoints).
  TrainingRecord record_;

  // Multi-worker state (null dist_: single process).
  const DistributedContext* dist_ = nullptr;
  int rank_ = 0, world_ = 1;
  // The gradient group (NCCL on a GPU, else gloo), and the control
  // collectives (control.h) over a gloo group of their own.
  std::unique_ptr<Collectives> collectives_;
  std::unique_ptr<Collectives> control_group_;
  std::unique_ptr<ControlChannel> control_;
  std::function<int(int64_t)> owner_;
  int64_t global_batch_ = 0;
  CommStats comm_;
  std::unique_ptr<StateSync> sync_;
  std::unique_ptr<TrainingPolicy> policy_;
  // A bounded working set (--memory-cache-bytes): its rule and counters,
  // and the worker's own spill store (its directory removed after the
  // store closes when the engine made it).
  absl::Status SetUpWorkingSet();
  struct SpillDir {
    std::string path;
    bool remove = false;
    ~SpillDir();
  } spill_dir_;
  std::unique_ptr<memstore::NodeStateStore> spill_store_;
  std::unique_ptr<plan::WorkingSetCache> cache_;
  int64_t cache_capacity_ = 0;  // states
  plan::WorkerPlan plan_;
  plan::PlanStats plan_stats_;
  absl::Status failure_;  // first error of a training pass
  bool said_no_cluster_checkpoint_ = false;
  // The run this process belongs to (rank 0's; kept across --resume) and
  // what every checkpoint records of it.
  std::string run_id_;
  CheckpointMeta CheckpointMetaNow() const {
    CheckpointMeta m;
    m.run_id = run_id_;
    m.run_config = o_.run_config;
    return m;
  }
  // Refuses changed flags (CheckRunConfig) and warns of an unverified file.
  absl::Status CheckResumed(const LoadedCheckpoint& loaded);
  // Every rank takes rank 0's run id.
  absl::Status ShareRunId();
};

}  // namespace mnemo::runtime

#endif  // MNEMO_TRAINER_RUNTIME_ENGINE_H_
