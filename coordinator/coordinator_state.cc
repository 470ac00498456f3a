#include "coordinator/coordinator_state.h"

#include <algorithm>
#include <iterator>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace mnemo::coordinator {
namespace {

class AlwaysSync : public DecisionPolicy {
 public:
  std::string name() const override { return "always-sync"; }
  bool Decide(const PolicyView&) override { return true; }
};

class NeverSync : public DecisionPolicy {
 public:
  std::string name() const override { return "never-sync"; }
  bool Decide(const PolicyView&) override { return false; }
};

// DepTGL Eq. 7: S_r = 0 iff r > 0, ema > 0 and g_{r-1} < tau_g * ema.
class GradientEma : public DecisionPolicy {
 public:
  explicit GradientEma(double tau_g) : tau_g_(tau_g) {}
  std::string name() const override { return "gradient-ema"; }
  bool Decide(const PolicyView& view) override {
    const bool skip = view.epoch_batch > 0 && view.grad_norm_ema > 0 &&
                      view.grad_norm < tau_g_ * view.grad_norm_ema;
    return !skip;
  }

 private:
  const double tau_g_;
};

// The subscriptions whose callbacks this thread is running now (state, id),
// so that Unsubscribe called from inside one does not wait for itself.
thread_local std::vector<std::pair<const CoordinatorState*, int>>
    tls_delivering;

}  // namespace

std::unique_ptr<DecisionPolicy> MakeAlwaysSyncPolicy() {
  return std::make_unique<AlwaysSync>();
}
std::unique_ptr<DecisionPolicy> MakeNeverSyncPolicy() {
  return std::make_unique<NeverSync>();
}
std::unique_ptr<DecisionPolicy> MakeGradientEmaPolicy(double tau_g) {
  return std::make_unique<GradientEma>(tau_g);
}

CoordinatorState::CoordinatorState(CoordinatorOptions options,
                                   std::unique_ptr<DecisionPolicy> policy,
                                   Clock clock)
    : options_(std::move(options)),
      clock_(std::move(clock)),
      policy_(std::move(policy)) {
  absl::MutexLock lock(&mu_);
  config_hash_ = options_.config_hash;
  workers_.resize(options_.world_size);
  stats_.resize(options_.world_size);
  for (int r = 0; r < options_.world_size; ++r) workers_[r].rank = r;
  decisions_.push_back({0, true});  // boundary 0: everyone starts in sync
  ++sync_count_;
}

absl::Status CoordinatorState::Join(int rank, const std::string& address,
                                    const std::string& host,
                                    const std::string& config_hash) {
  absl::MutexLock lock(&mu_);
  if (!job_status_.ok()) {
    return absl::AbortedError(
        absl::StrCat("the job has failed: ", job_status_.message()));
  }
  if (rank < 0 || rank >= options_.world_size) {
    return absl::InvalidArgumentError(
        absl::StrFormat("rank %d is out of range: the world size is %d", rank,
                        options_.world_size));
  }
  if (config_hash.empty()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("worker %d sent no run configuration hash", rank));
  }
  // A second join for a live rank is refused before its configuration is
  // compared: whatever it carries, it is not the job's worker (that one has
  // joined) and must not fail the job.
  WorkerInfo& w = workers_[rank];
  if (w.joined && !w.finished) {
    return absl::AlreadyExistsError(absl::StrFormat(
        "rank %d has already joined (from %s)", rank, w.address));
  }
  if (config_hash_.empty()) config_hash_ = config_hash;  // first joiner
  if (config_hash != config_hash_) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "worker %d has run configuration %s but the job has %s: start every "
        "worker with the same flags and data",
        rank, config_hash, config_hash_));
  }
  w.joined = true;
  if (first_join_time_ < 0) first_join_time_ = clock_();
  w.finished = false;
  w.address = address;
  w.host = host;
  w.last_seen = clock_();
  return absl::OkStatus();
}

absl::Status CoordinatorState::Heartbeat(int rank) {
  absl::MutexLock lock(&mu_);
  if (rank < 0 || rank >= options_.world_size || !workers_[rank].joined) {
    return absl::NotFoundError(absl::StrCat("rank ", rank, " has not joined"));
  }
  workers_[rank].last_seen = clock_();
  return job_status_;
}

absl::Status CoordinatorState::Finish(int rank) {
  absl::MutexLock lock(&mu_);
  if (rank < 0 || rank >= options_.world_size || !workers_[rank].joined) {
    return absl::NotFoundError(absl::StrCat("rank ", rank, " has not joined"));
  }
  workers_[rank].finished = true;
  return job_status_;
}

