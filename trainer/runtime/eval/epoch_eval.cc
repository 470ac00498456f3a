#include "trainer/runtime/eval/epoch_eval.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>
#include <sstream>
#include <string>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "trainer/data/negative_sampler.h"
#include "trainer/model/model_spec.h"
#include "trainer/runtime/eval/eval_share.h"
#include "util/proc.h"
#include "util/status_macros.h"

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

void EpochEvaluation::CountAsEvaluation(const memory::StoreTraffic& before) {
  memory::StoreTraffic& now = p_.comm.store;
  EvalTraffic& eval = p_.comm.eval;
  eval.states_pulled += now.states_pulled - before.states_pulled;
  eval.bytes_pulled += now.bytes_pulled - before.bytes_pulled;
  eval.states_pushed += now.states_pushed - before.states_pushed;
  eval.bytes_pushed += now.bytes_pushed - before.bytes_pushed;
  eval.pull_seconds += now.seconds - before.seconds;
  now = before;
}

EvalSetup EpochEvaluation::Setup(int epoch) const {
  EvalSetup setup;
  setup.log = &p_.task->log;
  setup.graph = p_.task->full_graph.get();
  setup.model = p_.model;
  setup.builder = p_.builder.get();
  setup.time_gaps = p_.TimeGaps();
  setup.neighbors = p_.o.model.neighbors;
  setup.strategy = p_.SamplingStrategy();
  setup.batch_size = p_.eval_batch_size;
  setup.bf16 = p_.bf16;
  setup.lr = p_.o.optim.lr;
  setup.versions = p_.Versions(epoch);
  setup.prepare_ahead = p_.o.checks.prepare_ahead;
  return setup;
}

absl::StatusOr<EvalResult> EpochEvaluation::Pass(
    int epoch, const std::vector<int64_t>& events,
    const EvalNegatives& negatives, const std::string& label) {
  ScopedTimer timer(&p_.evaluation_seconds);
  return Evaluate(Setup(epoch), events, negatives, label, &p_.memory,
                  &p_.progress);
}

absl::StatusOr<RankResult> EpochEvaluation::RankPass(
    const std::vector<int64_t>& events, const data::RankingNegatives& negatives,
    const std::string& label) {
  ScopedTimer timer(&p_.evaluation_seconds);
  return EvaluateRanking(Setup(0), events, negatives, label, &p_.memory,
                         &p_.progress);
}

absl::Status EpochEvaluation::KeepBest(const EpochResult& r) {
  TrainingRecord& record = p_.record;
  record.best_score = Score(r);
  record.best_epoch = r.epoch;
  record.rounds_without_improvement = 0;
  torch::NoGradGuard guard;
  record.best_params.clear();
  for (const auto& p : p_.model->parameters()) {
    record.best_params.push_back(p.clone());
  }
  // A worker with a bounded working set keeps no best memory (its
  // checkpoint holds 0 rows): the leader tested the epoch at once.
  if (p_.memory.bounded()) {
    record.best_state.Reset(p_.model->layout(), 0, p_.device);
  } else if (Shared()) {
    // The last rank ended the validation pass: it holds the memory.
    RETURN_IF_ERROR(BroadcastMemory(p_.world() - 1, &record.best_state));
    record.best_test.clear();
    best_state_everywhere_ = true;
  } else {
    record.best_state = p_.memory.Snapshot();
    record.best_test.clear();  // an earlier bounded run's best epoch
  }
  return absl::OkStatus();
}

bool EpochEvaluation::Shared() const {
  return p_.distributed() && p_.o.eval.shared && !p_.memory.bounded() &&
         !p_.task->tgb;
}

absl::Status EpochEvaluation::BroadcastMemory(int root,
                                              memory::NodeMemory* into) {
  std::string bytes;
  if (p_.rank() == root) {
    torch::serialize::OutputArchive archive;
    RETURN_IF_ERROR(p_.memory.view().Save(&archive));
    std::ostringstream out;
    archive.save_to(out);
    bytes = std::move(out).str();
  }
  RETURN_IF_ERROR(p_.cluster->control()->Broadcast(&bytes, root));
  p_.comm.eval.memory_bytes_received +=
      p_.rank() == root ? 0 : static_cast<int64_t>(bytes.size());
  if (p_.rank() == root) {
    *into = p_.memory.Snapshot();
    return absl::OkStatus();
  }
  std::istringstream in(std::move(bytes));
  torch::serialize::InputArchive archive;
  archive.load_from(in);
  return into->Load(archive, p_.model->layout(), p_.task->log.num_nodes,
                    p_.device);
}

