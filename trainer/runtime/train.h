// The single-process training engine behind `mnemo train`. Torch-free header:
// the CLI maps flags onto TrainOptions and calls Train(). The choices among
// names (--model, --protocol, ...) are enums here: the CLI parses the text
// once (services/train_flags.cc) and nothing below compares strings.
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
#include "trainer/model/model_kind.h"
#include "trainer/plan/batch_plan.h"
#include "trainer/plan/working_set.h"
#include "trainer/runtime/train_enums.h"

namespace mnemo::runtime {

struct DistributedContext;  // trainer/runtime/distributed.h

struct TrainOptions {
  // Data.
  std::string dataset = "wikipedia";   // registry name or path to a file
  std::vector<std::string> data_dirs;  // searched in order for registry names
  std::string format = "auto";         // loader format (see data::ParseFormat)
  bool skip_bad_lines = false;
  int64_t max_events = 0;  // 0: all events

  // Model (defaults follow TGL's TGN config).
  model::ModelKind model =
      model::ModelKind::kTgn;  // tgn | jodie | apan | tgat | dysat
  int64_t memory_dim = 100;
  int64_t time_dim = 100;
  int64_t embedding_dim = 100;
  int neighbors = 10;
  // Unset: the model's default (WithModelDefaults).
  std::optional<data::NeighborStrategy> neighbor_strategy;
  int heads = 2;
  double dropout = -1;           // < 0: the model's default (WithModelDefaults)
  int layers = 2;                // attention layers (TGAT: 1 or 2)
  int mailbox = 10;              // mails kept per node (APAN)
  int snapshots = 3;             // graph snapshots read (DySAT)
  double snapshot_span = 10000;  // time units per snapshot (DySAT)

  // Optimization.
  int epochs = 10;
  int64_t batch_size = 600;
  // 0: 200 under the tgn-reference protocol, else batch_size.
  int64_t eval_batch_size = 0;
  double lr = 1e-4;
  double lr_scale = 1;  // the factor --lr-scaling applied to lr (reported)
  int patience = 5;     // early stopping rounds on val AP (0: never stop)
  uint64_t seed = 0;
  // Evaluation protocol (docs/training.md "Evaluation protocol"):
  // kTgnReference ("tgn-reference") follows twitter-research/tgn (negatives
  // from unique destinations per split, best epoch by the mean of per-batch val
  // AP, evaluation batches of 200, JODIE time statistics per role over all
  // events); kMnemo ("mnemo") keeps test-time data out of training statistics
  // (JODIE statistics over training events only), draws non-bipartite negatives
  // from all nodes, picks the best epoch by the AP over all validation events
  // and evaluates in
  // --batch-size batches.
  Protocol protocol = Protocol::kTgnReference;
  int threads = 0;  // intra-op threads (0: every CPU of the affinity mask)
  Precision precision = Precision::kFp32;  // bf16: autocast, fp32 master
  // Where the model, node memory and batch tensors live (--device); the
  // gradient group is NCCL on CUDA, gloo on the CPU.
  Device device;
  // bf16 on AMX CPUs: let oneDNN use its AMX kernels (faster, but Debian's
  // oneDNN 2.6 crashes on some shapes; see trainer/runtime/cpu_isa.h).
  bool allow_amx = false;

