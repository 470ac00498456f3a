// The training engine: one process, or one worker of a cluster (`mnemo
// train`, `mnemo trainer`). One loop runs every policy through the
// TrainingPolicy seam (policies/policy.h) over this worker's plan
// (trainer/plan/).
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
#include "trainer/data/registry.h"
#include "trainer/data/split.h"
#include "trainer/model/temporal_model.h"
#include "trainer/plan/batch_plan.h"
#include "trainer/plan/subchain_plan.h"
#include "trainer/runtime/allocator.h"
#include "trainer/runtime/batch_builder.h"
#include "trainer/runtime/checkpoint.h"
#include "trainer/runtime/collectives.h"
#include "trainer/runtime/cpu_isa.h"
#include "trainer/runtime/distributed.h"
#include "trainer/runtime/engine_util.h"
#include "trainer/runtime/evaluator.h"
#include "trainer/runtime/fused_adam.h"
#include "trainer/runtime/metrics.h"
#include "trainer/runtime/op_profile.h"
#include "trainer/runtime/policies/policy.h"
#include "trainer/runtime/progress.h"
#include "trainer/runtime/resume_point.h"
#include "trainer/runtime/state_codec.h"
#include "trainer/runtime/state_sync.h"
#include "trainer/runtime/summary.h"
#include "trainer/runtime/train.h"
#include "util/proc.h"
#include "util/status_macros.h"

