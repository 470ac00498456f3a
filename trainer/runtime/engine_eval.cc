// The engine's evaluation: validation after each epoch (the leader
// evaluates, the others wait for its figures) and the best epoch's snapshot.
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <tuple>

#include "trainer/runtime/engine.h"

namespace mnemo::runtime {

namespace {

void SetValidation(const EvalResult& val, const EvalResult& nn_val,
                   EpochResult* r) {
  r->val_ap = val.ap;
  r->val_auc = val.auc;
  r->val_ap_batch_mean = val.ap_batch_mean;
  r->val_new_node_ap = nn_val.ap;
  r->val_new_node_auc = nn_val.auc;
  r->val_new_node_ap_batch_mean = nn_val.ap_batch_mean;
  r->val_loss = val.loss;
}

}  // namespace

std::vector<double> PackBestTest(const EvalResult& test,
                                 const EvalResult& nn_test) {
  std::vector<double> f;
  for (const EvalResult* e : {&test, &nn_test}) {
    f.insert(f.end(), {e->ap, e->auc, e->ap_batch_mean, e->auc_batch_mean,
                       static_cast<double>(e->events)});
  }
  return f;
}

void UnpackBestTest(const std::vector<double>& f, EvalResult* test,
                    EvalResult* nn_test) {
  for (EvalResult* e : {test, nn_test}) {
    const size_t at = e == test ? 0 : kBestTestFields / 2;
    e->ap = f[at];
    e->auc = f[at + 1];
    e->ap_batch_mean = f[at + 2];
    e->auc_batch_mean = f[at + 3];
    e->events = static_cast<int64_t>(f[at + 4]);
  }
}

void Engine::CountAsEvaluation(const CommStats& before) {
  comm_.eval_states_pulled += comm_.states_pulled - before.states_pulled;
  comm_.eval_bytes_pulled += comm_.bytes_pulled - before.bytes_pulled;
  comm_.eval_states_pushed += comm_.states_pushed - before.states_pushed;
  comm_.eval_bytes_pushed += comm_.bytes_pushed - before.bytes_pushed;
  comm_.eval_pull_seconds += comm_.seconds - before.seconds;
  comm_.states_pulled = before.states_pulled;
  comm_.bytes_pulled = before.bytes_pulled;
  comm_.states_pushed = before.states_pushed;
  comm_.bytes_pushed = before.bytes_pushed;
  comm_.seconds = before.seconds;
  comm_.rpcs = before.rpcs;
}

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
  setup.prepare_ahead = o_.prepare_ahead;
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
  // A worker with a bounded working set keeps no best memory (its
  // checkpoint holds 0 rows): the leader tested the epoch at once.
  if (cache_) {
    record_.best_state.Reset(model_->layout(), 0, device_);
  } else {
    record_.best_state = state_.Clone();
    record_.best_test.clear();  // an earlier bounded run's best epoch
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
// traffic: every policy needs it, training does not). With a bounded
// working set it evaluates through it instead (EvaluateBounded).
absl::Status Engine::PullAllForEvaluation(int epoch) {
  const CommStats before = comm_;
  std::vector<int64_t> all(task_->log.num_nodes);
  std::iota(all.begin(), all.end(), 0);
  RETURN_IF_ERROR(sync_->Pull(all, Versions(epoch)));
  CountAsEvaluation(before);
  return absl::OkStatus();
}

double Engine::Score(const EpochResult& r) const {
  // The reference picks the best epoch by the mean of per-batch val AP,
  // TGB by the validation MRR.
  return task_->tgb                  ? r.val_mrr
         : task_->reference_protocol ? r.val_ap_batch_mean
                                     : r.val_ap;
}

bool Engine::Improves(double score) const {
  // With a relative tolerance of 1e-10, as the reference.
  return score > record_.best_score +
                     1e-10 * std::max(1.0, std::abs(record_.best_score));
}

plan::ReadPredictor Engine::PredictEvalReads(const std::vector<int64_t>& events,
                                             const EvalNegatives& negatives) {
  // The pass's negatives, drawn as Evaluate draws them.
  auto negs = std::make_shared<std::vector<int32_t>>(events.size());
  data::NegativeSampler sampler(negatives.candidates, negatives.seed);
  sampler.Sample(static_cast<int64_t>(negs->size()), negs->data());
  return plan::EventReads(
      events, eval_batch_size_, task_->log,
      [negs](int64_t i) { return (*negs)[i]; },
      NeighborReads(task_->full_graph.get()));
}

absl::StatusOr<EvalResult> Engine::BoundedEvalPass(
    int epoch, const std::vector<int64_t>& events,
    const EvalNegatives& negatives, const std::string& label) {
  ScopedTimer timer(&timers_.evaluation);
  plan::ReadPredictor predicted;
  if (o_.memory_eviction == plan::Eviction::kBelady) {
    predicted = PredictEvalReads(events, negatives);
  }
  state_.ResetCache(model_->layout(), task_->log.num_nodes, cache_capacity_,
                    device_);
  sync_->SetWorkingSet(cache_.get(), spill_store_.get(),
                       /*pulls_every_read=*/false);
  // The prefetch reads the prediction Belady's rule reads (LRU has none).
  const int prefetch = o_.memory_prefetch;
  if (prefetch > 0 && !predicted.reads) {
    predicted = PredictEvalReads(events, negatives);
  }
  sync_->BeginEvaluation(std::move(predicted), prefetch);
  sync_->Prefetch(0);
  const StateVersions versions = Versions(epoch);
  EvalSetup setup = MakeEvalSetup();
  setup.acquire = [&](int64_t batch, const std::vector<int64_t>& nodes) {
    sync_->set_position(batch);
    absl::Status s = sync_->Acquire(nodes, versions);
    // The next batch's misses come while this one runs.
    if (s.ok()) sync_->Prefetch(batch + 1);
    if (s.ok()) return s;
    return absl::Status(s.code(), absl::StrCat(label, ": ", s.message()));
  };
  setup.changed = [&](const std::vector<int32_t>& nodes) {
    sync_->MarkChanged(nodes);
  };
  return Evaluate(setup, events, negatives, label, &state_, &progress_);
}

absl::Status Engine::CheckEvalFitsWorkingSet() {
  // The leader evaluates (the others hold no graph of all events); when it
  // refuses, the others stop with it.
  if (!leader()) return absl::OkStatus();
  const int64_t bytes = memory::HeldStateBytes(model_->layout());
  for (const auto& [events, negatives, label] :
       {std::tuple(&task_->split.val, &task_->val_negs, "validation"),
        std::tuple(&task_->split.test, &task_->test_negs, "test")}) {
    // One batch at a time: the pass's reads are never all held at once.
    const plan::ReadPredictor reads = PredictEvalReads(*events, *negatives);
    std::vector<int64_t> nodes;
    for (int64_t b = 0; b < reads.num_batches; ++b) {
      nodes.clear();
      reads.reads(b, &nodes);
      std::sort(nodes.begin(), nodes.end());
      const int64_t n = std::unique(nodes.begin(), nodes.end()) - nodes.begin();
      if (n <= cache_capacity_) continue;
      return absl::InvalidArgumentError(absl::StrFormat(
          "--memory-cache-bytes %d holds %d node states (%d bytes each), and "
          "%s batch %d (of %d events) reads at least %d: raise it to at "
          "least %d",
          o_.memory_cache_bytes, cache_capacity_, bytes, label, b,
          eval_batch_size_, n, n * bytes));
    }
  }
  return absl::OkStatus();
}

absl::Status Engine::EvaluateBounded(EpochResult* r) {
  // Evaluation's traffic is counted apart from training's.
  const CommStats before = comm_;
  ASSIGN_OR_RETURN(
      EvalResult nn_val,
      BoundedEvalPass(r->epoch, task_->split.new_node_val,
                      task_->new_node_val_negs, "validate new nodes"));
  ASSIGN_OR_RETURN(
      EvalResult val,
      BoundedEvalPass(r->epoch, task_->split.val, task_->val_negs, "validate"));
  SetValidation(val, nn_val, r);
  if (Improves(Score(*r))) {
    // The shards take the post-validation memory (the next epoch's states
    // supersede it); both test passes start from it.
    RETURN_IF_ERROR(sync_->Push(sync_->ChangedStates(), Versions(r->epoch)));
    ASSIGN_OR_RETURN(
        EvalResult test,
        BoundedEvalPass(r->epoch, task_->split.test, task_->test_negs, "test"));
    ASSIGN_OR_RETURN(
        EvalResult nn_test,
        BoundedEvalPass(r->epoch, task_->split.new_node_test,
                        task_->new_node_test_negs, "test new nodes"));
    record_.best_test = PackBestTest(test, nn_test);
  }
  CountAsEvaluation(before);
  return absl::OkStatus();
}

absl::Status Engine::EvaluateEpoch(EpochResult* r) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  r->val_mrr = r->val_hits_at_10 = nan;
  if (leader() && cache_) {
    RETURN_IF_ERROR(EvaluateBounded(r));
  } else if (leader() && distributed()) {
    RETURN_IF_ERROR(PullAllForEvaluation(r->epoch));
  }
  if (!leader() || cache_) {
    // The others wait for the leader's figures; a bounded leader has them.
  } else if (task_->tgb) {
    // TGB: validation is the ranking pass (no new-node hold-out).
    ASSIGN_OR_RETURN(
        RankResult val,
        RankPass(task_->split.val, task_->val_ranking, "validate (MRR)"));
    r->val_mrr = val.mrr;
    r->val_hits_at_10 = val.hits_at_10;
    r->val_ap = r->val_auc = r->val_ap_batch_mean = nan;
    r->val_new_node_ap = r->val_new_node_auc = nan;
    r->val_new_node_ap_batch_mean = r->val_loss = nan;
  } else {
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
    SetValidation(val, nn_val, r);
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
