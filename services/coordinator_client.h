// The trainer's gRPC client of the coordinator: runtime::ClusterClient over
// proto/mnemo/v1/coordinator.proto, plus joining and heartbeats.
#ifndef MNEMO_SERVICES_COORDINATOR_CLIENT_H_
#define MNEMO_SERVICES_COORDINATOR_CLIENT_H_

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/rendezvous_kv.h"
#include "services/security.h"
#include "trainer/runtime/cluster/distributed.h"

namespace mnemo::services {

struct ClusterSpecInfo {
  int world_size = 1;
  std::vector<std::string> memstore_addresses;
  std::string policy;
  std::string config_hash;
  double heartbeat_period_s = 1;
};

struct CoordinatorClientOptions {
  std::string address;  // coordinator gRPC address
  int rank = 0;
  std::string my_address;  // informational
  std::string config_hash, config_text;
  // Deadline of ordinary calls; Join retries until `connect_timeout_s`.
  double rpc_timeout_s = 10;
  double connect_timeout_s = 60;
  // Longest wait for a decision, and at a barrier entered without a
  // timeout of its own (the coordinator ends waits early when the job
  // fails; losing the coordinator ends them within about rpc_timeout_s).
  double wait_timeout_s = 1800;
  // TLS, mutual TLS and the bearer token (default: plaintext).
  ClientSecurity security;
};

class CoordinatorClient : public runtime::ClusterClient,
                          public coordinator::RendezvousKv {
 public:
  // Joins (retrying while the coordinator is not up yet), starts the
  // heartbeat and decision-stream threads.
  static absl::StatusOr<std::unique_ptr<CoordinatorClient>> Connect(
      const CoordinatorClientOptions& options, ClusterSpecInfo* spec);
  ~CoordinatorClient() override;

  absl::Status Report(const coordinator::BatchReport& report) override;
  absl::StatusOr<bool> WaitDecision(int64_t boundary) override;
  absl::Status Barrier(const std::string& name) override;
  // timeout_s <= 0: the call has no gRPC deadline; it ends when every
  // worker arrived, when the coordinator fails the job, or with UNAVAILABLE
  // when this client loses the coordinator (a heartbeat unanswered within
  // rpc_timeout_s or the decision stream broken cancels it).
  absl::Status Barrier(const std::string& name, double timeout_s) override;
  void ReportError(const std::string& message) override;
  // The job's rendezvous key-value store (Coordinator.Rendezvous). A wait
  // ends early with the job's failure when the job fails.
  absl::StatusOr<coordinator::KvReply> Call(
      const coordinator::KvRequest& request) override;
  // Clean end of this worker.
  absl::Status Finish();
  // The job's failure as last seen (heartbeat or decision stream), or OK.
  absl::Status job_status();

  class Impl;

 private:
  explicit CoordinatorClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace mnemo::services

#endif  // MNEMO_SERVICES_COORDINATOR_CLIENT_H_
