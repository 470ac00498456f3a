#include "trainer/serve/serving_model.h"

#include <sys/stat.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "trainer/platform/autocast.h"
#include "trainer/platform/cpu_setup.h"
#include "trainer/runtime/checkpoint/checkpoint.h"
#include "trainer/runtime/checkpoint/resume_point.h"
#include "trainer/runtime/record.h"
#include "trainer/runtime/report/progress.h"
#include "util/proc.h"
#include "util/status_macros.h"

namespace mnemo::serve {
namespace {

// The seed a query's neighbour sampler starts from, every batch.
constexpr uint64_t kQuerySeed = 0x5eed;

// Serve's versions in a memory store are StateVersions whose "epoch" is a
// generation 2^40 events long: ((generation * 2^40 + last event + 1) << 2)
// | owner. Generations start at 2^21, so every version serve writes is at
// least 2^63, which no training job's reaches (an epoch's base is epochs
// times events): serve can tell its own states from a job's. A new
// generation begins at each start and after a failed push (Resync), and
// states of earlier generations that it does not write again read as
// never updated.
constexpr int64_t kGenerationEvents = (int64_t{1} << 40) - 1;
constexpr uint64_t kFirstGeneration = uint64_t{1} << 21;
constexpr uint64_t kLastGeneration = (uint64_t{1} << 22) - 1;

// A batch built and run (not yet applied).
struct RunBatch {
  model::ModelOutput out;
  batch::PositiveUpdate update;
};

// Runs `f`, a batch's model work, turning what LibTorch or an allocation
// throws into an error.
template <typename F>
auto Guarded(F f) -> decltype(f()) {
  try {
    return f();
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("the model failed on the batch: ",
                                            e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the batch could not be computed: ", e.what()));
  }
}

std::vector<float> ToFloats(const torch::Tensor& t) {
  const torch::Tensor c = t.reshape(-1).to(torch::kFloat).contiguous();
  return std::vector<float>(c.data_ptr<float>(),
                            c.data_ptr<float>() + c.numel());
}

}  // namespace

ServingModel::ServingModel(ServingOptions options)
    : o_(std::move(options)), ids_({}, 0) {}

absl::StatusOr<std::unique_ptr<ServingModel>> ServingModel::Load(
    ServingOptions options) {
  std::unique_ptr<ServingModel> m(new ServingModel(std::move(options)));
  try {
    RETURN_IF_ERROR(m->Init());
  } catch (const std::exception& e) {
    // An allocation beyond the machine (--max-new-nodes), a data set past
    // the neighbour index's 2^32 events.
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot set up the model and its memory: ", e.what()));
  }
  return m;
}

absl::Status ServingModel::Init() {
  runtime::TrainOptions& o = o_.train;
  o = runtime::WithModelDefaults(o);
  auto say = [this](const std::string& line) {
    if (o_.log) o_.log(line);
  };
  if (o.compute.device.cuda()) {
    // Serving runs on the CPU; a GPU run's checkpoint loads there.
    say("the run trained on a GPU; serving on the CPU");
    o.compute.device = runtime::Device{};
  }
  // The allocator and oneDNN as training sets them, before any tensor.
  ASSIGN_OR_RETURN(
      platform::CpuSetup cpu,
      platform::SetUpCpu(o.optim.precision == runtime::Precision::kBf16,
                         o.compute.allow_amx, say));
  (void)cpu;
  {
    runtime::TrainCallbacks cb;
    cb.log = say;
    runtime::Progress progress(o, cb);
    ASSIGN_OR_RETURN(task_,
                     runtime::LoadTask(o, /*evaluates=*/false, &progress));
  }
  const data::EventLog& all = task_->log;
  const data::Split& split = task_->split;
  test_begin_ = split.test.empty() ? all.num_events() : split.test.front();
  if (!split.test.empty() && split.test.back() != all.num_events() - 1 &&
      static_cast<int64_t>(split.test.size()) !=
          all.num_events() - test_begin_) {
    return absl::InternalError(
        "the test events are not the log's last events (a time-ordered "
        "split has them last)");
  }

  // The model, as the run built it, then its best epoch's parameters and
  // memory from the checkpoint (following a job: its latest parameters,
  // and the job's memory).
  mo_ = o.model;
  mo_.edge_dim = all.edge_feature_dim;
  mo_.num_nodes = all.num_nodes;
  mo_.refine = o_.refine && model::SpecOf(mo_.kind).refines;
  // Its initial parameters do not matter: the checkpoint's replace them.
  model_ = model::MakeModel(mo_);
  const batch::BatchNeeds needs = model_->needs();
  // A model with parameters per trained node (DySAT) scores those nodes
  // only.
  const bool per_node = mo_.kind == model::ModelKind::kDysat;
  o_.limits.unknown_nodes = !per_node;
  o_.limits.edge_feature_dim = all.edge_feature_dim;
  o_.limits.time_offset = all.time_offset;
  ids_ =
      services::ServingIds(all.original_ids, per_node ? 0 : o_.max_new_nodes);
  {
    ASSIGN_OR_RETURN(Checkpoint loaded, ReadCheckpoint(o_.checkpoint));
    RETURN_IF_ERROR(SetParams(loaded.params, o_.checkpoint));
    model_epoch_ = loaded.epoch;
    model_written_ = loaded.written;
    memory_.Init(model_->layout(), ids_.rows(), torch::kCPU);
    if (o_.follow) {
      memory_.ResetColumns();
      say(absl::StrFormat("model: %s from %s (epoch %d, its latest parameters)",
                          model::ModelName(mo_.kind), o_.checkpoint,
                          loaded.epoch));
    } else {
      memory::NodeMemory state = std::move(loaded.best_state);
      state.Grow(ids_.rows());
      memory_.Restore(std::move(state));
      say(absl::StrFormat(
          "model: %s from %s (epoch %d; best epoch %d, val AP %.4f)",
          model::ModelName(mo_.kind), o_.checkpoint, loaded.epoch,
          loaded.best_epoch, loaded.best_score));
    }
  }
  model_->eval();
  bf16_ = o.optim.precision == runtime::Precision::kBf16;

  // The log up to where the memory stands (the end of validation), with
  // room for every node that may come.
  log_ = all;
  if (!o_.follow) TruncateLog(test_begin_);
  log_.num_nodes = ids_.rows();
  now_ = test_begin_ > 0 ? log_.t[test_begin_ - 1] : 0;
  graph_ = std::make_unique<data::TemporalGraph>(log_);
  const data::NeighborStrategy strategy =
      o.model.neighbor_strategy.value_or(data::NeighborStrategy::kRecent);
  // The test pass's samplers (evaluator.h: neighbours seeded from its
  // negatives' seed), so that ingesting the test period draws what it drew.
  if (needs.neighbors || needs.mail_to_neighbors) {
    sampler_.emplace(graph_.get(), o.model.neighbors, strategy,
                     task_->test_negs.seed + 1000);
    query_sampler_.emplace(graph_.get(), o.model.neighbors, strategy,
                           kQuerySeed);
  }
  // Ingestion's bounds from the run's data: a time gap past its whole span,
  // features 1000 times its largest.
  if (o_.limits.max_time_gap < 0) {
    o_.limits.max_time_gap =
        all.num_events() > 0 ? all.t[all.num_events() - 1] - all.t[0] : 0;
  }
  float largest = 0;
  for (const float x : all.edge_features) {
    largest = std::max(largest, std::fabs(x));
  }
  o_.limits.max_feature_abs = 1000.0f * std::max(1.0f, largest);
  std::vector<int32_t> candidates = task_->test_negs.candidates;
  if (candidates.empty()) candidates = split.all_destinations;
  negatives_ = std::make_unique<data::NegativeSampler>(std::move(candidates),
                                                       task_->test_negs.seed);
  destinations_ = split.all_destinations;
  builder_ = std::make_unique<batch::BatchBuilder>(&log_, ids_.rows());
  builder_->set_needs(needs);
  builder_->set_device(torch::kCPU);
  time_gaps_ = needs.target_time_deltas ? &task_->time_gaps : nullptr;
  replay_ap_ = replay_auc_ = std::numeric_limits<double>::quiet_NaN();
  if (o_.replay_test && !o_.follow && test_begin_ < all.num_events()) {
    RETURN_IF_ERROR(ReplayTest());
  }
  if (o_.store != nullptr) RETURN_IF_ERROR(ConnectStore());
  return absl::OkStatus();
}

memory::StateVersions ServingModel::StoreVersions() const {
  memory::StateVersions v;
  v.num_events = kGenerationEvents;
  v.epoch = static_cast<int>(generation_);
  return v;
}

absl::Status ServingModel::ConnectStore() {
  const int64_t width = model_->layout().RecordFloats();
  if (o_.store->dim() != width) {
    return absl::FailedPreconditionError(
        absl::StrCat("the memory store's states are ", o_.store->dim(),
                     " floats wide; this run's are ", width,
                     ": start its shards with --dim ", width));
  }
  // Serve is the one worker of its memory: it owns every node.
  memory_.Connect(
      o_.store, [](int64_t) { return true; }, /*rank=*/0, &store_traffic_,
      &store_working_set_);
  if (o_.follow) {
    RETURN_IF_ERROR(FollowJob(/*force=*/true));
    if (o_.log) {
      o_.log(absl::StrFormat(
          "memory store: following the job's memory (epoch %d, %d events "
          "applied, t %.17g)",
          job_epoch_, job_events_, now_ + log_.time_offset));
    }
    return absl::OkStatus();
  }
  // A generation above the newest state the store holds, which must be
  // serve's own: serve writes its memory over what the shards hold.
  ASSIGN_OR_RETURN(std::vector<memstore::NodeStateView> newest,
                   o_.store->ListRecent(1));
  generation_ = kFirstGeneration - 1;
  if (!newest.empty()) {
    const uint64_t v = newest.front().version;
    if (v >> 63 == 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the memory store holds states serve did not write (node ",
          newest.front().id, ", version ", v,
          ": a training job's?); serve writes its own memory into its "
          "shards: give it shards of its own"));
    }
    generation_ = (v >> 2) >> 40;
  }
  RETURN_IF_ERROR(Resync());
  if (o_.log) {
    o_.log(absl::StrFormat(
        "memory store: %d states written (%.1f MiB), generation %d",
        store_traffic_.states_pushed,
        static_cast<double>(store_traffic_.bytes_pushed) / (1 << 20),
        generation_ - kFirstGeneration));
  }
  return absl::OkStatus();
}

absl::StatusOr<ServingModel::Checkpoint> ServingModel::ReadCheckpoint(
    const std::string& file) const {
  const data::EventLog& all = task_->log;
  model::Model scratch = model::MakeModel(mo_);
  torch::optim::Adam adam(scratch->parameters(),
                          torch::optim::AdamOptions(o_.train.optim.lr));
  runtime::TrainingRecord record;
  auto loaded = runtime::LoadCheckpointFile(
      file, *scratch, adam, all.num_nodes, scratch->layout(), &record, nullptr);
  if (!loaded.ok()) {
    return absl::Status(loaded.status().code(),
                        absl::StrCat(file, ": ", loaded.status().message()));
  }
  Checkpoint c;
  c.epoch = loaded->epoch;
  c.best_epoch = record.best_epoch;
  c.best_score = record.best_score;
  struct stat st;
  if (stat(file.c_str(), &st) == 0) {
    c.written = static_cast<double>(st.st_mtim.tv_sec) +
                1e-9 * static_cast<double>(st.st_mtim.tv_nsec);
  }
  if (o_.follow) {
    c.params = scratch->parameters();
    return c;
  }
  if (record.best_params.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat(file,
                     ": the run has no best epoch yet (no validation "
                     "finished)"));
  }
  if (record.best_state.num_rows() != all.num_nodes) {
    return absl::FailedPreconditionError(absl::StrCat(
        file,
        ": the checkpoint keeps no best-epoch memory (the run bounded its "
        "workers' memory, --memory-cache-bytes, and left it in the memory "
        "stores): serve it with --follow --memstore on the job's shards"));
  }
  c.params = std::move(record.best_params);
  c.best_state = std::move(record.best_state);
  return c;
}

