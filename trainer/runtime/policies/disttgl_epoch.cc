// DistTGL's epoch parallelism (Zhou et al., SC 2023, Sec. 3; code
// amazon-science/disttgl, train.py with --group), as mnemo builds it: every
// worker trains the whole training stream in time order, worker k k steps
// behind worker 0 (plan::StaggerPlan: at step t it trains the batch worker 0
// trained at step t - k), each with negatives of its own; the gradients of
// the W batches of a step are all-reduced into one step. So each batch is
// trained W times an epoch, with W negative sets and parameters up to W - 1
// steps apart, at one worker's throughput in events: it buys gradient
// signal per step, not speed per event.
//
// Memory: each worker keeps its own node memory and advances it with every
// batch it trains, in time order, so its memory order is one process's (its
// reads are its own); nothing is pulled or pushed during the epoch (DistTGL
// shares one memory among the group's trainers through a mailbox process
// instead; with one memory per worker nothing goes stale and no transfer is
// needed). At the epoch's end worker 0, which has trained every batch,
// writes its memory to the store for evaluation.
#include "trainer/runtime/policies/policy.h"
#include "trainer/runtime/policies/policy_util.h"
#include "util/status_macros.h"

namespace mnemo::runtime {
namespace {

class DistTglEpochPolicy : public TrainingPolicy {
 public:
  DistTglEpochPolicy(const coordinator::PolicySpec& spec, const PolicyEnv& env)
      : spec_(spec), env_(env), advanced_(env.log->num_nodes) {}

  std::string name() const override { return spec_.name; }

  // One chain, the training stream as one process runs it, staggered.
  plan::PlanOptions PlanOptions() const override {
    return OneChainPlanOptions();
  }
  int PlanRank(int) const override { return 0; }
  plan::WorkerPlan DealPlan(plan::WorkerPlan chain) override {
    return plan::StaggerPlan(chain, env_.world, env_.rank);
  }
  int NegativeStream() const override { return env_.rank; }

  absl::Status Plan(BatchContext*) override { return absl::OkStatus(); }
  bool PlanIsLocal() const override { return true; }
  // Every state a batch reads is this worker's own.
  absl::Status Fetch(const BatchContext&,
                     const std::vector<int64_t>&) override {
    return absl::OkStatus();
  }

  absl::Status Report(const BatchContext& b, const BatchOutcome& o) override {
    advanced_.Add(*o.advanced);
    return window_.AddAndSendEvery(env_, b, o, kReportEvery);
  }

  // Worker 0's memory (it trained every batch) to the store.
  absl::Status EndEpoch(const memory::StateVersions& versions) override {
    std::vector<int64_t> nodes = advanced_.Take([](int32_t) { return true; });
    if (env_.rank != 0) return absl::OkStatus();
    return env_.exchange->Push(nodes, versions);
  }

 private:
  static constexpr int64_t kReportEvery = 64;
  const coordinator::PolicySpec spec_;
  const PolicyEnv env_;
  AdvancedNodes advanced_;
  WindowReport window_;
};

}  // namespace

std::unique_ptr<TrainingPolicy> MakeDistTglEpochPolicy(
    const coordinator::PolicySpec& spec, const PolicyEnv& env) {
  return std::make_unique<DistTglEpochPolicy>(spec, env);
}

}  // namespace mnemo::runtime
