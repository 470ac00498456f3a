// The single-process training engine behind `mnemo train`. Torch-free header:
// the CLI maps flags onto TrainOptions and calls Train(). The choices among
// names (--model, --protocol, ...) are enums here: the CLI parses the text
// once (services/cli/train_flags.cc) and nothing below compares strings.
#ifndef MNEMO_TRAINER_RUNTIME_TRAIN_H_
#define MNEMO_TRAINER_RUNTIME_TRAIN_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "trainer/data/neighbor_sampler.h"
#include "trainer/memory/transfer_stats.h"
#include "trainer/memory/working_set_options.h"
#include "trainer/model/model_spec.h"
#include "trainer/plan/batch_plan.h"
#include "trainer/plan/working_set.h"
#include "trainer/runtime/train_enums.h"
#include "util/fields.h"

namespace mnemo::runtime {

struct DistributedContext;  // trainer/runtime/distributed.h

// Where the events come from.
struct DataOptions {
  std::string dataset = "wikipedia";   // registry name or path to a file
  std::vector<std::string> data_dirs;  // searched in order for registry names
  std::string format = "auto";         // loader format (see data::ParseFormat)
  bool skip_bad_lines = false;
  int64_t max_events = 0;  // 0: all events
};

// The optimization.
struct OptimOptions {
  int epochs = 10;
  int64_t batch_size = 600;
  double lr = 1e-4;
  double lr_scale = 1;  // the factor --lr-scaling applied to lr (reported)
  // Where the engine derives the batch (DepBloomOptions::derive_batch):
  // lr x (global batch / kLrReferenceBatch)^lr_scale_power once it is
  // known (0.5: --lr-scaling sqrt, 1: linear, 0: none); lr is then the
  // unscaled rate until setup.
  double lr_scale_power = 0;
  int patience = 5;  // early stopping rounds on val AP (0: never stop)
  uint64_t seed = 0;
  Precision precision = Precision::kFp32;  // bf16: autocast, fp32 master
};

// How the model is evaluated (docs/training.md "Evaluation protocol").
struct EvalOptions {
  // kTgnReference ("tgn-reference") follows twitter-research/tgn
  // (negatives from unique destinations per split, best epoch by the mean
  // of per-batch val AP, evaluation batches of 200, JODIE time statistics
  // per role over all events); kMnemo ("mnemo") keeps test-time data out of
  // training statistics (JODIE statistics over training events only), draws
  // non-bipartite negatives from all nodes, picks the best epoch by the AP
  // over all validation events and evaluates in --batch-size batches;
  // kTgb ranks (MRR).
  Protocol protocol = Protocol::kTgnReference;
  // 0: 200 under the tgn-reference and tgb protocols, else the batch size.
  int64_t batch_size = 0;
  // --protocol tgb: negatives per positive in validation and test (0: every
  // other destination; -1: the data set's, 0 for wikipedia as in tgbl-wiki,
  // else 100 historical + random), the seed they are drawn with, and where
  // their files are written and read (empty: <out_dir>/tgb_negatives when
  // out_dir is set, else nowhere).
  int64_t tgb_negatives = -1;
  int64_t tgb_seed = 42;
  std::string tgb_negatives_dir;
  // A cluster's evaluation shared by every worker (--eval-on all; the same
  // figures as rank 0 alone, eval/eval_share.h) or run by rank 0 while the
  // others wait (--eval-on leader). Shared only where the memory holds
  // every node and the protocol is link prediction (not --protocol tgb).
  bool shared = true;
  // The replay cost the shared evaluation splits its passes by
  // (eval/eval_share.h): < 0 measures it as the run goes (the model's
  // default at first); tests fix it to force a split. Figures do not
  // depend on it.
  double share_replay_cost = -1;
};

// The machine the process computes on.
struct ComputeOptions {
  int threads = 0;  // intra-op threads (0: every CPU of the affinity mask)
  // Where the model, node memory and batch tensors live (--device); the
  // gradient group is NCCL on CUDA, gloo on the CPU.
  Device device;
  // bf16 on AMX CPUs: let oneDNN use its AMX kernels (faster, but Debian's
  // oneDNN 2.6 crashes on some shapes; see trainer/platform/cpu_isa.h).
  bool allow_amx = false;
  // fp32 on a GPU: cuBLAS products and cuDNN in TF32 (tensor cores, fp32
  // sums); false: full fp32. No effect on the CPU.
  bool tf32 = true;
};

// How a cluster's gradients travel (docs/design.md "The gradient
// all-reduce"): in flat buckets of about bucket_mb megabytes each, a
// bucket's all-reduce started as soon as the backward pass has produced
// its last gradient (0: one bucket, started when the backward pass ends;
// below 0, the default: the device's choice, BucketMb()), in the type
// `comm`. Every rank must agree (part of the run's configuration).
struct GradientOptions {
  double bucket_mb = kAuto;
  GradComm comm = GradComm::kFp32;