absl::Status ServingModel::SetParams(const std::vector<torch::Tensor>& params,
                                     const std::string& file) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> mine = model_->parameters();
  if (mine.size() != params.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        file, ": it holds ", params.size(),
        " parameter tensors, the model built from the run's flags ",
        mine.size()));
  }
  for (size_t i = 0; i < mine.size(); ++i) {
    if (!mine[i].sizes().equals(params[i].sizes())) {
      return absl::InvalidArgumentError(absl::StrCat(
          file, ": parameter ", i, " is ", c10::str(params[i].sizes()),
          ", the model's ", c10::str(mine[i].sizes())));
    }
  }
  for (size_t i = 0; i < mine.size(); ++i) mine[i].copy_(params[i]);
  return absl::OkStatus();
}

absl::Status ServingModel::Refresh() {
  const double t = MonotonicSeconds();
  if (o_.reload_seconds > 0 && t >= next_reload_) {
    next_reload_ = t + o_.reload_seconds;
    // The run's newest checkpoint (its files read again when they load).
    auto point = runtime::FindResumePoint(o_.run_dir, /*verify=*/false);
    const std::string file = point.ok() ? point->FileFor(0, 1) : "";
    // A checkpoint that did not load is not read again until it changes.
    struct stat st;
    const std::string key =
        stat(file.c_str(), &st) == 0
            ? absl::StrCat(file, "@", st.st_mtim.tv_sec, ".",
                           st.st_mtim.tv_nsec, "+", st.st_size)
            : file;
    if (point.ok() && point->epoch > model_epoch_ && key != failed_reload_) {
      absl::StatusOr<Checkpoint> loaded = [&] {
        try {
          return ReadCheckpoint(file);
        } catch (const std::exception& e) {
          return absl::StatusOr<Checkpoint>(
              absl::ResourceExhaustedError(absl::StrCat(file, ": ", e.what())));
        }
      }();
      absl::Status set =
          loaded.ok() ? SetParams(loaded->params, file) : loaded.status();
      if (set.ok()) {
        model_epoch_ = loaded->epoch;
        model_written_ = loaded->written;
        ++model_reloads_;
        failed_reload_.clear();
        if (o_.log) {
          o_.log(absl::StrFormat("model: epoch %d's parameters from %s",
                                 model_epoch_, file));
        }
      } else {
        failed_reload_ = key;
        if (o_.log) {
          o_.log(absl::StrCat("warning: a newer checkpoint did not load (",
                              set.message(), "); still epoch ", model_epoch_,
                              "'s parameters"));
        }
      }
    }
  }
  if (o_.follow && stored()) return FollowJob(/*force=*/false);
  return absl::OkStatus();
}

