// Pieces the window-based policies (deptgl, depbloom) share.
#ifndef MNEMO_TRAINER_RUNTIME_POLICIES_POLICY_UTIL_H_
#define MNEMO_TRAINER_RUNTIME_POLICIES_POLICY_UTIL_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "trainer/runtime/policies/policy.h"
#include "util/proc.h"

namespace mnemo::runtime {

// The coordinator's calls a policy makes, each one's wait counted: the
// decision for `boundary` and a named barrier as waits for the slowest
// worker, a report as state sync.
inline absl::StatusOr<bool> WaitDecision(const PolicyEnv& env,
                                         int64_t boundary) {
  ScopedTimer wait(&env.comm->collectives.barrier_seconds);
  return env.dist->cluster->WaitDecision(boundary);
}
inline absl::Status Barrier(const PolicyEnv& env, const std::string& name) {
  ScopedTimer wait(&env.comm->collectives.barrier_seconds);
  return env.dist->cluster->Barrier(name);
}
inline absl::Status SendReport(const PolicyEnv& env,
                               const coordinator::BatchReport& report) {
  ScopedTimer wait(&env.comm->store.seconds);
  return env.dist->cluster->Report(report);
}

// The nodes whose states this worker advanced since the last Take().
class AdvancedNodes {
 public:
  explicit AdvancedNodes(int64_t num_nodes) : mark_(num_nodes, 0) {}
  void Add(const std::vector<int32_t>& nodes) {
    for (int32_t u : nodes) {
      if (!mark_[u]) {
        mark_[u] = 1;
        nodes_.push_back(u);
      }
    }
  }
  // Empties the set: the nodes `keep` accepts are returned, the others go
  // to `rest` (when given; else they are dropped).
  std::vector<int64_t> Take(const std::function<bool(int32_t)>& keep,
                            std::vector<int64_t>* rest = nullptr) {
    std::vector<int64_t> taken;
    for (int32_t u : nodes_) {
      mark_[u] = 0;
      if (keep(u)) {
        taken.push_back(u);
      } else if (rest != nullptr) {
        rest->push_back(u);
      }
    }
    nodes_.clear();
    return taken;
  }

 private:
  std::vector<uint8_t> mark_;
  std::vector<int32_t> nodes_;
};

// The plan of the whole training stream as one process runs it (one
// worker's batches, every event a target): the single process's, and the
// chain a pipeline deals or epoch parallelism staggers.
inline plan::PlanOptions OneChainPlanOptions() {
  plan::PlanOptions p;
  p.kind = plan::PlanKind::kOwnTargets;
  p.world_size = 1;
  p.sync_every = 1;
  return p;
}

// Accumulates a window's batches and reports them to the coordinator in one
// BatchReport at the window's end (no per-batch round trip).
class WindowReport {
 public:
  void Add(const BatchOutcome& o) {
    ++batches_;
    events_ += o.targets + o.auxiliaries;
    targets_ += o.targets;
    compute_ += o.compute_seconds;
    seconds_ += o.batch_seconds;
  }
  void AddHeavy(int64_t pruned) {
    ++heavy_;
    pruned_ += pruned;
  }
  // Sends the window that ends with batch `b` and starts a new one.
  absl::Status Send(const PolicyEnv& env, const BatchContext& b,
                    const BatchOutcome& last, double grad_norm_ema) {
    coordinator::BatchReport report;
    report.rank = env.rank;
    report.batch = b.global_batch;
    report.grad_norm = last.grad_norm;
    report.grad_norm_ema = grad_norm_ema;
    report.batch_seconds = batches_ ? seconds_ / batches_ : 0;
    report.compute_seconds = batches_ ? compute_ / batches_ : 0;
    report.events = events_;
    report.targets = targets_;
    report.auxiliaries = events_ - targets_;
    report.epoch_batch = b.epoch_batch;
    report.last_of_epoch = b.last_of_epoch();
    report.batches = batches_;
    report.heavy_load_batches = heavy_;
    report.pruned = pruned_;
    *this = WindowReport();
    return SendReport(env, report);
  }
  // Adds batch `b` and sends a report every `every` batches and at the
  // epoch's end (a policy that asks for no decisions: the coordinator's
  // metrics only).
  absl::Status AddAndSendEvery(const PolicyEnv& env, const BatchContext& b,
                               const BatchOutcome& o, int64_t every) {
    Add(o);
    if (!b.last_of_epoch() && (b.epoch_batch + 1) % every != 0) {
      return absl::OkStatus();
    }
    return Send(env, b, o, /*grad_norm_ema=*/0);
  }

 private:
  int64_t batches_ = 0, events_ = 0, targets_ = 0, heavy_ = 0, pruned_ = 0;
  double compute_ = 0, seconds_ = 0;
};

}  // namespace mnemo::runtime

#endif  // MNEMO_TRAINER_RUNTIME_POLICIES_POLICY_UTIL_H_
