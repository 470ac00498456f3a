// The coordinator gRPC service (proto/mnemo/v1/coordinator.proto) over a
// coordinator::CoordinatorState, and a server hosting it with gRPC health,
// server reflection and Prometheus metrics (`mnemo_coordinator_`).
//
// Callback API: no reaction blocks. Barrier and WatchDecisions reactors are
// finished from the state machine's callbacks when the barrier releases or a
// decision is taken; a liveness thread declares silent workers dead.
#ifndef MNEMO_SERVICES_COORDINATOR_SERVICE_H_
#define MNEMO_SERVICES_COORDINATOR_SERVICE_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/coordinator_state.h"
#include "coordinator/policy_spec.h"
#include "services/security.h"

namespace mnemo::services {

class MetricsRegistry;

struct CoordinatorServerOptions {
  std::string listen = "127.0.0.1:0";  // ":port" means 127.0.0.1:port
  int world_size = 1;
  std::vector<std::string> memstore_addresses;
  // Training policy: any name coordinator::ParsePolicySpec accepts. It
  // picks the decision policy (coordinator::MakeDecisionPolicy) and goes to
  // the workers in the cluster spec as given.
  std::string policy = "vanilla";
  // Knobs of the decision policy (DepTGL Eq. 7 tau_g).
  coordinator::DecisionParams decision;
  double heartbeat_period_s = 1;
  // A worker silent for this long is declared dead and the job fails; so
  // is a memory-store shard that stops answering health checks (probed
  // every second once it has answered) for this long.
  double heartbeat_timeout_s = 10;
  // CoordinatorOptions::join_timeout_s (0: no limit).
  double join_timeout_s = 0;
  // TLS, mutual TLS and the bearer token of this server (default:
  // plaintext), and how it reaches the memory stores (health probes).
  ServerSecurity security;
  ClientSecurity memstore_security;
  // Where the coordinator's warnings go, one line each (a shard that
  // refuses its health probes for their TLS settings, or never answers
  // them: such a shard is not monitored). Called from the probe thread.
  // Default: stderr, "coordinator: warning: ...".
  std::function<void(const std::string&)> warn;
};

class CoordinatorServer {
 public:
  // Starts serving. Errors: INVALID_ARGUMENT (world size outside [1,
  // coordinator::kMaxWorldSize], unknown policy, tau_g not positive),
  // UNAVAILABLE (cannot listen).
  //
  // Requests are checked before they touch the job: a Join with a field out
  // of range or missing (rank, config_hash), or for a rank already joined,
  // and a ReportError from a rank that has not joined are refused and leave
  // the job running.
  static absl::StatusOr<std::unique_ptr<CoordinatorServer>> Start(
      CoordinatorServerOptions options, MetricsRegistry* metrics = nullptr);
  ~CoordinatorServer();

  int port() const;
  std::string address() const;
  coordinator::CoordinatorState& state();

  // Stops serving (in-flight barriers/streams end with UNAVAILABLE).
  void Shutdown(double grace_seconds = 2);

  class Impl;

 private:
  explicit CoordinatorServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace mnemo::services

#endif  // MNEMO_SERVICES_COORDINATOR_SERVICE_H_