absl::Status ServingModel::FollowJob(bool force) {
  const double t = MonotonicSeconds();
  if (!force && t < next_follow_) return absl::OkStatus();
  absl::StatusOr<std::vector<memstore::NodeStateView>> newest =
      o_.store->ListRecent(1);
  if (!newest.ok()) {
    return absl::Status(
        newest.status().code(),
        absl::StrCat("memory store: ", newest.status().message()));
  }
  // ListRecent scans each shard's states: once a second.
  next_follow_ = t + 1.0;
  if (newest->empty()) {  // the job has written nothing yet
    job_epoch_ = 0;
    job_events_ = 0;
    now_ = 0;
    return absl::OkStatus();
  }
  const uint64_t v = newest->front().version;
  if (v >> 63 != 0) {
    return absl::FailedPreconditionError(
        "the memory store holds serve's own memory (written by serve "
        "--memstore), not a training job's: --follow reads a job's shards");
  }
  // A job's version: ((epoch * (N + 1) + last event + 1) << 2) | flags.
  const uint64_t step = v >> 2;
  const uint64_t n = static_cast<uint64_t>(task_->log.num_events()) + 1;
  job_epoch_ = static_cast<int>(step / n);
  job_events_ = static_cast<int64_t>(step % n);
  now_ = newest->front().time;
  return absl::OkStatus();
}

