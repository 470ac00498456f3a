// The single-process training engine (`mnemo train`).
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
#include "trainer/runtime/batch_builder.h"
#include "trainer/runtime/collectives.h"
#include "trainer/runtime/cpu_isa.h"
#include "trainer/runtime/distributed.h"
#include "trainer/runtime/metrics.h"
#include "trainer/runtime/state_codec.h"
#include "trainer/runtime/summary.h"
#include "trainer/runtime/train.h"
#include "util/proc.h"
#include "util/status_macros.h"

namespace mnemo::runtime {
namespace fs = std::filesystem;
namespace {

// Seeds derived from the run seed, so that each epoch's randomness depends
// only on (seed, epoch): a resumed run draws exactly what an uninterrupted
// run draws. Evaluation negatives use fixed seeds (TGN protocol: 0..3).
uint64_t EpochSeed(uint64_t seed, int epoch, uint64_t stream) {
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + epoch * 0xBF58476D1CE4E5B9ull +
               stream * 0x94D049BB133111EBull;
  x ^= x >> 31;
  x *= 0xD6E8FEB86659FD93ull;
  x ^= x >> 32;
  return x;
}
constexpr uint64_t kValSeed = 0, kNewNodeValSeed = 1, kTestSeed = 2,
                   kNewNodeTestSeed = 3;

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

// Time accumulator for the summary's time breakdown.
struct Timers {
  double load = 0, prepare = 0, forward = 0, backward = 0, memory = 0,
         evaluation = 0;
};

// Gives every parameter without a gradient a zero one. Parameters outside a
// batch's graph (the memory updater before any mail exists) would otherwise
// be skipped by Adam; with zeros, single-process, resumed and all-reduced
// runs step every parameter alike (zero_grad() in LibTorch 1.13 leaves
// defined zeros after the first step, as PyTorch 1.13 does).
void DefineZeroGrads(const std::vector<torch::Tensor>& params) {
  for (auto p : params) {
    if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
  }
}

// L2 norm of all gradients together.
double GradNorm(const std::vector<torch::Tensor>& params) {
  double sq = 0;
  for (const auto& p : params) sq += p.grad().pow(2).sum().item<double>();
  return std::sqrt(sq);
}

class ScopedTimer {
 public:
  explicit ScopedTimer(double* acc) : acc_(acc), start_(MonotonicSeconds()) {}
  ~ScopedTimer() { *acc_ += MonotonicSeconds() - start_; }

 private:
  double* acc_;
  double start_;
};

// bf16 autocast on the CPU (fp32 master weights), enabled while alive.
class AutocastScope {
 public:
  explicit AutocastScope(bool enabled) : enabled_(enabled) {
    if (!enabled_) return;
    at::autocast::set_autocast_cpu_dtype(at::kBFloat16);
    at::autocast::set_cpu_enabled(true);
  }
  ~AutocastScope() {
    if (!enabled_) return;
    at::autocast::set_cpu_enabled(false);
    at::autocast::clear_cache();
  }

 private:
  bool enabled_;
};

class Progress {
 public:
  Progress(const TrainOptions& o, const TrainCallbacks& cb)
      : bar_(o.progress_bar), interval_(o.progress_interval_s), cb_(cb) {}

  void Start(std::string label, int64_t total) {
    label_ = std::move(label);
    total_ = total;
    done_ = 0;
    start_ = last_ = MonotonicSeconds();
  }
  // `loss` < 0: none to show.
  void Advance(int64_t n, double loss) {
    done_ += n;
    const double now = MonotonicSeconds();
    const double elapsed = now - start_;
    const double rate = elapsed > 0 ? done_ / elapsed : 0;
    const double eta = rate > 0 ? (total_ - done_) / rate : 0;
    if (bar_) {
      if (now - last_ < 0.2 && done_ < total_) return;
      last_ = now;
      const int width = 30;
      const int filled =
          total_ ? static_cast<int>(width * done_ / total_) : width;
      const std::string loss_text =
          loss >= 0 ? absl::StrFormat("  loss %.4f", loss) : "";
      std::fprintf(stderr, "\r%s [%s%s] %3d%% %8.0f ev/s  ETA %4.0fs%s ",
                   label_.c_str(), std::string(filled, '#').c_str(),
                   std::string(width - filled, '.').c_str(),
                   total_ ? static_cast<int>(100 * done_ / total_) : 100, rate,
                   eta, loss_text.c_str());
      if (done_ >= total_) std::fprintf(stderr, "\r\033[K");
      std::fflush(stderr);
    } else if (now - last_ >= interval_ && done_ < total_) {
      last_ = now;
      Log(absl::StrFormat(
          "%s %d/%d events (%.0f%%), %.0f ev/s, ETA %.0fs%s", label_, done_,
          total_, 100.0 * done_ / total_, rate, eta,
          loss >= 0 ? absl::StrFormat(", loss %.4f", loss) : ""));
    }
  }
  void Log(const std::string& line) const {
    if (cb_.log) {
      cb_.log(line);
    } else {
      std::fprintf(stderr, "%s\n", line.c_str());
    }
  }

