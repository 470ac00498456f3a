#include "trainer/model/memory_models.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <tuple>

#include "trainer/batch/builder.h"
#include "trainer/data/event_log.h"
#include "trainer/data/neighbor_sampler.h"
#include "trainer/memory/node_memory_test_peer.h"
#include "trainer/model/attention_ops.h"
#include "trainer/model/cell_ops.h"
#include "trainer/platform/autocast.h"

namespace mnemo::model {
namespace {

// A tiny stream: 6 nodes, 8 events, optional 2-dim edge features.
data::EventLog TinyLog(int edge_dim) {
  data::EventLog log;
  log.src = std::vector<int32_t>{0, 2, 0, 1, 4, 0, 2, 5};
  log.dst = std::vector<int32_t>{1, 3, 3, 2, 5, 1, 4, 3};
  log.t = std::vector<double>{1, 2, 3, 4, 5, 6, 7, 8};
  log.num_nodes = 6;
  log.edge_feature_dim = edge_dim;
  for (size_t i = 0; i < log.src.size() * edge_dim; ++i) {
    log.edge_features.push_back(0.1f * i);
  }
  return log;
}

ModelOptions SmallOptions(ModelKind kind, int edge_dim) {
  ModelOptions o;
  o.kind = kind;
  o.memory_dim = 8;
  o.time_dim = 6;
  o.embedding_dim = 10;
  o.edge_dim = edge_dim;
  o.heads = 2;
  o.dropout = 0.0;
  return o;
}

struct Runner {
  // `held`: the nodes the memory holds, row by row (empty: every node).
  explicit Runner(ModelKind kind, int edge_dim = 0,
                  std::vector<int64_t> held = {}, int64_t extra_nodes = 0)
      : log(WithExtraNodes(TinyLog(edge_dim), extra_nodes)),
        graph(log),
        sampler(&graph, 3),
        builder(&log, log.num_nodes),
        model(MakeModel(SmallOptions(kind, edge_dim))) {
    if (held.empty()) {
      state.Reset(model->layout(), log.num_nodes);
    } else {
      state.ResetHeld(model->layout(), log.num_nodes, std::move(held));
    }
  }
  static data::EventLog WithExtraNodes(data::EventLog log, int64_t extra) {
    log.num_nodes += extra;
    return log;
  }
  // Runs events [begin, end) as one batch with the given negatives.
  ModelOutput Run(int64_t begin, int64_t end, std::vector<int32_t> negatives,
                  bool apply = true) {
    std::vector<int64_t> events;
    for (int64_t e = begin; e < end; ++e) events.push_back(e);
    batch::TimeGapStats stats;
    const bool jodie = !model->needs().neighbors;
    builder.Build(events.data(), negatives.data(), events.size(), state,
                  jodie ? nullptr : &sampler, jodie ? &stats : nullptr, &batch,
                  &update);
    auto out = model->Forward(state, batch);
    if (apply) state.Apply(update, out.memory, out.rows);
    return out;
  }

