// The single-process policy and the two baselines of the papers: vanilla
// (Vanilla DDP: pull what a batch reads, push what it changed, every batch)
// and full-cache (replay every event locally, no refresh).
#include <vector>

#include "absl/strings/str_cat.h"
#include "trainer/runtime/policies/policy.h"
#include "trainer/runtime/policies/policy_util.h"
#include "util/proc.h"
#include "util/status_macros.h"

namespace mnemo::runtime {
namespace {

class SingleProcessPolicy : public TrainingPolicy {
 public:
  std::string name() const override { return "single"; }
  plan::PlanOptions PlanOptions() const override {
    return OneChainPlanOptions();
  }
  absl::Status Plan(BatchContext*) override { return absl::OkStatus(); }
  bool PlanIsLocal() const override { return true; }
  absl::Status Fetch(const BatchContext&,
                     const std::vector<int64_t>&) override {
    return absl::OkStatus();
  }
  absl::Status Report(const BatchContext&, const BatchOutcome&) override {
    return absl::OkStatus();
  }
  absl::Status EndEpoch(const memory::StateVersions&) override {
    return absl::OkStatus();
  }
};

// Shared by the per-batch baselines: the coordinator's decision for every
// batch (taken once every worker reported the previous one, so it also
// orders this batch's pulls after the previous batch's pushes) and a report
// after every batch.
class PerBatchPolicy : public TrainingPolicy {
 public:
  explicit PerBatchPolicy(const PolicyEnv& env) : env_(env) {}

 protected:
  absl::StatusOr<bool> WaitDecision(const BatchContext& b) {
    return runtime::WaitDecision(env_, b.global_batch);
  }
  absl::Status SendReport(const BatchContext& b, const BatchOutcome& o) {
    coordinator::BatchReport report;
    report.rank = env_.rank;
    report.batch = b.global_batch;
    report.grad_norm = o.grad_norm;
    report.batch_seconds = o.batch_seconds;
    report.events = o.targets + o.auxiliaries;
    report.targets = o.targets;
    report.auxiliaries = o.auxiliaries;
    report.epoch_batch = b.epoch_batch;
    report.last_of_epoch = b.last_of_epoch();
    report.compute_seconds = o.compute_seconds;
    return runtime::SendReport(env_, report);
  }
  plan::PlanOptions PlanFor(plan::PlanKind kind) const {
    plan::PlanOptions p;
    p.kind = kind;
    p.world_size = env_.world;
    p.batch_size = env_.options->optim.batch_size;
    p.sync_every = 1;
    return p;
  }

  PolicyEnv env_;
};

class VanillaPolicy : public PerBatchPolicy {
 public:
  using PerBatchPolicy::PerBatchPolicy;
  std::string name() const override { return "vanilla"; }
  bool PullsEveryRead() const override { return true; }
  plan::PlanOptions PlanOptions() const override {
    return PlanFor(plan::PlanKind::kOwnTargets);
  }
  absl::Status Plan(BatchContext*) override { return absl::OkStatus(); }
  bool PlanIsLocal() const override { return true; }
  // Pulls every state the batch reads (owned ones too: another worker may
  // have advanced an owned node as a destination).
  absl::Status Fetch(const BatchContext& b,
                     const std::vector<int64_t>& nodes) override {
    ASSIGN_OR_RETURN(bool sync, WaitDecision(b));
    // A bounded working set keeps only what the pulls bring (it spills
    // nothing), so it pulls whatever the decision.
    if (!sync && !env_.exchange->bounded()) return absl::OkStatus();
    RETURN_IF_ERROR(env_.exchange->Pull(nodes, b.versions));
    ++env_.comm->policy.refreshes;
    return absl::OkStatus();
  }
  // The batch's advanced states go to the store while the step runs (and,
  // in a worker that prepares ahead, the next batch's sampling): they are
  // packed here (from a GPU, copied back after the memory update and the
  // all-reduce, without waiting for them) and sent on a thread of their
  // own.
  absl::Status Push(const BatchContext& b,
                    const std::vector<int32_t>& advanced) override {
    RETURN_IF_ERROR(JoinPush());
    if (advanced.empty()) return absl::OkStatus();
    absl::Status status;
    memory::PackedStates packed;
    {
      ScopedTimer pack(&env_.comm->store.seconds);
      packed = env_.exchange->Pack(
          std::vector<int64_t>(advanced.begin(), advanced.end()), b.versions,
          &status, /*rows_later=*/true);
    }
    RETURN_IF_ERROR(status);
    push_ = env_.exchange->StartPush(std::move(packed));
    return absl::OkStatus();
  }
  // The report says the batch's states are in the store: the coordinator's
  // next decision, which every worker's next pull waits for, follows every
  // worker's push.
  absl::Status Report(const BatchContext& b, const BatchOutcome& o) override {
    RETURN_IF_ERROR(JoinPush());
    return SendReport(b, o);
  }
  absl::Status EndEpoch(const memory::StateVersions&) override {
    return JoinPush();
  }