 private:
  bool bar_;
  double interval_;
  const TrainCallbacks& cb_;
  std::string label_;
  int64_t total_ = 0, done_ = 0;
  double start_ = 0, last_ = 0;
};

struct EvalResult {
  double ap = 0, auc = 0, ap_batch_mean = 0, auc_batch_mean = 0;
  int64_t events = 0;
};

// A result with no events to measure.
EvalResult NoEvalResult() {
  EvalResult r;
  r.ap = r.auc = r.ap_batch_mean = r.auc_batch_mean =
      std::numeric_limits<double>::quiet_NaN();
  return r;
}

class Engine {
 public:
  Engine(const TrainOptions& o, const TrainCallbacks& cb)
      : o_(o), progress_(o, cb) {}

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
  PassStats TrainPass(int epoch);
  // Multi-worker training pass (DESIGN.md data flow): per global batch,
  // this worker's target events (owner of the source), the coordinator's
  // sync decision, cache refresh from the store, forward/backward on the
  // targets, gradient all-reduce, state push, report.
  PassStats DistributedTrainPass(int epoch);
  // Epoch end: every update in the store, then rank 0 pulls the complete
  // memory for evaluation.
  absl::Status FinalSync(int epoch);
  absl::Status PullIntoState(const std::vector<int64_t>& nodes,
                             const StateVersions& versions);
  absl::Status PushFromState(const std::vector<int64_t>& nodes,
                             const StateVersions& versions);
  StateVersions Versions(int epoch) const {
    return StateVersions{log_.num_events(), epoch};
  }
  bool distributed() const { return dist_ != nullptr; }
  bool leader() const { return rank_ == 0; }
  // Sets the same value on every rank (rank 0's).
  absl::Status ShareFromLeader(std::vector<double>* values);
  // Every rank's CommStats into result->per_worker and the totals.
  absl::Status GatherCommStats(TrainResult* result);
  struct EvalNegatives;
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

  absl::Status SaveCheckpoint(int epoch);
  absl::StatusOr<int> LoadCheckpoint();  // returns the epoch it finished
  void SnapshotBest();
  void RestoreBest();

  const TrainOptions& o_;
  Progress progress_;
  Timers timers_;
  std::string data_path_;
  data::EventLog log_;
  data::LoadReport load_report_;
  data::Split split_;
  std::unique_ptr<data::TemporalGraph> train_graph_, full_graph_;
  std::vector<int32_t> train_neg_candidates_;
  // Negatives of each evaluation split.
  struct EvalNegatives {
    std::vector<int32_t> candidates;
    uint64_t seed = 0;
  };
  EvalNegatives val_negs_, new_node_val_negs_, test_negs_, new_node_test_negs_;
  bool reference_protocol_ = true;
  std::string onednn_isa_cap_;  // SummaryInfo::onednn_isa_cap
  JodieTimeStats jodie_stats_;
  bool jodie_ = false;
  bool bf16_ = false;
  int64_t eval_batch_size_ = 0;

  model::TemporalModel model_{nullptr};
  std::unique_ptr<torch::optim::Adam> optimizer_;
  model::NodeState state_;
  std::unique_ptr<BatchBuilder> builder_;

  // Early stopping.
  std::vector<EpochResult> epochs_;
  int best_epoch_ = 0;
  // The best epoch's val AP (per-batch mean under the reference protocol).
  double best_val_ap_ = -1;
  int rounds_without_improvement_ = 0;
  std::vector<torch::Tensor> best_params_;
  model::NodeState best_state_;

  // Multi-worker state (null dist_: single process).
  const DistributedContext* dist_ = nullptr;
  int rank_ = 0, world_ = 1;
  std::unique_ptr<Collectives> collectives_;
  std::function<int(int64_t)> owner_;
  int64_t global_batch_ = 0;
  CommStats comm_;
  absl::Status failure_;  // first error of a distributed pass
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
  if (bf16_) {
    // Before any oneDNN kernel runs (cpu_isa.h: AMX kernels of Debian's
    // oneDNN crash on some shapes).
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
            "(Debian's oneDNN 2.6 AMX kernels crash on some shapes; "
            "--allow-amx opts in)");
      } else {
        return absl::FailedPreconditionError(absl::StrCat(
            "bf16 on an AMX CPU needs oneDNN capped at AVX512_CORE_BF16: ",
            s.message()));
      }
    } else if (cpu.amx()) {
      progress_.Log("bf16: AMX kernels allowed (--allow-amx)");
    }
  }
  if (o_.batch_size <= 0 || o_.epochs <= 0 || o_.memory_dim <= 0 ||
      o_.time_dim <= 0 || o_.embedding_dim <= 0 || o_.neighbors <= 0 ||
      o_.heads <= 0 || !(o_.lr > 0) || o_.dropout < 0 || o_.dropout >= 1) {
    return absl::InvalidArgumentError(
        "--batch-size, --epochs, --memory-dim, --time-dim, --embedding-dim, "
        "--neighbors, --heads and --lr must be positive; --dropout in [0, 1)");
  }
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
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: too few events (%d) for a 70/15/15 split",
                        data_path_, log_.num_events()));
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
  model_ = model::TemporalModel(mo);
  init_lock.unlock();
  optimizer_ = std::make_unique<torch::optim::Adam>(
      model_->parameters(), torch::optim::AdamOptions(o_.lr));
  builder_ = std::make_unique<BatchBuilder>(&log_, log_.num_nodes);
  state_.Reset(log_.num_nodes, o_.memory_dim, model_->mail_dim());

  if (o_.distributed != nullptr) {
    dist_ = o_.distributed;
    rank_ = dist_->rank;
    world_ = dist_->world_size;
    if (!o_.resume_dir.empty()) {
      return absl::UnimplementedError(
          "--resume is supported for single-process runs only");
    }
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
    CollectiveOptions co;
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
    progress_.Log(absl::StrFormat(
        "worker %d/%d: policy %s, record %d floats, store and %d-rank gloo "
        "group ready",
        rank_, world_, PolicyName(dist_->policy), record_dim, world_));
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
  if (distributed()) return DistributedTrainPass(epoch);
  model_->train();
  state_.Reset(log_.num_nodes, o_.memory_dim, model_->mail_dim());
  torch::manual_seed(EpochSeed(o_.seed, epoch, 1));
  data::NegativeSampler negs(train_neg_candidates_,
                             EpochSeed(o_.seed, epoch, 2));
  std::optional<data::NeighborSampler> sampler =
      MakeSampler(train_graph_.get(), EpochSeed(o_.seed, epoch, 3));
  PassStats stats;
  const int64_t total = split_.train.size();
  progress_.Start(absl::StrFormat("epoch %d/%d", epoch, o_.epochs), total);
  std::vector<int32_t> neg(o_.batch_size);
  model::BatchTensors batch;
  PositiveUpdate update;
  for (int64_t begin = 0; begin < total; begin += o_.batch_size) {
    const int64_t n = std::min<int64_t>(o_.batch_size, total - begin);
    {
      ScopedTimer t(&timers_.prepare);
      negs.Sample(n, neg.data());
      builder_->Build(split_.train.data() + begin, neg.data(), n, state_,
                      sampler ? &*sampler : nullptr,
                      jodie_ ? &jodie_stats_ : nullptr, &batch, &update);
    }
    model::TemporalModelImpl::Output out;
    torch::Tensor loss;
    {
      ScopedTimer t(&timers_.forward);
      AutocastScope autocast(bf16_);
      out = model_->Forward(state_, batch);
      loss = model::TemporalModelImpl::Loss(out);
    }
    const double l = loss.item<double>();
    if (!std::isfinite(l)) {
      failure_ = NonFinite("training loss", l, epoch, stats.batches);
      break;
    }
    double grad_norm = 0;
    {
      ScopedTimer t(&timers_.backward);
      optimizer_->zero_grad();
      loss.backward();
      const auto params = model_->parameters();
      DefineZeroGrads(params);
      grad_norm = GradNorm(params);
      if (!std::isfinite(grad_norm)) {
        failure_ = NonFinite("gradient norm", grad_norm, epoch, stats.batches);
        break;
      }
      optimizer_->step();
    }
    {
      ScopedTimer t(&timers_.memory);
      ApplyPositiveUpdate(batch, update, out.memory, &state_);
    }
    stats.loss_sum += l;
    stats.grad_norm_sum += grad_norm;
    ++stats.batches;
    progress_.Advance(n, stats.loss_sum / stats.batches);
  }
  return stats;
}

