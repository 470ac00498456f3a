// TGAT (trainer/model/tgat.h): its attention layer against the equations on
// tiny inputs, the two-hop batches it reads, gradients to every parameter.
#include "trainer/model/tgat.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <string>

#include "trainer/batch/builder.h"
#include "trainer/data/event_log.h"
#include "trainer/data/neighbor_sampler.h"

namespace mnemo::model {
namespace {

// 6 nodes, 8 events at t = 1..8, 2-dim edge features.
data::EventLog TinyLog() {
  data::EventLog log;
  log.src = std::vector<int32_t>{0, 2, 0, 1, 4, 0, 2, 5};
  log.dst = std::vector<int32_t>{1, 3, 3, 2, 5, 1, 4, 3};
  log.t = std::vector<double>{1, 2, 3, 4, 5, 6, 7, 8};
  log.num_nodes = 6;
  log.edge_feature_dim = 2;
  for (size_t i = 0; i < log.src.size() * 2; ++i) {
    log.edge_features.push_back(0.1f * i);
  }
  return log;
}

ModelOptions Small(int layers) {
  ModelOptions o;
  o.kind = ModelKind::kTgat;
  o.time_dim = 6;
  o.embedding_dim = 8;
  o.edge_dim = 2;
  o.heads = 2;
  o.dropout = 0.0;
  o.layers = layers;
  return o;
}

struct Batch {
  data::EventLog log = TinyLog();
  data::TemporalGraph graph{log};
  data::NeighborSampler sampler{&graph, 3};
  batch::BatchBuilder builder{&log, log.num_nodes};
  memory::NodeMemory state;
  batch::BatchTensors tensors;
  batch::PositiveUpdate update;

