// DepTGL (arXiv 2608.16305, Sections IV-V): mixed batches planned offline by
// Algorithm 1 (trainer/plan/), boundary refreshes every K batches decided by
// the coordinator from the gradient norm's EMA (Eq. 6-7), load-aware pruning
// of pure auxiliary events (Eq. 8-11), loss over target events only (Eq.
// 12-13, in the engine), Algorithm 2 as the runtime.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "trainer/runtime/policies/policy.h"
#include "trainer/runtime/policies/policy_util.h"
#include "util/proc.h"
#include "util/status_macros.h"

namespace mnemo::runtime {
namespace {

class DepTglPolicy : public TrainingPolicy {
 public:
  DepTglPolicy(const coordinator::PolicySpec& spec,
               const PolicyOptions& options, const PolicyEnv& env)
      : spec_(spec),
        options_(options),
        env_(env),
        advanced_(env.log->num_nodes),
        refresh_mark_(env.log->num_nodes, 0) {}

  std::string name() const override { return spec_.name; }

  plan::PlanOptions PlanOptions() const override {
    plan::PlanOptions p;
    p.kind = plan::PlanKind::kDependencyScan;
    p.world_size = env_.world;
    p.batch_size = env_.options->optim.batch_size;
    p.sync_every = options_.deptgl.sync_every;
    // A model that reads the memory of each target endpoint's temporal
    // neighbours (TGN): with refresh_reads they join the refresh set.
    if ((options_.deptgl.sync_scope == SyncScope::kReads) &&
        env_.model_reads_neighbors &&
        env_.options->model.neighbor_strategy ==
            data::NeighborStrategy::kRecent) {
      p.neighbor_reads = env_.options->model.neighbors;
      p.graph = env_.train_graph;
    }
    return p;
  }

  absl::Status Plan(BatchContext* b) override {
    if (b->view.boundary) RETURN_IF_ERROR(Boundary(*b));
    // DepTGL Eq. 9: heavy-load mode when the last batch's own compute time
    // exceeds tau_c times its EMA (literally: with tau_c = 0.5 almost
    // always; the summary reports the share of batches in this mode).
    const bool heavy = spec_.prune && have_compute_ && compute_ema_ > 0 &&
                       last_compute_ > options_.deptgl.tau_load * compute_ema_;
    if (heavy) {
      // Eq. 10-11: drop the pure auxiliary events (remote sources).
      size_t kept = 0;
      for (size_t i = 0; i < b->events.size(); ++i) {
        if (!b->target[i]) continue;
        b->events[kept] = b->events[i];
        b->target[kept] = 1;
        ++kept;
      }
      const int64_t dropped = b->events.size() - kept;
      b->events.resize(kept);
      b->target.resize(kept);
      env_.comm->policy.pruned += dropped;
      ++env_.comm->policy.heavy_load_batches;
      window_.AddHeavy(dropped);
    }
    return absl::OkStatus();
  }

  absl::Status Fetch(const BatchContext&,
                     const std::vector<int64_t>&) override {
    return absl::OkStatus();  // no per-batch traffic
  }

  absl::Status Report(const BatchContext& b, const BatchOutcome& o) override {
    // Eq. 6: EMA of the (all-reduced, so identical everywhere) gradient
    // norm over every batch.
    grad_ema_ = grad_ema_ == 0
                    ? o.grad_norm
                    : options_.deptgl.ema_alpha * o.grad_norm +
                          (1 - options_.deptgl.ema_alpha) * grad_ema_;
    // Eq. 8: EMA of this worker's own compute time.
    compute_ema_ = compute_ema_ == 0
                       ? o.compute_seconds
                       : options_.deptgl.ema_beta * o.compute_seconds +
                             (1 - options_.deptgl.ema_beta) * compute_ema_;
    last_compute_ = o.compute_seconds;
    have_compute_ = true;
    advanced_.Add(*o.advanced);
    window_.Add(o);
    const bool window_end =
        b.last_of_epoch() || plan_->batch(b.epoch_batch + 1).boundary;
    if (!window_end) return absl::OkStatus();
    // One report per window: it releases the coordinator's decision for
    // the next boundary (no per-batch round trip).
    return window_.Send(env_, b, o, grad_ema_);
  }

  // Final state synchronization before evaluation (Algorithm 2, line 21).
  absl::Status EndEpoch(const memory::StateVersions& versions) override {
    return PushAdvanced(versions);
  }