absl::Status ServingModel::Resync() {
  if (new_generation_ && generation_ >= kLastGeneration) {
    return absl::ResourceExhaustedError(
        "the memory store's versions are spent (2^21 generations: starts "
        "and failed pushes); start serve on empty shards");
  }
  std::vector<int64_t> nodes = std::move(resync_nodes_);
  resync_nodes_.clear();
  const std::vector<int64_t>& last = memory_.view().last_event();
  for (int64_t u = 0; u < static_cast<int64_t>(last.size()); ++u) {
    if (last[u] >= 0) nodes.push_back(u);
  }
  std::sort(nodes.begin(), nodes.end());
  nodes.erase(std::unique(nodes.begin(), nodes.end()), nodes.end());
  // A new generation at start and after a failed batch (whose states some
  // shard may hold, with versions of this generation). A retry after a
  // failed write of this memory keeps its generation: what a shard took
  // of it is this memory already, at the same versions.
  if (new_generation_) {
    ++generation_;
    new_generation_ = false;
  }
  resync_ = true;
  if (absl::Status s = memory_.exchange()->Push(nodes, StoreVersions());
      !s.ok()) {
    resync_nodes_ = std::move(nodes);
    return absl::Status(
        s.code(),
        absl::StrCat("memory store: writing serve's memory: ", s.message()));
  }
  resync_ = false;
  return absl::OkStatus();
}