absl::StatusOr<EpochEvaluation::SharedResult> EpochEvaluation::SharedPasses(
    int epoch, const std::vector<int64_t>& main, const EvalNegatives& main_negs,
    const std::string& main_label, const std::vector<int64_t>& side,
    const EvalNegatives& side_negs, const std::string& side_label,
    const std::string& barrier) {
  ScopedTimer timer(&p_.evaluation_seconds);
  const int world = p_.world(), rank = p_.rank();
  const int64_t bs = p_.eval_batch_size;
  const auto batches = [bs](const std::vector<int64_t>& events) {
    return (static_cast<int64_t>(events.size()) + bs - 1) / bs;
  };
  const auto events_in = [bs](const std::vector<int64_t>& events, int64_t b,
                              int64_t e) {
    const int64_t n = static_cast<int64_t>(events.size());
    return std::min(n, e * bs) - std::min(n, b * bs);
  };
  if (p_.o.eval.share_replay_cost >= 0) {
    replay_cost_ = p_.o.eval.share_replay_cost;
  } else if (replay_cost_ < 0) {
    replay_cost_ = DefaultReplayCost(
        std::string(model::ModelName(p_.o.model.kind)).c_str());
  }
  const std::vector<int64_t> begin =
      SharePass(batches(main), batches(side), world, replay_cost_);
  const EvalSetup setup = Setup(epoch);
  PassScores mine, mine_side;
  if (rank == 0) {
    // Both passes start from this memory.
    memory::NodeMemory start = p_.memory.Snapshot();
    RETURN_IF_ERROR(Evaluate(setup, side, side_negs, side_label, &p_.memory,
                             &p_.progress, {}, &mine_side)
                        .status());
    p_.memory.Restore(std::move(start));
  }
  // Ranks with nothing to score skip the pass, except the last, whose
  // replay leaves it holding the pass's end memory.
  int64_t replayed = 0;
  if (begin[rank] < begin[rank + 1] || rank == world - 1) {
    RETURN_IF_ERROR(Evaluate(setup, main, main_negs, main_label, &p_.memory,
                             &p_.progress, {begin[rank], begin[rank + 1]},
                             &mine)
                        .status());
    replayed = begin[rank];
  }
  EvalTraffic& counts = p_.comm.eval;
  counts.scored_batches += static_cast<int64_t>(mine.loss.size()) +
                           static_cast<int64_t>(mine_side.loss.size());
  counts.replayed_batches += replayed;
  counts.replay_seconds += mine.replay_seconds;
  counts.score_seconds += mine.score_seconds + mine_side.score_seconds;
  // Every rank's scores to every rank, rank by rank, once all are done.
  RETURN_IF_ERROR(p_.cluster->WaitForLeader(barrier));
  PassScores all_main, all_side;
  for (int q = 0; q < world; ++q) {
    const int64_t n_main = events_in(main, begin[q], begin[q + 1]);
    const int64_t b_main = begin[q + 1] - begin[q];
    const int64_t n_side = q == 0 ? static_cast<int64_t>(side.size()) : 0;
    const int64_t b_side = q == 0 ? batches(side) : 0;
    std::vector<double> v(2 * n_main + b_main + 2 * n_side + b_side);
    if (q == rank) {
      auto at = v.begin();
      for (const PassScores* ps : {&mine, &mine_side}) {
        at = std::copy(ps->pos.begin(), ps->pos.end(), at);
        at = std::copy(ps->neg.begin(), ps->neg.end(), at);
        at = std::copy(ps->loss.begin(), ps->loss.end(), at);
      }
      if (at != v.end()) {
        return absl::InternalError(absl::StrFormat(
            "shared evaluation: rank %d scored %d values, the plan says %d",
            rank, at - v.begin(), v.size()));
      }
    }
    RETURN_IF_ERROR(p_.cluster->control()->Broadcast(&v, q));
    auto at = v.begin();
    for (auto [ps, events, from, n, b] :
         {std::tuple(&all_main, &main, begin[q], n_main, b_main),
          std::tuple(&all_side, &side, int64_t{0}, n_side, b_side)}) {
      ps->pos.insert(ps->pos.end(), at, at + n);
      ps->neg.insert(ps->neg.end(), at + n, at + 2 * n);
      ps->loss.insert(ps->loss.end(), at + 2 * n, at + 2 * n + b);
      for (int64_t i = from; i < from + b; ++i) {
        ps->batch_events.push_back(events_in(*events, i, i + 1));
      }
      at += 2 * n + b;
    }
  }
  SharedResult result;
  ASSIGN_OR_RETURN(result.main,
                   ResultOfScores(all_main, static_cast<int64_t>(main.size())));
  ASSIGN_OR_RETURN(result.side,
                   ResultOfScores(all_side, static_cast<int64_t>(side.size())));
  // The replay's cost, as measured by every rank, for the next split
  // (rank 0's reckoning, so that every rank plans alike).
  std::vector<double> t = {
      mine.replay_seconds, static_cast<double>(replayed),
      mine.score_seconds + mine_side.score_seconds,
      static_cast<double>(mine.loss.size() + mine_side.loss.size())};
  RETURN_IF_ERROR(p_.cluster->control()->Sum(&t));
  std::vector<double> cost = {replay_cost_};
  if (t[1] > 0 && t[2] > 0 && t[3] > 0) {
    cost[0] = std::clamp((t[0] / t[1]) / (t[2] / t[3]), 0.02, 1.0);
  }
  RETURN_IF_ERROR(p_.cluster->ShareFromLeader(&cost));
  replay_cost_ = cost[0];
  p_.comm.eval.replay_cost = replay_cost_;
  return result;
}