void CoordinatorState::ReportError(int rank, const std::string& message) {
  Abort(absl::AbortedError(
      absl::StrFormat("worker %d failed: %s", rank, message)));
}

void CoordinatorState::Abort(absl::Status status) {
  if (status.ok()) status = absl::UnknownError("the job was aborted");
  std::vector<Delivery> calls;
  {
    absl::MutexLock lock(&mu_);
    FailLocked(std::move(status), &calls);
  }
  Deliver(std::move(calls));
}

void CoordinatorState::WorkerLost(int rank, const std::string& reason) {
  std::vector<Delivery> calls;
  {
    absl::MutexLock lock(&mu_);
    if (rank < 0 || rank >= options_.world_size) return;
    const WorkerInfo& w = workers_[rank];
    if (!w.joined || w.finished) return;
    FailLocked(absl::UnavailableError(absl::StrFormat(
                   "worker %d (%s) is gone: %s", rank, w.address, reason)),
               &calls);
  }
  Deliver(std::move(calls));
}

void CoordinatorState::AddDeliveryLocked(int id, std::function<void()> call,
                                         std::vector<Delivery>* out) {
  ++in_flight_[id];
  out->push_back({id, std::move(call)});
}

void CoordinatorState::Deliver(std::vector<Delivery> deliveries) {
  for (Delivery& d : deliveries) {
    if (d.subscriber < 0) {
      d.call();
      continue;
    }
    tls_delivering.emplace_back(this, d.subscriber);
    d.call();
    tls_delivering.pop_back();
    absl::MutexLock lock(&mu_);
    auto it = in_flight_.find(d.subscriber);
    if (--it->second == 0) in_flight_.erase(it);
    in_flight_done_.SignalAll();
  }
}

void CoordinatorState::FailLocked(absl::Status status,
                                  std::vector<Delivery>* calls) {
  if (!job_status_.ok()) return;  // the first failure is the one reported
  job_status_ = std::move(status);
  // Release every waiter with the failure (called after the lock is
  // released by the caller).
  const absl::Status s = job_status_;
  for (auto& [name, b] : barriers_) {
    for (auto& w : b.waiters) {
      if (w) calls->push_back({-1, [w, s] { w(s); }});
    }
    b.waiters.clear();
    b.arrived.assign(options_.world_size, false);
  }
  for (auto& [id, sub] : subscribers_) {
    if (sub.on_end) {
      AddDeliveryLocked(
          id, [cb = sub.on_end, s] { cb(s); }, calls);
    }
  }
  subscribers_.clear();
}

void CoordinatorState::MarkDecidedLocked(int64_t first, int64_t last) {
  first = std::max(first, decided_below_);
  if (first > last) return;
  // Merge with the intervals it overlaps or touches.
  auto it = decided_above_.upper_bound(first);
  if (it != decided_above_.begin()) {
    auto prev = std::prev(it);
    if (prev->second + 1 >= first) {
      first = prev->first;
      last = std::max(last, prev->second);
      decided_above_.erase(prev);
    }
  }
  while (it != decided_above_.end() && it->first <= last + 1) {
    last = std::max(last, it->second);
    it = decided_above_.erase(it);
  }
  if (first == decided_below_) {
    decided_below_ = last + 1;  // merged: the next interval is not adjacent
  } else {
    decided_above_.emplace(first, last);
  }
}

bool CoordinatorState::IsDecidedLocked(int64_t batch) const {
  if (batch < decided_below_) return true;
  auto it = decided_above_.upper_bound(batch);
  return it != decided_above_.begin() && std::prev(it)->second >= batch;
}