void ServingModel::AppendEvents(const std::vector<int32_t>& src,
                                const std::vector<int32_t>& dst,
                                const std::vector<double>& t,
                                const std::vector<float>* features) {
  const int dim = log_.edge_feature_dim;
  for (size_t i = 0; i < src.size(); ++i) {
    log_.src.push_back(src[i]);
    log_.dst.push_back(dst[i]);
    log_.t.push_back(t[i]);
    if (!log_.labels.empty()) log_.labels.push_back(0.0f);
  }
  if (dim > 0) {
    const size_t n = log_.edge_features.size();
    log_.edge_features.resize(n + src.size() * dim, 0.0f);
    if (features != nullptr) {
      std::copy(features->begin(), features->end(),
                log_.edge_features.mutable_data() + n);
    }
  }
}

void ServingModel::TruncateLog(int64_t events) {
  log_.src.resize(events);
  log_.dst.resize(events);
  log_.t.resize(events);
  if (!log_.labels.empty()) log_.labels.resize(events);
  log_.edge_features.resize(events * log_.edge_feature_dim);
}

absl::Status ServingModel::Build(int64_t first, int64_t n,
                                 const int32_t* negatives,
                                 data::NeighborSampler* sampler,
                                 batch::BatchTensors* tensors,
                                 batch::PositiveUpdate* update,
                                 std::vector<int64_t>* read,
                                 memstore::PulledStates* before) {
  std::vector<int64_t> events(n);
  std::iota(events.begin(), events.end(), first);
  builder_->Prepare(events.data(), negatives, n, nullptr, 0, sampler);
  std::vector<int64_t> nodes = builder_->StateNodes();
  RETURN_IF_ERROR(memory_.Ready(nodes, {}));
  if (stored() && o_.follow) {
    // The job's states of what the batch reads (the run's nodes: it has no
    // others), as its epoch stands.
    RETURN_IF_ERROR(FollowJob(/*force=*/false));
    std::vector<int64_t> job_nodes;
    for (const int64_t u : nodes) {
      if (u < ids_.run_nodes()) job_nodes.push_back(u);
    }
    memory::StateVersions job;
    job.num_events = task_->log.num_events();
    job.epoch = job_epoch_;
    if (absl::Status s = memory_.exchange()->Pull(job_nodes, job); !s.ok()) {
      return absl::Status(
          s.code(), absl::StrCat("memory store: reading the job's states: ",
                                 s.message()));
    }
  } else if (stored()) {
    // The store's states of what the batch reads replace the local ones.
    if (resync_) RETURN_IF_ERROR(Resync());
    memstore::PulledStates pulled;
    if (absl::Status s = memory_.exchange()->PullAndKeep(
            nodes, StoreVersions(), before != nullptr ? before : &pulled);
        !s.ok()) {
      return absl::Status(
          s.code(), absl::StrCat("memory store: reading the batch's states: ",
                                 s.message()));
    }
  }
  if (read != nullptr) *read = std::move(nodes);
  builder_->Finish(memory_.view(), time_gaps_, tensors, update);
  return absl::OkStatus();
}

data::NeighborSampler* ServingModel::QuerySampler() {
  if (!query_sampler_) return nullptr;
  query_sampler_->rng().seed(kQuerySeed);
  return &*query_sampler_;
}

absl::StatusOr<model::ModelOutput> ServingModel::Run(
    int64_t first, int64_t n, const int32_t* negatives, bool apply,
    data::NeighborSampler* sampler) {
  torch::NoGradGuard no_grad;
  return Guarded([&]() -> absl::StatusOr<model::ModelOutput> {
    RunBatch b;
    batch::BatchTensors tensors;
    std::vector<int64_t> read;
    memstore::PulledStates before;
    RETURN_IF_ERROR(Build(first, n, negatives, sampler, &tensors, &b.update,
                          &read, apply && stored() ? &before : nullptr));
    platform::AutocastRegion autocast;
    autocast.Begin(bf16_, torch::kCPU);
    b.out = model_->Forward(memory_.view(), tensors);
    autocast.End();
    // Scores, and the memory a batch would write, finite: a batch the model
    // cannot score is not answered, one whose memory overflows not applied.
    std::vector<torch::Tensor> out = {b.out.pos_logits.reshape(-1),
                                      b.out.neg_logits.reshape(-1)};
    if (apply && b.out.memory.defined())
      out.push_back(b.out.memory.reshape(-1));
    if (apply && b.out.rows.defined()) out.push_back(b.out.rows.reshape(-1));
    for (const torch::Tensor& t : out) {
      if (!torch::isfinite(t.to(torch::kFloat)).all().item<bool>()) {
        return absl::InternalError(
            "the model's scores or memory of the batch are not finite "
            "(nothing applied)");
      }
    }
    if (apply) {
      memory_.Advance(b.update, b.out.memory, b.out.rows, {}, {});
      memory_.EndBatch();
      if (stored()) {
        RETURN_IF_ERROR(PushBatch(b.update, read, std::move(before)));
      }
    }
    return std::move(b.out);
  });
}