  // Events [begin, end) with negatives, read by `model`.
  void Build(const Model& model, int64_t begin, int64_t end,
             std::vector<int32_t> negatives) {
    state.Reset(model->layout(), log.num_nodes);
    builder.set_needs(model->needs());
    std::vector<int64_t> events;
    for (int64_t e = begin; e < end; ++e) events.push_back(e);
    builder.Build(events.data(), negatives.data(), events.size(), state,
                  &sampler, nullptr, &tensors, &update);
  }
};

TEST(TgatTest, KeepsNoMemoryAndReadsTwoHops) {
  torch::manual_seed(1);
  Model model = MakeModel(Small(2));
  EXPECT_EQ(model->layout().memory_dim, 0);
  EXPECT_EQ(model->layout().mail_dim, 0);
  EXPECT_EQ(model->layout().RecordFloats(), 3);
  EXPECT_TRUE(model->needs().neighbors);
  EXPECT_EQ(model->needs().neighbor_hops, 2);
  Batch b;
  b.Build(model, 6, 8, {5, 0});
  const batch::BatchTensors& t = b.tensors;
  const int64_t n = 6, k = 3;  // 3B targets, k slots
  ASSERT_EQ(t.nbr2_mask.sizes(), (std::vector<int64_t>{n * k, k}));
  ASSERT_EQ(t.nbr2_dt.size(0), n * k * k);
  ASSERT_EQ(t.nbr2_edge_feat.sizes(), (std::vector<int64_t>{n * k * k, 2}));
  // Second-hop neighbours are strictly before their first-hop edge; a
  // padding slot has none.
  auto mask1 = t.nbr_mask.reshape({-1});
  for (int64_t s = 0; s < n * k; ++s) {
    for (int j = 0; j < k; ++j) {
      if (!t.nbr2_mask[s][j].item<bool>()) continue;
      EXPECT_TRUE(mask1[s].item<bool>()) << s;
      EXPECT_GT(t.nbr2_dt[s * k + j].item<float>(), 0) << s << "," << j;
    }
  }
  EXPECT_GT(t.nbr2_mask.sum().item<int64_t>(), 0);
  ModelOutput out = model->Forward(b.state, t);
  EXPECT_EQ(out.pos_logits.sizes(), (std::vector<int64_t>{2}));
  EXPECT_EQ(out.neg_logits.sizes(), (std::vector<int64_t>{2}));
  EXPECT_EQ(out.memory.size(1), 0);
  EXPECT_TRUE(torch::isfinite(out.pos_logits).all().item<bool>());
}

TEST(TgatTest, GradientsReachEveryParameter) {
  for (int layers : {1, 2}) {
    torch::manual_seed(2);
    Model model = MakeModel(Small(layers));
    Batch b;
    b.Build(model, 5, 8, {0, 1, 2});
    Loss(model->Forward(b.state, b.tensors)).backward();
    for (const auto& p : model->named_parameters()) {
      ASSERT_TRUE(p.value().grad().defined()) << layers << " " << p.key();
      EXPECT_GT(p.value().grad().abs().sum().item<double>(), 0)
          << layers << " " << p.key();
    }
  }
}

// One layer against its equations, written out: q = W_q [h, cos(w*0+b)],
// k/v = W_{k,v} [h_nbr, edge, cos(w*dt+b)], scores LeakyReLU_0.2(q_h . k_h)
// per head, softmax over the valid slots, out = LayerNorm(ReLU(W_out [sum
// att v, h])); a query with no valid slot aggregates nothing.
TEST(TgatTest, LayerIsItsEquations) {
  torch::manual_seed(3);
  const int64_t n = 3, k = 2, node = 4, edge = 2, time = 3, heads = 2,
                out_dim = 4;
  TemporalAttentionLayer layer(node, edge, time, heads, /*dropout=*/0.0,
                               out_dim);
  layer->eval();
  torch::Tensor self_h = torch::randn({n, node});
  torch::Tensor nbr_h = torch::randn({n * k, node});
  torch::Tensor nbr_edge = torch::randn({n * k, edge});
  torch::Tensor nbr_dt = torch::rand({n * k}) * 10;
  torch::Tensor mask =
      torch::tensor({1, 1, 1, 0, 0, 0}, torch::kBool).view({n, k});
  torch::Tensor got = layer->forward(self_h, nbr_h, nbr_edge, nbr_dt, mask);

  torch::NoGradGuard no_grad;
  std::map<std::string, torch::Tensor> p;
  for (const auto& item : layer->named_parameters()) {
    p[item.key()] = item.value();
  }
  auto linear = [&](const torch::Tensor& x, const std::string& name) {
    return x.matmul(p.at(name + ".weight").t()) + p.at(name + ".bias");
  };
  auto enc = [&](double dt) {
    return torch::cos(linear(torch::full({1, 1}, dt), "time_encoder"))[0];
  };
  const int64_t dh = out_dim / heads;
  for (int64_t i = 0; i < n; ++i) {
    torch::Tensor q =
        linear(torch::cat({self_h[i], enc(0)}).unsqueeze(0), "w_q")[0];
    torch::Tensor agg = torch::zeros({out_dim});
    std::vector<torch::Tensor> keys, values;
    for (int64_t j = 0; j < k; ++j) {
      if (!mask[i][j].item<bool>()) continue;
      const int64_t s = i * k + j;
      torch::Tensor in =
          torch::cat({nbr_h[s], nbr_edge[s], enc(nbr_dt[s].item<double>())})
              .unsqueeze(0);
      keys.push_back(linear(in, "w_k")[0]);
      values.push_back(linear(in, "w_v")[0]);
    }
    for (int64_t h = 0; h < heads && !keys.empty(); ++h) {
      std::vector<double> score;
      for (const auto& key : keys) {
        double s = (q.narrow(0, h * dh, dh) * key.narrow(0, h * dh, dh))
                       .sum()
                       .item<double>();
        score.push_back(s > 0 ? s : 0.2 * s);
      }
      double mx = -std::numeric_limits<double>::infinity(), z = 0;
      for (double s : score) mx = std::max(mx, s);
      for (double s : score) z += std::exp(s - mx);
      for (size_t j = 0; j < keys.size(); ++j) {
        agg.narrow(0, h * dh, dh) +=
            std::exp(score[j] - mx) / z * values[j].narrow(0, h * dh, dh);
      }
    }
    torch::Tensor pre = torch::relu(
        linear(torch::cat({agg, self_h[i]}).unsqueeze(0), "w_out")[0]);
    torch::Tensor mean = pre.mean(), var = pre.var(/*unbiased=*/false);
    torch::Tensor want =
        (pre - mean) / torch::sqrt(var + 1e-5) * p.at("norm.weight") +
        p.at("norm.bias");
    EXPECT_TRUE(torch::allclose(got[i], want, 1e-4, 1e-5))
        << i << ": " << got[i] << want;
  }
}

// Dropout acts only in training: evaluation is deterministic.
TEST(TgatTest, EvaluationIsDeterministic) {
  torch::manual_seed(4);
  ModelOptions o = Small(2);
  o.dropout = 0.5;
  Model model = MakeModel(o);
  Batch b;
  b.Build(model, 4, 8, {0, 1, 2, 3});
  model->eval();
  auto a = model->Forward(b.state, b.tensors).pos_logits;
  auto c = model->Forward(b.state, b.tensors).pos_logits;
  EXPECT_TRUE(torch::equal(a, c));
  model->train();
  auto d = model->Forward(b.state, b.tensors).pos_logits;
  EXPECT_FALSE(torch::equal(a, d));
}

}  // namespace
}  // namespace mnemo::model
