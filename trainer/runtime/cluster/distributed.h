// What a trainer worker of a multi-process job needs besides TrainOptions:
// its rank, the node-state store (the memory-store shards), the coordinator
// and the collective group. Torch-free; services/ fills it from flags/env.
#ifndef MNEMO_TRAINER_RUNTIME_CLUSTER_DISTRIBUTED_H_
#define MNEMO_TRAINER_RUNTIME_CLUSTER_DISTRIBUTED_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/coordinator_state.h"
#include "coordinator/policy_spec.h"
#include "coordinator/rendezvous_kv.h"
#include "memstore/node_state_store.h"

namespace mnemo::runtime {

// The trainer's side of the coordinator protocol (implemented over gRPC in
// services/, and directly over a CoordinatorState in tests). Thread-safe.
class ClusterClient {
 public:
  virtual ~ClusterClient() = default;
  // Per-batch report (gradient norm, batch time, counts). Idempotent: a
  // repeated report of the same batch is ignored by the coordinator.
  virtual absl::Status Report(const coordinator::BatchReport& report) = 0;
  // Blocks until the coordinator's decision for `boundary` is known (or the
  // job fails / the deadline passes): true = sync.
  virtual absl::StatusOr<bool> WaitDecision(int64_t boundary) = 0;
  // Named barrier across all workers, bounded by the client's default wait
  // timeout.
  virtual absl::Status Barrier(const std::string& name) = 0;
  // Named barrier across all workers. OK once every worker arrived; the
  // job's failure if it fails first (the coordinator releases every
  // barrier then, e.g. when a worker's heartbeats stop; a client that loses
  // the coordinator itself ends the wait with UNAVAILABLE);
  // DEADLINE_EXCEEDED after `timeout_s` when timeout_s > 0. timeout_s <= 0:
  // no fixed deadline, for waits whose length nobody can bound (workers
  // waiting while rank 0 evaluates): safe because every worker heartbeats
  // from a background thread, so a dead worker or coordinator still ends
  // the wait within the heartbeat timeout.
  virtual absl::Status Barrier(const std::string& name, double timeout_s) = 0;
  // Tells the coordinator this worker failed (best effort).
  virtual void ReportError(const std::string& message) = 0;
};

// The coordinator's sync/skip decisions as they arrive, and the job's end,
// for a worker to wait on (shared by the gRPC and the in-process clients).
// Thread-safe.
class DecisionBoard {
 public:
  void Put(int64_t boundary, bool sync);
  // The job ended with `status` (not OK); the first end wins.
  void End(absl::Status status);
  // The decision for `boundary` (true = sync); the job's failure if it ended
  // first; DEADLINE_EXCEEDED after `timeout_s`. Forgets older decisions.
  absl::StatusOr<bool> Wait(int64_t boundary, double timeout_s);

 private:
  absl::Mutex mu_;
  absl::CondVar cv_;
  std::map<int64_t, bool> decisions_ ABSL_GUARDED_BY(mu_);
  absl::Status ended_ ABSL_GUARDED_BY(mu_);
};

// Default node ownership pi(u): a hash of the node id modulo the world size.
int HashOwner(int64_t node, int world_size);

struct DistributedContext {
  int rank = 0;
  int world_size = 1;
  // The worker's rank on its node (LOCAL_RANK, as torchrun sets it): the
  // GPU `--device cuda` takes; -1: `rank`.
  int local_rank = -1;
  // The training policy (coordinator/policy_spec.h parses its name).
  coordinator::PolicySpec policy;
  // Rendezvous of the collective group: the coordinator's key-value store
  // (not owned); null: a c10d TCPStore at master_addr:master_port (tests).
  coordinator::RendezvousKv* rendezvous = nullptr;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string bind_host = "127.0.0.1";
  std::chrono::milliseconds timeout{60000};
  // The authoritative node states (all shards). Not owned.
  memstore::NodeStateStore* store = nullptr;
  // The coordinator. Not owned.
  ClusterClient* cluster = nullptr;
  // Node ownership; null: HashOwner.
  std::function<int(int64_t node)> owner;
};

}  // namespace mnemo::runtime

#endif  // MNEMO_TRAINER_RUNTIME_CLUSTER_DISTRIBUTED_H_