absl::Status ServingModel::PushBatch(const batch::PositiveUpdate& update,
                                     const std::vector<int64_t>& read,
                                     memstore::PulledStates before) {
  std::vector<int64_t> changed(update.node_ids.begin(), update.node_ids.end());
  std::sort(changed.begin(), changed.end());
  changed.erase(std::unique(changed.begin(), changed.end()), changed.end());
  absl::Status s = memory_.exchange()->Push(changed, StoreVersions());
  if (s.ok()) return s;
  // The local memory as the batch found it; the shards that took their
  // part keep it until the store is written again, before the next read.
  memory_.exchange()->Apply(read, std::move(before.states),
                            std::move(before.version), std::move(before.time),
                            StoreVersions());
  resync_ = true;
  new_generation_ = true;
  resync_nodes_.insert(resync_nodes_.end(), changed.begin(), changed.end());
  return absl::Status(s.code(),
                      absl::StrCat("memory store: writing the batch's states "
                                   "(nothing applied): ",
                                   s.message()));
}

absl::StatusOr<torch::Tensor> ServingModel::EmbedAt(
    const std::vector<int32_t>& nodes, const std::vector<double>& times) {
  // Three nodes of one time a row (its source, destination and negative:
  // the model embeds all three alike), a time's last row filled with its
  // first node. Row r of the result is nodes[r]'s.
  const int64_t n = static_cast<int64_t>(nodes.size());
  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return times[a] < times[b]; });
  std::vector<int32_t> part[3];
  std::vector<double> row_t;
  // Node i is block block[i] (source, destination, negative) of row
  // row[i]; the model's [3R, d] output holds block b's rows at b * R.
  std::vector<int64_t> block(n), row(n);
  for (int64_t i = 0; i < n;) {
    int64_t end = i;
    while (end < n && times[order[end]] == times[order[i]]) ++end;
    const int64_t rows = (end - i + 2) / 3;
    const int64_t first_row = static_cast<int64_t>(row_t.size());
    for (int64_t k = 0; k < 3 * rows; ++k) {
      const bool real = i + k < end;
      part[k % 3].push_back(nodes[order[real ? i + k : i]]);
      if (real) {
        block[order[i + k]] = k % 3;
        row[order[i + k]] = first_row + k / 3;
      }
    }
    row_t.insert(row_t.end(), rows, times[order[i]]);
    i = end;
  }
  const int64_t rows = static_cast<int64_t>(row_t.size());
  std::vector<int64_t> at(n);
  for (int64_t i = 0; i < n; ++i) at[i] = block[i] * rows + row[i];
  const int64_t base = log_.num_events();
  AppendEvents(part[0], part[1], row_t, nullptr);
  torch::NoGradGuard no_grad;
  absl::StatusOr<torch::Tensor> emb =
      Guarded([&]() -> absl::StatusOr<torch::Tensor> {
        batch::BatchTensors tensors;
        batch::PositiveUpdate update;
        RETURN_IF_ERROR(Build(base, rows, part[2].data(), QuerySampler(),
                              &tensors, &update));
        platform::AutocastRegion autocast;
        autocast.Begin(bf16_, torch::kCPU);
        const model::UpdatedMemory updated =
            model_->UpdateMemory(memory_.view(), tensors);
        torch::Tensor e = model_->TargetEmbeddings(tensors, updated);
        autocast.End();
        return e.index_select(0, torch::tensor(at, torch::kLong));
      });
  TruncateLog(base);
  return emb;
}