  static constexpr double kAuto = -1;
  // The default on GPUs (NCCL), as PyTorch DDP buckets, scaled to models
  // of 0.1-1.5 MB of gradients. On the CPU (gloo) one bucket: each extra
  // all-reduce costs ~1.4 ms of the trainer's own CPU there, and the
  // overlap hides nothing (bench/results/allreduce_buckets.md).
  static constexpr double kGpuBucketMb = 0.25;
  // The bucket size a run uses on a GPU (`cuda`) or the CPU.
  double BucketMb(bool cuda) const {
    return bucket_mb >= 0 ? bucket_mb : (cuda ? kGpuBucketMb : 0);
  }
};

// What a run writes and where it continues from.
struct RunOptions {
  std::string out_dir;     // summary.json, metrics.csv, checkpoints/ (optional)
  std::string resume_dir;  // continue from the last checkpoint in this dir
  // Flags --resume may change although the checkpoint was trained with
  // other values (--resume-override; CheckRunConfig).
  std::vector<std::string> resume_overrides;
  // The flags that define the result (RunConfigText), recorded in every
  // checkpoint and compared on --resume (empty: neither).
  std::string run_config;
  std::string config_path;    // recorded in the summary only
  bool progress_bar = false;  // \r progress bar (terminal); else plain lines
  double progress_interval_s = 10;  // plain progress line period
  // Operator profile (LibTorch's profiler) of profile_batches training
  // batches of the first epoch, written to this file (empty: off).
  std::string profile_path;
  int64_t profile_batches = 50;
};

// DepTGL (docs/models-and-policies.md): K, the global batches of a
// synchronization window (Definition 1); tau_g (Eq. 7, decided by the
// coordinator; here for the run-configuration hash); tau_c (Eq. 9); the
// EMA factors of the gradient norm (Eq. 6) and of the batch time (Eq. 8).
struct DepTglOptions {
  int sync_every = 6;
  double tau_grad = 1.6;
  double tau_load = 1.5;
  double ema_alpha = 0.1;
  double ema_beta = 0.1;
  // Which states a worker pushes: kAdvanced (every state it advanced,
  // ordered by event versions) or kOwned (the paper's owner states only).
  PushScope push_scope = PushScope::kAdvanced;
  // What a refresh pulls: kFrontier (the paper's N_sync) or kReads (also
  // the remote temporal neighbours and negatives the window's targets read).
  SyncScope sync_scope = SyncScope::kReads;
};

// DepBloom: windows of the training stream (events), how each window is
// split into per-worker sub-chains (metis, greedy, time), the allowed
// imbalance of the parts, the batches whose states count as urgent, and the
// critical-path optimization (urgent states first, the rest in the
// background).
struct DepBloomOptions {
  // Intra-batch memory refinement IMR(k): each training batch is k
  // micro-batches whose memories are refined from earlier micro-batches'
  // events (1: off; 0: the policy's default, 4 for depbloom, else 1).
  int refine_chunks = 0;
  // Events per window; 0: derived from the training events and workers
  // once the data is loaded (trainer/runtime/depbloom_sizes.h).
  int64_t window_events = 80000;
  // OptimOptions::batch_size (per worker) is derived the same way (the CLI
  // sets this under depbloom when --batch-size is not given).
  bool derive_batch = false;
  plan::Partitioner partitioner = plan::Partitioner::kMetis;
  // The cut: METIS over the events' dependency graph (pieces of one event)
  // and each event in the part that breaks fewer of its endpoints' chains;
  // the paper's (whole nodes, the source's part) splits a hub's in-events
  // over its sources' parts (docs/models-and-policies.md).
  plan::ChainAssignment chain_assignment = plan::ChainAssignment::kFollow;
  int64_t piece_events = 1;
  double imbalance = 0.05;
  int urgent_batches = 1;
  bool critical_path = true;
  // G: workers per sub-chain. Each window's workers / G sub-chains are each
  // run by a group of G workers as a pipeline (policies/pipeline_handoff.h;
  // DepBloom Sec. 4.2, Fig. 9); 1: one worker per sub-chain.
  int pipeline_depth = 1;
};

// The cluster policies' knobs (docs/design.md "Training policies"; the
// policy itself is DistributedContext::policy), handed to the policy whole.
struct PolicyOptions {
  DepTglOptions deptgl;
  DepBloomOptions depbloom;
  // Where planned batches are cached (empty: no cache).
  std::string plan_cache_dir;
};

// Checks and switches that do not change the result.
struct CheckOptions {
  // Multi-worker runs: after every optimizer step, all-reduce a parameter
  // checksum and fail if any worker's parameters differ (costs one small
  // all-reduce per batch).
  bool check_parameters = false;
  // Prepares the next batch (its targets and sampled neighbours and, in
  // one process, its tensors) while this one computes, where the policy
  // allows it (every policy but DepTGL, whose next batch depends on this
  // one's compute time). The results are the same either way; tests
  // compare the two.
  bool prepare_ahead = true;
  // One process on a GPU: a CUDA call that makes the host wait for the
  // device inside a training batch's queued work (anything but the batch's
  // one read of its loss and gradient norm) fails the run naming the call.
  // The GPU tests' check that the loop never stalls the device.
  bool check_device_syncs = false;
};

// Everything a run is told, in groups each part of the runtime takes whole.
struct TrainOptions {
  DataOptions data;
  model::ModelOptions model;  // open defaults: WithModelDefaults
  OptimOptions optim;
  EvalOptions eval;
  ComputeOptions compute;
  GradientOptions gradients;
  RunOptions run;
  PolicyOptions policy;
  memory::WorkingSetOptions working_set;
  CheckOptions checks;
  // Multi-worker run (null: single process). Not owned.
  const DistributedContext* distributed = nullptr;
};

// One finished epoch.
struct EpochResult {
  int epoch = 0;  // 1-based
  double train_loss = 0;
  double val_ap = 0, val_auc = 0;
  double val_new_node_ap = 0, val_new_node_auc = 0;
  double val_ap_batch_mean = 0, val_new_node_ap_batch_mean = 0;
  double val_loss = 0;      // mean over validation batches of the training loss
  double seconds = 0;       // training seconds of the epoch
  double eval_seconds = 0;  // validation seconds
  int64_t train_events = 0;
  double train_events_per_second = 0;
  double grad_norm_mean = 0;  // mean gradient L2 norm over the epoch's batches
  int64_t steps = 0;          // optimizer steps (training batches) taken
  // --protocol tgb: validation MRR and Hits@10 (NaN otherwise).
  double val_mrr = 0, val_hits_at_10 = 0;
};

struct TestResult {
  double ap = 0, auc = 0, new_node_ap = 0, new_node_auc = 0;
  double ap_batch_mean = 0, auc_batch_mean = 0;
  double new_node_ap_batch_mean = 0, new_node_auc_batch_mean = 0;
  int64_t events = 0, new_node_events = 0;
  // --protocol tgb: MRR and Hits@10 (NaN otherwise).
  double mrr = 0, hits_at_10 = 0;
};

// Rank 0's traffic for evaluation (not in the training counters: every
// policy needs it, training does not): its pull of every state at each
// epoch's end or, with a bounded working set, the states its evaluation
// passes pulled and the post-validation states of each best epoch it
// pushed before testing.
struct EvalTraffic {
  int64_t states_pulled = 0, bytes_pulled = 0;
  double pull_seconds = 0;
  int64_t states_pushed = 0, bytes_pushed = 0;
  // Shared evaluation (eval/eval_share.h): the batches this worker scored
  // and replayed, their wall seconds, and the bytes of best-epoch memory it
  // received from another worker.
  int64_t scored_batches = 0, replayed_batches = 0;
  double score_seconds = 0, replay_seconds = 0;
  int64_t memory_bytes_received = 0;
  double replay_cost = 0;  // the last split's (every worker's the same)