namespace mnemo::runtime {
namespace fs = std::filesystem;
namespace {

// Sorted unique destinations of `events`.
std::vector<int32_t> UniqueDestinations(const data::EventLog& log,
                                        const std::vector<int64_t>& events) {
  std::vector<int32_t> d;
  d.reserve(events.size());
  for (int64_t e : events) d.push_back(log.dst[e]);
  std::sort(d.begin(), d.end());
  d.erase(std::unique(d.begin(), d.end()), d.end());
  return d;
}

// Mean and (population) standard deviation of the time since a node's
// previous event (0 before its first) over `events` (null: all), counting
// nodes as sources (role 0), destinations (role 1) or both, each role with
// its own last-seen times when one is chosen. JODIE normalizes time gaps
// with these.
std::pair<double, double> GapStats(const data::EventLog& log,
                                   const std::vector<int64_t>* events,
                                   int role) {
  std::vector<double> last(log.num_nodes, 0.0);
  double sum = 0, sq = 0;
  int64_t count = 0;
  auto visit = [&](int64_t e) {
    for (int r = 0; r < 2; ++r) {
      if (role >= 0 && r != role) continue;
      const int32_t u = r == 0 ? log.src[e] : log.dst[e];
      const double dt = log.t[e] - last[u];
      sum += dt;
      sq += dt * dt;
      ++count;
      last[u] = log.t[e];
    }
  };
  if (events != nullptr) {
    for (int64_t e : *events) visit(e);
  } else {
    for (int64_t e = 0; e < log.num_events(); ++e) visit(e);
  }
  const double mean = count ? sum / count : 0;
  const double var = count ? sq / count - mean * mean : 0;
  return {mean, var > 0 ? std::sqrt(var) : 1.0};
}

class Engine {
 public:
  Engine(const TrainOptions& o, const TrainCallbacks& cb)
      : o_(o), cb_(cb), progress_(o, cb) {}

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
  // One training epoch over this worker's plan (DESIGN.md data flow): per
  // global batch, the policy's refresh, the mixed batch (targets with
  // negatives, auxiliary replay events), forward, loss over the targets,
  // backward, gradient all-reduce, step, memory update, the policy's push
  // and report.
  PassStats TrainPass(int epoch);
  // Checks (with --check-parameters) that every worker holds the same
  // parameters after `global_batch`'s step.
  absl::Status CheckParameters();
  // Epoch end: every update in the store (the policy's final push), then a
  // barrier.
  absl::Status FinalSync(int epoch);
  absl::Status PullAllForEvaluation(int epoch);
  StateVersions Versions(int epoch) const {
    return StateVersions{log_.num_events(), epoch};
  }
  bool distributed() const { return dist_ != nullptr; }
  bool leader() const { return rank_ == 0; }
  // Sets the same value on every rank (rank 0's).
  absl::Status ShareFromLeader(std::vector<double>* values);
  // Every rank's CommStats into result->per_worker and the totals.
  absl::Status GatherCommStats(TrainResult* result);
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
  // The temporal neighbour sampler over `graph` (none for JODIE, which reads
  // no neighbours).
  std::optional<data::NeighborSampler> MakeSampler(
      const data::TemporalGraph* graph, uint64_t seed) const {
    if (jodie_) return std::nullopt;
    return data::NeighborSampler(graph, o_.neighbors,
                                 o_.neighbor_strategy == "uniform"
                                     ? data::NeighborStrategy::kUniform
                                     : data::NeighborStrategy::kRecent,
                                 seed);
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

  const TrainOptions& o_;
  const TrainCallbacks& cb_;
  Progress progress_;
  Timers timers_;
  // --profile: the first epoch this run trains records its operators.
  std::unique_ptr<OpProfile> profile_;
  bool profiled_ = false;
  std::string data_path_;
  data::EventLog log_;
  data::LoadReport load_report_;
  data::Split split_;
  std::unique_ptr<data::TemporalGraph> train_graph_, full_graph_;
  std::vector<int32_t> train_neg_candidates_;
  std::vector<int64_t> train_pos_;  // log index -> position in split_.train
  std::vector<int32_t> epoch_negatives_;  // per position in split_.train
  // Negatives of each evaluation split.
  EvalNegatives val_negs_, new_node_val_negs_, test_negs_, new_node_test_negs_;
  bool reference_protocol_ = true;
  int refine_chunks_ = 1;       // IMR(k) micro-batches per training batch
  std::string onednn_isa_cap_;  // SummaryInfo::onednn_isa_cap
  std::string malloc_;          // SummaryInfo::malloc
  JodieTimeStats jodie_stats_;
  bool jodie_ = false;
  bool bf16_ = false;
  int64_t eval_batch_size_ = 0;

  model::TemporalModel model_{nullptr};
  std::unique_ptr<FusedAdam> optimizer_;
  model::NodeState state_;
  std::unique_ptr<BatchBuilder> builder_;

  // History and early stopping (saved in checkpoints).
  TrainingRecord record_;

  // Multi-worker state (null dist_: single process).
  const DistributedContext* dist_ = nullptr;
  int rank_ = 0, world_ = 1;
  std::unique_ptr<Collectives> collectives_;
  std::function<int(int64_t)> owner_;
  int64_t global_batch_ = 0;
  CommStats comm_;
  std::unique_ptr<StateSync> sync_;
  std::unique_ptr<TrainingPolicy> policy_;
  plan::WorkerPlan plan_;
  plan::PlanStats plan_stats_;
  absl::Status failure_;  // first error of a training pass
  bool said_no_cluster_checkpoint_ = false;
};

absl::Status Engine::Setup() {
  ScopedTimer t(&timers_.load);
  if (o_.model != "tgn" && o_.model != "jodie") {
    return absl::InvalidArgumentError(
        absl::StrCat("--model must be tgn or jodie, got '", o_.model, "'"));
  }
  jodie_ = o_.model == "jodie";
  if (o_.precision != "fp32" && o_.precision != "bf16") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--precision must be fp32 or bf16, got '", o_.precision, "'"));
  }
  bf16_ = o_.precision == "bf16";
  malloc_ = TuneAllocatorForTraining();  // allocator.h: before the tensors
  if (bf16_) {
    // Before any oneDNN kernel runs (cpu_isa.h: oneDNN 2.6's AMX kernels
    // crashed on some shapes; 3.10's are not yet checked).
    const char* env = std::getenv("ONEDNN_MAX_CPU_ISA");
    if (env == nullptr) env = std::getenv("DNNL_MAX_CPU_ISA");
    const CpuFeatures cpu = DetectCpuFeatures();
    if (env != nullptr) {
      onednn_isa_cap_ = absl::StrCat("environment: ", env);
    } else if (std::string cap = ChooseOneDnnIsaCap(true, cpu, o_.allow_amx);
               !cap.empty()) {
      if (absl::Status s = CapOneDnnIsa(cap); s.ok()) {
        onednn_isa_cap_ = cap;
        progress_.Log(
            "bf16: this CPU has AMX; oneDNN is capped at AVX512_CORE_BF16 "
            "(oneDNN 2.6's AMX kernels crashed on some shapes; those of "
            "LibTorch 2.11's oneDNN 3.10 are not yet checked; --allow-amx "
            "opts in)");
      } else {
        return absl::FailedPreconditionError(absl::StrCat(
            "bf16 on an AMX CPU needs oneDNN capped at AVX512_CORE_BF16: ",
            s.message()));
      }
    } else if (cpu.amx()) {
      progress_.Log("bf16: AMX kernels allowed (--allow-amx)");
    }
    if (!cpu.avx512_bf16 && !cpu.amx()) {
      progress_.Log(
          "warning: bf16 on a CPU without AVX512_BF16 or AMX: oneDNN "
          "emulates bf16 products, many times slower than fp32 (TGN on "
          "Wikipedia on an AMD EPYC with AVX2 only: 0.06x, "
          "bench/results/bf16_emulated.md); --precision fp32 is faster here");
    }
  }
  RETURN_IF_ERROR(ValidateTrainOptions(o_));
  if (!jodie_ && (o_.memory_dim + o_.time_dim) % o_.heads != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--memory-dim + --time-dim (%d) must be divisible by --heads (%d)",
        o_.memory_dim + o_.time_dim, o_.heads));
  }
  if (o_.neighbor_strategy != "recent" && o_.neighbor_strategy != "uniform") {
    return absl::InvalidArgumentError(
        absl::StrCat("--neighbor-strategy must be recent or uniform, got '",
                     o_.neighbor_strategy, "'"));
  }
  if (o_.protocol != "tgn-reference" && o_.protocol != "mnemo") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--protocol must be tgn-reference or mnemo, got '", o_.protocol, "'"));
  }
  reference_protocol_ = o_.protocol == "tgn-reference";
  if (o_.refine_chunks < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--refine-chunks must be >= 0 (0: the policy's default), got ",
        o_.refine_chunks));
  }
  refine_chunks_ = o_.refine_chunks > 0
                       ? o_.refine_chunks
                       : (o_.distributed != nullptr &&
                                  o_.distributed->policy.policy ==
                                      coordinator::TrainingPolicy::kDepBloom
                              ? 4
                              : 1);
  eval_batch_size_ = o_.eval_batch_size > 0 ? o_.eval_batch_size
                     : reference_protocol_  ? 200
                                            : o_.batch_size;
  // LibTorch's own default here is one thread: 0 means every CPU this
  // process may use (its affinity mask, so a pinned worker uses its share).
  at::set_num_threads(o_.threads > 0 ? o_.threads : UsableCpuCount());

  data::Format format = data::Format::kAuto;
  ASSIGN_OR_RETURN(format, data::ParseFormat(o_.format));
  data::ResolveOptions resolve;
  resolve.search_dirs = o_.data_dirs;
  data::Format registry_format = data::Format::kAuto;
  ASSIGN_OR_RETURN(data_path_,
                   data::ResolveDataset(o_.dataset, resolve, &registry_format));
  data::LoadOptions load;
  load.format = format != data::Format::kAuto ? format : registry_format;
  load.skip_bad_lines = o_.skip_bad_lines;
  load.max_events = o_.max_events;
  const data::DatasetInfo* info = data::FindDataset(o_.dataset);
  load.name = info ? info->name : fs::path(data_path_).stem().string();
  ASSIGN_OR_RETURN(log_, data::LoadEventLog(data_path_, load, &load_report_));
  if (load_report_.bad_lines_skipped > 0) {
    progress_.Log(
        absl::StrFormat("warning: skipped %d malformed lines of %s (first: %s)",
                        load_report_.bad_lines_skipped, data_path_,
                        load_report_.first_bad_line_error));
  }
  data::SplitOptions split_options;
  split_options.reference_draw = reference_protocol_;
  split_ = data::MakeSplit(log_, split_options);
  if (split_.train.empty() || split_.val.empty() || split_.test.empty()) {
    // The split cuts at time quantiles: with enough events, an empty part
    // means the timestamps do not spread (often one timestamp for all).
    const auto [lo, hi] = std::minmax_element(log_.t.begin(), log_.t.end());
    if (log_.num_events() >= 20 && lo != log_.t.end() && *lo == *hi) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: all %d events have the same timestamp, so the chronological "
          "70/15/15 split has nothing to cut at (the third field must be "
          "the event time)",
          data_path_, log_.num_events()));
    }
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: the chronological 70/15/15 split of %d events left a part "
        "empty (train %d, validation %d, test %d): too few events or too "
        "few distinct timestamps",
        data_path_, log_.num_events(), split_.train.size(), split_.val.size(),
        split_.test.size()));
  }
  train_graph_ = std::make_unique<data::TemporalGraph>(log_, split_.train);
  full_graph_ = std::make_unique<data::TemporalGraph>(log_);
  // Negative candidates and evaluation negative seeds (TGN protocol: seeds
  // 0-3, independent of --seed).
  if (reference_protocol_ || log_.bipartite) {
    // The reference draws from the unique destinations of each sampler's
    // data: training events; all events (validation, test, and -- a quirk
    // of the reference -- new-node validation, with the validation seed);
    // the new-node test events.
    train_neg_candidates_ = split_.train_destinations;
    val_negs_ = {split_.all_destinations, kValSeed};
    test_negs_ = {split_.all_destinations, kTestSeed};
    if (reference_protocol_) {
      new_node_val_negs_ = {split_.all_destinations, kValSeed};
      new_node_test_negs_ = {UniqueDestinations(log_, split_.new_node_test),
                             kNewNodeTestSeed};
    } else {
      new_node_val_negs_ = {split_.all_destinations, kNewNodeValSeed};
      new_node_test_negs_ = {split_.all_destinations, kNewNodeTestSeed};
    }
  } else {
    std::vector<int32_t> all(log_.num_nodes);
    std::iota(all.begin(), all.end(), 0);
    train_neg_candidates_ = all;
    val_negs_ = {all, kValSeed};
    new_node_val_negs_ = {all, kNewNodeValSeed};
    test_negs_ = {all, kTestSeed};
    new_node_test_negs_ = {all, kNewNodeTestSeed};
  }
  if (train_neg_candidates_.empty()) train_neg_candidates_ = {0};
  if (new_node_test_negs_.candidates.empty()) {
    new_node_test_negs_.candidates = split_.all_destinations;
  }
  // JODIE's time-gap statistics.
  if (reference_protocol_) {
    const auto [sm, ss] = GapStats(log_, nullptr, /*role=*/0);
    const auto [dm, ds] = GapStats(log_, nullptr, /*role=*/1);
    jodie_stats_ = {sm, ss, dm, ds};
  } else {
    const auto [m, sd] = GapStats(log_, &split_.train, /*role=*/-1);
    jodie_stats_ = {m, sd, m, sd};
  }

  // Seeding and initialization draw from torch's process-wide generator:
  // serialize them so engines running side by side in one process (workers
  // as threads in tests) each get the initialization their seed gives.
  static std::mutex* init_mu = new std::mutex;
  std::unique_lock<std::mutex> init_lock(*init_mu);
  torch::manual_seed(o_.seed);
  model::TemporalModelOptions mo;
  mo.kind = jodie_ ? model::ModelKind::kJodie : model::ModelKind::kTgn;
  mo.memory_dim = o_.memory_dim;
  mo.time_dim = o_.time_dim;
  mo.embedding_dim = o_.embedding_dim;
  mo.edge_dim = log_.edge_feature_dim;
  mo.heads = o_.heads;
  mo.dropout = o_.dropout;
  mo.refine = refine_chunks_ > 1;
  model_ = model::TemporalModel(mo);
  init_lock.unlock();
  optimizer_ = std::make_unique<FusedAdam>(model_->parameters(),
                                           torch::optim::AdamOptions(o_.lr));
  builder_ = std::make_unique<BatchBuilder>(&log_, log_.num_nodes);
  state_.Reset(log_.num_nodes, o_.memory_dim, model_->mail_dim());

  if (o_.distributed != nullptr) {
    dist_ = o_.distributed;
    rank_ = dist_->rank;
    world_ = dist_->world_size;
    if (dist_->store == nullptr || dist_->cluster == nullptr) {
      return absl::InvalidArgumentError(
          "a distributed run needs a node-state store and a coordinator");
    }
    const int64_t record_dim =
        StateRecordDim(o_.memory_dim, model_->mail_dim());
    if (dist_->store->dim() != record_dim) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "the memory store holds records of %d floats but this model needs "
          "%d (memory %d + mail %d + 3): start the memstores with --dim %d",
          dist_->store->dim(), record_dim, o_.memory_dim, model_->mail_dim(),
          record_dim));
    }
    owner_ = dist_->owner ? dist_->owner
                          : [w = world_](int64_t u) { return HashOwner(u, w); };
    sync_ = std::make_unique<StateSync>(
        dist_->store, &state_, [this](int64_t u) { return owner_(u) == rank_; },
        rank_, &comm_);
    CollectiveOptions co;
    co.rendezvous = dist_->rendezvous;
    co.master_addr = dist_->master_addr;
    co.master_port = dist_->master_port;
    co.rank = rank_;
    co.world_size = world_;
    co.bind_host = dist_->bind_host;
    co.timeout = dist_->timeout;
    ASSIGN_OR_RETURN(collectives_, Collectives::Connect(co));
    // Identical initial parameters everywhere (the seed already makes them
    // equal; the broadcast makes it a guarantee).
    torch::NoGradGuard guard;
    RETURN_IF_ERROR(collectives_->Broadcast(model_->parameters(), 0));
    PolicyEnv env;
    env.options = &o_;
    env.dist = dist_;
    env.rank = rank_;
    env.world = world_;
    env.log = &log_;
    env.train = &split_.train;
    env.train_graph = train_graph_.get();
    env.train_pos = &train_pos_;
    env.negatives = &epoch_negatives_;
    env.state = &state_;
    env.sync = sync_.get();
    env.comm = &comm_;
    env.progress = &progress_;
    env.owner = owner_;
    PolicyOptions po;
    po.sync_every = o_.sync_every;
    po.tau_load = o_.tau_load;
    po.ema_alpha = o_.ema_alpha;
    po.ema_beta = o_.ema_beta;
    po.push_advanced = o_.push_scope == "advanced";
    po.refresh_reads = o_.sync_scope == "reads";
    po.window_events = o_.window_events;
    po.partitioner = o_.partitioner == "greedy" ? plan::Partitioner::kGreedy
                     : o_.partitioner == "time" ? plan::Partitioner::kTime
                                                : plan::Partitioner::kMetis;
    po.imbalance = o_.imbalance;
    po.urgent_batches = o_.urgent_batches;
    po.critical_path = o_.critical_path;
    ASSIGN_OR_RETURN(policy_, MakeTrainingPolicy(dist_->policy, po, env));
    progress_.Log(absl::StrFormat(
        "worker %d/%d: policy %s, record %d floats, store and %d-rank gloo "
        "group ready",
        rank_, world_, dist_->policy.name, record_dim, world_));
  } else {
    owner_ = [](int64_t) { return 0; };
    policy_ = MakeSingleProcessPolicy();
  }
  // This worker's batches (trainer/plan/), cached on disk.
  {
    train_pos_.assign(log_.num_events(), -1);
    for (size_t i = 0; i < split_.train.size(); ++i) {
      train_pos_[split_.train[i]] = static_cast<int64_t>(i);
    }
    plan::PlanOptions po = policy_->PlanOptions();
    po.batch_size = o_.batch_size;
    // Sub-chains: rank 0 partitions and every rank plans from its partition
    // (METIS's rand() is process-wide: ranks partitioning on their own
    // disagreed about 1 run in 10, losing or doubling events and leaving
    // their collectives out of step).
    std::vector<int32_t> chain;
    if (distributed() && po.kind == plan::PlanKind::kSubChains &&
        po.window_events >= 1) {
      if (rank_ == 0) {
        chain = plan::PartitionSubChains(log_, split_.train, po).chain;
      }
      chain.resize(split_.train.size());
      torch::Tensor t = torch::from_blob(
          chain.data(), {static_cast<int64_t>(chain.size())}, torch::kInt32);
      RETURN_IF_ERROR(collectives_->Broadcast({t}, 0));
      po.given_chain = &chain;
    }
    ASSIGN_OR_RETURN(plan_,
                     plan::LoadOrMakeWorkerPlan(
                         log_, split_.train, owner_, rank_, po,
                         distributed() ? o_.plan_cache_dir : "", &plan_stats_));
    policy_->SetPlan(&plan_);
    comm_.plan_seconds = plan_stats_.seconds;
    if (distributed()) {
      progress_.Log(absl::StrFormat(
          "plan (%s): %d batches, %d targets, %d auxiliary events, %d "
          "windows, refresh sets %d nodes in all (max %d); %.3f s%s",
          policy_->name(), plan_stats_.batches, plan_stats_.targets,
          plan_stats_.auxiliaries, plan_stats_.windows,
          plan_stats_.refresh_total, plan_stats_.refresh_max,
          plan_stats_.seconds,
          plan_stats_.from_cache
              ? absl::StrCat(", from ", plan_stats_.cache_path)
              : ""));
    }
  }

  progress_.Log(absl::StrFormat(
      "data: %s (%s, %s): %d events, %d nodes%s, %d edge features; "
      "train %d, val %d (new-node %d), test %d (new-node %d)",
      log_.name, data_path_, data::FormatName(log_.format), log_.num_events(),
      log_.num_nodes, log_.bipartite ? ", bipartite" : "",
      log_.edge_feature_dim, split_.train.size(), split_.val.size(),
      split_.new_node_val.size(), split_.test.size(),
      split_.new_node_test.size()));
  return absl::OkStatus();
}

