// DySAT (trainer/model/dysat.h): the snapshot batches it reads, that only
// events inside its snapshot windows reach it, gradients to every
// parameter.
#include "trainer/model/dysat.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "trainer/batch/builder.h"
#include "trainer/data/event_log.h"
#include "trainer/data/neighbor_sampler.h"

namespace mnemo::model {
namespace {

// 7 nodes (node 6 has no events), 8 events at t = 1..8, `extra` events
// (src, dst, t) inserted in time order.
data::EventLog TinyLog(std::vector<std::tuple<int, int, double>> extra = {}) {
  std::vector<std::tuple<int, int, double>> ev = {
      {0, 1, 1}, {2, 3, 2}, {0, 3, 3}, {1, 2, 4},
      {4, 5, 5}, {0, 1, 6}, {2, 4, 7}, {5, 3, 8}};
  ev.insert(ev.end(), extra.begin(), extra.end());
  std::stable_sort(ev.begin(), ev.end(), [](const auto& a, const auto& b) {
    return std::get<2>(a) < std::get<2>(b);
  });
  data::EventLog log;
  for (const auto& [s, d, t] : ev) {
    log.src.push_back(s);
    log.dst.push_back(d);
    log.t.push_back(t);
  }
  log.num_nodes = 7;
  return log;
}

ModelOptions Small(int layers) {
  ModelOptions o;
  o.kind = ModelKind::kDysat;
  o.embedding_dim = 8;
  o.heads = 2;
  o.dropout = 0.0;
  o.layers = layers;
  o.num_nodes = 7;
  o.snapshots = 3;
  o.snapshot_span = 2;
  return o;
}

struct Batch {
  explicit Batch(data::EventLog l) : log(std::move(l)) {}
  data::EventLog log;
  data::TemporalGraph graph{log};
  data::NeighborSampler sampler{&graph, 3};  // the 3 most recent
  batch::BatchBuilder builder{&log, log.num_nodes};
  memory::NodeMemory state;
  batch::BatchTensors tensors;
  batch::PositiveUpdate update;

