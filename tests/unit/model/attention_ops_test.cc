#include "trainer/model/attention_ops.h"

#include <ATen/autocast_mode.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

namespace mnemo::model {
namespace {

// The same attention from plain LibTorch operators (what the kernels
// replace).
NeighbourAttentionResult Reference(const std::vector<torch::Tensor>& parts,
                                   const torch::Tensor& y,
                                   const torch::Tensor& bias,
                                   const torch::Tensor& mask,
                                   const torch::Tensor& keep) {
  torch::Tensor x = torch::cat(parts, 2);               // [N,K,W]
  torch::Tensor s = torch::bmm(x, y.transpose(1, 2)) +  // [N,K,H]
                    bias.unsqueeze(1);
  s = s.masked_fill(mask.logical_not().unsqueeze(-1),
                    -std::numeric_limits<float>::infinity());
  torch::Tensor a = torch::softmax(s, 1);
  if (keep.defined()) a = a * keep;
  return {torch::bmm(a.transpose(1, 2), x), a.sum(1)};
}

// A neighbour mask in which some targets see fewer neighbours and target 3
// only slot 0 (what the model opens for a target without neighbours), and
// with `dropout` a keep mask (p = 0.2, scaled), drawn in that order.
struct MaskAndKeep {
  torch::Tensor mask, keep;
};
MaskAndKeep DrawMaskAndKeep(int64_t N, int64_t K, int64_t H, bool dropout) {
  MaskAndKeep m;
  m.mask = torch::rand({N, K}) < 0.7;
  m.mask.select(1, 0).fill_(true);
  m.mask[3].fill_(false);
  m.mask[3][0] = true;
  if (dropout) {
    m.keep = (torch::rand({N, K, H}) < 0.8).to(torch::kFloat) / 0.8;
  }
  return m;
}

struct Case {
  std::vector<int64_t> widths;
  bool dropout;
  int64_t heads = 3;
};

class NeighbourAttentionTest : public ::testing::TestWithParam<Case> {};

TEST_P(NeighbourAttentionTest, MatchesPlainOperatorsWithGradients) {
  const Case c = GetParam();
  torch::manual_seed(7);
  const int64_t N = 37, K = 5, H = c.heads;
  int64_t W = 0;
  std::vector<torch::Tensor> parts, ref_parts;
  for (int64_t w : c.widths) {
    parts.push_back(torch::randn({N, K, w}).requires_grad_());
    ref_parts.push_back(parts.back().detach().clone().requires_grad_());
    W += w;
  }
  torch::Tensor y = torch::randn({N, H, W}).requires_grad_();
  torch::Tensor bias = torch::randn({N, H}).requires_grad_();
  torch::Tensor ry = y.detach().clone().requires_grad_();
  torch::Tensor rb = bias.detach().clone().requires_grad_();
  const auto [mask, keep] = DrawMaskAndKeep(N, K, H, c.dropout);

  NeighbourAttentionResult got = NeighbourAttention(parts, y, bias, mask, keep);
  NeighbourAttentionResult want = Reference(ref_parts, ry, rb, mask, keep);
  EXPECT_TRUE(torch::allclose(got.mix, want.mix, 1e-4, 1e-5));
  EXPECT_TRUE(torch::allclose(got.weight, want.weight, 1e-5, 1e-6));

  // Gradients of an arbitrary function of both outputs.
  torch::Tensor gm = torch::randn({N, H, W}), gw = torch::randn({N, H});
  ((got.mix * gm).sum() + (got.weight * gw).sum()).backward();
  ((want.mix * gm).sum() + (want.weight * gw).sum()).backward();
  for (size_t i = 0; i < parts.size(); ++i) {
    EXPECT_TRUE(
        torch::allclose(parts[i].grad(), ref_parts[i].grad(), 1e-4, 1e-4))
        << "part " << i << " max diff "
        << (parts[i].grad() - ref_parts[i].grad()).abs().max().item<float>();
  }
  EXPECT_TRUE(torch::allclose(y.grad(), ry.grad(), 1e-4, 1e-4))
      << (y.grad() - ry.grad()).abs().max().item<float>();
  EXPECT_TRUE(torch::allclose(bias.grad(), rb.grad(), 1e-4, 1e-4))
      << (bias.grad() - rb.grad()).abs().max().item<float>();

  // The operators' version (what a GPU runs) gives the same values and
  // gradients.
  std::vector<torch::Tensor> op_parts;
  for (const auto& p : ref_parts) {
    op_parts.push_back(p.detach().clone().requires_grad_());
  }
  torch::Tensor oy = ry.detach().clone().requires_grad_();
  torch::Tensor ob = rb.detach().clone().requires_grad_();
  NeighbourAttentionResult ops =
      NeighbourAttentionOperators(op_parts, oy, ob, mask, keep);
  EXPECT_EQ(ops.mix.scalar_type(), torch::kFloat);
  EXPECT_TRUE(torch::allclose(ops.mix, want.mix, 1e-5, 1e-6));
  EXPECT_TRUE(torch::allclose(ops.weight, want.weight, 1e-5, 1e-6));
  ((ops.mix * gm).sum() + (ops.weight * gw).sum()).backward();
  for (size_t i = 0; i < op_parts.size(); ++i) {
    EXPECT_TRUE(
        torch::allclose(op_parts[i].grad(), ref_parts[i].grad(), 1e-5, 1e-5));
  }
  EXPECT_TRUE(torch::allclose(oy.grad(), ry.grad(), 1e-5, 1e-5));
  EXPECT_TRUE(torch::allclose(ob.grad(), rb.grad(), 1e-5, 1e-5));
}

INSTANTIATE_TEST_SUITE_P(
    Parts, NeighbourAttentionTest,
    ::testing::Values(Case{{16}, false}, Case{{12, 9}, false},
                      Case{{12, 9}, true}, Case{{8, 7, 3}, true},
                      Case{{12, 9}, true, 2}, Case{{8, 7, 3}, true, 2},
                      Case{{21}, true, 1}, Case{{8, 7, 3}, false, 1}));

// Softmax does not see a bias shared by a target's scores of one head:
// without a bias the results and the gradients of x and y are those with
// any bias, and there is no bias gradient to compute (TGN's key bias).
TEST(NeighbourAttentionTest, NoBiasIsAnyBias) {
  torch::manual_seed(9);
  const int64_t N = 23, K = 6, H = 2, W = 11;
  torch::Tensor x = torch::randn({N, K, W}).requires_grad_();
  torch::Tensor y = torch::randn({N, H, W}).requires_grad_();
  torch::Tensor bias = torch::randn({N, H}) * 3;
  torch::Tensor mask = torch::rand({N, K}) < 0.7;
  mask.select(1, 0).fill_(true);
  torch::Tensor keep = (torch::rand({N, K, H}) < 0.8).to(torch::kFloat) / 0.8;
  torch::Tensor x2 = x.detach().clone().requires_grad_();
  torch::Tensor y2 = y.detach().clone().requires_grad_();
  for (bool cpu_kernel : {true, false}) {
    auto run = [&](const torch::Tensor& xi, const torch::Tensor& yi,
                   const torch::Tensor& b) {
      return cpu_kernel ? NeighbourAttention({xi}, yi, b, mask, keep)
                        : NeighbourAttentionOperators({xi}, yi, b, mask, keep);
    };
    NeighbourAttentionResult none = run(x, y, torch::Tensor());
    NeighbourAttentionResult with = run(x2, y2, bias);
    EXPECT_TRUE(torch::allclose(none.mix, with.mix, 1e-5, 1e-5)) << cpu_kernel;
    EXPECT_TRUE(torch::allclose(none.weight, with.weight, 1e-5, 1e-6));
    torch::Tensor gm = torch::randn({N, H, W});
    (none.mix * gm).sum().backward();
    (with.mix * gm).sum().backward();
    EXPECT_TRUE(torch::allclose(x.grad(), x2.grad(), 1e-4, 1e-5)) << cpu_kernel;
    EXPECT_TRUE(torch::allclose(y.grad(), y2.grad(), 1e-4, 1e-5)) << cpu_kernel;
    for (torch::Tensor t : {x, y, x2, y2}) t.mutable_grad() = torch::Tensor();
  }
}

TEST(NeighbourAttentionTest, Bf16InputsGiveFloatResultsAndGradients) {
  torch::manual_seed(8);
  torch::Tensor x =
      torch::randn({4, 3, 16}).to(torch::kBFloat16).requires_grad_();
  torch::Tensor y =
      torch::randn({4, 2, 16}).to(torch::kBFloat16).requires_grad_();
  torch::Tensor bias = torch::zeros({4, 2});
  torch::Tensor mask = torch::ones({4, 3}, torch::kBool);
  auto out = NeighbourAttention({x}, y, bias, mask, {});
  EXPECT_EQ(out.mix.scalar_type(), torch::kFloat);
  out.mix.sum().backward();
  EXPECT_EQ(x.grad().scalar_type(), torch::kBFloat16);
  EXPECT_EQ(y.grad().scalar_type(), torch::kBFloat16);
}

TEST(TimeEncodingTest, MatchesCosOfLinearWithGradients) {
  torch::manual_seed(9);
  torch::Tensor dt = torch::rand({50}) * 1000;
  torch::Tensor w = torch::randn({12, 1}).mul_(0.01).requires_grad_();
  torch::Tensor b = torch::randn({12}).requires_grad_();
  torch::Tensor rw = w.detach().clone().requires_grad_();
  torch::Tensor rb = b.detach().clone().requires_grad_();
  torch::Tensor got = TimeEncoding(dt, w, b);
  torch::Tensor want =
      torch::cos(torch::nn::functional::linear(dt.unsqueeze(1), rw, rb));
  EXPECT_TRUE(torch::allclose(got, want, 1e-5, 1e-5));
  torch::Tensor g = torch::randn({50, 12});
  (got * g).sum().backward();
  (want * g).sum().backward();
  EXPECT_TRUE(torch::allclose(w.grad(), rw.grad(), 1e-3, 1e-3))
      << w.grad() << rw.grad();
  EXPECT_TRUE(torch::allclose(b.grad(), rb.grad(), 1e-4, 1e-4));

  // The operators' version (what a GPU runs): the same, and float32 under
  // bf16 autocast.
  torch::Tensor ow = w.detach().clone().requires_grad_();
  torch::Tensor ob = b.detach().clone().requires_grad_();
  torch::Tensor ops;
  {
    at::autocast::set_autocast_enabled(at::kCPU, true);
    ops = TimeEncodingOperators(dt, ow, ob);
    at::autocast::set_autocast_enabled(at::kCPU, false);
  }
  EXPECT_EQ(ops.scalar_type(), torch::kFloat);
  EXPECT_TRUE(torch::allclose(ops, want, 1e-5, 1e-5));
  (ops * g).sum().backward();
  EXPECT_TRUE(torch::allclose(ow.grad(), rw.grad(), 1e-3, 1e-3));
  EXPECT_TRUE(torch::allclose(ob.grad(), rb.grad(), 1e-4, 1e-4));
}

// The time encoding's own sin/cos (attention_ops.cc) against double
// precision, for arguments up to 2^36 (time gaps in seconds or milliseconds
// times w = 1; rows from 2^29 on take std::cos): dt * w is exact here (w a
// power of two, b = 0), so z is known exactly.
TEST(TimeEncodingTest, AccurateOverWideArguments) {
  std::vector<float> dts;
  for (int i = 0; i < 4000; ++i) {
    dts.push_back(static_cast<float>(std::ldexp(1.0 + i / 4000.0, i % 37)));
  }
  dts.push_back(0.f);
  dts.push_back(-12345.5f);
  const int64_t T = 19;  // two vectors of 8 and a scalar tail
  torch::Tensor w = torch::empty({T, 1}), b = torch::zeros({T});
  for (int64_t j = 0; j < T; ++j)
    w[j][0] = std::ldexp(1.f, -static_cast<int>(j));
  torch::Tensor dt = torch::tensor(dts);
  torch::Tensor b_grad = b.clone().requires_grad_();
  torch::Tensor got = TimeEncoding(dt, w, b_grad);  // also computes sin
  torch::Tensor no_grad = TimeEncoding(dt, w, b);   // cos only
  ASSERT_TRUE(torch::equal(got.detach(), no_grad));
  // The backward pass uses the sin: d/db_j sum(cos(z)) = -sum_n sin(z_nj).
  got.sum().backward();
  auto g = no_grad.accessor<float, 2>();
  auto gb = b_grad.grad().accessor<float, 1>();
  double worst = 0;
  for (int64_t j = 0; j < T; ++j) {
    double sin_sum = 0;
    for (size_t n = 0; n < dts.size(); ++n) {
      const double z = static_cast<double>(dts[n]) * std::ldexp(1.0, -j);
      worst = std::max(worst, std::abs(g[n][j] - std::cos(z)));
      sin_sum += std::sin(z);
    }
    EXPECT_NEAR(gb[j], -sin_sum, 2e-3) << j;
  }
  EXPECT_LT(worst, 2.5e-7);
}

// Rows whose arguments leave the fast path's range (nanosecond timestamps)
// or are NaN take std::cos.
TEST(TimeEncodingTest, HugeAndNaNGapsTakeTheLibraryPath) {
  torch::Tensor dt = torch::tensor({1.7e18f, NAN, 3.f});
  torch::Tensor w = torch::tensor({1.f, 1e-9f}).view({2, 1});
  torch::Tensor b = torch::tensor({0.5f, 0.f});
  torch::Tensor got = TimeEncoding(dt, w, b);
  for (int j = 0; j < 2; ++j) {
    const float w_j = w[j][0].item<float>(), b_j = b[j].item<float>();
    EXPECT_FLOAT_EQ(got[0][j].item<float>(), std::cos(1.7e18f * w_j + b_j));
    EXPECT_TRUE(std::isnan(got[1][j].item<float>()));
    EXPECT_NEAR(got[2][j].item<float>(), std::cos(3.0 * w_j + b_j), 2.5e-7);
  }
}

TEST(TimeEncodingTest, Float32UnderBf16Autocast) {
  torch::Tensor w = torch::randn({12, 1}).requires_grad_();
  torch::Tensor b = torch::randn({12}).requires_grad_();
  torch::Tensor out;
  {
    at::autocast::set_autocast_enabled(at::kCPU, true);
    out = TimeEncoding(torch::rand({5}), w, b);
    at::autocast::set_autocast_enabled(at::kCPU, false);
  }
  EXPECT_EQ(out.scalar_type(), torch::kFloat);
  out.sum().backward();
  EXPECT_EQ(w.grad().scalar_type(), torch::kFloat);
}

// The gathered attention is the composition it replaces: memory rows
// gathered at their slots (repeated slots among them), the time encoding of
// the gaps and edge features as parts, with the same values and the same
// gradients of memory, the encoding's parameters, edge features and y.
class GatheredAttentionTest : public ::testing::TestWithParam<Case> {};

TEST_P(GatheredAttentionTest, IsTheGatherEncodeAttendComposition) {
  const Case c = GetParam();  // widths: memory, time, edge (optional)
  torch::manual_seed(11);
  const int64_t N = 41, K = 6, H = 2, R = 23;
  const int64_t M = c.widths[0], T = c.widths[1];
  const int64_t E = c.widths.size() > 2 ? c.widths[2] : 0;
  auto leaf = [](const torch::Tensor& t) {
    return t.detach().clone().requires_grad_();
  };
  torch::Tensor memory = torch::randn({R, M}).requires_grad_();
  torch::Tensor slot = torch::randint(R, {N * K}, torch::kLong);
  // Gaps of real streams: 0 to a month in seconds.
  torch::Tensor dt = torch::rand({N * K}) * 2.7e6;
  dt.narrow(0, 0, 7).zero_();
  torch::Tensor tw = (torch::randn({T, 1}) * 0.1).requires_grad_();
  tw.data()[0][0] = 1.0;  // TGN's fastest frequency
  torch::Tensor tb = torch::randn({T}).requires_grad_();
  torch::Tensor edge = E > 0 ? torch::randn({N, K, E}) : torch::Tensor();
  if (E > 0) edge.requires_grad_();
  const int64_t W = M + T + E;
  torch::Tensor y = torch::randn({N, H, W}).requires_grad_();
  const auto [mask, keep] = DrawMaskAndKeep(N, K, H, c.dropout);

  NeighbourRows rows{memory, slot, dt, tw, tb, edge};
  NeighbourAttentionResult got =
      GatheredNeighbourAttention(rows, y, mask, keep);

  torch::Tensor rm = leaf(memory), rtw = leaf(tw), rtb = leaf(tb), ry = leaf(y);
  torch::Tensor re = E > 0 ? leaf(edge) : torch::Tensor();
  std::vector<torch::Tensor> parts = {
      rm.index_select(0, slot).view({N, K, M}),
      TimeEncoding(dt, rtw, rtb).view({N, K, T})};
  if (E > 0) parts.push_back(re);
  NeighbourAttentionResult want =
      NeighbourAttention(parts, ry, torch::Tensor(), mask, keep);
  // The same kernels on the same values: equal, not close.
  EXPECT_TRUE(torch::equal(got.mix, want.mix))
      << (got.mix - want.mix).abs().max().item<float>();
  EXPECT_TRUE(torch::equal(got.weight, want.weight));

  torch::Tensor gm = torch::randn({N, H, W}), gw = torch::randn({N, H});
  ((got.mix * gm).sum() + (got.weight * gw).sum()).backward();
  ((want.mix * gm).sum() + (want.weight * gw).sum()).backward();
  auto expect_close = [](const char* what, const torch::Tensor& a,
                         const torch::Tensor& b, double rtol, double atol) {
    ASSERT_TRUE(a.defined()) << what;
    EXPECT_TRUE(torch::allclose(a, b, rtol, atol))
        << what << " max diff " << (a - b).abs().max().item<float>()
        << " of max " << b.abs().max().item<float>();
  };
  expect_close("memory", memory.grad(), rm.grad(), 1e-5, 1e-5);
  expect_close("y", y.grad(), ry.grad(), 0, 0);
  // Sums over rows of dt * sin * g, with dt up to 2.7e6: another order of
  // the same float sums.
  expect_close("time_w", tw.grad(), rtw.grad(), 1e-4,
               1e-5 * rtw.grad().abs().max().item<double>());
  expect_close("time_b", tb.grad(), rtb.grad(), 1e-4, 1e-5);
  if (E > 0) expect_close("edge", edge.grad(), re.grad(), 0, 0);
}

INSTANTIATE_TEST_SUITE_P(Parts, GatheredAttentionTest,
                         ::testing::Values(Case{{16, 12}, false},
                                           Case{{16, 12}, true},
                                           Case{{12, 9, 5}, true}));

// Data that wants no gradient gets none, and the other gradients are
// unchanged (edge features, and the encoding under no_grad parameters).
TEST(GatheredAttentionTest, DataWithoutGradientGetsNone) {
  torch::manual_seed(3);
  const int64_t N = 9, K = 4, H = 2, R = 5, M = 8, T = 6, E = 3;
  torch::Tensor memory = torch::randn({R, M}).requires_grad_();
  torch::Tensor tw = torch::randn({T, 1}), tb = torch::randn({T});
  torch::Tensor edge = torch::randn({N, K, E});
  torch::Tensor y = torch::randn({N, H, M + T + E}).requires_grad_();
  torch::Tensor mask = torch::ones({N, K}, torch::kBool);
  NeighbourRows rows{memory,
                     torch::randint(R, {N * K}, torch::kLong),
                     torch::rand({N * K}) * 100,
                     tw,
                     tb,
                     edge};
  NeighbourAttentionResult got =
      GatheredNeighbourAttention(rows, y, mask, torch::Tensor());
  got.mix.sum().backward();
  EXPECT_TRUE(memory.grad().defined());
  EXPECT_TRUE(y.grad().defined());
  EXPECT_FALSE(tw.grad().defined());
  EXPECT_FALSE(edge.grad().defined());
  // Without gradients at all (evaluation): the same values.
  torch::NoGradGuard no_grad;
  NeighbourAttentionResult eval =
      GatheredNeighbourAttention(rows, y, mask, torch::Tensor());
  EXPECT_TRUE(torch::equal(eval.mix, got.mix.detach()));
}

TEST(GatheredAttentionTest, WrongShapesNameTheArgument) {
  const int64_t N = 4, K = 3, H = 2;
  NeighbourRows rows{torch::randn({5, 8}),  torch::zeros({N * K}, torch::kLong),
                     torch::zeros({N * K}), torch::randn({6, 1}),
                     torch::randn({6}),     torch::Tensor()};
  torch::Tensor y = torch::randn({N, H, 14});
  torch::Tensor mask = torch::ones({N, K}, torch::kBool);
  auto message = [&](const NeighbourRows& r, const torch::Tensor& yy) {
    try {
      GatheredNeighbourAttention(r, yy, mask, torch::Tensor());
    } catch (const c10::Error& e) {
      return std::string(e.what_without_backtrace());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message(rows, y).find("no error"), 0u);
  NeighbourRows bad = rows;
  bad.slot = torch::zeros({N * K - 1}, torch::kLong);
  EXPECT_NE(message(bad, y).find("slot must be"), std::string::npos);
  bad = rows;
  bad.dt = torch::zeros({N, K});
  EXPECT_NE(message(bad, y).find("dt must be"), std::string::npos);
  bad = rows;
  bad.time_b = torch::randn({5});
  EXPECT_NE(message(bad, y).find("time_w [T, 1] and time_b"),
            std::string::npos);
  EXPECT_NE(message(rows, torch::randn({N, H, 15})).find("15"),
            std::string::npos);
}

TEST(NeighbourAttentionTest, WrongShapesNameTheArgument) {
  torch::Tensor x = torch::randn({4, 3, 16}), y = torch::randn({4, 2, 15});
  torch::Tensor bias = torch::zeros({4, 2});
  torch::Tensor mask = torch::ones({4, 3}, torch::kBool);
  try {
    NeighbourAttention({x}, y, bias, mask, {});
    FAIL() << "accepted a y narrower than x";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("16 wide"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(NeighbourAttention({x}, torch::randn({4, 2, 16}), bias,
                                  torch::ones({4, 3}), {}),
               c10::Error);  // mask not bool
}

}  // namespace
}  // namespace mnemo::model