Engine::PassStats Engine::TrainPass(int epoch) {
  model_->train();
  state_.Reset(log_.num_nodes, o_.memory_dim, model_->mail_dim());
  torch::manual_seed(EpochSeed(o_.seed, epoch, 1) + rank_);
  // Every rank draws the same negatives for the whole epoch (the same
  // sequence per-batch draws would give) and uses its targets' ones.
  {
    data::NegativeSampler negs(train_neg_candidates_,
                               EpochSeed(o_.seed, epoch, 2));
    epoch_negatives_.resize(split_.train.size());
    negs.Sample(epoch_negatives_.size(), epoch_negatives_.data());
  }
  std::optional<data::NeighborSampler> sampler =
      MakeSampler(train_graph_.get(), EpochSeed(o_.seed, epoch, 3) + rank_);
  policy_->BeginEpoch(epoch);
  PassStats stats;
  const int64_t total = split_.train.size();
  progress_.Start(
      distributed()
          ? absl::StrFormat("epoch %d/%d [rank %d]", epoch, o_.epochs, rank_)
          : absl::StrFormat("epoch %d/%d", epoch, o_.epochs),
      total);
  std::vector<int64_t> targets;
  std::vector<int32_t> negatives;
  model::BatchTensors batch;
  PositiveUpdate update;
  const auto params = model_->parameters();
  BatchContext b;
  b.epoch = epoch;
  b.num_batches = plan_.num_batches();
  if (!o_.profile_path.empty() && !profiled_) {
    // Warm-up batches (allocations, first-touch) stay out of the profile.
    const int64_t count = std::max<int64_t>(1, o_.profile_batches);
    const int64_t first = std::clamp<int64_t>(b.num_batches - count, 0, 10);
    profile_ = std::make_unique<OpProfile>(o_.profile_path, first, count);
  }
  b.versions = Versions(epoch);
  for (int64_t r = 0; r < b.num_batches && failure_.ok();
       ++r, ++global_batch_) {
    const double batch_start = MonotonicSeconds();
    double compute = 0;  // this worker's own compute, waits excluded
    const Timers timers_before = timers_;
    double optimizer_seconds = 0;
    if (profile_) profile_->BeginBatch(r);
    b.epoch_batch = r;
    b.global_batch = global_batch_;
    b.global_events = plan_.step_events(r);  // targets of all workers
    b.view = plan_.batch(r);
    b.events.assign(b.view.events.begin(), b.view.events.end());
    b.target.assign(b.view.target.begin(), b.view.target.end());
    if (absl::Status s = policy_->BeforeBatch(&b); !s.ok()) {
      failure_ = s;
      break;
    }
    const int64_t n = b.global_events;
    {
      ScopedTimer t(&timers_.prepare);
      ScopedTimer c(&compute);
      targets.clear();
      negatives.clear();
      for (size_t i = 0; i < b.events.size(); ++i) {
        if (!b.target[i]) continue;
        targets.push_back(b.events[i]);
        negatives.push_back(epoch_negatives_[train_pos_[b.events[i]]]);
      }
      const bool replay = targets.size() != b.events.size();
      builder_->Prepare(targets.data(), negatives.data(), targets.size(),
                        replay ? b.events.data() : nullptr,
                        replay ? b.events.size() : 0,
                        sampler ? &*sampler : nullptr, refine_chunks_);
    }
    if (absl::Status s = policy_->BeforeForward(b, builder_->unique_nodes());
        !s.ok()) {
      failure_ = s;
      break;
    }
    {
      ScopedTimer t(&timers_.prepare);
      ScopedTimer c(&compute);
      builder_->Finish(state_, jodie_ ? &jodie_stats_ : nullptr, &batch,
                       &update);
    }
    const int64_t mine = targets.size();
    double loss_value = 0;
    ForgetGrads(params);
    if (mine > 0) {
      model::TemporalModelImpl::Output out;
      torch::Tensor loss;
      {
        ScopedTimer t(&timers_.forward);
        ScopedTimer c(&compute);
        AutocastScope autocast(bf16_);
        out = model_->Forward(state_, batch);
        // DepTGL Eq. 12-13: the mean loss over this worker's targets.
        loss = model::TemporalModelImpl::Loss(out);
      }
      loss_value = loss.item<double>();
      if (!distributed() && !std::isfinite(loss_value)) {
        failure_ = NonFinite("training loss", loss_value, epoch, r);
        break;
      }
      {
        ScopedTimer t(&timers_.backward);
        ScopedTimer c(&compute);
        // Scaled so that the mean of the ranks' gradients is the gradient
        // of the global batch's mean loss (1 in one process).
        (loss * (static_cast<double>(mine) * world_ / n)).backward();
      }
      {
        ScopedTimer t(&timers_.memory);
        ScopedTimer c(&compute);
        ApplyPositiveUpdate(batch, update, out.memory, &state_);
      }
    } else if (update.nodes.numel() > 0) {
      // Nothing to predict, but replayed events still update memory.
      torch::NoGradGuard guard;
      ScopedTimer t(&timers_.memory);
      ScopedTimer c(&compute);
      auto out = model_->Forward(state_, batch);
      ApplyPositiveUpdate(batch, update, out.memory, &state_);
    }
    DefineZeroGrads(params);
    if (distributed()) {
      const double t0 = MonotonicSeconds();
      std::vector<torch::Tensor> grads;
      for (const auto& p : params) grads.push_back(p.grad());
      absl::Status s = collectives_->AllReduceMean(grads);
      comm_.allreduce_seconds += MonotonicSeconds() - t0;
      if (!s.ok()) {
        failure_ = s;
        break;
      }
    }
    double grad_norm = 0;
    {
      ScopedTimer t(&timers_.backward);
      ScopedTimer c(&compute);
      ScopedTimer o(&optimizer_seconds);
      grad_norm = GradNorm(params);
      // The all-reduced gradient is the same everywhere, so every rank stops
      // at the same batch (a rank that stopped alone would leave the others
      // waiting in the next collective).
      if (!std::isfinite(grad_norm) || !std::isfinite(loss_value)) {
        failure_ = std::isfinite(grad_norm)
                       ? NonFinite("training loss", loss_value, epoch, r)
                       : NonFinite("gradient norm", grad_norm, epoch, r);
        break;
      }
      optimizer_->step();
    }
    if (o_.check_parameters && distributed()) {
      if (absl::Status s = CheckParameters(); !s.ok()) {
        failure_ = s;
        break;
      }
    }
    if (profile_) {
      profile_->EndBatch(
          r, timers_.forward - timers_before.forward,
          timers_.backward - timers_before.backward - optimizer_seconds,
          optimizer_seconds);
    }
    BatchOutcome outcome;
    outcome.grad_norm = grad_norm;
    outcome.loss = loss_value;
    outcome.targets = mine;
    outcome.auxiliaries = static_cast<int64_t>(b.events.size()) - mine;
    outcome.compute_seconds = compute;
    outcome.batch_seconds = MonotonicSeconds() - batch_start;
    outcome.advanced = &update.node_ids;
    if (absl::Status s = policy_->AfterBatch(b, outcome); !s.ok()) {
      failure_ = s;
      break;
    }
    comm_.target_events += mine;
    comm_.replayed_events += outcome.auxiliaries;
    stats.loss_sum += loss_value;
    stats.global_loss_sum += loss_value * static_cast<double>(mine) / n;
    stats.grad_norm_sum += grad_norm;
    ++stats.batches;
    progress_.Advance(n, stats.loss_sum / stats.batches);
    if (cb_.batch) {
      TrainCallbacks::Batch cb;
      cb.epoch = epoch;
      cb.target_events = mine;
      cb.loss = loss_value;
      cb.grad_norm = grad_norm;
      cb.seconds = MonotonicSeconds() - batch_start;
      cb.states_pulled = comm_.states_pulled;
      cb.states_pushed = comm_.states_pushed;
      cb.bytes_pulled = comm_.bytes_pulled;
      cb.bytes_pushed = comm_.bytes_pushed;
      cb_.batch(cb);
    }
  }
  if (profile_) {
    profiled_ = true;
    if (absl::Status s = profile_->Finish(); !s.ok()) {
      if (failure_.ok()) failure_ = s;
    } else {
      progress_.Log(
          absl::StrCat("wrote the operator profile to ", o_.profile_path));
    }
    profile_.reset();
  }
  return stats;
}