absl::Status Engine::PullIntoState(const std::vector<int64_t>& nodes,
                                   const StateVersions& versions) {
  if (nodes.empty()) return absl::OkStatus();
  const double t0 = MonotonicSeconds();
  memstore::PulledStates pulled;
  RETURN_IF_ERROR(dist_->store->Pull(nodes, &pulled));
  UnpackStates(pulled, nodes, versions, &state_);
  comm_.seconds += MonotonicSeconds() - t0;
  ++comm_.rpcs;
  comm_.states_pulled += nodes.size();
  comm_.bytes_pulled += pulled.states.size() * sizeof(float);
  return absl::OkStatus();
}

absl::Status Engine::PushFromState(const std::vector<int64_t>& nodes,
                                   const StateVersions& versions) {
  if (nodes.empty()) return absl::OkStatus();
  const double t0 = MonotonicSeconds();
  std::vector<float> records;
  std::vector<uint64_t> record_versions;
  std::vector<double> times;
  PackStates(
      state_, nodes, versions, [this](int64_t u) { return owner_(u) == rank_; },
      &records, &record_versions, &times);
  RETURN_IF_ERROR(
      dist_->store->Push(nodes, records, record_versions, times, rank_));
  comm_.seconds += MonotonicSeconds() - t0;
  ++comm_.rpcs;
  comm_.states_pushed += nodes.size();
  comm_.bytes_pushed += records.size() * sizeof(float);
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

Engine::PassStats Engine::DistributedTrainPass(int epoch) {
  model_->train();
  state_.Reset(log_.num_nodes, o_.memory_dim, model_->mail_dim());
  torch::manual_seed(EpochSeed(o_.seed, epoch, 1) + rank_);
  // Every rank draws the same global negatives and keeps its own.
  data::NegativeSampler negs(train_neg_candidates_,
                             EpochSeed(o_.seed, epoch, 2));
  std::optional<data::NeighborSampler> sampler =
      MakeSampler(train_graph_.get(), EpochSeed(o_.seed, epoch, 3) + rank_);
  const bool full_cache = dist_->policy == Policy::kFullCache;
  const StateVersions versions = Versions(epoch);
  PassStats stats;
  const int64_t total = split_.train.size();
  progress_.Start(
      absl::StrFormat("epoch %d/%d [rank %d]", epoch, o_.epochs, rank_), total);
  std::vector<int32_t> neg(o_.batch_size), my_neg;
  std::vector<int64_t> my_events;
  model::BatchTensors batch;
  PositiveUpdate update;
  const auto params = model_->parameters();
  for (int64_t begin = 0; begin < total && failure_.ok();
       begin += o_.batch_size, ++global_batch_) {
    const double batch_start = MonotonicSeconds();
    const int64_t n = std::min<int64_t>(o_.batch_size, total - begin);
    const int64_t* events = split_.train.data() + begin;
    bool sync = true;
    {
      ScopedTimer t(&timers_.prepare);
      negs.Sample(n, neg.data());
      my_events.clear();
      my_neg.clear();
      for (int64_t i = 0; i < n; ++i) {
        if (owner_(log_.src[events[i]]) == rank_) {
          my_events.push_back(events[i]);
          my_neg.push_back(neg[i]);
        }
      }
      builder_->Prepare(my_events.data(), my_neg.data(), my_events.size(),
                        full_cache ? events : nullptr, full_cache ? n : 0,
                        sampler ? &*sampler : nullptr);
    }
    // The coordinator's decision for this boundary; it is taken once every
    // worker has reported the previous batch, which also orders this
    // batch's pulls after all of the previous batch's pushes.
    {
      const double t0 = MonotonicSeconds();
      auto decision = dist_->cluster->WaitDecision(global_batch_);
      comm_.barrier_seconds += MonotonicSeconds() - t0;
      if (!decision.ok()) {
        failure_ = decision.status();
        break;
      }
      sync = *decision && !full_cache;
    }
    if (sync) {
      absl::Status s = PullIntoState(builder_->unique_nodes(), versions);
      if (!s.ok()) {
        failure_ = s;
        break;
      }
      ++comm_.sync_count;
    }
    {
      ScopedTimer t(&timers_.prepare);
      builder_->Finish(state_, jodie_ ? &jodie_stats_ : nullptr, &batch,
                       &update);
    }
    const int64_t mine = my_events.size();
    double loss_value = 0;
    double grad_norm = 0;
    optimizer_->zero_grad();
    if (mine > 0) {
      model::TemporalModelImpl::Output out;
      torch::Tensor loss;
      {
        ScopedTimer t(&timers_.forward);
        AutocastScope autocast(bf16_);
        out = model_->Forward(state_, batch);
        loss = model::TemporalModelImpl::Loss(out);
      }
      {
        ScopedTimer t(&timers_.backward);
        // Scaled so that the mean of the ranks' gradients is the gradient
        // of the global batch's mean loss.
        (loss * (static_cast<double>(mine) * world_ / n)).backward();
      }
      loss_value = loss.item<double>();
      {
        ScopedTimer t(&timers_.memory);
        ApplyPositiveUpdate(batch, update, out.memory, &state_);
      }
    } else if (update.nodes.numel() > 0) {
      // Nothing to predict, but replayed events still update memory.
      torch::NoGradGuard guard;
      ScopedTimer t(&timers_.memory);
      auto out = model_->Forward(state_, batch);
      ApplyPositiveUpdate(batch, update, out.memory, &state_);
    }
    {
      const double t0 = MonotonicSeconds();
      DefineZeroGrads(params);
      std::vector<torch::Tensor> grads;
      for (const auto& p : params) grads.push_back(p.grad());
      absl::Status s = collectives_->AllReduceMean(grads);
      comm_.allreduce_seconds += MonotonicSeconds() - t0;
      if (!s.ok()) {
        failure_ = s;
        break;
      }
    }
    {
      ScopedTimer t(&timers_.backward);
      grad_norm = GradNorm(params);
      // The all-reduced gradient is the same everywhere, so every rank stops
      // at the same batch (a rank that stopped alone would leave the others
      // waiting in the next collective).
      if (!std::isfinite(grad_norm) || !std::isfinite(loss_value)) {
        failure_ =
            std::isfinite(grad_norm)
                ? NonFinite("training loss", loss_value, epoch, stats.batches)
                : NonFinite("gradient norm", grad_norm, epoch, stats.batches);
        break;
      }
      optimizer_->step();
    }
    if (o_.check_parameters) {
      // Identical parameters everywhere after every step: the mean of the
      // ranks' checksums equals ours only if all are equal (to rounding).
      const double mine_sum = model::ParameterChecksum(*model_);
      torch::Tensor t =
          torch::tensor({mine_sum, mine_sum * mine_sum}, torch::kDouble);
      absl::Status s = collectives_->AllReduceSum(t);
      if (s.ok()) {
        const double mean = t[0].item<double>() / world_;
        const double var = t[1].item<double>() / world_ - mean * mean;
        const double scale = std::max(1.0, std::abs(mean));
        if (std::abs(mean - mine_sum) > 1e-9 * scale ||
            var > 1e-12 * scale * scale) {
          s = absl::InternalError(absl::StrFormat(
              "parameters differ across workers after batch %d (rank %d "
              "checksum %.17g, mean over ranks %.17g)",
              global_batch_, rank_, mine_sum, mean));
        }
      }
      if (!s.ok()) {
        failure_ = s;
        break;
      }
    }
    if (!full_cache && !update.node_ids.empty()) {
      std::vector<int64_t> nodes(update.node_ids.begin(),
                                 update.node_ids.end());
      absl::Status s = PushFromState(nodes, versions);
      if (!s.ok()) {
        failure_ = s;
        break;
      }
    }
    comm_.target_events += mine;
    if (full_cache) comm_.replayed_events += n - mine;
    coordinator::BatchReport report;
    report.rank = rank_;
    report.batch = global_batch_;
    report.grad_norm = grad_norm;
    report.batch_seconds = MonotonicSeconds() - batch_start;
    report.events = full_cache ? n : mine;
    report.targets = mine;
    report.auxiliaries = full_cache ? n - mine : 0;
    {
      const double t0 = MonotonicSeconds();
      absl::Status s = dist_->cluster->Report(report);
      comm_.seconds += MonotonicSeconds() - t0;
      if (!s.ok()) {
        failure_ = s;
        break;
      }
    }
    stats.loss_sum += loss_value;
    stats.global_loss_sum += loss_value * static_cast<double>(mine) / n;
    stats.grad_norm_sum += grad_norm;
    ++stats.batches;
    progress_.Advance(n, stats.loss_sum / stats.batches);
  }
  return stats;
}

absl::Status Engine::FinalSync(int epoch) {
  const StateVersions versions = Versions(epoch);
  if (dist_->policy == Policy::kFullCache) {
    // Replayed memory is complete on every worker; each writes back the
    // nodes it owns.
    std::vector<int64_t> owned;
    for (int64_t u = 0; u < log_.num_nodes; ++u) {
      if (owner_(u) == rank_ && state_.has_mail[u]) owned.push_back(u);
    }
    RETURN_IF_ERROR(PushFromState(owned, versions));
  }
  ++comm_.sync_count;
  {
    const double t0 = MonotonicSeconds();
    absl::Status s = dist_->cluster->Barrier(absl::StrCat("synced-", epoch));
    comm_.barrier_seconds += MonotonicSeconds() - t0;
    RETURN_IF_ERROR(s);
  }
  if (leader()) {
    std::vector<int64_t> all(log_.num_nodes);
    std::iota(all.begin(), all.end(), 0);
    RETURN_IF_ERROR(PullIntoState(all, versions));
  }
  return absl::OkStatus();
}

absl::Status Engine::GatherCommStats(TrainResult* result) {
  constexpr int kFields = 18;
  comm_.allreduce_bytes = collectives_->bytes_reduced();
  torch::Tensor all = torch::zeros({world_, kFields}, torch::kDouble);
  auto row = all[rank_];
  const CommStats& c = comm_;
  const double mine[kFields] = {double(c.sync_count),
                                double(c.rpcs),
                                double(c.states_pulled),
                                double(c.states_pushed),
                                double(c.bytes_pulled),
                                double(c.bytes_pushed),
                                c.seconds,
                                c.allreduce_seconds,
                                double(c.allreduce_bytes),
                                c.barrier_seconds,
                                c.train_seconds,
                                c.preparation_seconds,
                                c.forward_seconds,
                                c.backward_seconds,
                                c.memory_seconds,
                                double(c.target_events),
                                double(c.replayed_events),
                                c.train_loss};
  for (int i = 0; i < kFields; ++i) row[i] = mine[i];
  torch::Tensor rss = torch::zeros({world_}, torch::kDouble);
  rss[rank_] = static_cast<double>(c.peak_rss_bytes);
  RETURN_IF_ERROR(collectives_->AllReduceSum(all));
  RETURN_IF_ERROR(collectives_->AllReduceSum(rss));
  result->per_worker.clear();
  CommStats total;
  for (int r = 0; r < world_; ++r) {
    auto v = all[r];
    CommStats w;
    w.sync_count = v[0].item<double>();
    w.rpcs = v[1].item<double>();
    w.states_pulled = v[2].item<double>();
    w.states_pushed = v[3].item<double>();
    w.bytes_pulled = v[4].item<double>();
    w.bytes_pushed = v[5].item<double>();
    w.seconds = v[6].item<double>();
    w.allreduce_seconds = v[7].item<double>();
    w.allreduce_bytes = v[8].item<double>();
    w.barrier_seconds = v[9].item<double>();
    w.train_seconds = v[10].item<double>();
    w.preparation_seconds = v[11].item<double>();
    w.forward_seconds = v[12].item<double>();
    w.backward_seconds = v[13].item<double>();
    w.memory_seconds = v[14].item<double>();
    w.target_events = v[15].item<double>();
    w.replayed_events = v[16].item<double>();
    w.train_loss = v[17].item<double>();
    w.peak_rss_bytes = rss[r].item<double>();
    w.share = w.train_seconds > 0
                  ? (w.seconds + w.allreduce_seconds + w.barrier_seconds) /
                        w.train_seconds
                  : 0;
    total.sync_count += w.sync_count;
    total.rpcs += w.rpcs;
    total.states_pulled += w.states_pulled;
    total.states_pushed += w.states_pushed;
    total.bytes_pulled += w.bytes_pulled;
    total.bytes_pushed += w.bytes_pushed;
    total.seconds += w.seconds;
    total.allreduce_seconds += w.allreduce_seconds;
    total.allreduce_bytes += w.allreduce_bytes;
    total.barrier_seconds += w.barrier_seconds;
    total.train_seconds += w.train_seconds;
    total.preparation_seconds += w.preparation_seconds;
    total.forward_seconds += w.forward_seconds;
    total.backward_seconds += w.backward_seconds;
    total.memory_seconds += w.memory_seconds;
    total.target_events += w.target_events;
    total.replayed_events += w.replayed_events;
    total.peak_rss_bytes = std::max(total.peak_rss_bytes, w.peak_rss_bytes);
    result->per_worker.push_back(w);
  }
  total.train_loss = epochs_.empty() ? 0 : epochs_.back().train_loss;
  total.share =
      total.train_seconds > 0
          ? (total.seconds + total.allreduce_seconds + total.barrier_seconds) /
                total.train_seconds
          : 0;
  result->comm = total;
  return absl::OkStatus();
}

absl::StatusOr<EvalResult> Engine::EvalPass(const std::vector<int64_t>& events,
                                            const EvalNegatives& negatives,
                                            const std::string& label) {
  const uint64_t neg_seed = negatives.seed;
  ScopedTimer timer(&timers_.evaluation);
  torch::NoGradGuard no_grad;
  model_->eval();
  data::NegativeSampler negs(negatives.candidates, neg_seed);
  std::optional<data::NeighborSampler> sampler =
      MakeSampler(full_graph_.get(), neg_seed + 1000);
  LinkMetrics metrics;
  const int64_t total = events.size();
  progress_.Start(label, total);
  std::vector<int32_t> neg(eval_batch_size_);
  model::BatchTensors batch;
  PositiveUpdate update;
  for (int64_t begin = 0; begin < total; begin += eval_batch_size_) {
    const int64_t n = std::min<int64_t>(eval_batch_size_, total - begin);
    negs.Sample(n, neg.data());
    builder_->Build(events.data() + begin, neg.data(), n, state_,
                    sampler ? &*sampler : nullptr,
                    jodie_ ? &jodie_stats_ : nullptr, &batch, &update);
    model::TemporalModelImpl::Output out;
    {
      AutocastScope autocast(bf16_);
      out = model_->Forward(state_, batch);
    }
    torch::Tensor pos = out.pos_logits.contiguous();
    torch::Tensor neg_logits = out.neg_logits.contiguous();
    if (!metrics.AddBatch(pos.data_ptr<float>(), neg_logits.data_ptr<float>(),
                          n)) {
      return absl::InternalError(absl::StrFormat(
          "%s, batch %d (events %d-%d of %d): the model's scores are not "
          "finite: the parameters have diverged (lower --lr, now %g) or the "
          "data holds extreme values",
          label, begin / eval_batch_size_, begin, begin + n - 1, total, o_.lr));
    }
    ApplyPositiveUpdate(batch, update, out.memory, &state_);
    progress_.Advance(n, /*loss=*/-1);  // evaluation: no loss
  }
  EvalResult r = NoEvalResult();
  r.events = total;
  if (total > 0) {
    r.ap = metrics.ap();
    r.auc = metrics.auc();
    r.ap_batch_mean = metrics.ap_batch_mean();
    r.auc_batch_mean = metrics.auc_batch_mean();
  }
  return r;
}

absl::Status Engine::NonFinite(const std::string& what, double value, int epoch,
                               int64_t batch) const {
  std::string checkpoint = "no checkpoint was written";
  if (!o_.out_dir.empty() && epoch > 1) {
    checkpoint = absl::StrFormat("the last good checkpoint is %s",
                                 (fs::path(o_.out_dir) / "checkpoints" /
                                  absl::StrFormat("epoch-%04d.pt", epoch - 1))
                                     .string());
  }
  return absl::InternalError(absl::StrFormat(
      "epoch %d, batch %d (events %d-%d of the training split): the %s is "
      "not finite (%g): training has diverged; lower --lr (now %g) or check "
      "the data for "
      "extreme values; %s",
      epoch, batch, batch * o_.batch_size, (batch + 1) * o_.batch_size - 1,
      what, value, o_.lr, checkpoint));
}

void Engine::SnapshotBest() {
  torch::NoGradGuard guard;
  best_params_.clear();
  for (const auto& p : model_->parameters()) best_params_.push_back(p.clone());
  best_state_ = state_.Clone();
}

void Engine::RestoreBest() {
  torch::NoGradGuard guard;
  auto params = model_->parameters();
  for (size_t i = 0; i < params.size(); ++i) params[i].copy_(best_params_[i]);
  state_ = best_state_.Clone();
}

// Checkpoint layout (torch archive): model/, optimizer/, best/param_i,
// best/memory, best/mail, best/times (last_update, mail_time, has_mail),
// history (per-epoch figures), meta (epoch, best epoch, best val AP, rounds
// without improvement, seed). Randomness is derived from (seed, epoch), so
// the seed and epoch are the RNG state.
namespace {
constexpr int kHistoryFields = 12;
torch::Tensor DoublesToTensor(const std::vector<double>& v) {
  return torch::from_blob(const_cast<double*>(v.data()),
                          {static_cast<int64_t>(v.size())}, torch::kDouble)
      .clone();
}
std::vector<double> TensorToDoubles(const torch::Tensor& t) {
  torch::Tensor c = t.contiguous().to(torch::kDouble);
  return std::vector<double>(c.data_ptr<double>(),
                             c.data_ptr<double>() + c.numel());
}

// Adam's per-parameter state, keyed by parameter index. (LibTorch's own
// optimizer serialization keys the state by tensor address, which does not
// map state back to the right parameters after a restart.)
void SaveAdamState(torch::optim::Adam& opt,
                   const std::vector<torch::Tensor>& params,
                   torch::serialize::OutputArchive* archive) {
  for (size_t i = 0; i < params.size(); ++i) {
    auto it =
        opt.state().find(c10::guts::to_string(params[i].unsafeGetTensorImpl()));
    if (it == opt.state().end()) continue;
    auto& st = static_cast<torch::optim::AdamParamState&>(*it->second);
    torch::serialize::OutputArchive a;
    a.write("step", torch::tensor(st.step(), torch::kInt64));
    a.write("exp_avg", st.exp_avg());
    a.write("exp_avg_sq", st.exp_avg_sq());
    archive->write(absl::StrCat("param_", i), a);
  }
}

absl::Status LoadAdamState(torch::serialize::InputArchive& archive,
                           const std::vector<torch::Tensor>& params,
                           torch::optim::Adam* opt) {
  for (size_t i = 0; i < params.size(); ++i) {
    torch::serialize::InputArchive a;
    if (!archive.try_read(absl::StrCat("param_", i), a)) continue;
    auto st = std::make_unique<torch::optim::AdamParamState>();
    torch::Tensor step, avg, avg_sq;
    a.read("step", step);
    a.read("exp_avg", avg);
    a.read("exp_avg_sq", avg_sq);
    if (!avg.sizes().equals(params[i].sizes())) {
      return absl::InvalidArgumentError(
          absl::StrCat("checkpoint optimizer state does not match parameter ",
                       i, " (different model configuration?)"));
    }
    st->step(step.item<int64_t>());
    st->exp_avg(avg);
    st->exp_avg_sq(avg_sq);
    opt->state()[c10::guts::to_string(params[i].unsafeGetTensorImpl())] =
        std::move(st);
  }
  return absl::OkStatus();
}
}  // namespace

absl::Status Engine::SaveCheckpoint(int epoch) {
  if (o_.out_dir.empty()) return absl::OkStatus();
  const fs::path dir = fs::path(o_.out_dir) / "checkpoints";
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    return absl::InternalError(
        absl::StrCat("cannot create ", dir.string(), ": ", ec.message()));
  }
  torch::serialize::OutputArchive archive, model_archive, opt_archive,
      best_archive;
  model_->save(model_archive);
  SaveAdamState(*optimizer_, model_->parameters(), &opt_archive);
  archive.write("model", model_archive);
  archive.write("optimizer", opt_archive);
  for (size_t i = 0; i < best_params_.size(); ++i) {
    best_archive.write(absl::StrCat("param_", i), best_params_[i]);
  }
  best_archive.write("memory", best_state_.memory);
  best_archive.write("mail", best_state_.mail);
  best_archive.write("last_update", DoublesToTensor(best_state_.last_update));
  best_archive.write("mail_time", DoublesToTensor(best_state_.mail_time));
  std::vector<double> has(best_state_.has_mail.begin(),
                          best_state_.has_mail.end());
  best_archive.write("has_mail", DoublesToTensor(has));
  archive.write("best", best_archive);
  std::vector<double> history;
  for (const EpochResult& e : epochs_) {
    history.insert(
        history.end(),
        {double(e.epoch), e.train_loss, e.val_ap, e.val_auc, e.val_new_node_ap,
         e.val_new_node_auc, e.val_ap_batch_mean, e.val_new_node_ap_batch_mean,
         e.seconds, e.eval_seconds, double(e.train_events), e.grad_norm_mean});
  }
  archive.write("history", DoublesToTensor(history));
  archive.write(
      "meta",
      DoublesToTensor({double(epoch), double(best_epoch_), best_val_ap_,
                       double(rounds_without_improvement_), double(o_.seed)}));
  const fs::path final_path = dir / absl::StrFormat("epoch-%04d.pt", epoch);
  const fs::path tmp = final_path.string() + ".tmp";
  try {
    archive.save_to(tmp.string());
  } catch (const std::exception& e) {
    return absl::InternalError(
        absl::StrCat("cannot write checkpoint ", tmp.string(), ": ", e.what()));
  }
  fs::rename(tmp, final_path, ec);
  if (ec) {
    return absl::InternalError(absl::StrCat("cannot rename checkpoint to ",
                                            final_path.string(), ": ",
                                            ec.message()));
  }
  return absl::OkStatus();
}