  data::EventLog log;
  data::TemporalGraph graph;
  data::NeighborSampler sampler;
  batch::BatchBuilder builder;
  Model model;
  memory::NodeMemory state;
  batch::BatchTensors batch;
  batch::PositiveUpdate update;
};

TEST(MemoryModelsTest, ShapesTgn) {
  torch::manual_seed(1);
  Runner r(ModelKind::kTgn, /*edge_dim=*/2);
  auto out = r.Run(0, 3, {4, 5, 2});
  EXPECT_EQ(out.pos_logits.sizes(), (std::vector<int64_t>{3}));
  EXPECT_EQ(out.neg_logits.sizes(), (std::vector<int64_t>{3}));
  EXPECT_EQ(out.memory.size(1), 8);
  EXPECT_EQ(out.memory.size(0), r.batch.unique_rows.size(0));
  EXPECT_EQ(r.batch.nbr_mask.sizes(), (std::vector<int64_t>{9, 3}));
  EXPECT_EQ(r.batch.nbr_edge_feat.sizes(), (std::vector<int64_t>{27, 2}));
  EXPECT_EQ(r.state.mail().size(1), 2 * 8 + 2);
}

// Every parameter receives a gradient once a batch reads nodes with pending
// mail and non-zero memory (the memory updater learns through the messages,
// as in TGN).
void ExpectAllGradients(ModelKind kind) {
  torch::manual_seed(2);
  Runner r(kind, 2);
  r.Run(0, 4, {5, 4, 5, 0});  // leaves mail on nodes 0..3
  r.Run(4, 6, {2, 3});        // applies it: nodes 0, 1 get non-zero memory
  auto out = r.Run(6, 8, {0, 1}, /*apply=*/false);
  ASSERT_GT(r.batch.mail_slot.size(0), 0);
  Loss(out).backward();
  for (const auto& p : r.model->named_parameters()) {
    // Messages are data: their time encoding is not trained through them,
    // so JODIE (no attention) never trains the time encoder, as in the TGN
    // reference.
    // TGN's key bias changes no output (softmax does not see a shift shared
    // by a target's scores): no gradient reaches it.
    const bool untrained =
        (kind == ModelKind::kJodie && p.key().rfind("time_encoder", 0) == 0) ||
        (kind == ModelKind::kTgn && p.key() == "k_time.bias");
    if (untrained) {
      EXPECT_FALSE(p.value().grad().defined() &&
                   p.value().grad().abs().sum().item<double>() > 0)
          << p.key();
      continue;
    }
    ASSERT_TRUE(p.value().grad().defined()) << p.key();
    EXPECT_GT(p.value().grad().abs().sum().item<double>(), 0) << p.key();
  }
}
TEST(MemoryModelsTest, GradientsReachEveryParameterTgn) {
  ExpectAllGradients(ModelKind::kTgn);
}
TEST(MemoryModelsTest, GradientsReachEveryParameterJodie) {
  ExpectAllGradients(ModelKind::kJodie);
}

// The graph attention projects queries into the neighbours' input space
// instead of keys and values out of it (EmbedTgn): the logits equal the
// textbook per-pair projection from the same parameters.
TEST(MemoryModelsTest, TgnAttentionIsThePerPairProjection) {
  torch::manual_seed(5);
  Runner r(ModelKind::kTgn, /*edge_dim=*/2);
  r.model->eval();
  r.Run(0, 4, {5, 4, 5, 0});  // neighbours and mail for the next batch
  auto out = r.Run(4, 8, {0, 1, 2, 3}, /*apply=*/false);
  ASSERT_GT(r.batch.nbr_mask.sum().item<int64_t>(), 0);
  ASSERT_GT(r.batch.nbr_mask.logical_not().sum().item<int64_t>(), 0);

  torch::NoGradGuard no_grad;
  std::map<std::string, torch::Tensor> p;
  for (const auto& item : r.model->named_parameters()) {
    p[item.key()] = item.value();
  }
  auto linear = [&](const torch::Tensor& x, const std::string& name) {
    torch::Tensor y = x.matmul(p.at(name + ".weight").t());
    return p.count(name + ".bias") ? y + p.at(name + ".bias") : y;
  };
  auto time = [&](const torch::Tensor& dt) {
    return torch::cos(linear(dt.unsqueeze(1), "time_encoder"));
  };
  const batch::BatchTensors& b = r.batch;
  const torch::Tensor mem = out.memory;  // what the embedding reads
  const int64_t n = b.target_slot.size(0), k = b.k, heads = 2, dh = 7;
  torch::Tensor h = mem.index_select(0, b.target_slot);
  torch::Tensor q =
      linear(h, "q_mem") + linear(time(torch::zeros({1})), "q_time");
  torch::Tensor te = time(b.nbr_dt);
  torch::Tensor key = linear(mem, "k_mem").index_select(0, b.nbr_slot) +
                      linear(te, "k_time") + linear(b.nbr_edge_feat, "k_edge");
  torch::Tensor val = linear(mem, "v_mem").index_select(0, b.nbr_slot) +
                      linear(te, "v_time") + linear(b.nbr_edge_feat, "v_edge");
  torch::Tensor scores =
      (q.view({n, 1, heads, dh}) * key.view({n, k, heads, dh})).sum(-1) /
      std::sqrt(double(dh));
  torch::Tensor has_nbr = b.nbr_mask.any(1);
  torch::Tensor mask = b.nbr_mask.clone();
  mask.select(1, 0).logical_or_(has_nbr.logical_not());
  scores = scores.masked_fill(mask.logical_not().unsqueeze(-1),
                              -std::numeric_limits<float>::infinity());
  torch::Tensor attn = torch::softmax(scores, 1);
  torch::Tensor att = (attn.unsqueeze(-1) * val.view({n, k, heads, dh}))
                          .sum(1)
                          .reshape({n, heads * dh});
  att = linear(att, "out_proj") * has_nbr.unsqueeze(1).to(torch::kFloat);
  torch::Tensor emb =
      linear(torch::relu(linear(torch::cat({att, h}, 1), "merge1")), "merge2");
  const int64_t bs = b.batch_size;
  torch::Tensor src = emb.narrow(0, 0, bs).repeat({2, 1});
  torch::Tensor logits =
      linear(torch::relu(linear(torch::cat({src, emb.narrow(0, bs, 2 * bs)}, 1),
                                "predictor1")),
             "predictor2")
          .squeeze(1);
  EXPECT_TRUE(
      torch::allclose(out.pos_logits, logits.narrow(0, 0, bs), 1e-4, 1e-5))
      << out.pos_logits << logits;
  EXPECT_TRUE(
      torch::allclose(out.neg_logits, logits.narrow(0, bs, bs), 1e-4, 1e-5))
      << out.neg_logits << logits;
}

TEST(MemoryModelsTest, BatchDoesNotSeeItsOwnEvents) {
  torch::manual_seed(3);
  Runner r(ModelKind::kTgn);
  r.Run(0, 2, {4, 5});
  // Node 0 has mail from event 0 (t=1). Event 2 (0->3, t=3) is in the next
  // batch: its prediction uses memory updated by that mail only.
  EXPECT_TRUE(r.state.has_mail()[0]);
  EXPECT_DOUBLE_EQ(r.state.mail_time()[0], 1.0);
  torch::Tensor before = r.state.memory().clone();
  auto out_a = r.Run(2, 3, {5}, /*apply=*/false);
  // Changing the batch's own destination does not change the memory the
  // batch predicts from for node 0.
  r.log.dst.set(2, 1);
  auto out_b = r.Run(2, 3, {5}, /*apply=*/false);
  auto slot = [&](int node) {
    return (r.batch.unique_rows == node).nonzero().item<int64_t>();
  };
  torch::Tensor mem0_b = out_b.memory[slot(0)];
  r.log.dst.set(2, 3);
  r.Run(2, 3, {5}, /*apply=*/true);
  EXPECT_TRUE(torch::allclose(r.state.memory()[0], mem0_b));
  // The memory state only changed for the batch's positives.
  torch::Tensor changed = (r.state.memory() != before).any(1);
  EXPECT_TRUE(changed[0].item<bool>());
  EXPECT_FALSE(changed[4].item<bool>());
  // Mail now carries the batch's event time; the applied mail was older.
  EXPECT_DOUBLE_EQ(r.state.mail_time()[0], 3.0);
  EXPECT_DOUBLE_EQ(r.state.last_update()[0], 1.0);
  EXPECT_DOUBLE_EQ(r.state.mail_time()[3], 3.0);
}

TEST(MemoryModelsTest, NodesWithoutNeighboursGetFiniteEmbeddings) {
  torch::manual_seed(4);
  Runner r(ModelKind::kTgn);
  auto out = r.Run(0, 1, {5});  // first event: nobody has neighbours yet
  EXPECT_FALSE(r.batch.nbr_mask.any().item<bool>());
  EXPECT_TRUE(torch::isfinite(out.pos_logits).all().item<bool>());
  EXPECT_TRUE(torch::isfinite(out.neg_logits).all().item<bool>());
}

TEST(MemoryModelsTest, NeighboursAreStrictlyInThePast) {
  Runner r(ModelKind::kTgn);
  r.Run(0, 6, {5, 5, 5, 5, 5, 5});
  // For every valid neighbour slot: dt = target time - edge time > 0.
  torch::Tensor valid = r.batch.nbr_mask.reshape({-1});
  torch::Tensor dt = r.batch.nbr_dt.masked_select(valid);
  EXPECT_GT(dt.numel(), 0);
  EXPECT_TRUE((dt > 0).all().item<bool>());
}

TEST(MemoryModelsTest, ChecksumChangesWithParameters) {
  torch::manual_seed(5);
  Model a = MakeModel(SmallOptions(ModelKind::kTgn, 0));
  torch::manual_seed(5);
  Model b = MakeModel(SmallOptions(ModelKind::kTgn, 0));
  EXPECT_DOUBLE_EQ(ParameterChecksum(*a), ParameterChecksum(*b));
  {
    torch::NoGradGuard g;
    b->parameters()[0].add_(1.0);
  }
  EXPECT_NE(ParameterChecksum(*a), ParameterChecksum(*b));
}

}  // namespace
}  // namespace mnemo::model

