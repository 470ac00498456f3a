// The engine's evaluation: validation after each epoch (the leader
// evaluates, the others wait for its figures) and the best epoch's snapshot.
#include <limits>

#include "trainer/runtime/engine.h"

namespace mnemo::runtime {

EvalSetup Engine::MakeEvalSetup() {
  EvalSetup setup;
  setup.log = &task_->log;
  setup.graph = task_->full_graph.get();
  setup.model = model_;
  setup.builder = builder_.get();
  setup.time_gaps = TimeGaps();
  setup.neighbors = o_.neighbors;
  setup.strategy = SamplingStrategy();
  setup.batch_size = eval_batch_size_;
  setup.bf16 = bf16_;
  setup.lr = o_.lr;
  return setup;
}

absl::StatusOr<EvalResult> Engine::EvalPass(const std::vector<int64_t>& events,
                                            const EvalNegatives& negatives,
                                            const std::string& label) {
  ScopedTimer timer(&timers_.evaluation);
  return Evaluate(MakeEvalSetup(), events, negatives, label, &state_,
                  &progress_);
}

absl::StatusOr<RankResult> Engine::RankPass(
    const std::vector<int64_t>& events, const data::RankingNegatives& negatives,
    const std::string& label) {
  ScopedTimer timer(&timers_.evaluation);
  return EvaluateRanking(MakeEvalSetup(), events, negatives, label, &state_,
                         &progress_);
}

void Engine::SnapshotBest() {
  torch::NoGradGuard guard;
  record_.best_params.clear();
  for (const auto& p : model_->parameters())
    record_.best_params.push_back(p.clone());
  // A worker with a bounded working set that does not evaluate keeps no
  // best memory (its checkpoint holds 0 rows).
  if (cache_ && !leader()) {
    record_.best_state.Reset(model_->layout(), 0, device_);
  } else {
    record_.best_state = state_.Clone();
  }
}

void Engine::RestoreBest() {
  torch::NoGradGuard guard;
  auto params = model_->parameters();
  for (size_t i = 0; i < params.size(); ++i)
    params[i].copy_(record_.best_params[i]);
  state_ = record_.best_state.Clone();
}

// Rank 0 pulls every state for evaluation (counted apart from training's
// traffic: every policy needs it, training does not).
absl::Status Engine::PullAllForEvaluation(int epoch) {
  if (cache_) {
    // Evaluation still reads the complete memory in this process.
    sync_->SetWorkingSet(nullptr, nullptr, false);
    state_.Reset(model_->layout(), task_->log.num_nodes, device_);
  }
  const CommStats before = comm_;
  std::vector<int64_t> all(task_->log.num_nodes);
  std::iota(all.begin(), all.end(), 0);
  RETURN_IF_ERROR(sync_->Pull(all, Versions(epoch)));
  comm_.eval_states_pulled += comm_.states_pulled - before.states_pulled;
  comm_.eval_bytes_pulled += comm_.bytes_pulled - before.bytes_pulled;
  comm_.eval_pull_seconds += comm_.seconds - before.seconds;
  comm_.states_pulled = before.states_pulled;
  comm_.bytes_pulled = before.bytes_pulled;
  comm_.seconds = before.seconds;
  comm_.rpcs = before.rpcs;
  return absl::OkStatus();
}

absl::Status Engine::EvaluateEpoch(EpochResult* r) {
  if (leader() && distributed())
    RETURN_IF_ERROR(PullAllForEvaluation(r->epoch));
  const double nan = std::numeric_limits<double>::quiet_NaN();
  r->val_mrr = r->val_hits_at_10 = nan;
  if (leader() && task_->tgb) {
    // TGB: validation is the ranking pass (no new-node hold-out).
    ASSIGN_OR_RETURN(
        RankResult val,
        RankPass(task_->split.val, task_->val_ranking, "validate (MRR)"));
    r->val_mrr = val.mrr;
    r->val_hits_at_10 = val.hits_at_10;
    r->val_ap = r->val_auc = r->val_ap_batch_mean = nan;
    r->val_new_node_ap = r->val_new_node_auc = nan;
    r->val_new_node_ap_batch_mean = r->val_loss = nan;
  } else if (leader()) {
    // Evaluation on the complete (synchronized) memory; in a distributed
    // run rank 0 evaluates while the others wait for its figures.
    memory::NodeMemory train_end = state_.Clone();
    ASSIGN_OR_RETURN(EvalResult val,
                     EvalPass(task_->split.val, task_->val_negs, "validate"));
    memory::NodeMemory val_end = state_.Clone();
    state_ = std::move(train_end);
    ASSIGN_OR_RETURN(EvalResult nn_val,
                     EvalPass(task_->split.new_node_val,
                              task_->new_node_val_negs, "validate new nodes"));
    state_ = std::move(val_end);
    r->val_ap = val.ap;
    r->val_auc = val.auc;
    r->val_ap_batch_mean = val.ap_batch_mean;
    r->val_new_node_ap = nn_val.ap;
    r->val_new_node_auc = nn_val.auc;
    r->val_new_node_ap_batch_mean = nn_val.ap_batch_mean;
    r->val_loss = val.loss;
  }
  if (!distributed()) return absl::OkStatus();
  // The others wait as long as the leader evaluates: no fixed deadline (a
  // dead leader fails the job through the coordinator's liveness check,
  // which releases the barrier).
  RETURN_IF_ERROR(
      dist_->cluster->Barrier(absl::StrCat("evaluated-", r->epoch), 0));
  std::vector<double> v = {
      r->val_ap,          r->val_auc,          r->val_ap_batch_mean,
      r->val_new_node_ap, r->val_new_node_auc, r->val_new_node_ap_batch_mean,
      r->val_loss,        r->val_mrr,          r->val_hits_at_10};
  RETURN_IF_ERROR(ShareFromLeader(&v));
  r->val_ap = v[0];
  r->val_auc = v[1];
  r->val_ap_batch_mean = v[2];
  r->val_new_node_ap = v[3];
  r->val_new_node_auc = v[4];
  r->val_new_node_ap_batch_mean = v[5];
  r->val_loss = v[6];
  r->val_mrr = v[7];
  r->val_hits_at_10 = v[8];
  return absl::OkStatus();
}

}  // namespace mnemo::runtime