absl::Status CoordinatorState::Report(const BatchReport& report,
                                      ReportOutcome* outcome) {
  ReportOutcome ignored;
  if (outcome == nullptr) outcome = &ignored;
  *outcome = ReportOutcome();
  std::vector<Delivery> deliveries;
  {
    absl::MutexLock lock(&mu_);
    if (!job_status_.ok()) return job_status_;
    if (report.rank < 0 || report.rank >= options_.world_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("report from rank ", report.rank, " out of range"));
    }
    if (report.batch < 0 || report.epoch_batch < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "report from rank ", report.rank, " for batch ", report.batch,
          " (epoch batch ", report.epoch_batch, "): batches count from 0"));
    }
    if (report.batches < 1 || report.batches > report.batch + 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("report from rank ", report.rank, " for batch ",
                       report.batch, " covers ", report.batches,
                       " batches: at least 1 and at most ", report.batch + 1));
    }
    if (report.heavy_load_batches < 0 ||
        report.heavy_load_batches > report.batches || report.pruned < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "report from rank ", report.rank, " for batch ", report.batch, ": ",
          report.heavy_load_batches, " heavy-load batches of ", report.batches,
          " and ", report.pruned, " pruned events"));
    }
    workers_[report.rank].last_seen = clock_();
    // A retried report, or one for a batch decided already: ignored, so a
    // batch is decided once, when every rank has reported it once.
    if (IsDecidedLocked(report.batch)) {
      outcome->duplicate = true;
      return absl::OkStatus();
    }
    BatchAgg& agg = pending_[report.batch];
    if (agg.reported_by.empty()) {
      agg.reported_by.assign(options_.world_size, false);
    }
    if (agg.reported_by[report.rank]) {
      outcome->duplicate = true;
      return absl::OkStatus();
    }
    agg.reported_by[report.rank] = true;
    agg.min_batches = agg.reported == 0
                          ? report.batches
                          : std::min(agg.min_batches, report.batches);
    ++agg.reported;
    agg.grad_norm_sum += report.grad_norm;
    if (report.grad_norm_ema > 0) {
      agg.grad_norm_ema_sum += report.grad_norm_ema;
      ++agg.grad_norm_ema_count;
    }
    agg.epoch_batch = std::max(agg.epoch_batch, report.epoch_batch);
    agg.last_of_epoch = agg.last_of_epoch || report.last_of_epoch;
    RankStats& s = stats_[report.rank];
    s.last_batch_seconds = report.batch_seconds;
    s.last_compute_seconds = report.compute_seconds;
    s.batch_seconds_ema = s.reports == 0
                              ? report.batch_seconds
                              : (1 - options_.ema_alpha) * s.batch_seconds_ema +
                                    options_.ema_alpha * report.batch_seconds;
    s.grad_norm = report.grad_norm;
    ++s.reports;
    s.batches += report.batches;
    s.heavy_load_batches += report.heavy_load_batches;
    s.pruned += report.pruned;
    if (agg.reported == options_.world_size) {
      const double g = agg.grad_norm_sum / options_.world_size;
      grad_norm_ema_ = ema_initialized_
                           ? (1 - options_.ema_alpha) * grad_norm_ema_ +
                                 options_.ema_alpha * g
                           : g;
      ema_initialized_ = true;
      PolicyView view;
      view.boundary = report.batch + 1;
      view.world_size = options_.world_size;
      view.grad_norm = g;
      view.grad_norm_ema = agg.grad_norm_ema_count > 0
                               ? agg.grad_norm_ema_sum / agg.grad_norm_ema_count
                               : grad_norm_ema_;
      batches_since_sync_ += agg.min_batches;
      view.batches_since_sync = batches_since_sync_;
      view.epoch_batch = agg.last_of_epoch ? 0 : agg.epoch_batch + 1;
      // The window's batches are decided with it; per-batch reports some
      // rank sent inside it are superseded (agg is gone after this).
      const int64_t first = report.batch - agg.min_batches + 1;
      pending_.erase(pending_.lower_bound(first),
                     pending_.upper_bound(report.batch));
      MarkDecidedLocked(first, report.batch);
      const bool sync = policy_->Decide(view);
      if (sync) {
        ++sync_count_;
        batches_since_sync_ = 0;
      } else {
        ++skip_count_;
      }
      Decision d{report.batch + 1, sync};
      decisions_.push_back(d);
      outcome->decided = true;
      outcome->decision = d;
      outcome->view = view;
      for (auto& [id, sub] : subscribers_) {
        AddDeliveryLocked(
            id, [cb = sub.on_decision, d] { cb(d); }, &deliveries);
      }
    }
  }
  Deliver(std::move(deliveries));
  return absl::OkStatus();
}

void CoordinatorState::ArriveAtBarrier(const std::string& name, int rank,
                                       std::function<void(absl::Status)> done) {
  std::vector<std::function<void(absl::Status)>> release;
  absl::Status result;
  {
    absl::MutexLock lock(&mu_);
    if (!job_status_.ok()) {
      result = job_status_;
    } else if (rank < 0 || rank >= options_.world_size) {
      result = absl::InvalidArgumentError(
          absl::StrCat("barrier '", name, "': rank ", rank, " out of range"));
    } else {
      BarrierState& b = barriers_[name];
      if (b.arrived.empty()) b.arrived.assign(options_.world_size, false);
      if (b.arrived[rank]) {
        result = absl::FailedPreconditionError(absl::StrFormat(
            "rank %d arrived twice at barrier '%s' (generation %d)", rank, name,
            b.generation));
      } else {
        workers_[rank].last_seen = clock_();
        b.arrived[rank] = true;
        b.waiters.push_back(std::move(done));
        bool all = true;
        for (bool a : b.arrived) all = all && a;
        if (!all) return;
        release.swap(b.waiters);
        b.arrived.assign(options_.world_size, false);
        ++b.generation;
      }
    }
  }
  if (!release.empty()) {
    for (auto& w : release) w(absl::OkStatus());
  } else {
    done(result);
  }
}