  // Output.
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
  // Operator profile (LibTorch's profiler) of profile_batches training
  // batches of the first epoch, written to this file (empty: off).
  std::string profile_path;
  int64_t profile_batches = 50;
  // Cluster policies (docs/design.md "Training policies"; the policy itself is
  // DistributedContext::policy). DepTGL: K, the global batches of a
  // synchronization window (Definition 1); tau_g (Eq. 7, decided by the
  // coordinator; here for the run-configuration hash); tau_c (Eq. 9); the
  // EMA factors of the gradient norm (Eq. 6) and of the batch time (Eq. 8).
  int sync_every = 6;
  double tau_grad = 1.6;
  double tau_load = 1.5;
  double ema_alpha = 0.1;
  double ema_beta = 0.1;
  // Which states a DepTGL worker pushes: kAdvanced (every state it
  // advanced, ordered by event versions) or kOwned (the paper's owner
  // states only).
  PushScope push_scope = PushScope::kAdvanced;
  // What a DepTGL refresh pulls: kFrontier (the paper's N_sync) or kReads
  // (also the remote temporal neighbours and negatives the window's targets
  // read).
  SyncScope sync_scope = SyncScope::kReads;
  // DepBloom intra-batch memory refinement IMR(k): each training batch is k
  // micro-batches whose memories are refined from earlier micro-batches'
  // events (1: off; 0: the policy's default, 4 for depbloom, else 1).
  int refine_chunks = 0;
  // DepBloom: windows of the training stream (events), how each window is
  // split into per-worker sub-chains (metis, greedy, time), the
  // allowed imbalance of the parts, the batches whose states count as
  // urgent, and the critical-path optimization (urgent states first, the
  // rest in the background).
  int64_t window_events = 80000;
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
  // Where planned batches are cached (empty: no cache).
  std::string plan_cache_dir;
  // Cluster workers: bytes of node state (memory, mails, times) a worker
  // holds at once, the rest in the memory stores and in the worker's own
  // spill store (0: every node's state, unbounded); which state a full
  // working set drops (Belady over the plan's reads, or LRU); the spill
  // store's directory (empty: a temporary one, removed at exit).
  int64_t memory_cache_bytes = 0;
  plan::Eviction memory_eviction = plan::Eviction::kBelady;
  std::string memory_spill_dir;
  // With memory_cache_bytes: evaluation pulls the predicted misses of up
  // to this many coming batches from the memory stores while the batches
  // before them run (0: each batch's when it needs them).
  int memory_prefetch = 4;
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
  // Multi-worker run (null: single process). Not owned.
  const DistributedContext* distributed = nullptr;
  double progress_interval_s = 10;  // plain progress line period
  // --protocol tgb: negatives per positive in validation and test (0: every
  // other destination; -1: the data set's, 0 for wikipedia as in tgbl-wiki,
  // else 100 historical + random), the seed they are drawn with, and where
  // their files are written and read (empty: <out_dir>/tgb_negatives when
  // out_dir is set, else nowhere).
  int64_t tgb_negatives = -1;
  int64_t tgb_seed = 42;
  std::string tgb_negatives_dir;
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

// Communication and time accounting of one worker (or totals).
struct CommStats {
  int64_t sync_count = 0;  // cache refreshes performed (pulls of needed states)
  int64_t rpcs = 0;        // store calls (pull + push)
  int64_t states_pulled = 0, states_pushed = 0;
  int64_t bytes_pulled = 0, bytes_pushed = 0;  // state payload bytes
  // Time the training thread spent in store pulls and pushes (packing
  // included) and decision waits; for vanilla's pushes beside the step,
  // only its wait for them (DepBloom's background pushes count their own
  // time).
  double seconds = 0;
  double allreduce_seconds = 0;
  int64_t allreduce_bytes = 0;
  double barrier_seconds = 0;  // waiting for the slowest worker
  double share = 0;            // (seconds + allreduce + barrier) / train time
  double train_seconds = 0;    // training time (all epochs)
  double preparation_seconds = 0, forward_seconds = 0, backward_seconds = 0,
         memory_seconds = 0;
  int64_t target_events = 0;    // events whose loss this worker computed
  int64_t replayed_events = 0;  // extra events replayed for memory only
  int64_t peak_rss_bytes = 0;
  // Mean loss over this worker's own target events in the last epoch (the
  // totals hold the global batches' mean instead).
  double train_loss = 0;
  // Policy figures (DepTGL): auxiliary events pruned, batches run in
  // heavy-load mode, candidate refresh boundaries (refreshed / skipped; the
  // same on every worker), nodes pulled at refreshes (total, largest), and
  // the time to plan (or load) this worker's batches.
  int64_t pruned_events = 0, heavy_load_batches = 0;
  // DepBloom: states pushed urgently / in the background, and their bytes.
  int64_t urgent_states = 0, urgent_bytes = 0, nonurgent_states = 0,
          nonurgent_bytes = 0;
  // Planned windows: mean cross-sub-chain ratio and load imbalance, and
  // partitioning seconds (DepBloom; the same on every worker).
  double cross_ratio = 0, imbalance = 0, partition_seconds = 0;
  int64_t boundaries = 0, boundaries_refreshed = 0, boundaries_skipped = 0;
  int64_t refresh_nodes_total = 0, refresh_nodes_max = 0;
  double plan_seconds = 0;
  // Rank 0's pull of every state for evaluation at each epoch's end (not in
  // the counters above: training does not need it). With a bounded working
  // set, the states its evaluation passes pulled, and the post-validation
  // states of each best epoch it pushed before testing.
  int64_t eval_states_pulled = 0, eval_bytes_pulled = 0;
  int64_t eval_states_pushed = 0, eval_bytes_pushed = 0;
  double eval_pull_seconds = 0;
  // A bounded working set (--memory-cache-bytes; 0 when unbounded): states
  // it holds at most and did hold at most, states requested from it (a
  // batch's reads and the policy's pulls and pushes) and found held,
  // states it had to bring in (misses) and dropped (evictions), dropped
  // states spilled to the worker's own store because they had changed, and
  // spilled states restored, with their bytes and the time spent on both.
  // In evaluation, misses pulled ahead while the batch before ran
  // (--memory-prefetch; in states_pulled and eval_states_pulled too), and
  // those of them the batch did not read after all.
  int64_t cache_capacity_states = 0, cache_peak_states = 0;
  int64_t cache_reads = 0, cache_hits = 0, cache_misses = 0;
  int64_t cache_evictions = 0, cache_spills = 0, cache_restores = 0;
  int64_t cache_spill_bytes = 0, cache_restore_bytes = 0;
  int64_t cache_prefetched = 0, cache_prefetch_unused = 0;
  double cache_seconds = 0;
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
    // This rank's totals so far (CommStats).
    int64_t states_pulled = 0, states_pushed = 0;
    int64_t bytes_pulled = 0, bytes_pushed = 0;
    // A bounded working set's totals so far (0 when unbounded).
    int64_t cache_hits = 0, cache_misses = 0, cache_evictions = 0;
    int64_t cache_spills = 0, cache_restores = 0;
    int64_t cache_spill_bytes = 0, cache_restore_bytes = 0;
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

// `options` with the model's defaults where they are left open: the
// neighbour strategy (tgat: uniform, as TGL configures it; else recent) and
// the dropout (tgat, apan: 0.1; else 0.2).
TrainOptions WithModelDefaults(const TrainOptions& options);

// Loads the data, trains, evaluates and (with out_dir) writes summary.json,
// metrics.csv and per-epoch checkpoints. Errors: bad options
// (INVALID_ARGUMENT), data problems (as the loaders report them), I/O.
absl::StatusOr<TrainResult> Train(const TrainOptions& options,
                                  const TrainCallbacks& callbacks = {});

}  // namespace mnemo::runtime

#endif  // MNEMO_TRAINER_RUNTIME_TRAIN_H_