// Rank 0 pulls every state for evaluation (counted apart from training's
// traffic: every policy needs it, training does not). With a bounded
// working set it evaluates through it instead (ValidateBounded).
absl::Status EpochEvaluation::PullAll(int epoch) {
  const memory::StoreTraffic before = p_.comm.store;
  std::vector<int64_t> all(p_.task->log.num_nodes);
  std::iota(all.begin(), all.end(), 0);
  RETURN_IF_ERROR(p_.memory.exchange()->Pull(all, p_.Versions(epoch)));
  CountAsEvaluation(before);
  return absl::OkStatus();
}

// Each rank pulls a slice of the nodes (each shard serves each state once,
// not once per rank) and sends the store's answer to the others, which
// write it as a pull of their own would.
absl::Status EpochEvaluation::PullAllShared(int epoch) {
  const memory::StoreTraffic before = p_.comm.store;
  const int64_t n = p_.task->log.num_nodes;
  const int world = p_.world();
  const auto slice = [&](int q) {
    std::vector<int64_t> nodes(n * (q + 1) / world - n * q / world);
    std::iota(nodes.begin(), nodes.end(), n * q / world);
    return nodes;
  };
  const memory::StateVersions versions = p_.Versions(epoch);
  memstore::PulledStates mine;
  RETURN_IF_ERROR(
      p_.memory.exchange()->PullAndKeep(slice(p_.rank()), versions, &mine));
  CountAsEvaluation(before);
  ScopedTimer timer(&p_.comm.eval.pull_seconds);
  for (int q = 0; q < world; ++q) {
    const std::vector<int64_t> nodes = slice(q);
    const size_t k = nodes.size();
    std::string bytes;
    if (q == p_.rank()) {
      bytes.resize(mine.states.size() * sizeof(float) +
                   k * (sizeof(uint64_t) + sizeof(double)));
      char* at = bytes.data();
      for (auto [data, size] :
           {std::pair<const void*, size_t>(mine.states.data(),
                                           mine.states.size() * sizeof(float)),
            {mine.version.data(), k * sizeof(uint64_t)},
            {mine.time.data(), k * sizeof(double)}}) {
        std::memcpy(at, data, size);
        at += size;
      }
    }
    RETURN_IF_ERROR(p_.cluster->control()->Broadcast(&bytes, q));
    if (q == p_.rank()) continue;
    const size_t per_state = sizeof(uint64_t) + sizeof(double);
    const size_t record_bytes = bytes.size() - k * per_state;
    if (k == 0 ? !bytes.empty() : record_bytes % (k * sizeof(float)) != 0) {
      return absl::InternalError(absl::StrFormat(
          "shared evaluation: rank %d sent %d bytes for %d states", q,
          bytes.size(), k));
    }
    std::vector<float> records(record_bytes / sizeof(float));
    std::vector<uint64_t> v(k);
    std::vector<double> t(k);
    const char* at = bytes.data();
    std::memcpy(records.data(), at, record_bytes);
    std::memcpy(v.data(), at + record_bytes, k * sizeof(uint64_t));
    std::memcpy(t.data(), at + record_bytes + k * sizeof(uint64_t),
                k * sizeof(double));
    p_.memory.exchange()->Apply(nodes, std::move(records), std::move(v),
                                std::move(t), versions);
  }
  return absl::OkStatus();
}