absl::StatusOr<Scored> ServingModel::Score(const std::vector<int32_t>& src,
                                           const std::vector<int32_t>& dst,
                                           const std::vector<double>& t) {
  // Each distinct (node, time) embedded once, as a query's target at that
  // time (read, never applied: the graph does not hold the rows, so no
  // query sees another as a neighbour), then every pair scored from its
  // two embeddings by the model's link predictor.
  const int64_t n = static_cast<int64_t>(src.size());
  std::vector<int32_t> nodes;
  std::vector<double> times;
  absl::flat_hash_map<std::pair<int32_t, double>, int64_t> index;
  auto row_of = [&](int32_t v, double at) {
    auto [it, added] =
        index.try_emplace({v, at}, static_cast<int64_t>(nodes.size()));
    if (added) {
      nodes.push_back(v);
      times.push_back(at);
    }
    return it->second;
  };
  std::vector<int64_t> src_row(n), dst_row(n);
  for (int64_t i = 0; i < n; ++i) {
    src_row[i] = row_of(src[i], t[i]);
    dst_row[i] = row_of(dst[i], t[i]);
  }
  ASSIGN_OR_RETURN(torch::Tensor emb, EmbedAt(nodes, times));
  absl::StatusOr<torch::Tensor> logits =
      Guarded([&]() -> absl::StatusOr<torch::Tensor> {
        torch::NoGradGuard no_grad;
        platform::AutocastRegion autocast;
        autocast.Begin(bf16_, torch::kCPU);
        torch::Tensor l =
            model_->PairLogits(emb, torch::tensor(src_row, torch::kLong),
                               torch::tensor(dst_row, torch::kLong));
        autocast.End();
        if (!torch::isfinite(l).all().item<bool>()) {
          return absl::InternalError(
              "the model's scores of the batch are not finite");
        }
        return l;
      });
  if (!logits.ok()) return logits.status();
  Scored s;
  s.logits = ToFloats(*logits);
  s.version = version();
  return s;
}

absl::StatusOr<Embedded> ServingModel::Embed(const std::vector<int32_t>& nodes,
                                             double t) {
  ASSIGN_OR_RETURN(torch::Tensor emb,
                   EmbedAt(nodes, std::vector<double>(nodes.size(), t)));
  const torch::Tensor e = emb.to(torch::kFloat).contiguous();
  Embedded out;
  out.dim = e.size(1);
  out.values.assign(e.data_ptr<float>(), e.data_ptr<float>() + e.numel());
  out.version = version();
  return out;
}

absl::StatusOr<Ingested> ServingModel::Ingest(
    const services::DecodedBatch& batch) {
  if (o_.follow) {
    return absl::FailedPreconditionError(
        "serve --follow reads a training job's memory: the job writes it, "
        "serve does not ingest");
  }
  const int64_t base = log_.num_events();
  AppendEvents(batch.src, batch.dst, batch.t, &batch.features);
  absl::StatusOr<Ingested> r;
  try {
    graph_->Append(log_, base);
    r = Apply(base, batch.negative, batch.online_figures);
  } catch (const std::exception& e) {
    r = absl::ResourceExhaustedError(
        absl::StrCat("the batch could not be indexed: ", e.what()));
  }
  if (!r.ok()) {
    // Nothing applied: the log and the neighbour index as they were (the
    // index rebuilt only where the batch's entries cannot be taken back).
    const bool removed = graph_->RemoveAppended(log_, base);
    TruncateLog(base);
    if (!removed) *graph_ = data::TemporalGraph(log_);
    return r.status();
  }
  ids_.Add(batch.new_nodes);
  return r;
}

absl::StatusOr<Ingested> ServingModel::Apply(int64_t first,
                                             std::vector<int32_t> negative,
                                             bool figures) {
  const int64_t n = static_cast<int64_t>(negative.size());
  const std::mt19937_64 negative_rng = negatives_->rng();
  const std::mt19937_64 neighbor_rng =
      sampler_ ? sampler_->rng() : std::mt19937_64();
  Ingested r;
  r.negative = std::move(negative);
  for (int32_t& v : r.negative) {
    if (v < 0) negatives_->Sample(1, &v);
  }
  absl::StatusOr<model::ModelOutput> out =
      Run(first, n, r.negative.data(), /*apply=*/true,
          sampler_ ? &*sampler_ : nullptr);
  if (!out.ok()) {
    negatives_->rng() = negative_rng;
    if (sampler_) sampler_->rng() = neighbor_rng;
    return out.status();
  }
  r.pos = ToFloats(out->pos_logits);
  r.neg = ToFloats(out->neg_logits);
  events_applied_ += n;
  ++batches_applied_;
  now_ = log_.t[first + n - 1];
  AddToWindow(r.pos, r.neg);
  r.online_ap = r.online_mrr = std::numeric_limits<double>::quiet_NaN();
  if (figures) OnlineFigures(&r.online_ap, &r.online_mrr);
  r.version = version();
  return r;
}

