// DepBloom (arXiv 2610.15730, Sections 4.2-4.4): temporally bounded spatial
// partitioning (trainer/plan/: windows of --window-events, METIS sub-chains;
// worker p trains sub-chain p of each window with no synchronization inside
// the window), intra-batch memory refinement (IMR(k), in the model and the
// batch builder), and critical-path optimization at window boundaries:
//
//   urgent states (read by some worker's first batch of the next window,
//   known from the plan) are pushed first, then a barrier, then the first
//   batch's reads are pulled; the other states this worker advanced are
//   pushed by a background thread that overlaps the next batches and ends
//   at a barrier of its own; a later batch pulls the states it first reads
//   after that barrier (on demand). The batch is prepared (accessed nodes,
//   index remaps, neighbour tensors) before it waits for its states.
//
// Without critical-path optimization (--critical-path off, the ablation)
// every advanced state is pushed at the boundary, then a barrier, then the
// whole window's reads are pulled on the critical path.
//
// Pipelines (--pipeline-depth G > 1, Sec. 4.2 Fig. 9): each window is cut
// into workers / G sub-chains, sub-chain g run by workers g*G .. g*G + G - 1
// as a pipeline of its own (pipeline_handoff.h): the sub-chain's batches of
// the window are dealt to the group in turn, and each worker hands the
// states its batch wrote to the next right after its memory update (with
// the critical path, the next batch's urgent states first). Windows
// synchronize as above. The gradients are all-reduced over every worker
// each step, as with G = 1: a step is one round of every group.
#include <algorithm>
#include <optional>

#include "absl/strings/str_cat.h"
#include "trainer/runtime/policies/pipeline_handoff.h"
#include "trainer/runtime/policies/policy.h"
#include "trainer/runtime/policies/policy_util.h"
#include "util/proc.h"
#include "util/status_macros.h"

namespace mnemo::runtime {
namespace {

class DepBloomPolicy : public TrainingPolicy {
 public:
  DepBloomPolicy(const coordinator::PolicySpec& spec,
                 const PolicyOptions& options, const PolicyEnv& env)
      : spec_(spec),
        options_(options),
        env_(env),
        advanced_(env.log->num_nodes),
        fresh_(env.log->num_nodes, 0),
        depth_(std::max(1, options.depbloom.pipeline_depth)) {
    if (depth_ > 1) {
      std::vector<int> ranks;
      const int group = env.rank / depth_;
      for (int k = 0; k < depth_; ++k) ranks.push_back(group * depth_ + k);
      handoff_.emplace(env, std::move(ranks), env.rank % depth_,
                       options.depbloom.critical_path,
                       /*pass_parameters=*/false, /*write_back=*/false);
    }
  }

  std::string name() const override { return spec_.name; }

  plan::PlanOptions PlanOptions() const override {
    plan::PlanOptions p;
    p.kind = plan::PlanKind::kSubChains;
    p.world_size = env_.world / depth_;  // sub-chains
    p.batch_size = env_.options->optim.batch_size;
    p.window_events = options_.depbloom.window_events;
    p.partitioner = options_.depbloom.partitioner;
    p.chain_assignment = options_.depbloom.chain_assignment;
    p.piece_events = options_.depbloom.piece_events;
    p.imbalance = options_.depbloom.imbalance;
    p.urgent_batches = options_.depbloom.urgent_batches;
    return p;
  }

  // A group of G plans its sub-chain and deals it.
  int PlanRank(int rank) const override { return rank / depth_; }
  plan::WorkerPlan DealPlan(plan::WorkerPlan chain) override {
    if (depth_ == 1) return chain;
    chain_ = std::move(chain);
    return plan::DealToGroup(chain_, depth_, env_.rank % depth_,
                             /*one_window=*/false);
  }
  // The plan's urgent sets are every worker's (trainer/plan/), made from
  // the partition rank 0 cut and broadcast: the same on every rank.
  void SetPlan(const plan::WorkerPlan* plan) override {
    plan_ = plan;
    if (handoff_) handoff_->SetPlans(&chain_, plan, /*one_window=*/false);
  }

  void BeginEpoch(int) override {
    std::fill(fresh_.begin(), fresh_.end(), 0);
    if (handoff_) handoff_->BeginEpoch();
  }

  absl::Status Handoff(const BatchContext& b,
                       const std::vector<int32_t>& advanced) override {
    return handoff_ ? handoff_->Send(b, advanced) : absl::OkStatus();
  }