double EpochEvaluation::Score(const EpochResult& r) const {
  // The reference picks the best epoch by the mean of per-batch val AP,
  // TGB by the validation MRR.
  return p_.task->tgb                  ? r.val_mrr
         : p_.task->reference_protocol ? r.val_ap_batch_mean
                                       : r.val_ap;
}

bool EpochEvaluation::Improves(const EpochResult& r) const {
  // With a relative tolerance of 1e-10, as the reference.
  const double best = p_.record.best_score;
  return Score(r) > best + 1e-10 * std::max(1.0, std::abs(best));
}

plan::ReadPredictor EpochEvaluation::PredictReads(
    const std::vector<int64_t>& events, const EvalNegatives& negatives) const {
  // The pass's negatives, drawn as Evaluate draws them.
  auto negs = std::make_shared<std::vector<int32_t>>(events.size());
  data::NegativeSampler sampler(negatives.candidates, negatives.seed);
  sampler.Sample(static_cast<int64_t>(negs->size()), negs->data());
  return plan::EventReads(
      events, p_.eval_batch_size, p_.task->log,
      [negs](int64_t i) { return (*negs)[i]; },
      p_.NeighborReads(p_.task->full_graph.get()));
}

absl::StatusOr<EvalResult> EpochEvaluation::BoundedPass(
    int epoch, const std::vector<int64_t>& events,
    const EvalNegatives& negatives, const std::string& label) {
  ScopedTimer timer(&p_.evaluation_seconds);
  plan::ReadPredictor predicted;
  // The prefetch reads the prediction Belady's rule reads (LRU has none).
  const int prefetch = p_.o.working_set.prefetch;
  if (p_.o.working_set.eviction == plan::Eviction::kBelady || prefetch > 0) {
    predicted = PredictReads(events, negatives);
  }
  p_.memory.BeginEvaluation(std::move(predicted), prefetch);
  return Evaluate(Setup(epoch), events, negatives, label, &p_.memory,
                  &p_.progress);
}

absl::Status EpochEvaluation::CheckFitsWorkingSet() const {
  // The leader evaluates (the others hold no graph of all events); when it
  // refuses, the others stop with it.
  if (!p_.memory.bounded() || !p_.leader()) return absl::OkStatus();
  const int64_t bytes = memory::HeldStateBytes(p_.model->layout());
  const Task& task = *p_.task;
  for (const auto& [events, negatives, label] :
       {std::tuple(&task.split.val, &task.val_negs, "validation"),
        std::tuple(&task.split.test, &task.test_negs, "test")}) {
    // One batch at a time: the pass's reads are never all held at once.
    const plan::ReadPredictor reads = PredictReads(*events, *negatives);
    std::vector<int64_t> nodes;
    for (int64_t b = 0; b < reads.num_batches; ++b) {
      nodes.clear();
      reads.reads(b, &nodes);
      std::sort(nodes.begin(), nodes.end());
      const int64_t n = std::unique(nodes.begin(), nodes.end()) - nodes.begin();
      if (n <= p_.memory.capacity()) continue;
      return absl::InvalidArgumentError(absl::StrFormat(
          "--memory-cache-bytes %d holds %d node states (%d bytes each), and "
          "%s batch %d (of %d events) reads at least %d: raise it to at "
          "least %d",
          p_.o.working_set.budget_bytes, p_.memory.capacity(), bytes, label, b,
          p_.eval_batch_size, n, n * bytes));
    }
  }
  return absl::OkStatus();
}

