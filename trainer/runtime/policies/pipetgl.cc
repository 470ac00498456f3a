// PipeTGL (Zhang et al., VLDB 2025; code magicmoo/PipeTGL), the baseline of
// DepBloom: one global pipeline over every worker. The training stream's
// batches, in time order, are dealt to the workers in turn (worker k runs
// batches k, k + W, ...); each worker receives the memory the batches
// before left from the worker before it, runs its memory update, hands the
// states on to the next worker at once, and then runs its embedding and
// backward pass while the next worker updates (pipeline_handoff.h). No
// gradient all-reduce: the parameters travel down the pipeline as in
// PipeTGL's code. Memory order is one process's.
//
// --critical-path (off by default here: PipeTGL sends every update) applies
// DepBloom's critical-path split to the handoffs.
#include "absl/strings/str_cat.h"
#include "trainer/runtime/policies/pipeline_handoff.h"
#include "trainer/runtime/policies/policy.h"
#include "trainer/runtime/policies/policy_util.h"
#include "util/status_macros.h"

namespace mnemo::runtime {
namespace {

class PipeTglPolicy : public TrainingPolicy {
 public:
  PipeTglPolicy(const coordinator::PolicySpec& spec,
                const PolicyOptions& options, const PolicyEnv& env)
      : spec_(spec),
        env_(env),
        handoff_(env, AllRanks(env.world), env.rank,
                 options.depbloom.critical_path, /*pass_parameters=*/true,
                 /*write_back=*/true) {}

  std::string name() const override { return spec_.name; }

  // One chain: the training stream in batches, as one process runs it.
  plan::PlanOptions PlanOptions() const override {
    return OneChainPlanOptions();
  }
  int PlanRank(int) const override { return 0; }
  plan::WorkerPlan DealPlan(plan::WorkerPlan chain) override {
    chain_ = std::move(chain);
    return plan::DealToGroup(chain_, env_.world, env_.rank,
                             /*one_window=*/true);
  }
  void SetPlan(const plan::WorkerPlan* plan) override {
    plan_ = plan;
    handoff_.SetPlans(&chain_, plan, /*one_window=*/true);
  }

  void BeginEpoch(int) override { handoff_.BeginEpoch(); }
  absl::Status Plan(BatchContext*) override { return absl::OkStatus(); }
  bool PlanIsLocal() const override { return true; }

  absl::Status Fetch(const BatchContext& b,
                     const std::vector<int64_t>& nodes) override {
    return handoff_.Receive(b, nodes);
  }
  absl::Status Handoff(const BatchContext& b,
                       const std::vector<int32_t>& advanced) override {
    return handoff_.Send(b, advanced);
  }
  bool CombinesGradients() const override { return false; }
  absl::Status ReceiveParameters(const BatchContext& b) override {
    return handoff_.ReceiveParameters(b);
  }
  absl::Status PassParameters(const BatchContext& b) override {
    return handoff_.PassParameters(b);
  }

  // One report to the coordinator every kReportEvery batches and at the
  // epoch's end (for its metrics: the pipeline asks for no decisions).
  absl::Status Report(const BatchContext& b, const BatchOutcome& o) override {
    return window_.AddAndSendEvery(env_, b, o, kReportEvery);
  }

  absl::Status EndEpoch(const memory::StateVersions& versions) override {
    return handoff_.EndEpoch(versions);
  }

 private:
  static constexpr int64_t kReportEvery = 64;
  static std::vector<int> AllRanks(int world) {
    std::vector<int> ranks(world);
    for (int r = 0; r < world; ++r) ranks[r] = r;
    return ranks;
  }

  const coordinator::PolicySpec spec_;
  const PolicyEnv env_;
  plan::WorkerPlan chain_;
  PipelineHandoff handoff_;
  WindowReport window_;
};

}  // namespace

std::unique_ptr<TrainingPolicy> MakePipeTglPolicy(
    const coordinator::PolicySpec& spec, const PolicyOptions& options,
    const PolicyEnv& env) {
  return std::make_unique<PipeTglPolicy>(spec, options, env);
}

}  // namespace mnemo::runtime
