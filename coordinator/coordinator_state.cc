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
  std::vector<std::function<void()>> calls;
  {
    absl::MutexLock lock(&mu_);
    FailLocked(absl::AbortedError(
                   absl::StrFormat("worker %d failed: %s", rank, message)),
               &calls);
  }
  for (auto& f : calls) f();
}

void CoordinatorState::WorkerLost(int rank, const std::string& reason) {
  std::vector<std::function<void()>> calls;
  {
    absl::MutexLock lock(&mu_);
    if (rank < 0 || rank >= options_.world_size) return;
    const WorkerInfo& w = workers_[rank];
    if (!w.joined || w.finished) return;
    FailLocked(absl::UnavailableError(absl::StrFormat(
                   "worker %d (%s) is gone: %s", rank, w.address, reason)),
               &calls);
  }
  for (auto& f : calls) f();
}

void CoordinatorState::FailLocked(absl::Status status,
                                  std::vector<std::function<void()>>* calls) {
  if (!job_status_.ok()) return;  // the first failure is the one reported
  job_status_ = std::move(status);
  // Release every waiter with the failure (called after the lock is
  // released by the caller).
  const absl::Status s = job_status_;
  for (auto& [name, b] : barriers_) {
    for (auto& w : b.waiters) {
      if (w) calls->push_back([w, s] { w(s); });
    }
    b.waiters.clear();
    b.arrived.assign(options_.world_size, false);
  }
  for (auto& [id, sub] : subscribers_) {
    if (sub.on_end) calls->push_back([cb = sub.on_end, s] { cb(s); });
  }
  subscribers_.clear();
}

absl::Status CoordinatorState::Report(const BatchReport& report) {
  std::vector<std::function<void()>> deliveries;
  {
    absl::MutexLock lock(&mu_);
    if (!job_status_.ok()) return job_status_;
    if (report.rank < 0 || report.rank >= options_.world_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("report from rank ", report.rank, " out of range"));
    }
    workers_[report.rank].last_seen = clock_();
    RankStats& s = stats_[report.rank];
    s.last_batch_seconds = report.batch_seconds;
    s.batch_seconds_ema = s.batches == 0
                              ? report.batch_seconds
                              : (1 - options_.ema_alpha) * s.batch_seconds_ema +
                                    options_.ema_alpha * report.batch_seconds;
    s.grad_norm = report.grad_norm;
    ++s.batches;
    BatchAgg& agg = pending_[report.batch];
    ++agg.reported;
    agg.grad_norm_sum += report.grad_norm;
    if (agg.reported == options_.world_size) {
      const double g = agg.grad_norm_sum / options_.world_size;
      grad_norm_ema_ = ema_initialized_
                           ? (1 - options_.ema_alpha) * grad_norm_ema_ +
                                 options_.ema_alpha * g
                           : g;
      ema_initialized_ = true;
      pending_.erase(report.batch);
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
      for (auto& [id, sub] : subscribers_) {
        auto cb = sub.on_decision;
        deliveries.push_back([cb, d] { cb(d); });
      }
    }
  }
  for (auto& f : deliveries) f();
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
  std::vector<Decision> past;
  absl::Status status;
  int id;
  {
    absl::MutexLock lock(&mu_);
    id = next_subscriber_++;
    past = decisions_;
    status = job_status_;
    if (status.ok()) subscribers_[id] = {on_decision, on_end};
  }
  for (const Decision& d : past) on_decision(d);
  if (!status.ok()) on_end(status);
  return id;
}

void CoordinatorState::Unsubscribe(int id) {
  absl::MutexLock lock(&mu_);
  subscribers_.erase(id);
}

absl::Status CoordinatorState::CheckLiveness() {
  std::vector<std::function<void()>> calls;
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
  for (auto& f : calls) f();
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

}  // namespace mnemo::coordinator

namespace mnemo::coordinator {
std::string CoordinatorState::config_hash() const {
  absl::MutexLock lock(&mu_);
  return config_hash_;
}
}  // namespace mnemo::coordinator