absl::Status EpochEvaluation::ValidateBounded(EpochResult* r) {
  // Evaluation's traffic is counted apart from training's.
  const memory::StoreTraffic before = p_.comm.store;
  const Task& task = *p_.task;
  ASSIGN_OR_RETURN(EvalResult nn_val,
                   BoundedPass(r->epoch, task.split.new_node_val,
                               task.new_node_val_negs, "validate new nodes"));
  ASSIGN_OR_RETURN(EvalResult val, BoundedPass(r->epoch, task.split.val,
                                               task.val_negs, "validate"));
  SetValidation(val, nn_val, r);
  if (Improves(*r)) {
    // The shards take the post-validation memory (the next epoch's states
    // supersede it); both test passes start from it.
    memory::StoreExchange* exchange = p_.memory.exchange();
    RETURN_IF_ERROR(
        exchange->Push(exchange->ChangedStates(), p_.Versions(r->epoch)));
    ASSIGN_OR_RETURN(EvalResult test, BoundedPass(r->epoch, task.split.test,
                                                  task.test_negs, "test"));
    ASSIGN_OR_RETURN(EvalResult nn_test,
                     BoundedPass(r->epoch, task.split.new_node_test,
                                 task.new_node_test_negs, "test new nodes"));
    p_.record.best_test = PackBestTest(test, nn_test);
  }
  CountAsEvaluation(before);
  return absl::OkStatus();
}

absl::Status EpochEvaluation::ValidateWhole(EpochResult* r) {
  const Task& task = *p_.task;
  if (p_.distributed()) RETURN_IF_ERROR(PullAll(r->epoch));
  if (task.tgb) {
    // TGB: validation is the ranking pass (no new-node hold-out).
    const double nan = std::numeric_limits<double>::quiet_NaN();
    ASSIGN_OR_RETURN(RankResult val, RankPass(task.split.val, task.val_ranking,
                                              "validate (MRR)"));
    r->val_mrr = val.mrr;
    r->val_hits_at_10 = val.hits_at_10;
    r->val_ap = r->val_auc = r->val_ap_batch_mean = nan;
    r->val_new_node_ap = r->val_new_node_auc = nan;
    r->val_new_node_ap_batch_mean = r->val_loss = nan;
    return absl::OkStatus();
  }
  // Validation from the memory training left, new-node validation from the
  // same memory again; the post-validation memory is what the next steps
  // (the best epoch's test) start from.
  memory::NodeMemory train_end = p_.memory.Snapshot();
  ASSIGN_OR_RETURN(EvalResult val,
                   Pass(r->epoch, task.split.val, task.val_negs, "validate"));
  memory::NodeMemory val_end = p_.memory.Snapshot();
  p_.memory.Restore(std::move(train_end));
  ASSIGN_OR_RETURN(EvalResult nn_val,
                   Pass(r->epoch, task.split.new_node_val,
                        task.new_node_val_negs, "validate new nodes"));
  p_.memory.Restore(std::move(val_end));
  SetValidation(val, nn_val, r);
  return absl::OkStatus();
}