absl::Status Engine::CheckParameters() {
  // Identical parameters everywhere after every step: the mean of the
  // ranks' checksums equals ours only if all are equal (to rounding).
  const double mine_sum = model::ParameterChecksum(*model_);
  torch::Tensor t =
      torch::tensor({mine_sum, mine_sum * mine_sum}, torch::kDouble);
  RETURN_IF_ERROR(collectives_->AllReduceSum(t));
  const double mean = t[0].item<double>() / world_;
  const double var = t[1].item<double>() / world_ - mean * mean;
  const double scale = std::max(1.0, std::abs(mean));
  if (std::abs(mean - mine_sum) > 1e-9 * scale || var > 1e-12 * scale * scale) {
    return absl::InternalError(absl::StrFormat(
        "parameters differ across workers after batch %d (rank %d "
        "checksum %.17g, mean over ranks %.17g)",
        global_batch_, rank_, mine_sum, mean));
  }
  return absl::OkStatus();
}

absl::Status Engine::ShareFromLeader(std::vector<double>* values) {
  torch::Tensor t =
      torch::from_blob(values->data(), {static_cast<int64_t>(values->size())},
                       torch::kDouble)
          .clone();
  const double t0 = MonotonicSeconds();
  RETURN_IF_ERROR(collectives_->Broadcast({t}, 0));
  comm_.allreduce_seconds += MonotonicSeconds() - t0;
  std::memcpy(values->data(), t.data_ptr<double>(),
              values->size() * sizeof(double));
  return absl::OkStatus();
}