int CoordinatorState::Subscribe(
    std::function<void(const Decision&)> on_decision,
    std::function<void(absl::Status)> on_end) {
  std::vector<Delivery> deliveries;
  int id;
  {
    absl::MutexLock lock(&mu_);
    id = next_subscriber_++;
    const std::vector<Decision> past = decisions_;
    const absl::Status status = job_status_;
    AddDeliveryLocked(
        id,
        [on_decision, on_end, past, status] {
          for (const Decision& d : past) on_decision(d);
          if (!status.ok()) on_end(status);
        },
        &deliveries);
    if (status.ok()) subscribers_[id] = {on_decision, on_end};
  }
  Deliver(std::move(deliveries));
  return id;
}

void CoordinatorState::Unsubscribe(int id) {
  // Calls of this subscription running on this very thread (Unsubscribe
  // from inside its own callback): not waited for.
  int own = 0;
  for (const auto& [state, sub] : tls_delivering) {
    own += state == this && sub == id;
  }
  absl::MutexLock lock(&mu_);
  subscribers_.erase(id);
  while (true) {
    auto it = in_flight_.find(id);
    if (it == in_flight_.end() || it->second <= own) break;
    in_flight_done_.Wait(&mu_);
  }
}

absl::Status CoordinatorState::CheckLiveness() {
  std::vector<Delivery> calls;
  absl::Status status;
  {
    absl::MutexLock lock(&mu_);
    const double now = clock_();
    for (const WorkerInfo& w : workers_) {
      if (w.joined && !w.finished &&
          now - w.last_seen > options_.heartbeat_timeout_s) {
        FailLocked(absl::UnavailableError(absl::StrFormat(
                       "worker %d (%s) stopped sending heartbeats %.1f s ago",
                       w.rank, w.address, now - w.last_seen)),
                   &calls);
        break;
      }
    }
    if (job_status_.ok() && options_.join_timeout_s > 0 &&
        first_join_time_ >= 0 &&
        now - first_join_time_ > options_.join_timeout_s) {
      std::vector<int> missing;
      for (const WorkerInfo& w : workers_) {
        if (!w.joined) missing.push_back(w.rank);
      }
      if (!missing.empty()) {
        FailLocked(absl::UnavailableError(absl::StrFormat(
                       "worker%s %s did not join within %g s of the first (not "
                       "started, hung, or unable to reach the coordinator)",
                       missing.size() > 1 ? "s" : "",
                       absl::StrJoin(missing, ", "), options_.join_timeout_s)),
                   &calls);
      }
    }
    status = job_status_;
  }
  Deliver(std::move(calls));
  return status;
}

absl::Status CoordinatorState::job_status() const {
  absl::MutexLock lock(&mu_);
  return job_status_;
}

bool CoordinatorState::all_finished() const {
  absl::MutexLock lock(&mu_);
  for (const WorkerInfo& w : workers_) {
    if (!w.finished) return false;
  }
  return true;
}

double CoordinatorState::first_join_time() const {
  absl::MutexLock lock(&mu_);
  return first_join_time_;
}

int CoordinatorState::joined_count() const {
  absl::MutexLock lock(&mu_);
  int n = 0;
  for (const WorkerInfo& w : workers_) n += w.joined && !w.finished;
  return n;
}

std::vector<WorkerInfo> CoordinatorState::workers() const {
  absl::MutexLock lock(&mu_);
  return workers_;
}

std::vector<RankStats> CoordinatorState::rank_stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

int64_t CoordinatorState::decisions_sync() const {
  absl::MutexLock lock(&mu_);
  return sync_count_;
}

int64_t CoordinatorState::decisions_skip() const {
  absl::MutexLock lock(&mu_);
  return skip_count_;
}

double CoordinatorState::grad_norm_ema() const {
  absl::MutexLock lock(&mu_);
  return grad_norm_ema_;
}

std::string CoordinatorState::config_hash() const {
  absl::MutexLock lock(&mu_);
  return config_hash_;
}

}  // namespace mnemo::coordinator