absl::Status EpochEvaluation::Validate(EpochResult* r) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  r->val_mrr = r->val_hits_at_10 = nan;
  if (Shared()) {
    // Every rank gets every state, then each runs its part.
    RETURN_IF_ERROR(PullAllShared(r->epoch));
    const Task& task = *p_.task;
    ASSIGN_OR_RETURN(SharedResult v,
                     SharedPasses(r->epoch, task.split.val, task.val_negs,
                                  "validate", task.split.new_node_val,
                                  task.new_node_val_negs, "validate new nodes",
                                  absl::StrCat("evaluated-", r->epoch)));
    SetValidation(v.main, v.side, r);
    return absl::OkStatus();
  }
  if (p_.leader()) {
    RETURN_IF_ERROR(p_.memory.bounded() ? ValidateBounded(r)
                                        : ValidateWhole(r));
  }
  if (!p_.distributed()) return absl::OkStatus();
  // The others wait as long as the leader evaluates.
  RETURN_IF_ERROR(
      p_.cluster->WaitForLeader(absl::StrCat("evaluated-", r->epoch)));
  return ShareValidation(r);
}

absl::Status EpochEvaluation::ShareValidation(EpochResult* r) {
  std::vector<double> v = {
      r->val_ap,          r->val_auc,          r->val_ap_batch_mean,
      r->val_new_node_ap, r->val_new_node_auc, r->val_new_node_ap_batch_mean,
      r->val_loss,        r->val_mrr,          r->val_hits_at_10};
  RETURN_IF_ERROR(p_.cluster->ShareFromLeader(&v));
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

absl::Status EpochEvaluation::Test(TestResult* result, RankResult* ranked) {
  {
    torch::NoGradGuard guard;
    auto params = p_.model->parameters();
    for (size_t i = 0; i < params.size(); ++i) {
      params[i].copy_(p_.record.best_params[i]);
    }
    p_.memory.Restore(p_.record.best_state.Clone());
  }
  EvalResult test = NoEvalResult(), nn_test = NoEvalResult();
  ranked->mrr = ranked->hits_at_10 = std::numeric_limits<double>::quiet_NaN();
  const Task& task = *p_.task;
  const int best = p_.record.best_epoch;
  if (Shared()) {
    // Rank 0's best memory everywhere, unless this session kept it so (a
    // resumed run's checkpoint may come from a version where only rank 0
    // kept it), then both test passes shared.
    if (!best_state_everywhere_) {
      RETURN_IF_ERROR(BroadcastMemory(0, &p_.record.best_state));
      p_.memory.Restore(p_.record.best_state.Clone());
    }
    ASSIGN_OR_RETURN(
        SharedResult t,
        SharedPasses(best, task.split.test, task.test_negs, "test",
                     task.split.new_node_test, task.new_node_test_negs,
                     "test new nodes", "tested"));
    test = t.main;
    nn_test = t.side;
  } else if (p_.leader() && p_.record.best_test.size() == kBestTestFields) {
    // A bounded working set: the best epoch was tested when it was
    // evaluated, from the same parameters and memory.
    UnpackBestTest(p_.record.best_test, &test, &nn_test);
  } else if (p_.leader() && task.tgb) {
    ASSIGN_OR_RETURN(
        *ranked, RankPass(task.split.test, task.test_ranking, "test (MRR)"));
    test.events = ranked->events;
  } else if (p_.leader()) {
    ASSIGN_OR_RETURN(test, Pass(best, task.split.test, task.test_negs, "test"));
    p_.memory.Restore(p_.record.best_state.Clone());
    ASSIGN_OR_RETURN(nn_test, Pass(best, task.split.new_node_test,
                                   task.new_node_test_negs, "test new nodes"));
  }
  // The others wait while the leader tests.
  if (p_.distributed() && !Shared()) {
    RETURN_IF_ERROR(p_.cluster->WaitForLeader("tested"));
  }
  result->ap = test.ap;
  result->auc = test.auc;
  result->ap_batch_mean = test.ap_batch_mean;
  result->auc_batch_mean = test.auc_batch_mean;
  result->new_node_ap = nn_test.ap;
  result->new_node_auc = nn_test.auc;
  result->new_node_ap_batch_mean = nn_test.ap_batch_mean;
  result->new_node_auc_batch_mean = nn_test.auc_batch_mean;
  result->events = test.events;
  result->new_node_events = nn_test.events;
  result->mrr = ranked->mrr;
  result->hits_at_10 = ranked->hits_at_10;
  return absl::OkStatus();
}

}  // namespace mnemo::runtime