absl::Status Engine::FinalSync(int epoch) {
  const StateVersions versions = Versions(epoch);
  RETURN_IF_ERROR(policy_->EndEpoch(versions));
  ++comm_.sync_count;
  {
    const double t0 = MonotonicSeconds();
    absl::Status s = dist_->cluster->Barrier(absl::StrCat("synced-", epoch));
    comm_.barrier_seconds += MonotonicSeconds() - t0;
    RETURN_IF_ERROR(s);
  }
  return absl::OkStatus();
}

namespace {
// Calls f on every CommStats field, in a fixed order (for gathering them
// across workers as doubles).
template <typename F>
void ForEachCommField(CommStats& c, F f) {
  f(c.sync_count), f(c.rpcs), f(c.states_pulled), f(c.states_pushed);
  f(c.bytes_pulled), f(c.bytes_pushed), f(c.seconds), f(c.allreduce_seconds);
  f(c.allreduce_bytes), f(c.barrier_seconds), f(c.train_seconds);
  f(c.preparation_seconds), f(c.forward_seconds), f(c.backward_seconds);
  f(c.memory_seconds), f(c.target_events), f(c.replayed_events);
  f(c.train_loss), f(c.peak_rss_bytes), f(c.pruned_events);
  f(c.heavy_load_batches), f(c.boundaries), f(c.boundaries_refreshed);
  f(c.boundaries_skipped), f(c.refresh_nodes_total), f(c.refresh_nodes_max);
  f(c.plan_seconds), f(c.eval_states_pulled), f(c.eval_bytes_pulled);
  f(c.eval_pull_seconds), f(c.urgent_states), f(c.urgent_bytes);
  f(c.nonurgent_states), f(c.nonurgent_bytes), f(c.cross_ratio);
  f(c.imbalance), f(c.partition_seconds);
}

double CommShare(const CommStats& c) {
  return c.train_seconds > 0
             ? (c.seconds + c.allreduce_seconds + c.barrier_seconds) /
                   c.train_seconds
             : 0;
}
}  // namespace