  std::vector<double> SaveState() const override {
    return {grad_ema_, compute_ema_, last_compute_, have_compute_ ? 1.0 : 0.0};
  }
  absl::Status RestoreState(const std::vector<double>& s) override {
    if (s.size() != 4) {
      return absl::InvalidArgumentError(absl::StrCat(
          "checkpointed DepTGL state has ", s.size(), " values, not 4"));
    }
    grad_ema_ = s[0];
    compute_ema_ = s[1];
    last_compute_ = s[2];
    have_compute_ = s[3] != 0;
    return absl::OkStatus();
  }

 private:
  // A candidate refresh boundary: the coordinator's decision S_r, then
  // push -> barrier -> pull of the window's refresh set.
  absl::Status Boundary(const BatchContext& b) {
    ++env_.comm->policy.boundaries;
    absl::StatusOr<bool> decision = WaitDecision(env_, b.global_batch);
    RETURN_IF_ERROR(decision.status());
    if (!*decision) {
      ++env_.comm->policy.boundaries_skipped;
      return absl::OkStatus();
    }
    ++env_.comm->policy.boundaries_refreshed;
    // Memory restarts every epoch: at r = 0 every state is fresh.
    if (b.epoch_batch == 0) return absl::OkStatus();
    RETURN_IF_ERROR(PushAdvanced(b.versions));
    RETURN_IF_ERROR(Barrier(env_, absl::StrCat("refresh-", b.global_batch)));
    std::vector<int64_t> nodes = RefreshSet(b);
    env_.comm->policy.refresh_nodes_total += nodes.size();
    env_.comm->policy.refresh_nodes_max =
        std::max<int64_t>(env_.comm->policy.refresh_nodes_max, nodes.size());
    RETURN_IF_ERROR(
        env_.exchange->Pull(nodes, b.versions, /*keep_newer=*/true));
    ++env_.comm->policy.refreshes;
    return absl::OkStatus();
  }

  // The window's N_sync (the plan's; with refresh_reads it already holds
  // the remote neighbours the targets read), plus with refresh_reads
  // everything else the window's targets read: their negatives and their
  // own endpoints (Algorithm 1 never replays an event that advances an
  // owned node from a remote source, so the store, where the other worker
  // pushed it, may hold a later state; Pull keeps whichever is later).
  std::vector<int64_t> RefreshSet(const BatchContext& b) {
    std::vector<int64_t> nodes(b.view.refresh.begin(), b.view.refresh.end());
    if (!(options_.deptgl.sync_scope == SyncScope::kReads)) return nodes;
    for (int64_t u : nodes) refresh_mark_[u] = 1;
    auto add = [&](int64_t u) {
      if (!refresh_mark_[u]) {
        refresh_mark_[u] = 1;
        nodes.push_back(u);
      }
    };
    const data::EventLog& log = *env_.log;
    const int64_t end = std::min<int64_t>(
        b.epoch_batch + options_.deptgl.sync_every, b.num_batches);
    for (int64_t r = b.epoch_batch; r < end; ++r) {
      const plan::BatchView v = plan_->batch(r);
      for (size_t i = 0; i < v.events.size(); ++i) {
        if (!v.target[i]) continue;
        const int64_t e = v.events[i];
        add(log.src[e]);
        add(log.dst[e]);
        add((*env_.negatives)[(*env_.train_pos)[e]]);
      }
    }
    for (int64_t u : nodes) refresh_mark_[u] = 0;
    return nodes;
  }

  // Pushes the states this worker advanced since its last push: all of
  // them, or (push_advanced off) only the owned ones. Versions order them
  // by event; the owner's push wins a tie.
  absl::Status PushAdvanced(const memory::StateVersions& versions) {
    return env_.exchange->Push(advanced_.Take([this](int32_t u) {
      return options_.deptgl.push_scope == PushScope::kAdvanced ||
             env_.owner(u) == env_.rank;
    }),
                               versions);
  }

  const coordinator::PolicySpec spec_;
  const PolicyOptions options_;
  const PolicyEnv env_;

  double grad_ema_ = 0;
  double compute_ema_ = 0, last_compute_ = 0;
  bool have_compute_ = false;
  AdvancedNodes advanced_;
  std::vector<uint8_t> refresh_mark_;
  WindowReport window_;  // the window being run (reported at its end)
};

}  // namespace

std::unique_ptr<TrainingPolicy> MakeDepTglPolicy(
    const coordinator::PolicySpec& spec, const PolicyOptions& options,
    const PolicyEnv& env) {
  return std::make_unique<DepTglPolicy>(spec, options, env);
}

}  // namespace mnemo::runtime