  template <typename Self, typename F>
  static void Fields(Self& s, F&& f) {
    f("states_pulled", s.states_pulled, Merge::kSum);
    f("bytes_pulled", s.bytes_pulled, Merge::kSum);
    f("pull_seconds", s.pull_seconds, Merge::kSum);
    f("states_pushed", s.states_pushed, Merge::kSum);
    f("bytes_pushed", s.bytes_pushed, Merge::kSum);
    f("scored_batches", s.scored_batches, Merge::kSum);
    f("replayed_batches", s.replayed_batches, Merge::kSum);
    f("score_seconds", s.score_seconds, Merge::kSum);
    f("replay_seconds", s.replay_seconds, Merge::kSum);
    f("memory_bytes_received", s.memory_bytes_received, Merge::kSum);
    f("replay_cost", s.replay_cost, Merge::kFirst);
  }
};

// The gradient all-reduce and the waits for the slowest worker.
struct CollectiveStats {
  // The training thread's wait for the gradients (the all-reduce's exposed
  // time: what the backward pass and the next batch's preparation did not
  // hide), with the control collectives' waits.
  double allreduce_seconds = 0;
  int64_t allreduce_bytes = 0;
  // Gradient buckets all-reduced, and those of them started during the
  // backward pass (grad_buckets.h).
  int64_t allreduce_buckets = 0, allreduce_buckets_in_backward = 0;
  double barrier_seconds = 0;  // waiting for the slowest worker