absl::Status Engine::GatherCommStats(TrainResult* result) {
  comm_.allreduce_bytes = collectives_->bytes_reduced();
  int fields = 0;
  ForEachCommField(comm_, [&](auto&) { ++fields; });
  torch::Tensor all = torch::zeros({world_, fields}, torch::kDouble);
  {
    double* row = all[rank_].data_ptr<double>();
    int i = 0;
    ForEachCommField(comm_,
                     [&](auto& v) { row[i++] = static_cast<double>(v); });
  }
  RETURN_IF_ERROR(collectives_->AllReduceSum(all));
  result->per_worker.clear();
  CommStats total;
  for (int r = 0; r < world_; ++r) {
    const double* row = all[r].data_ptr<double>();
    CommStats w;
    int i = 0;
    ForEachCommField(w, [&](auto& v) {
      v = static_cast<std::decay_t<decltype(v)>>(row[i++]);
    });
    w.share = CommShare(w);
    int j = 0;
    ForEachCommField(total, [&](auto& v) {
      v += static_cast<std::decay_t<decltype(v)>>(row[j++]);
    });
    result->per_worker.push_back(w);
  }
  // Not sums: the largest, or what every worker shares.
  const CommStats& first = result->per_worker[0];
  total.peak_rss_bytes = total.refresh_nodes_max = 0;
  total.plan_seconds = 0;
  for (const CommStats& w : result->per_worker) {
    total.peak_rss_bytes = std::max(total.peak_rss_bytes, w.peak_rss_bytes);
    total.refresh_nodes_max =
        std::max(total.refresh_nodes_max, w.refresh_nodes_max);
    total.plan_seconds = std::max(total.plan_seconds, w.plan_seconds);
  }
  total.boundaries = first.boundaries;
  total.cross_ratio = first.cross_ratio;
  total.imbalance = first.imbalance;
  total.partition_seconds = first.partition_seconds;
  total.boundaries_refreshed = first.boundaries_refreshed;
  total.boundaries_skipped = first.boundaries_skipped;
  total.train_loss =
      record_.epochs.empty() ? 0 : record_.epochs.back().train_loss;
  total.share = CommShare(total);
  result->comm = total;
  return absl::OkStatus();
}

absl::StatusOr<EvalResult> Engine::EvalPass(const std::vector<int64_t>& events,
                                            const EvalNegatives& negatives,
                                            const std::string& label) {
  ScopedTimer timer(&timers_.evaluation);
  EvalSetup setup;
  setup.log = &log_;
  setup.graph = full_graph_.get();
  setup.model = model_;
  setup.builder = builder_.get();
  setup.jodie = jodie_ ? &jodie_stats_ : nullptr;
  setup.neighbors = o_.neighbors;
  setup.strategy = o_.neighbor_strategy == "uniform"
                       ? data::NeighborStrategy::kUniform
                       : data::NeighborStrategy::kRecent;
  setup.batch_size = eval_batch_size_;
  setup.bf16 = bf16_;
  setup.lr = o_.lr;
  return Evaluate(setup, events, negatives, label, &state_, &progress_);
}

absl::Status Engine::NonFinite(const std::string& what, double value, int epoch,
                               int64_t batch) const {
  std::string checkpoint = "no checkpoint was written";
  if (!o_.out_dir.empty() && epoch > 1) {
    checkpoint = absl::StrFormat(
        "the last good checkpoint is %s",
        distributed() ? ClusterCheckpointDir(o_.out_dir, epoch - 1)
                      : SingleCheckpointPath(o_.out_dir, epoch - 1));
  }
  return absl::InternalError(absl::StrFormat(
      "epoch %d, batch %d (events %d-%d of the training split): the %s is "
      "not finite (%g): training has diverged; lower --lr (now %g) or check "
      "the data for "
      "extreme values; %s",
      epoch, batch, batch * o_.batch_size, (batch + 1) * o_.batch_size - 1,
      what, value, o_.lr, checkpoint));
}

absl::Status Engine::SaveClusterCheckpoint(int epoch) {
  absl::Status saved = absl::OkStatus();
  if (!o_.out_dir.empty()) {
    saved = SaveRankCheckpoint(o_.out_dir, epoch, rank_, o_.seed, *model_,
                               *optimizer_, record_, policy_->SaveState());
  }
  // {ranks that wrote their file, ranks that failed to}: every rank's
  // file is renamed into place before it enters this collective.
  torch::Tensor t = torch::tensor(
      {saved.ok() && !o_.out_dir.empty() ? 1.0 : 0.0, saved.ok() ? 0.0 : 1.0},
      torch::kDouble);
  RETURN_IF_ERROR(collectives_->AllReduceSum(t));
  RETURN_IF_ERROR(saved);
  const int written = static_cast<int>(t[0].item<double>());
  if (t[1].item<double>() > 0) {
    return absl::InternalError(absl::StrFormat(
        "epoch %d: another rank could not write its checkpoint file", epoch));
  }
  if (!leader() || o_.out_dir.empty()) return absl::OkStatus();
  if (written < world_) {
    if (!said_no_cluster_checkpoint_) {
      progress_.Log(absl::StrFormat(
          "warning: only %d of %d ranks write checkpoint files (the others "
          "have no --out): this job keeps no checkpoint to --resume from",
          written, world_));
      said_no_cluster_checkpoint_ = true;
    }
    return absl::OkStatus();
  }
  ClusterManifest m;
  m.epoch = epoch;
  m.workers = world_;
  m.seed = o_.seed;
  m.policy = policy_->name();
  return WriteClusterManifest(o_.out_dir, m);
}

absl::StatusOr<int> Engine::ResumeCluster() {
  // Rank 0's choice for all: {epoch (-1: none), workers, cluster set, same
  // job shape (world size and policy)}.
  std::vector<double> v = {-1, 0, 0, 0};
  absl::StatusOr<ResumePoint> point =
      absl::NotFoundError("rank 0 found no checkpoint to resume from");
  if (leader()) {
    point = FindResumePoint(o_.resume_dir);
    if (point.ok()) {
      v = {double(point->epoch), double(point->workers),
           point->cluster ? 1.0 : 0.0,
           point->SameJobShape(world_, policy_->name()) ? 1.0 : 0.0};
    }
  }
  RETURN_IF_ERROR(ShareFromLeader(&v));
  if (v[0] < 0) return point.status();
  ResumePoint p;
  p.dir = o_.resume_dir;
  p.epoch = static_cast<int>(v[0]);
  p.workers = static_cast<int>(v[1]);
  p.cluster = v[2] != 0;
  const bool same_shape = v[3] != 0;
  const std::string file = p.FileFor(rank_, world_);
  std::vector<double> policy_state;
  ASSIGN_OR_RETURN(
      LoadedCheckpoint loaded,
      LoadCheckpointFile(file, *model_, *optimizer_, log_.num_nodes,
                         o_.memory_dim, &record_, &policy_state));
  if (loaded.epoch != p.epoch) {
    return absl::DataLossError(
        absl::StrFormat("--resume: %s holds epoch %d, rank 0 resumes from "
                        "epoch %d",
                        file, loaded.epoch, p.epoch));
  }
  if (same_shape) {
    RETURN_IF_ERROR(policy_->RestoreState(policy_state));
  } else if (leader()) {
    progress_.Log(absl::StrFormat(
        "warning: resuming %s with %d workers and policy %s: the model, "
        "optimizer and history continue, but the run will differ from an "
        "uninterrupted one (the plan, each rank's random streams and the "
        "policy's state depend on the worker count and policy)",
        point->describe, world_, policy_->name()));
  }
  if (loaded.seed != o_.seed && leader()) {
    progress_.Log(
        "warning: --resume with a different --seed than the checkpoint's; "
        "the result will differ from an uninterrupted run");
  }
  progress_.Log(absl::StrFormat("rank %d resumed from %s (epoch %d done)",
                                rank_, loaded.path, loaded.epoch));
  return p.epoch;
}

