// What a trainer worker of a multi-process job needs besides TrainOptions:
// its rank, the node-state store (the memory-store shards), the coordinator
// and the collective group. Torch-free; services/ fills it from flags/env.
#ifndef MNEMO_TRAINER_RUNTIME_DISTRIBUTED_H_
#define MNEMO_TRAINER_RUNTIME_DISTRIBUTED_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "coordinator/coordinator_state.h"
#include "memstore/node_state_store.h"

namespace mnemo::runtime {

// The trainer's side of the coordinator protocol (implemented over gRPC in
// services/, and directly over a CoordinatorState in tests).
class ClusterClient {
 public:
  virtual ~ClusterClient() = default;
  // Per-batch report (gradient norm, batch time, counts).
  virtual absl::Status Report(const coordinator::BatchReport& report) = 0;
  // Blocks until the coordinator's decision for `boundary` is known (or the
  // job fails / the deadline passes): true = sync.
  virtual absl::StatusOr<bool> WaitDecision(int64_t boundary) = 0;
  // Named barrier across all workers.
  virtual absl::Status Barrier(const std::string& name) = 0;
  // Tells the coordinator this worker failed (best effort).
  virtual void ReportError(const std::string& message) = 0;
};

// Training policies of the multi-worker runtime (DESIGN.md "Training
// policies").
enum class Policy {
  kVanilla,  // pull needed states before, push updated states after every batch
  kFullCache,  // replay every event locally, no state refresh during the epoch
};
absl::StatusOr<Policy> ParsePolicy(std::string_view name);
std::string_view PolicyName(Policy policy);

// Default node ownership pi(u): a hash of the node id modulo the world size.
int HashOwner(int64_t node, int world_size);

struct DistributedContext {
  int rank = 0;
  int world_size = 1;
  Policy policy = Policy::kVanilla;
  // Rendezvous of the collective group: the coordinator's c10d TCPStore.
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

#endif  // MNEMO_TRAINER_RUNTIME_DISTRIBUTED_H_