  template <typename Self, typename F>
  static void Fields(Self& s, F&& f) {
    f("allreduce_seconds", s.allreduce_seconds, Merge::kSum);
    f("allreduce_bytes", s.allreduce_bytes, Merge::kSum);
    f("allreduce_buckets", s.allreduce_buckets, Merge::kSum);
    f("allreduce_buckets_in_backward", s.allreduce_buckets_in_backward,
      Merge::kSum);
    f("barrier_wait_seconds", s.barrier_seconds, Merge::kSum);
  }
};

// Where a worker's training time went, by stage of its steps.
struct PhaseSeconds {
  double preparation = 0, forward = 0, backward = 0, memory_management = 0;

  template <typename Self, typename F>
  static void Fields(Self& s, F&& f) {
    f("preparation", s.preparation, Merge::kSum);
    f("forward", s.forward, Merge::kSum);
    f("backward", s.backward, Merge::kSum);
    f("memory_management", s.memory_management, Merge::kSum);
  }
};

// What a policy and its plan did: cache refreshes performed (pulls of
// needed states), DepTGL's auxiliary events pruned, batches run in
// heavy-load mode, candidate refresh boundaries (refreshed / skipped; the
// same on every worker), nodes pulled at refreshes (total, largest);
// DepBloom's states pushed urgently / in the background and their bytes;
// the planned windows' mean cross-sub-chain ratio, load imbalance and
// partitioning seconds (the same on every worker); and the time to plan
// (or load) this worker's batches.
struct PolicyCounters {
  int64_t refreshes = 0;
  int64_t pruned = 0, heavy_load_batches = 0;
  int64_t boundaries = 0, boundaries_refreshed = 0, boundaries_skipped = 0;
  int64_t refresh_nodes_total = 0, refresh_nodes_max = 0;
  int64_t urgent_states = 0, urgent_bytes = 0;
  int64_t nonurgent_states = 0, nonurgent_bytes = 0;
  double cross_ratio = 0, imbalance = 0, partition_seconds = 0;
  double plan_seconds = 0;