void Engine::SnapshotBest() {
  torch::NoGradGuard guard;
  record_.best_params.clear();
  for (const auto& p : model_->parameters())
    record_.best_params.push_back(p.clone());
  record_.best_state = state_.Clone();
}

void Engine::RestoreBest() {
  torch::NoGradGuard guard;
  auto params = model_->parameters();
  for (size_t i = 0; i < params.size(); ++i)
    params[i].copy_(record_.best_params[i]);
  state_ = record_.best_state.Clone();
}

// Rank 0 pulls every state for evaluation (counted apart from training's
// traffic: every policy needs it, training does not).
absl::Status Engine::PullAllForEvaluation(int epoch) {
  const CommStats before = comm_;
  std::vector<int64_t> all(log_.num_nodes);
  std::iota(all.begin(), all.end(), 0);
  RETURN_IF_ERROR(sync_->Pull(all, Versions(epoch)));
  comm_.eval_states_pulled += comm_.states_pulled - before.states_pulled;
  comm_.eval_bytes_pulled += comm_.bytes_pulled - before.bytes_pulled;
  comm_.eval_pull_seconds += comm_.seconds - before.seconds;
  comm_.states_pulled = before.states_pulled;
  comm_.bytes_pulled = before.bytes_pulled;
  comm_.seconds = before.seconds;
  comm_.rpcs = before.rpcs;
  return absl::OkStatus();
}

absl::Status Engine::EvaluateEpoch(EpochResult* r) {
  if (leader() && distributed())
    RETURN_IF_ERROR(PullAllForEvaluation(r->epoch));
  if (leader()) {
    // Evaluation on the complete (synchronized) memory; in a distributed
    // run rank 0 evaluates while the others wait for its figures.
    model::NodeState train_end = state_.Clone();
    ASSIGN_OR_RETURN(EvalResult val,
                     EvalPass(split_.val, val_negs_, "validate"));
    model::NodeState val_end = state_.Clone();
    state_ = std::move(train_end);
    ASSIGN_OR_RETURN(EvalResult nn_val,
                     EvalPass(split_.new_node_val, new_node_val_negs_,
                              "validate new nodes"));
    state_ = std::move(val_end);
    r->val_ap = val.ap;
    r->val_auc = val.auc;
    r->val_ap_batch_mean = val.ap_batch_mean;
    r->val_new_node_ap = nn_val.ap;
    r->val_new_node_auc = nn_val.auc;
    r->val_new_node_ap_batch_mean = nn_val.ap_batch_mean;
    r->val_loss = val.loss;
  }
  if (!distributed()) return absl::OkStatus();
  // The others wait as long as the leader evaluates: no fixed deadline (a
  // dead leader fails the job through the coordinator's liveness check,
  // which releases the barrier).
  RETURN_IF_ERROR(
      dist_->cluster->Barrier(absl::StrCat("evaluated-", r->epoch), 0));
  std::vector<double> v = {
      r->val_ap,          r->val_auc,          r->val_ap_batch_mean,
      r->val_new_node_ap, r->val_new_node_auc, r->val_new_node_ap_batch_mean,
      r->val_loss};
  RETURN_IF_ERROR(ShareFromLeader(&v));
  r->val_ap = v[0];
  r->val_auc = v[1];
  r->val_ap_batch_mean = v[2];
  r->val_new_node_ap = v[3];
  r->val_new_node_auc = v[4];
  r->val_new_node_ap_batch_mean = v[5];
  r->val_loss = v[6];
  return absl::OkStatus();
}