  // The last `n` events with negatives, read by `model`.
  void Build(const Model& model, int64_t n, std::vector<int32_t> negatives) {
    state.Reset(model->layout(), log.num_nodes);
    builder.set_needs(model->needs());
    std::vector<int64_t> events;
    for (int64_t e = log.num_events() - n; e < log.num_events(); ++e) {
      events.push_back(e);
    }
    builder.Build(events.data(), negatives.data(), events.size(), state,
                  &sampler, nullptr, &tensors, &update);
  }
};

TEST(DysatTest, ReadsSnapshotWindowsAndNoNeighbourState) {
  torch::manual_seed(1);
  Model model = MakeModel(Small(2));
  EXPECT_EQ(model->layout().memory_dim, 0);
  EXPECT_EQ(model->layout().RecordFloats(), 3);
  EXPECT_EQ(model->needs().snapshots, 3);
  EXPECT_EQ(model->needs().snapshot_span, 2);
  Batch b(TinyLog());
  b.Build(model, 2, {6, 0});  // events at t = 7, 8
  const batch::BatchTensors& t = b.tensors;
  const int64_t q = 6, k = 3, h_count = 3;
  ASSERT_EQ(t.snap_node.sizes(), (std::vector<int64_t>{h_count, q * k}));
  ASSERT_EQ(t.snap_mask.sizes(), (std::vector<int64_t>{h_count, q, k}));
  ASSERT_EQ(t.snap2_node.sizes(), (std::vector<int64_t>{h_count, q * k * k}));
  ASSERT_EQ(t.snap2_mask.sizes(), (std::vector<int64_t>{h_count, q * k, k}));
  EXPECT_FALSE(t.nbr_slot.defined());
  // Only the targets and the positives' endpoints are read: 2, 4, 5, 3, 6, 0.
  EXPECT_EQ(t.unique_rows.size(0), 6);
  const torch::Tensor targets = t.unique_rows.index_select(0, t.target_slot);
  EXPECT_TRUE(
      torch::equal(t.snap_nodes.index_select(0, t.snap_target), targets));
  // Every valid slot is an edge of its target inside the snapshot's window
  // [time - (3 - h) 2, time - (2 - h) 2); every such edge is found (at most
  // 3 per window here).
  for (int64_t h = 0; h < h_count; ++h) {
    for (int64_t i = 0; i < q; ++i) {
      const int64_t u = targets[i].item<int64_t>();
      const double time = b.log.t[6 + i % 2];
      const double to = time - (2 - h) * 2.0, from = to - 2.0;
      std::multiset<int64_t> want, got;
      for (int64_t e = 0; e < b.log.num_events(); ++e) {
        if (b.log.t[e] < from || b.log.t[e] >= to) continue;
        if (b.log.src[e] == u) want.insert(b.log.dst[e]);
        if (b.log.dst[e] == u) want.insert(b.log.src[e]);
      }
      for (int64_t j = 0; j < k; ++j) {
        if (t.snap_mask[h][i][j].item<bool>()) {
          got.insert(t.snap_nodes[t.snap_node[h][i * k + j].item<int64_t>()]
                         .item<int64_t>());
        }
      }
      EXPECT_EQ(got, want) << "snapshot " << h << " target " << i;
    }
  }
  EXPECT_GT(t.snap2_mask.sum().item<int64_t>(), 0);
  ModelOutput out = model->Forward(b.state, t);
  EXPECT_EQ(out.pos_logits.sizes(), (std::vector<int64_t>{2}));
  EXPECT_EQ(out.memory.size(1), 0);
  // Node 6 has no neighbour in any snapshot: still a finite score.
  EXPECT_TRUE(torch::isfinite(out.neg_logits).all().item<bool>());
}

TEST(DysatTest, OnlyEventsInsideTheWindowsReachIt) {
  for (int layers : {1, 2}) {
    auto logits = [&](std::vector<std::tuple<int, int, double>> extra) {
      torch::manual_seed(4);
      Model model = MakeModel(Small(layers));
      model->eval();
      Batch b(TinyLog(std::move(extra)));
      b.Build(model, 2, {6, 0});
      ModelOutput out = model->Forward(b.state, b.tensors);
      return torch::cat({out.pos_logits, out.neg_logits});
    };
    const torch::Tensor base = logits({});
    // Before every window of t = 7 ([1, 7)) and t = 8 ([2, 8)).
    EXPECT_TRUE(torch::equal(logits({{2, 4, 0.5}, {5, 3, 0.9}}), base))
        << layers;
    // Inside the newest window of the event at t = 8.
    EXPECT_FALSE(torch::allclose(logits({{5, 1, 6.5}}), base)) << layers;
    // Inside its oldest window: the recurrent combination carries it.
    EXPECT_FALSE(torch::allclose(logits({{5, 1, 2.5}}), base)) << layers;
  }
}

TEST(DysatTest, GradientsReachEveryParameter) {
  for (int layers : {1, 2}) {
    torch::manual_seed(2);
    Model model = MakeModel(Small(layers));
    // Node 5 (the last event's source) meets 0 and 1 in each of its
    // snapshots: attention over two different neighbours has a gradient.
    Batch b(TinyLog({{5, 0, 2.2},
                     {5, 1, 2.4},
                     {5, 0, 4.2},
                     {5, 1, 4.4},
                     {5, 0, 6.2},
                     {5, 1, 6.4}}));
    b.Build(model, 2, {0, 1});
    Loss(model->Forward(b.state, b.tensors)).backward();
    for (const auto& p : model->named_parameters()) {
      ASSERT_TRUE(p.value().grad().defined()) << layers << " " << p.key();
      EXPECT_GT(p.value().grad().abs().sum().item<double>(), 0)
          << layers << " " << p.key();
    }
  }
}

}  // namespace
}  // namespace mnemo::model