  template <typename Self, typename F>
  static void Fields(Self& s, F&& f) {
    f("sync_count", s.refreshes, Merge::kSum);
    f("pruned", s.pruned, Merge::kSum);
    f("heavy_load_batches", s.heavy_load_batches, Merge::kSum);
    f("boundaries", s.boundaries, Merge::kFirst);
    f("boundaries_refreshed", s.boundaries_refreshed, Merge::kFirst);
    f("boundaries_skipped", s.boundaries_skipped, Merge::kFirst);
    f("refresh_nodes_total", s.refresh_nodes_total, Merge::kSum);
    f("refresh_nodes_max", s.refresh_nodes_max, Merge::kMax);
    f("urgent_states", s.urgent_states, Merge::kSum);
    f("urgent_bytes", s.urgent_bytes, Merge::kSum);
    f("nonurgent_states", s.nonurgent_states, Merge::kSum);
    f("nonurgent_bytes", s.nonurgent_bytes, Merge::kSum);
    f("cross_ratio", s.cross_ratio, Merge::kFirst);
    f("imbalance", s.imbalance, Merge::kFirst);
    f("partition_seconds", s.partition_seconds, Merge::kFirst);
    f("seconds", s.plan_seconds, Merge::kMax);
  }
};

// A pipeline's handoffs (pipetgl; policies/pipeline_handoff.h): the
// handoffs this worker received and sent, the states and bytes it sent
// (those sent first, the next batch's urgent reads, apart where the
// critical path splits them), its bubble (seconds idle waiting for the
// worker before: its states, or its parameters), the critical path's own
// seconds (from a batch's states arriving to this worker handing its
// update on), and the parameters it passed on.
struct PipelineCounters {
  int64_t handoffs_received = 0, handoffs_sent = 0;
  int64_t states_sent = 0, bytes_sent = 0;
  int64_t urgent_states_sent = 0, urgent_bytes_sent = 0;
  int64_t late_rest = 0;  // batches that read a state sent after the urgent
  double bubble_seconds = 0, state_wait_seconds = 0, parameter_wait_seconds = 0;
  double critical_seconds = 0;
  int64_t parameter_passes = 0, parameter_bytes = 0;

  template <typename Self, typename F>
  static void Fields(Self& s, F&& f) {
    f("handoffs_received", s.handoffs_received, Merge::kSum);
    f("handoffs_sent", s.handoffs_sent, Merge::kSum);
    f("states_sent", s.states_sent, Merge::kSum);
    f("bytes_sent", s.bytes_sent, Merge::kSum);
    f("urgent_states_sent", s.urgent_states_sent, Merge::kSum);
    f("urgent_bytes_sent", s.urgent_bytes_sent, Merge::kSum);
    f("late_rest", s.late_rest, Merge::kSum);
    f("bubble_seconds", s.bubble_seconds, Merge::kSum);
    f("state_wait_seconds", s.state_wait_seconds, Merge::kSum);
    f("parameter_wait_seconds", s.parameter_wait_seconds, Merge::kSum);
    f("critical_seconds", s.critical_seconds, Merge::kSum);
    f("parameter_passes", s.parameter_passes, Merge::kSum);
    f("parameter_bytes", s.parameter_bytes, Merge::kSum);
  }
};

// Communication and time accounting of one worker (or totals), in groups,
// each with its field list (Fields) that summary.json, the per-batch
// callbacks and the cluster's gathering (GatherCommStats) walk.
struct CommStats {
  memory::StoreTraffic store;  // training's pulls and pushes
  EvalTraffic eval;
  CollectiveStats collectives;
  PhaseSeconds time;
  PolicyCounters policy;
  memory::WorkingSetStats working_set;
  PipelineCounters pipeline;
  double train_seconds = 0;     // training time (all epochs)
  int64_t target_events = 0;    // events whose loss this worker computed
  int64_t replayed_events = 0;  // extra events replayed for memory only
  int64_t peak_rss_bytes = 0;
  // Mean loss over this worker's own target events in the last epoch (the
  // totals hold the global batches' mean instead).
  double train_loss = 0;