  absl::Status Plan(BatchContext*) override { return absl::OkStatus(); }
  bool PlanIsLocal() const override { return true; }

  // After the batch is prepared: the window boundary (push, barrier, first
  // pulls), then the states this batch reads for the first time in its
  // window.
  absl::Status Fetch(const BatchContext& b,
                     const std::vector<int64_t>& nodes) override {
    // The last handoff's second message first: a boundary's pulls are
    // newer than its states.
    if (handoff_) RETURN_IF_ERROR(handoff_->Drain(b.versions));
    RETURN_IF_ERROR(FetchFromStore(b, nodes));
    // Then what the group's batches before this one wrote in the window
    // (newer than anything the store holds).
    return handoff_ ? handoff_->Receive(b, nodes) : absl::OkStatus();
  }

  absl::Status FetchFromStore(const BatchContext& b,
                              const std::vector<int64_t>& nodes) {
    const bool boundary = b.view.boundary;
    if (boundary) RETURN_IF_ERROR(Boundary(b));
    // An epoch's first window starts from reset memory: nothing to pull.
    if (plan_->window_of(b.epoch_batch) == 0) return absl::OkStatus();
    std::vector<int64_t> need;
    for (int64_t u : nodes) {
      if (!fresh_[u]) need.push_back(u);
    }
    if (need.empty()) return absl::OkStatus();
    // On the critical path, the first batch of a window pulls only the
    // urgent states (in the store after the boundary barrier) without
    // waiting for the background push; its other reads (temporal
    // neighbours the plan cannot know) use this worker's own copy and are
    // pulled once that push is done, by the next batch that reads them.
    // (Pulling them now would read whatever part of the background push
    // had landed: a race that made the run's accuracy vary.) A window of
    // one batch has no next batch: its boundary pushed everything first.
    const int64_t w = plan_->window_of(b.epoch_batch);
    const bool urgent_only = boundary && Overlapped(w);
    if (!urgent_only) RETURN_IF_ERROR(JoinBackground());
    if (urgent_only) {
      const absl::Span<const int64_t> urgent = plan_->urgent(w - 1);
      std::erase_if(need, [urgent](int64_t u) {
        return !std::binary_search(urgent.begin(), urgent.end(), u);
      });
    }
    for (int64_t u : need) fresh_[u] = 1;
    if (need.empty()) return absl::OkStatus();
    env_.comm->policy.refresh_nodes_total += need.size();
    ++env_.comm->policy.refreshes;
    return env_.exchange->Pull(need, b.versions, /*keep_newer=*/true);
  }

  absl::Status Report(const BatchContext& b, const BatchOutcome& o) override {
    advanced_.Add(*o.advanced);
    window_.Add(o);
    const bool window_end =
        b.last_of_epoch() || plan_->batch(b.epoch_batch + 1).boundary;
    if (!window_end) return absl::OkStatus();
    // One report per window, for the coordinator's metrics (DepBloom
    // needs no decisions: windows are fixed).
    return window_.Send(env_, b, o, /*grad_norm_ema=*/0);
  }

  // Everything this worker advanced goes to the store before evaluation.
  absl::Status EndEpoch(const memory::StateVersions& versions) override {
    if (handoff_) RETURN_IF_ERROR(handoff_->EndEpoch(versions));
    RETURN_IF_ERROR(JoinBackground());
    std::vector<int64_t> nodes = advanced_.Take(All);
    env_.comm->policy.nonurgent_states += nodes.size();
    const int64_t before = env_.comm->store.bytes_pushed;
    RETURN_IF_ERROR(env_.exchange->Push(nodes, versions));
    env_.comm->policy.nonurgent_bytes += env_.comm->store.bytes_pushed - before;
    return absl::OkStatus();
  }