 private:
  // Waits for the push in flight, if any; the training thread's wait is
  // state-sync time (the push's own time, spent beside the step, is not).
  absl::Status JoinPush() {
    if (!push_.pending()) return absl::OkStatus();
    absl::Status status;
    {
      ScopedTimer wait(&env_.comm->store.seconds);
      status = push_.Wait();
    }
    env_.comm->store.AddPushCounts(push_.traffic());
    return status;
  }

  memory::PushWork push_;
};

class FullCachePolicy : public PerBatchPolicy {
 public:
  using PerBatchPolicy::PerBatchPolicy;
  std::string name() const override { return "full-cache"; }
  plan::PlanOptions PlanOptions() const override {
    return PlanFor(plan::PlanKind::kFullReplay);
  }
  absl::Status Plan(BatchContext*) override { return absl::OkStatus(); }
  bool PlanIsLocal() const override { return true; }
  // Replayed memory needs no refresh; the decision still paces the batches.
  absl::Status Fetch(const BatchContext& b,
                     const std::vector<int64_t>&) override {
    return WaitDecision(b).status();
  }
  absl::Status Report(const BatchContext& b, const BatchOutcome& o) override {
    return SendReport(b, o);
  }
  // Replayed memory is complete on every worker; each writes back the
  // nodes it owns.
  absl::Status EndEpoch(const memory::StateVersions& versions) override {
    std::vector<int64_t> owned;
    for (int64_t u = 0; u < env_.log->num_nodes; ++u) {
      if (env_.owner(u) == env_.rank && env_.exchange->HasMail(u)) {
        owned.push_back(u);
      }
    }
    return env_.exchange->Push(owned, versions);
  }
};

}  // namespace

std::unique_ptr<TrainingPolicy> MakeSingleProcessPolicy() {
  return std::make_unique<SingleProcessPolicy>();
}

std::unique_ptr<TrainingPolicy> MakeDepTglPolicy(
    const coordinator::PolicySpec& spec, const PolicyOptions& options,
    const PolicyEnv& env);  // deptgl.cc
std::unique_ptr<TrainingPolicy> MakeDepBloomPolicy(
    const coordinator::PolicySpec& spec, const PolicyOptions& options,
    const PolicyEnv& env);  // depbloom.cc
std::unique_ptr<TrainingPolicy> MakePipeTglPolicy(
    const coordinator::PolicySpec& spec, const PolicyOptions& options,
    const PolicyEnv& env);  // pipetgl.cc
std::unique_ptr<TrainingPolicy> MakeDistTglEpochPolicy(
    const coordinator::PolicySpec& spec,
    const PolicyEnv& env);  // disttgl_epoch.cc

absl::StatusOr<std::unique_ptr<TrainingPolicy>> MakeTrainingPolicy(
    const coordinator::PolicySpec& spec, const PolicyOptions& options,
    const PolicyEnv& env) {
  switch (spec.policy) {
    case coordinator::PolicyKind::kVanilla:
      return std::unique_ptr<TrainingPolicy>(new VanillaPolicy(env));
    case coordinator::PolicyKind::kFullCache:
      return std::unique_ptr<TrainingPolicy>(new FullCachePolicy(env));
    case coordinator::PolicyKind::kDepTgl:
      return MakeDepTglPolicy(spec, options, env);
    case coordinator::PolicyKind::kDepBloom:
      return MakeDepBloomPolicy(spec, options, env);
    case coordinator::PolicyKind::kPipeTgl:
      return MakePipeTglPolicy(spec, options, env);
    case coordinator::PolicyKind::kDistTglEpoch:
      return MakeDistTglEpochPolicy(spec, env);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("policy ", spec.name, " is not implemented yet"));
}

}  // namespace mnemo::runtime