  // The fields outside the groups.
  template <typename Self, typename F>
  static void Fields(Self& s, F&& f) {
    f("train_seconds", s.train_seconds, Merge::kSum);
    f("target_events", s.target_events, Merge::kSum);
    f("replayed_events", s.replayed_events, Merge::kSum);
    f("peak_rss_bytes", s.peak_rss_bytes, Merge::kMax);
    f("train_loss", s.train_loss, Merge::kFirst);
  }
  // Calls g(part) for every group and then for the struct itself (whose
  // Fields are the rest): every field, in one order.
  template <typename Self, typename G>
  static void Parts(Self& s, G&& g) {
    g(s.store);
    g(s.eval);
    g(s.collectives);
    g(s.time);
    g(s.policy);
    g(s.working_set);
    g(s.pipeline);
    g(s);
  }
  // (store seconds + all-reduce + barrier waits) / training time.
  double share() const {
    return train_seconds > 0 ? (store.seconds + collectives.allreduce_seconds +
                                collectives.barrier_seconds) /
                                   train_seconds
                             : 0;
  }
};

struct TrainResult {
  std::string policy = "single";
  int workers = 1;
  CommStats comm;  // totals over workers
  std::vector<CommStats> per_worker;
  double parameter_checksum = 0;  // sum of all parameters after training
  std::vector<EpochResult> epochs;
  int best_epoch = 0;
  TestResult test;
  double train_events_per_second = 0;  // over all epochs' training time
  double test_seconds = 0;             // the best epoch's test, waits included
  // data_preparation, forward, backward, memory_update, evaluation, load.
  std::vector<std::pair<std::string, double>> time_breakdown_seconds;
  int64_t peak_rss_bytes = 0;
  std::string summary_json;  // what was (or would be) written to summary.json
};

// Prints progress and per-epoch lines; the default writes to stderr/stdout.
struct TrainCallbacks {
  std::function<void(const std::string& line)> log;  // informational lines
  // After every training step (on each rank, for its own share).
  struct Batch {
    int epoch = 0;
    int64_t target_events = 0;  // events whose loss this rank computed
    double loss = 0, grad_norm = 0;
    double seconds = 0;  // the step, including its waits for states
    // This rank's totals so far (CommStats): its store traffic and, with
    // a bounded working set, the set's counters (0 when unbounded).
    memory::StoreTraffic store;
    memory::WorkingSetStats working_set;
    // A pipeline's (pipetgl, depbloom --pipeline-depth): this rank's totals.
    PipelineCounters pipeline;
  };
  std::function<void(const Batch&)> batch;
  // After each epoch's evaluation (every rank gets rank 0's figures).
  std::function<void(const EpochResult&)> epoch;
  // After the test pass.
  std::function<void(const TestResult&)> test;
};

// The per-flag range checks of the options (INVALID_ARGUMENT naming one
// flag and what it must be): --threads, --epochs, --batch-size,
// --eval-batch-size, --max-events, --patience, the widths, --neighbors,
// --heads, --refine-chunks, --lr, --dropout, and what each model's shapes
// need (heads dividing the widths, APAN's mailbox, TGAT's and DySAT's
// layers, DySAT's snapshots). Train() runs them first; the
// CLI runs them before anything loads, to answer with a usage error.
absl::Status ValidateTrainOptions(const TrainOptions& options);

// `options` with the model's defaults where they are left open (the
// neighbour strategy, the dropout: model::WithDefaults).
TrainOptions WithModelDefaults(const TrainOptions& options);

// The events per evaluation batch: EvalOptions::batch_size where set, else
// 200 under the TGN reference and TGB protocols, else the training batch
// (`options` after the engine derived it where it was left to the data).
int64_t EvalBatchSize(const TrainOptions& options);

// Loads the data, trains, evaluates and (with out_dir) writes summary.json,
// metrics.csv and per-epoch checkpoints. Errors: bad options
// (INVALID_ARGUMENT), data problems (as the loaders report them), I/O.
absl::StatusOr<TrainResult> Train(const TrainOptions& options,
                                  const TrainCallbacks& callbacks = {});

}  // namespace mnemo::runtime

#endif  // MNEMO_TRAINER_RUNTIME_TRAIN_H_