absl::StatusOr<int> Engine::LoadCheckpoint() {
  const fs::path dir = fs::path(o_.resume_dir) / "checkpoints";
  std::error_code ec;
  fs::path last;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("epoch-", 0) == 0 && entry.path().extension() == ".pt" &&
        (last.empty() || name > last.filename().string())) {
      last = entry.path();
    }
  }
  if (ec || last.empty()) {
    return absl::NotFoundError(
        absl::StrCat("--resume ", o_.resume_dir,
                     ": no checkpoint (checkpoints/epoch-N.pt) "
                     "found",
                     ec ? absl::StrCat(": ", ec.message()) : ""));
  }
  try {
    torch::serialize::InputArchive archive, model_archive, opt_archive,
        best_archive;
    archive.load_from(last.string());
    archive.read("model", model_archive);
    archive.read("optimizer", opt_archive);
    archive.read("best", best_archive);
    model_->load(model_archive);
    RETURN_IF_ERROR(
        LoadAdamState(opt_archive, model_->parameters(), optimizer_.get()));
    // As after any step of an uninterrupted run (see DefineZeroGrads).
    DefineZeroGrads(model_->parameters());
    best_params_.clear();
    for (size_t i = 0; i < model_->parameters().size(); ++i) {
      torch::Tensor p;
      best_archive.read(absl::StrCat("param_", i), p);
      best_params_.push_back(p);
    }
    torch::Tensor t;
    best_archive.read("memory", best_state_.memory);
    best_archive.read("mail", best_state_.mail);
    best_archive.read("last_update", t);
    best_state_.last_update = TensorToDoubles(t);
    best_archive.read("mail_time", t);
    best_state_.mail_time = TensorToDoubles(t);
    best_archive.read("has_mail", t);
    std::vector<double> has = TensorToDoubles(t);
    best_state_.has_mail.assign(has.begin(), has.end());
    if (best_state_.memory.size(0) != log_.num_nodes ||
        best_state_.memory.size(1) != o_.memory_dim) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "--resume %s: checkpoint holds %d nodes x %d memory, this run has "
          "%d x %d (different data or --memory-dim?)",
          last.string(), best_state_.memory.size(0), best_state_.memory.size(1),
          log_.num_nodes, o_.memory_dim));
    }
    archive.read("history", t);
    std::vector<double> h = TensorToDoubles(t);
    epochs_.clear();
    for (size_t i = 0; i + kHistoryFields <= h.size(); i += kHistoryFields) {
      EpochResult e;
      e.epoch = static_cast<int>(h[i]);
      e.train_loss = h[i + 1];
      e.val_ap = h[i + 2];
      e.val_auc = h[i + 3];
      e.val_new_node_ap = h[i + 4];
      e.val_new_node_auc = h[i + 5];
      e.val_ap_batch_mean = h[i + 6];
      e.val_new_node_ap_batch_mean = h[i + 7];
      e.seconds = h[i + 8];
      e.eval_seconds = h[i + 9];
      e.train_events = static_cast<int64_t>(h[i + 10]);
      e.grad_norm_mean = h[i + 11];
      e.train_events_per_second =
          e.seconds > 0 ? e.train_events / e.seconds : 0;
      epochs_.push_back(e);
    }
    archive.read("meta", t);
    std::vector<double> meta = TensorToDoubles(t);
    best_epoch_ = static_cast<int>(meta[1]);
    best_val_ap_ = meta[2];
    rounds_without_improvement_ = static_cast<int>(meta[3]);
    if (static_cast<uint64_t>(meta[4]) != o_.seed) {
      progress_.Log(
          "warning: --resume with a different --seed than the "
          "checkpoint's; the result will differ from an "
          "uninterrupted run");
    }
    progress_.Log(absl::StrFormat("resumed from %s (epoch %d done)",
                                  last.string(), static_cast<int>(meta[0])));
    return static_cast<int>(meta[0]);
  } catch (const std::exception& e) {
    return absl::DataLossError(absl::StrCat("--resume: cannot read checkpoint ",
                                            last.string(), ": ", e.what()));
  }
}