 private:
  absl::Status Boundary(const BatchContext& b) {
    ++env_.comm->policy.boundaries;
    const int64_t w = plan_->window_of(b.epoch_batch);
    RETURN_IF_ERROR(JoinBackground());
    std::fill(fresh_.begin(), fresh_.end(), 0);
    if (b.epoch_batch == 0) return absl::OkStatus();  // memory restarts
    ++env_.comm->policy.boundaries_refreshed;
    const int64_t bytes0 = env_.comm->store.bytes_pushed;
    if (!Overlapped(w)) {
      std::vector<int64_t> nodes = advanced_.Take(All);
      env_.comm->policy.urgent_states += nodes.size();
      RETURN_IF_ERROR(env_.exchange->Push(nodes, b.versions));
      env_.comm->policy.urgent_bytes += env_.comm->store.bytes_pushed - bytes0;
      RETURN_IF_ERROR(Barrier(env_, absl::StrCat("window-", b.global_batch)));
      // The whole window's reads on the critical path.
      std::vector<int64_t> reads(b.view.refresh.begin(), b.view.refresh.end());
      for (int64_t u : reads) fresh_[u] = 1;
      ++env_.comm->policy.refreshes;
      env_.comm->policy.refresh_nodes_total += reads.size();
      // (Neighbours and negatives outside the sub-chain are pulled on
      // demand by Fetch.)
      return env_.exchange->Pull(reads, b.versions, /*keep_newer=*/true);
    }
    // Urgent first: what some worker reads in its first batch of window w
    // (the previous window's urgent set).
    const absl::Span<const int64_t> urgent_set = plan_->urgent(w - 1);
    std::vector<int64_t> rest;
    std::vector<int64_t> urgent = advanced_.Take(
        [urgent_set](int32_t u) {
          return std::binary_search(urgent_set.begin(), urgent_set.end(), u);
        },
        &rest);
    env_.comm->policy.urgent_states += urgent.size();
    RETURN_IF_ERROR(env_.exchange->Push(urgent, b.versions));
    env_.comm->policy.urgent_bytes += env_.comm->store.bytes_pushed - bytes0;
    RETURN_IF_ERROR(Barrier(env_, absl::StrCat("window-", b.global_batch)));
    ++env_.comm->policy.refreshes;
    // The rest in the background, overlapping the next batches; the
    // states are copied here, on the training thread (from a GPU, the copy
    // is queued here and waited for by the background thread).
    env_.comm->policy.nonurgent_states += rest.size();
    absl::Status packed;
    memory::PackedStates rest_packed = env_.exchange->Pack(
        std::move(rest), b.versions, &packed, /*rows_later=*/true);
    RETURN_IF_ERROR(packed);
    const std::string name = absl::StrCat("window-rest-", b.global_batch);
    background_ = env_.exchange->StartPush(
        std::move(rest_packed), [this, name](absl::Status pushed) {
          // Every worker waits here until all have pushed (the first
          // on-demand pull after it reads complete states); a failed push
          // still arrives so that no one waits for this worker.
          absl::Status s = env_.dist->cluster->Barrier(name);
          return pushed.ok() ? s : pushed;
        });
    // This batch's reads are pulled by Fetch right after: every
    // worker's urgent states are in the store.
    return absl::OkStatus();
  }

  // Whether window w's non-urgent states travel in the background,
  // overlapping its batches after the first (every worker plans the same
  // number of batches per window, so all decide alike).
  bool Overlapped(int64_t w) const {
    return options_.depbloom.critical_path && plan_->window_batches(w) > 1;
  }

  // Waits for the background push of the last boundary, if any.
  absl::Status JoinBackground() {
    if (!background_.pending()) return absl::OkStatus();
    absl::Status status;
    {
      ScopedTimer wait(&env_.comm->collectives.barrier_seconds);
      status = background_.Wait();
    }
    const memory::StoreTraffic& pushed = background_.traffic();
    env_.comm->store.AddPushCounts(pushed);
    env_.comm->store.seconds += pushed.seconds;
    env_.comm->policy.nonurgent_bytes += pushed.bytes_pushed;
    return status;
  }

  static bool All(int32_t) { return true; }

  const coordinator::PolicySpec spec_;
  const PolicyOptions options_;
  const PolicyEnv env_;

  AdvancedNodes advanced_;
  std::vector<uint8_t> fresh_;
  const int depth_;         // workers per sub-chain
  plan::WorkerPlan chain_;  // the group's sub-chain (depth_ > 1)
  std::optional<PipelineHandoff> handoff_;
  // The background push of the last boundary (and its barrier).
  memory::PushWork background_;
  WindowReport window_;  // the window being run (reported at its end)
};

}  // namespace

std::unique_ptr<TrainingPolicy> MakeDepBloomPolicy(
    const coordinator::PolicySpec& spec, const PolicyOptions& options,
    const PolicyEnv& env) {
  return std::make_unique<DepBloomPolicy>(spec, options, env);
}

}  // namespace mnemo::runtime
