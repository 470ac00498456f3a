#include "coordinator/coordinator_state.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

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
  if (config_hash_.empty()) config_hash_ = config_hash;  // first joiner
  if (config_hash != config_hash_) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "worker %d has run configuration %s but the job has %s: start every "
        "worker with the same flags and data",
        rank, config_hash, config_hash_));
  }
  WorkerInfo& w = workers_[rank];
  if (w.joined && !w.finished) {
    return absl::AlreadyExistsError(absl::StrFormat(
        "rank %d has already joined (from %s)", rank, w.address));
  }
  w.joined = true;
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

void CoordinatorState::MarkDecidedLocked(int64_t batch) {
  if (batch < decided_below_) return;
  decided_above_.insert(batch);
  while (!decided_above_.empty() && *decided_above_.begin() == decided_below_) {
    decided_above_.erase(decided_above_.begin());
    ++decided_below_;
  }
}

bool CoordinatorState::IsDecidedLocked(int64_t batch) const {
  return batch < decided_below_ || decided_above_.count(batch) > 0;
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
    if (report.batch < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("report from rank ", report.rank, " for batch ",
                       report.batch, ": batches count from 0"));
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
    ++agg.reported;
    agg.grad_norm_sum += report.grad_norm;
    RankStats& s = stats_[report.rank];
    s.last_batch_seconds = report.batch_seconds;
    s.batch_seconds_ema = s.batches == 0
                              ? report.batch_seconds
                              : (1 - options_.ema_alpha) * s.batch_seconds_ema +
                                    options_.ema_alpha * report.batch_seconds;
    s.grad_norm = report.grad_norm;
    ++s.batches;
    if (agg.reported == options_.world_size) {
      const double g = agg.grad_norm_sum / options_.world_size;
      grad_norm_ema_ = ema_initialized_
                           ? (1 - options_.ema_alpha) * grad_norm_ema_ +
                                 options_.ema_alpha * g
                           : g;
      ema_initialized_ = true;
      pending_.erase(report.batch);
      MarkDecidedLocked(report.batch);
      PolicyView view;
      view.boundary = report.batch + 1;
      view.world_size = options_.world_size;
      view.grad_norm = g;
      view.grad_norm_ema = grad_norm_ema_;
      view.batches_since_sync = ++batches_since_sync_;
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
