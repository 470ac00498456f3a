// A ClusterClient over an in-process CoordinatorState: the coordinator
// protocol without gRPC, for tests of the multi-worker runtime (the gRPC
// client in services/ implements the same interface).
#ifndef MNEMO_TRAINER_RUNTIME_CLUSTER_LOCAL_CLUSTER_H_
#define MNEMO_TRAINER_RUNTIME_CLUSTER_LOCAL_CLUSTER_H_

#include <string>

#include "coordinator/coordinator_state.h"
#include "trainer/runtime/cluster/distributed.h"

namespace mnemo::runtime {

class LocalClusterClient : public ClusterClient {
 public:
  // `state` must outlive the client. `timeout_s` bounds WaitDecision and the
  // one-argument Barrier. Subscribes to the state's decisions; the
  // destructor unsubscribes, which waits for a delivery in flight.
  LocalClusterClient(coordinator::CoordinatorState* state, int rank,
                     double timeout_s = 120);
  ~LocalClusterClient() override;

  absl::Status Report(const coordinator::BatchReport& report) override;
  absl::StatusOr<bool> WaitDecision(int64_t boundary) override;
  absl::Status Barrier(const std::string& name) override;
  // timeout_s <= 0: waits until every rank arrives or the state's job fails
  // (an in-process state with a real clock fails it when a rank stops
  // heartbeating; see CoordinatorState::CheckLiveness).
  absl::Status Barrier(const std::string& name, double timeout_s) override;
  void ReportError(const std::string& message) override;

 private:
  coordinator::CoordinatorState* state_;
  const int rank_;
  const double timeout_s_;
  int subscription_ = -1;

  DecisionBoard decisions_;
};

}  // namespace mnemo::runtime

#endif  // MNEMO_TRAINER_RUNTIME_CLUSTER_LOCAL_CLUSTER_H_