namespace mnemo::model {
namespace {

// DepBloom's intra-batch memory refinement: events 0..7 as one batch of 2
// micro-batches (events 0-3, 4-7). Nodes with an event in micro-batch 1
// that are read again in micro-batch 2 (0, 1, 2, 3 ... per TinyLog) are read
// through refined replicas; the refinement module gets gradients; the state
// after the batch is each node's latest replica.
TEST(MemoryModelsTest, IntraBatchRefinement) {
  for (ModelKind kind : {ModelKind::kTgn, ModelKind::kJodie}) {
    torch::manual_seed(4);
    data::EventLog log = TinyLog(2);
    data::TemporalGraph graph(log);
    data::NeighborSampler sampler(&graph, 3);
    batch::BatchBuilder builder(&log, log.num_nodes);
    ModelOptions o = SmallOptions(kind, 2);
    o.refine = true;
    Model model = MakeModel(o);
    memory::NodeMemory state;
    state.Reset(model->layout(), log.num_nodes);
    state.memory().normal_();  // memory from earlier batches (non-zero)
    std::vector<int64_t> events = {0, 1, 2, 3, 4, 5, 6, 7};
    std::vector<int32_t> negatives = {5, 4, 5, 0, 1, 2, 3, 4};
    batch::TimeGapStats stats;
    const bool jodie = kind == ModelKind::kJodie;
    batch::BatchTensors batch;
    batch::PositiveUpdate update;
    builder.Prepare(events.data(), negatives.data(), 8, nullptr, 0,
                    jodie ? nullptr : &sampler, /*chunks=*/2);
    builder.Finish(state, jodie ? &stats : nullptr, &batch, &update);
    // Micro-batch 1 touches nodes 0, 1, 2, 3; micro-batch 2 reads 0, 4, 5,
    // 2, 1, 3 (sources, destinations) and negatives 1, 2, 3, 4: replicas
    // for 0, 1, 2, 3.
    const int64_t u = batch.unique_rows.size(0);
    ASSERT_TRUE(batch.replica_self.defined());
    EXPECT_EQ(batch.replica_self.size(0), 4);
    EXPECT_EQ(batch.replica_dt.size(0), 4);
    EXPECT_EQ(batch.replica_edge_feat.sizes(), (std::vector<int64_t>{4, 2}));
    // Second micro-batch's source of event 5 (node 0) reads a replica; the
    // first micro-batch's never does.
    EXPECT_GE(batch.target_slot[5].item<int64_t>(), u);
    for (int i = 0; i < 4; ++i)
      EXPECT_LT(batch.target_slot[i].item<int64_t>(), u);
    if (jodie) {
      // JODIE's time since the memory's update: for a replica, since the
      // node's event in micro-batch 1 (not since the batch's start).
      const int32_t node = log.src[5];
      int64_t last0 = -1;
      for (int64_t e = 0; e < 4; ++e) {
        if (log.src[e] == node || log.dst[e] == node) last0 = e;
      }
      ASSERT_GE(last0, 0);
      EXPECT_FLOAT_EQ(batch.target_dt[5].item<float>(),
                      static_cast<float>(log.t[5] - log.t[last0]));
      EXPECT_FLOAT_EQ(batch.target_dt[0].item<float>(),
                      static_cast<float>(log.t[0]));  // never updated
    }
    auto out = model->Forward(state, batch);
    EXPECT_EQ(out.memory.size(0), u + 4);
    Loss(out).backward();
    int gates = 0;
    for (const auto& p : model->named_parameters()) {
      if (p.key().rfind("refine_gate", 0) != 0) continue;
      ++gates;
      ASSERT_TRUE(p.value().grad().defined()) << p.key();
      EXPECT_GT(p.value().grad().abs().sum().item<double>(), 0) << p.key();
    }
    EXPECT_EQ(gates, 2);  // weight and bias
    // Node 0's latest event (5) is in micro-batch 2: its state after the
    // batch is its replica there.
    state.Apply(update, out.memory);
    const int64_t replica0 = batch.target_slot[5].item<int64_t>();
    EXPECT_TRUE(
        torch::allclose(state.memory()[0], out.memory[replica0].detach()));
  }
}

// Under bf16 autocast the memory updater's rows are padded to a bucket
// (MemoryCell): the updated memory and the updater's gradients are those of
// the cell applied to the mail rows alone.
void ExpectPaddedCellIsTheCell(ModelKind kind) {
  torch::manual_seed(7);
  Runner r(kind, /*edge_dim=*/2);
  r.Run(0, 4, {5, 4, 5, 0});  // leaves mail on nodes 0..3
  // On until reset(), off again however the test ends.
  std::optional<platform::AutocastScope> autocast(std::in_place,
                                                  /*enabled=*/true);
  auto out = r.Run(4, 8, {2, 3, 0, 1}, /*apply=*/false);
  const batch::BatchTensors& b = r.batch;
  const int64_t rows = b.mail_slot.size(0);
  ASSERT_GT(rows, 0);
  ASSERT_NE(rows % 32, 0);  // padded
  auto params = r.model->named_parameters();
  torch::Tensor msg =
      torch::cat({r.state.mail().index_select(0, b.mail_node),
                  TimeEncoding(b.mail_dt, params["time_encoder.weight"],
                               params["time_encoder.bias"])
                      .detach()},
                 1);
  torch::Tensor prev = r.state.memory()
                           .index_select(0, b.unique_rows)
                           .index_select(0, b.mail_slot);
  std::shared_ptr<torch::nn::Module> cell =
      r.model->named_children()["memory_updater"];
  // The cell the model runs (cell_ops.h) on the mail rows alone.
  auto cell_params = cell->named_parameters();
  torch::Tensor expected =
      Cell(kind == ModelKind::kTgn ? CellKind::kGru : CellKind::kRnnTanh, msg,
           prev, cell_params["weight_ih"], cell_params["weight_hh"],
           cell_params["bias_ih"], cell_params["bias_hh"]);
  autocast.reset();
  // bf16 products of 32 and of `rows` rows may sum in a different order
  // (oneDNN picks kernels by shape): equal up to bf16 rounding.
  torch::Tensor got = out.memory.index_select(0, b.mail_slot);
  EXPECT_TRUE(torch::allclose(got, expected.to(got.scalar_type()), 1e-2, 1e-3))
      << got - expected;
  // The same gradient reaches the cell's weights through both.
  torch::Tensor probe = torch::randn_like(got);
  std::vector<torch::Tensor> weights;
  for (const auto& p : cell->parameters()) weights.push_back(p);
  auto g_model = torch::autograd::grad({(got * probe).sum()}, weights);
  auto g_cell = torch::autograd::grad(
      {(expected.to(torch::kFloat) * probe).sum()}, weights);
  for (size_t i = 0; i < weights.size(); ++i) {
    EXPECT_TRUE(torch::allclose(g_model[i], g_cell[i], 1e-2, 1e-3))
        << i << ": " << (g_model[i] - g_cell[i]).abs().max();
  }
}
TEST(MemoryModelsTest, Bf16PaddedMemoryCellIsTheCellTgn) {
  ExpectPaddedCellIsTheCell(ModelKind::kTgn);
}
TEST(MemoryModelsTest, Bf16PaddedMemoryCellIsTheCellJodie) {
  ExpectPaddedCellIsTheCell(ModelKind::kJodie);
}

// With one micro-batch there are no replicas and the refinement changes
// nothing.
TEST(MemoryModelsTest, OneChunkMeansNoRefinement) {
  torch::manual_seed(5);
  data::EventLog log = TinyLog(0);
  data::TemporalGraph graph(log);
  data::NeighborSampler sampler(&graph, 3);
  batch::BatchBuilder builder(&log, log.num_nodes);
  ModelOptions o = SmallOptions(ModelKind::kTgn, 0);
  o.refine = true;
  Model model = MakeModel(o);
  memory::NodeMemory state;
  state.Reset(model->layout(), log.num_nodes);
  std::vector<int64_t> events = {0, 1, 2, 3};
  std::vector<int32_t> negatives = {5, 4, 5, 0};
  batch::BatchTensors batch;
  batch::PositiveUpdate update;
  builder.Prepare(events.data(), negatives.data(), 4, nullptr, 0, &sampler, 1);
  builder.Finish(state, nullptr, &batch, &update);
  EXPECT_FALSE(batch.replica_self.defined());
  auto out = model->Forward(state, batch);
  EXPECT_EQ(out.memory.size(0), batch.unique_rows.size(0));
}

// The node memory may hold a subset of the graph's nodes in any row order
// (a worker holding only the nodes it trains): batches built against it
// compute exactly what they compute against a memory of every node, and
// each node's row holds the same state.
void ExpectSubsetMemoryComputesTheSame(ModelKind kind) {
  // 4 nodes beyond the 6 the stream touches; the subset holds the 6, in
  // another order than their ids.
  const std::vector<int64_t> held = {5, 3, 0, 4, 1, 2};
  torch::manual_seed(7);
  Runner full(kind, 2, {}, 4);
  torch::manual_seed(7);
  Runner subset(kind, 2, held, 4);
  ASSERT_EQ(subset.state.num_rows(), 6);
  ASSERT_EQ(full.state.num_rows(), 10);
  EXPECT_EQ(subset.state.Row(5), 0);
  EXPECT_EQ(subset.state.Row(2), 5);
  EXPECT_EQ(subset.state.Row(7), -1);
  EXPECT_FALSE(subset.state.Holds(7));
  const std::vector<std::tuple<int64_t, int64_t, std::vector<int32_t>>>
      batches = {{0, 3, {4, 5, 2}}, {3, 6, {1, 2, 3}}, {6, 8, {0, 1}}};
  for (const auto& [begin, end, negatives] : batches) {
    auto a = full.Run(begin, end, negatives);
    auto b = subset.Run(begin, end, negatives);
    EXPECT_TRUE(torch::equal(a.pos_logits, b.pos_logits)) << begin;
    EXPECT_TRUE(torch::equal(a.neg_logits, b.neg_logits)) << begin;
  }
  for (const int64_t u : held) {
    const int64_t r = subset.state.Row(u);
    EXPECT_TRUE(torch::equal(full.state.memory()[u], subset.state.memory()[r]))
        << "node " << u;
    EXPECT_TRUE(torch::equal(full.state.mail()[u], subset.state.mail()[r]));
    EXPECT_EQ(full.state.last_event()[u], subset.state.last_event()[r]);
    EXPECT_EQ(full.state.mail_time()[u], subset.state.mail_time()[r]);
    EXPECT_EQ(full.state.has_mail()[u], subset.state.has_mail()[r]);
  }
  // A batch that reads a node the memory does not hold is refused.
  EXPECT_THROW(subset.Run(0, 1, {7}), c10::Error);
}
TEST(MemoryModelsTest, SubsetMemoryComputesTheSameTgn) {
  ExpectSubsetMemoryComputesTheSame(ModelKind::kTgn);
}
TEST(MemoryModelsTest, SubsetMemoryComputesTheSameJodie) {
  ExpectSubsetMemoryComputesTheSame(ModelKind::kJodie);
}
TEST(MemoryModelsTest, SubsetMemoryComputesTheSameApan) {
  ExpectSubsetMemoryComputesTheSame(ModelKind::kApan);
}

// PairLogits scores any pairs of TargetEmbeddings' rows as Embed scores a
// batch's (source, destination) and (source, negative) (`mnemo serve`
// scores a query's candidates this way).
void ExpectPairLogitsAreEmbedsScores(ModelKind kind) {
  Runner r(kind);
  r.Run(0, 3, {4, 5, 2});
  const ModelOutput out = r.Run(3, 6, {1, 2, 3}, /*apply=*/false);
  torch::NoGradGuard no_grad;
  const UpdatedMemory updated = r.model->UpdateMemory(r.state, r.batch);
  const torch::Tensor emb = r.model->TargetEmbeddings(r.batch, updated);
  const int64_t b = r.batch.batch_size;
  const torch::Tensor src = torch::arange(b), dst = torch::arange(b, 2 * b),
                      neg = torch::arange(2 * b, 3 * b);
  EXPECT_TRUE(torch::allclose(r.model->PairLogits(emb, src, dst),
                              out.pos_logits, 1e-5, 1e-6));
  EXPECT_TRUE(torch::allclose(r.model->PairLogits(emb, src, neg),
                              out.neg_logits, 1e-5, 1e-6));
  // Any pairs: a destination scored as a source, one pair twice.
  const torch::Tensor x =
      torch::tensor({int64_t{2 * b}, int64_t{1}, int64_t{1}});
  const torch::Tensor y =
      torch::tensor({int64_t{0}, int64_t{b + 1}, int64_t{b + 1}});
  const torch::Tensor l = r.model->PairLogits(emb, x, y);
  ASSERT_EQ(l.size(0), 3);
  EXPECT_TRUE(torch::allclose(l[1], out.pos_logits[1], 1e-5, 1e-6));
  EXPECT_TRUE(torch::equal(l[1], l[2]));
}
TEST(MemoryModelsTest, PairLogitsAreEmbedsScoresTgn) {
  ExpectPairLogitsAreEmbedsScores(ModelKind::kTgn);
}
TEST(MemoryModelsTest, PairLogitsAreEmbedsScoresJodie) {
  ExpectPairLogitsAreEmbedsScores(ModelKind::kJodie);
}
TEST(MemoryModelsTest, PairLogitsAreEmbedsScoresApan) {
  ExpectPairLogitsAreEmbedsScores(ModelKind::kApan);
}

// A cache memory (a bounded working set) gives nodes rows as they come and
// takes them back: a reused row starts reset, whatever it held.
TEST(MemoryModelsTest, CacheMemoryReusesRowsReset) {
  memory::RecordLayout layout;
  layout.memory_dim = 4;
  layout.mail_dim = 3;
  layout.mailbox_slots = 2;
  memory::NodeMemory m;
  m.ResetCache(layout, 10, 3);
  EXPECT_EQ(m.num_rows(), 3);
  EXPECT_EQ(m.num_nodes(), 10);
  EXPECT_EQ(m.free_rows(), 3);
  EXPECT_TRUE(m.holds_subset());
  m.Admit({7, 2});
  EXPECT_EQ(m.Row(7), 0);
  EXPECT_EQ(m.Row(2), 1);
  EXPECT_EQ(m.Row(3), -1);
  EXPECT_EQ(m.free_rows(), 1);
  const int64_t r = m.Row(7);
  m.memory()[r].fill_(1.0);
  m.mail()[r].fill_(2.0);
  memory::NodeMemoryTestPeer(&m).last_event()[r] = 5;
  memory::NodeMemoryTestPeer(&m).has_mail()[r] = 1;
  memory::NodeMemoryTestPeer(&m).mail_time()[r] =
      memory::NodeMemoryTestPeer(&m).last_update()[r] = 9.0;
  memory::NodeMemoryTestPeer(&m).slot_time()[r * 2 + 1] = 9.0;
  memory::NodeMemoryTestPeer(&m).mails_received()[r] = 3;
  EXPECT_FALSE(m.IsReset(r));
  m.Release({7});
  EXPECT_EQ(m.Row(7), -1);
  EXPECT_EQ(m.held()[r], -1);
  m.Admit({4});
  const int64_t q = m.Row(4);
  EXPECT_EQ(q, r);  // the freed row, reset
  EXPECT_TRUE(m.IsReset(q));
  EXPECT_EQ(m.memory()[q].abs().sum().item<float>(), 0.0f);
  EXPECT_EQ(m.mail()[q].abs().sum().item<float>(), 0.0f);
  EXPECT_EQ(m.mail_time()[q], 0.0);
  EXPECT_EQ(m.last_update()[q], 0.0);
  EXPECT_EQ(m.slot_time()[q * 2 + 1], 0.0);
  EXPECT_EQ(m.mails_received()[q], 0);
  EXPECT_EQ(m.held()[q], 4);
  m.Admit({9});
  EXPECT_THROW(m.Admit({8}), c10::Error);    // no free row
  EXPECT_THROW(m.Release({8}), c10::Error);  // not held
  EXPECT_THROW(m.Admit({9}), c10::Error);    // held already
}

}  // namespace
}  // namespace mnemo::model