Version ServingModel::version() const {
  Version v;
  v.events_applied = events_applied_;
  v.batches_applied = batches_applied_;
  v.time = now_ + log_.time_offset;
  v.model_epoch = model_epoch_;
  v.model_reloads = model_reloads_;
  v.model_written = model_written_;
  v.job_epoch = job_epoch_;
  v.job_events = job_events_;
  return v;
}

void ServingModel::AddToWindow(const std::vector<float>& pos,
                               const std::vector<float>& neg) {
  const int64_t w = o_.online_window;
  if (w <= 0) return;
  if (static_cast<int64_t>(window_pos_.size()) != w) {
    window_pos_.assign(w, 0.0f);
    window_neg_.assign(w, 0.0f);
  }
  for (size_t i = 0; i < pos.size(); ++i) {
    window_pos_[window_next_] = pos[i];
    window_neg_[window_next_] = neg[i];
    window_next_ = (window_next_ + 1) % w;
    window_size_ = std::min(window_size_ + 1, w);
  }
}

void ServingModel::OnlineFigures(double* ap, double* mrr) const {
  *ap = *mrr = std::numeric_limits<double>::quiet_NaN();
  if (window_size_ == 0) return;
  // One sort of the window's scores (LinkMetrics would add a per-batch AP
  // and AUC of the whole window too).
  std::vector<float> scores(window_pos_.begin(),
                            window_pos_.begin() + window_size_);
  scores.insert(scores.end(), window_neg_.begin(),
                window_neg_.begin() + window_size_);
  std::vector<uint8_t> labels(2 * window_size_, 0);
  std::fill(labels.begin(), labels.begin() + window_size_, 1);
  *ap = runtime::AveragePrecision(scores, labels);
  double sum = 0;
  for (int64_t i = 0; i < window_size_; ++i) {
    // The positive's rank among it and its negative, ties counting half
    // (TGB's rule, eval/metrics.h).
    const float p = window_pos_[i], q = window_neg_[i];
    sum += 1.0 / (p > q ? 1.0 : p == q ? 1.5 : 2.0);
  }
  *mrr = sum / static_cast<double>(window_size_);
}

absl::Status ServingModel::ReplayTest() {
  const data::EventLog& all = task_->log;
  const runtime::TrainOptions& o = o_.train;
  const int64_t batch = runtime::EvalBatchSize(o);
  runtime::LinkMetrics metrics;
  const int dim = all.edge_feature_dim;
  const double t0 = MonotonicSeconds();
  // The test period into the log and the neighbour index at once (as the
  // evaluation's graph holds every event: a sample strictly before each
  // event's time sees the same), then scored and applied batch by batch.
  const int64_t first = test_begin_, end = all.num_events();
  AppendEvents(std::vector<int32_t>(all.src.begin() + first, all.src.end()),
               std::vector<int32_t>(all.dst.begin() + first, all.dst.end()),
               std::vector<double>(all.t.begin() + first, all.t.end()),
               nullptr);
  if (dim > 0) {
    std::copy(all.edge_features.begin() + first * dim, all.edge_features.end(),
              log_.edge_features.mutable_data() + first * dim);
  }
  graph_->Append(log_, first);
  for (int64_t b = first; b < end; b += batch) {
    const int64_t n = std::min(batch, end - b);
    ASSIGN_OR_RETURN(Ingested r,
                     Apply(b, std::vector<int32_t>(n, -1), /*figures=*/false));
    if (!metrics.AddBatch(r.pos.data(), r.neg.data(), n)) {
      return absl::InternalError("test replay: the scores are not finite");
    }
  }
  replay_ap_ = metrics.ap();
  replay_auc_ = metrics.auc();
  if (o_.log) {
    o_.log(absl::StrFormat(
        "memory: the test period replayed (%d events, predict then update, "
        "%.0f events/s): AP %.9f, AUC %.9f; now at t %.17g",
        all.num_events() - test_begin_,
        static_cast<double>(all.num_events() - test_begin_) /
            std::max(1e-9, MonotonicSeconds() - t0),
        replay_ap_, replay_auc_, now_ + all.time_offset));
  }
  // The online figures start with what clients ingest.
  window_next_ = window_size_ = 0;
  return absl::OkStatus();
}

}  // namespace mnemo::serve