absl::Status Engine::EvaluateEpoch(EpochResult* r) {
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
  }
  if (!distributed()) return absl::OkStatus();
  // The others wait as long as the leader evaluates: no fixed deadline (a
  // dead leader fails the job through the coordinator's liveness check,
  // which releases the barrier).
  RETURN_IF_ERROR(
      dist_->cluster->Barrier(absl::StrCat("evaluated-", r->epoch), 0));
  std::vector<double> v = {
      r->val_ap,          r->val_auc,          r->val_ap_batch_mean,
      r->val_new_node_ap, r->val_new_node_auc, r->val_new_node_ap_batch_mean};
  RETURN_IF_ERROR(ShareFromLeader(&v));
  r->val_ap = v[0];
  r->val_auc = v[1];
  r->val_ap_batch_mean = v[2];
  r->val_new_node_ap = v[3];
  r->val_new_node_auc = v[4];
  r->val_new_node_ap_batch_mean = v[5];
  return absl::OkStatus();
}

absl::StatusOr<TrainResult> Engine::Run() {
  int start_epoch = 1;
  if (!o_.resume_dir.empty()) {
    ASSIGN_OR_RETURN(int done, LoadCheckpoint());
    start_epoch = done + 1;
  }
  bool stop = o_.patience > 0 && rounds_without_improvement_ >= o_.patience;
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
    epochs_.push_back(r);
    // The reference picks the best epoch by the mean of per-batch val AP,
    // with a relative tolerance of 1e-10.
    const double score = reference_protocol_ ? r.val_ap_batch_mean : r.val_ap;
    if (score > best_val_ap_ + 1e-10 * std::max(1.0, std::abs(best_val_ap_))) {
      best_val_ap_ = score;
      best_epoch_ = epoch;
      rounds_without_improvement_ = 0;
      SnapshotBest();
    } else {
      ++rounds_without_improvement_;
    }
    progress_.Log(absl::StrFormat(
        "epoch %d/%d  loss %.4f  val AP %.4f AUC %.4f  new-node val AP %.4f "
        "AUC %.4f  %.1fs (eval %.1fs)  %.0f ev/s%s",
        epoch, o_.epochs, r.train_loss, r.val_ap, r.val_auc, r.val_new_node_ap,
        r.val_new_node_auc, r.seconds, r.eval_seconds,
        r.train_events_per_second, best_epoch_ == epoch ? "  *best" : ""));
    if (leader()) {
      if (absl::Status s = SaveCheckpoint(epoch); !s.ok()) return Fail(s);
    }
    if (o_.patience > 0 && rounds_without_improvement_ >= o_.patience) {
      progress_.Log(absl::StrFormat(
          "early stopping: val AP%s has not improved for %d epochs; best "
          "epoch %d (%.4f)",
          reference_protocol_ ? " (mean of per-batch AP)" : "", o_.patience,
          best_epoch_, best_val_ap_));
      stop = true;
    }
  }
  if (best_params_.empty()) {
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
    state_ = best_state_.Clone();
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
  result.epochs = epochs_;
  result.best_epoch = best_epoch_;
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
  double secs = 0;
  int64_t events = 0;
  for (const EpochResult& e : epochs_) {
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
  if (distributed()) {
    result.policy = std::string(PolicyName(dist_->policy));
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
      best_epoch_, test.ap, test.auc, test.ap_batch_mean, nn_test.ap,
      nn_test.auc, nn_test.ap_batch_mean));

  SummaryInfo info;
  info.options = &o_;
  info.data_path = data_path_;
  info.log = &log_;
  info.split = &split_;
  info.threads = at::get_num_threads();
  info.eval_batch_size = eval_batch_size_;
  info.onednn_isa_cap = onednn_isa_cap_;
  result.summary_json = SummaryJson(info, result);
  if (!o_.out_dir.empty()) {
    RETURN_IF_ERROR(WriteOutputs(o_.out_dir, log_, result));
  }
  return result;
}

}  // namespace

absl::StatusOr<TrainResult> Train(const TrainOptions& options,
                                  const TrainCallbacks& callbacks) {
  Engine engine(options, callbacks);
  RETURN_IF_ERROR(engine.Setup());
  return engine.Run();
}

}  // namespace mnemo::runtime
