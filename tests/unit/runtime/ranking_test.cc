// TGB's one-vs-many evaluation (EvaluateRanking) on a tiny stream whose MRR
// is computed by hand, and its predict-then-update order.
#include "trainer/runtime/eval/ranking.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "tests/unit/runtime/train_test_util.h"
#include "trainer/batch/builder.h"
#include "trainer/data/neighbor_sampler.h"
#include "trainer/data/tgb_negatives.h"
#include "trainer/memory/worker_memory.h"
#include "trainer/model/model.h"
#include "trainer/runtime/report/progress.h"
#include "util/status_matchers.h"

namespace mnemo::runtime {
namespace {

// Sources 0-2, destinations 3-6. Events 0-3 come before the evaluated
// ones; evaluated: (0 -> 3, t 10), (1 -> 4, t 11), (1 -> 5, t 11) (one
// source, one time), (2 -> 6, t 12).
data::EventLog TinyLog() {
  data::EventLog log;
  log.name = "tiny";
  log.num_nodes = 7;
  const std::vector<std::tuple<int, int, double>> events = {
      {0, 4, 1},  {1, 3, 2},  {2, 5, 3},  {0, 6, 4},
      {0, 3, 10}, {1, 4, 11}, {1, 5, 11}, {2, 6, 12}};
  for (const auto& [s, d, t] : events) {
    log.src.push_back(s);
    log.dst.push_back(d);
    log.t.push_back(t);
  }
  for (int64_t u = 0; u < 7; ++u) log.original_ids.push_back(u);
  return log;
}

struct Fixture {
  explicit Fixture(model::ModelKind kind)
      : log(TinyLog()), graph(log), builder(&log, log.num_nodes) {
    model::ModelOptions mo;
    mo.kind = kind;
    mo.memory_dim = 4;
    mo.time_dim = 4;
    mo.embedding_dim = 4;
    mo.heads = 1;
    mo.dropout = 0;
    model = model::MakeModel(mo);
    builder.set_needs(model->needs());
    state.Init(model->layout(), log.num_nodes, torch::kCPU);
    state.ResetColumns();
    setup.log = &log;
    setup.graph = &graph;
    setup.model = model;
    setup.builder = &builder;
    setup.time_gaps = &gaps;
    setup.neighbors = 2;
    setup.batch_size = 2;
  }
  data::EventLog log;
  data::TemporalGraph graph;
  batch::BatchBuilder builder;
  model::Model model;
  memory::WorkerMemory state;
  batch::TimeGapStats gaps;
  EvalSetup setup;
};

const std::vector<int64_t> kEvaluated = {4, 5, 6, 7};
const std::vector<int32_t> kDestinations = {3, 4, 5, 6};

// With every parameter zero every score is the same: each positive ties
// with all its k negatives, so its rank is 1 + k/2. Every other
// destination: event 4 has k = 3 (4, 5, 6), events 5 and 6 k = 2 (1
// reaches both 4 and 5 at time 11: neither counts against the other),
// event 7 k = 3. MRR = (1/2.5 + 1/2 + 1/2 + 1/2.5) / 4 = 0.45; every rank
// <= 10: Hits@10 = 1.
TEST(RankingTest, TiedScoresGiveTheHandComputedMrr) {
  for (const model::ModelKind kind :
       {model::ModelKind::kJodie, model::ModelKind::kTgn}) {
    Fixture f(kind);
    {
      torch::NoGradGuard guard;
      for (auto& p : f.model->parameters()) p.zero_();
    }
    data::TgbNegativeOptions o;
    o.strategy = data::TgbStrategy::kEveryOther;
    const data::RankingNegatives negs =
        data::MakeTgbNegatives(f.log, kEvaluated, kDestinations, {}, o);
    Progress progress(TrainOptions(), testing::Quiet());
    auto r = EvaluateRanking(f.setup, kEvaluated, negs, "test", &f.state,
                             &progress, /*max_rows=*/2);
    ASSERT_THAT(r, IsOk());
    EXPECT_DOUBLE_EQ(r->mrr, 0.45) << model::ModelName(kind);
    EXPECT_DOUBLE_EQ(r->hits_at_10, 1.0);
    EXPECT_EQ(r->events, 4);
    EXPECT_EQ(r->negatives, 3 + 2 + 2 + 3);
    // Predict, then update: memory advanced through every evaluated event.
    EXPECT_EQ(f.state.view().last_event()[f.state.view().Row(0)], 4);
    EXPECT_EQ(f.state.view().last_event()[f.state.view().Row(5)], 6);
    EXPECT_EQ(f.state.view().last_event()[f.state.view().Row(6)], 7);
  }
}

// Scores do not depend on how the negatives are chunked, and match the
// AP pass's scores of the same pairs: with one negative per positive the
// rank is 1 (positive higher), 1.5 (tie) or 2.
TEST(RankingTest, ChunkingDoesNotChangeScores) {
  torch::manual_seed(3);
  Fixture a(model::ModelKind::kTgn);
  torch::manual_seed(3);
  Fixture b(model::ModelKind::kTgn);
  data::TgbNegativeOptions o;
  o.strategy = data::TgbStrategy::kEveryOther;
  const data::RankingNegatives negs =
      data::MakeTgbNegatives(a.log, kEvaluated, kDestinations, {}, o);
  Progress progress(TrainOptions(), testing::Quiet());
  auto one = EvaluateRanking(a.setup, kEvaluated, negs, "test", &a.state,
                             &progress, /*max_rows=*/1);
  auto all = EvaluateRanking(b.setup, kEvaluated, negs, "test", &b.state,
                             &progress, /*max_rows=*/1000);
  ASSERT_THAT(one, IsOk());
  ASSERT_THAT(all, IsOk());
  EXPECT_NEAR(one->mrr, all->mrr, 1e-12);
  EXPECT_GT(one->mrr, 0.25);  // k <= 3: rank <= 4
  EXPECT_TRUE(
      torch::allclose(a.state.view().memory(), b.state.view().memory()));
}

}  // namespace
}  // namespace mnemo::runtime