absl::StatusOr<TrainResult> Engine::Run() {
  int start_epoch = 1;
  if (!o_.resume_dir.empty() && distributed()) {
    absl::StatusOr<int> done = ResumeCluster();
    if (!done.ok()) return Fail(done.status());
    start_epoch = *done + 1;
  } else if (!o_.resume_dir.empty()) {
    ASSIGN_OR_RETURN(LoadedCheckpoint loaded,
                     LoadCheckpoint(o_.resume_dir, *model_, *optimizer_,
                                    log_.num_nodes, o_.memory_dim, &record_));
    if (loaded.seed != o_.seed) {
      progress_.Log(
          "warning: --resume with a different --seed than the "
          "checkpoint's; the result will differ from an "
          "uninterrupted run");
    }
    progress_.Log(absl::StrFormat("resumed from %s (epoch %d done)",
                                  loaded.path, loaded.epoch));
    start_epoch = loaded.epoch + 1;
  }
  bool stop =
      o_.patience > 0 && record_.rounds_without_improvement >= o_.patience;
  for (int epoch = start_epoch; epoch <= o_.epochs && !stop; ++epoch) {
    const double t0 = MonotonicSeconds();
    PassStats pass = TrainPass(epoch);
    if (!failure_.ok()) return Fail(failure_);
    EpochResult r;
    r.epoch = epoch;
    r.train_loss = pass.batches ? pass.loss_sum / pass.batches : 0;
    comm_.train_loss = r.train_loss;
    if (distributed()) {
      // The global batches' mean loss, as one process would report it (the
      // ranks leave the pass together: its last step was a collective).
      torch::Tensor t = torch::tensor({pass.global_loss_sum}, torch::kDouble);
      absl::Status s = collectives_->AllReduceSum(t);
      if (s.ok()) s = FinalSync(epoch);
      if (!s.ok()) return Fail(s);
      r.train_loss = pass.batches ? t[0].item<double>() / pass.batches : 0;
    }
    r.seconds = MonotonicSeconds() - t0;
    r.grad_norm_mean = pass.batches ? pass.grad_norm_sum / pass.batches : 0;
    r.train_events = split_.train.size();
    r.train_events_per_second = r.train_events / r.seconds;
    comm_.train_seconds += r.seconds;
    const double e0 = MonotonicSeconds();
    if (absl::Status s = EvaluateEpoch(&r); !s.ok()) return Fail(s);
    r.eval_seconds = MonotonicSeconds() - e0;
    record_.epochs.push_back(r);
    if (cb_.epoch) cb_.epoch(r);
    // The reference picks the best epoch by the mean of per-batch val AP,
    // with a relative tolerance of 1e-10.
    const double score = reference_protocol_ ? r.val_ap_batch_mean : r.val_ap;
    if (score > record_.best_score +
                    1e-10 * std::max(1.0, std::abs(record_.best_score))) {
      record_.best_score = score;
      record_.best_epoch = epoch;
      record_.rounds_without_improvement = 0;
      SnapshotBest();
    } else {
      ++record_.rounds_without_improvement;
    }
    progress_.Log(absl::StrFormat(
        "epoch %d/%d  loss %.4f  val AP %.4f AUC %.4f  new-node val AP %.4f "
        "AUC %.4f  %.1fs (eval %.1fs)  %.0f ev/s%s",
        epoch, o_.epochs, r.train_loss, r.val_ap, r.val_auc, r.val_new_node_ap,
        r.val_new_node_auc, r.seconds, r.eval_seconds,
        r.train_events_per_second,
        record_.best_epoch == epoch ? "  *best" : ""));
    if (distributed()) {
      if (absl::Status s = SaveClusterCheckpoint(epoch); !s.ok()) {
        return Fail(s);
      }
    } else if (absl::Status s = SaveCheckpoint(o_.out_dir, epoch, o_.seed,
                                               *model_, *optimizer_, record_);
               !s.ok()) {
      return Fail(s);
    }
    if (o_.patience > 0 && record_.rounds_without_improvement >= o_.patience) {
      progress_.Log(absl::StrFormat(
          "early stopping: val AP%s has not improved for %d epochs; best "
          "epoch %d (%.4f)",
          reference_protocol_ ? " (mean of per-batch AP)" : "", o_.patience,
          record_.best_epoch, record_.best_score));
      stop = true;
    }
  }
  if (record_.best_params.empty()) {
    return absl::FailedPreconditionError("no epoch was trained");
  }

  // Test with the best model and its post-validation memory (TGN protocol:
  // new-node test starts again from the validation memory).
  RestoreBest();
  EvalResult test = NoEvalResult(), nn_test = NoEvalResult();
  if (leader()) {
    auto t = EvalPass(split_.test, test_negs_, "test");
    if (!t.ok()) return Fail(t.status());
    test = *t;
    state_ = record_.best_state.Clone();
    auto nn =
        EvalPass(split_.new_node_test, new_node_test_negs_, "test new nodes");
    if (!nn.ok()) return Fail(nn.status());
    nn_test = *nn;
  }
  if (distributed()) {
    // The others wait while the leader tests, then gather statistics.
    if (absl::Status s = dist_->cluster->Barrier("tested", 0); !s.ok()) {
      return Fail(s);
    }
  }

  TrainResult result;
  result.epochs = record_.epochs;
  result.best_epoch = record_.best_epoch;
  result.test.ap = test.ap;
  result.test.auc = test.auc;
  result.test.ap_batch_mean = test.ap_batch_mean;
  result.test.auc_batch_mean = test.auc_batch_mean;
  result.test.new_node_ap = nn_test.ap;
  result.test.new_node_auc = nn_test.auc;
  result.test.new_node_ap_batch_mean = nn_test.ap_batch_mean;
  result.test.new_node_auc_batch_mean = nn_test.auc_batch_mean;
  result.test.events = test.events;
  result.test.new_node_events = nn_test.events;
  if (cb_.test && leader()) cb_.test(result.test);
  double secs = 0;
  int64_t events = 0;
  for (const EpochResult& e : record_.epochs) {
    secs += e.seconds;
    events += e.train_events;
  }
  result.train_events_per_second = secs > 0 ? events / secs : 0;
  result.time_breakdown_seconds = {{"load", timers_.load},
                                   {"data_preparation", timers_.prepare},
                                   {"forward", timers_.forward},
                                   {"backward", timers_.backward},
                                   {"memory_update", timers_.memory},
                                   {"evaluation", timers_.evaluation}};
  result.peak_rss_bytes = PeakRssBytes();
  result.parameter_checksum = model::ParameterChecksum(*model_);
  comm_.preparation_seconds = timers_.prepare;
  comm_.forward_seconds = timers_.forward;
  comm_.backward_seconds = timers_.backward;
  comm_.memory_seconds = timers_.memory;
  comm_.peak_rss_bytes = result.peak_rss_bytes;
  {
    const PolicyStats ps = policy_->stats();
    comm_.pruned_events = ps.pruned;
    comm_.heavy_load_batches = ps.heavy_load_batches;
    comm_.boundaries = ps.boundaries;
    comm_.boundaries_refreshed = ps.boundaries_refreshed;
    comm_.boundaries_skipped = ps.boundaries_skipped;
    comm_.refresh_nodes_total = ps.refresh_nodes_total;
    comm_.refresh_nodes_max = ps.refresh_nodes_max;
    comm_.urgent_states = ps.urgent_states;
    comm_.urgent_bytes = ps.urgent_bytes;
    comm_.nonurgent_states = ps.nonurgent_states;
    comm_.nonurgent_bytes = ps.nonurgent_bytes;
    comm_.cross_ratio = plan_stats_.cross_ratio;
    comm_.imbalance = plan_stats_.mean_imbalance;
    comm_.partition_seconds = plan_stats_.partition_seconds;
  }
  if (distributed()) {
    result.policy = policy_->name();
    result.workers = world_;
    if (absl::Status s = GatherCommStats(&result); !s.ok()) return Fail(s);
  } else {
    result.per_worker = {comm_};
    result.comm = comm_;
  }
  if (!leader()) return result;
  progress_.Log(absl::StrFormat(
      "test (best epoch %d): AP %.4f AUC %.4f (per-batch mean AP %.4f)  "
      "new-node AP %.4f AUC %.4f (per-batch mean AP %.4f)",
      record_.best_epoch, test.ap, test.auc, test.ap_batch_mean, nn_test.ap,
      nn_test.auc, nn_test.ap_batch_mean));

  SummaryInfo info;
  info.options = &o_;
  info.data_path = data_path_;
  info.log = &log_;
  info.split = &split_;
  info.threads = at::get_num_threads();
  info.eval_batch_size = eval_batch_size_;
  info.onednn_isa_cap = onednn_isa_cap_;
  info.malloc = malloc_;
  result.summary_json = SummaryJson(info, result);
  if (!o_.out_dir.empty()) {
    RETURN_IF_ERROR(WriteOutputs(o_.out_dir, log_, result));
  }
  return result;
}

}  // namespace

absl::StatusOr<TrainResult> Train(const TrainOptions& options,
                                  const TrainCallbacks& callbacks) {
  // LibTorch reports errors (an allocation too large for this machine, a
  // shape it rejects) as exceptions: an error naming them, not an abort.
  try {
    Engine engine(options, callbacks);
    RETURN_IF_ERROR(engine.Setup());
    return engine.Run();
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("LibTorch: ", ExceptionMessage(e)));
  }
}

}  // namespace mnemo::runtime
