#include "trainer/runtime/cluster/local_cluster.h"

#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"

namespace mnemo::runtime {

LocalClusterClient::LocalClusterClient(coordinator::CoordinatorState* state,
                                       int rank, double timeout_s)
    : state_(state), rank_(rank), timeout_s_(timeout_s) {
  subscription_ = state_->Subscribe(
      [this](const coordinator::Decision& d) {
        decisions_.Put(d.boundary, d.sync);
      },
      [this](absl::Status s) { decisions_.End(s); });
}

LocalClusterClient::~LocalClusterClient() {
  state_->Unsubscribe(subscription_);
}

absl::Status LocalClusterClient::Report(
    const coordinator::BatchReport& report) {
  return state_->Report(report);
}

absl::StatusOr<bool> LocalClusterClient::WaitDecision(int64_t boundary) {
  return decisions_.Wait(boundary, timeout_s_);
}

absl::Status LocalClusterClient::Barrier(const std::string& name) {
  return Barrier(name, timeout_s_);
}

absl::Status LocalClusterClient::Barrier(const std::string& name,
                                         double timeout_s) {
  // Shared with the callback: it may run after a timed-out wait returned.
  struct Wait {
    absl::Mutex mu;
    bool done = false;
    absl::Status status;
  };
  auto w = std::make_shared<Wait>();
  state_->ArriveAtBarrier(name, rank_, [w](absl::Status s) {
    absl::MutexLock lock(&w->mu);
    w->status = s;
    w->done = true;
  });
  absl::MutexLock lock(&w->mu);
  if (timeout_s <= 0) {
    w->mu.Await(absl::Condition(&w->done));
  } else if (!w->mu.AwaitWithTimeout(absl::Condition(&w->done),
                                     absl::Seconds(timeout_s))) {
    return absl::DeadlineExceededError(
        absl::StrCat("rank ", rank_, ": barrier '", name,
                     "' not reached by every worker within ", timeout_s, " s"));
  }
  return w->status;
}

void LocalClusterClient::ReportError(const std::string& message) {
  state_->ReportError(rank_, message);
}

}  // namespace mnemo::runtime
