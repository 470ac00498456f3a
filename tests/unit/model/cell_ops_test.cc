#include "trainer/model/cell_ops.h"

#include <ATen/autocast_mode.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "trainer/platform/autocast.h"

namespace mnemo::model {
namespace {

struct Inputs {
  torch::Tensor x, h, w_ih, w_hh, b_ih, b_hh;
  std::vector<torch::Tensor> all() const {
    return {x, h, w_ih, w_hh, b_ih, b_hh};
  }
  Inputs Clone() const {
    Inputs c;
    c.x = x.detach().clone().requires_grad_();
    c.h = h.detach().clone().requires_grad_();
    c.w_ih = w_ih.detach().clone().requires_grad_();
    c.w_hh = w_hh.detach().clone().requires_grad_();
    c.b_ih = b_ih.detach().clone().requires_grad_();
    c.b_hh = b_hh.detach().clone().requires_grad_();
    return c;
  }
};

Inputs Random(CellKind kind, int64_t N, int64_t X, int64_t M, double scale) {
  const int64_t G = kind == CellKind::kGru ? 3 : 1;
  Inputs in;
  in.x = (torch::randn({N, X}) * scale).requires_grad_();
  in.h = torch::randn({N, M}).tanh().requires_grad_();
  const double bound = 1.0 / std::sqrt(static_cast<double>(M));
  in.w_ih = (torch::rand({G * M, X}) * 2 - 1).mul(bound).requires_grad_();
  in.w_hh = (torch::rand({G * M, M}) * 2 - 1).mul(bound).requires_grad_();
  in.b_ih = (torch::rand({G * M}) * 2 - 1).mul(bound).requires_grad_();
  in.b_hh = (torch::rand({G * M}) * 2 - 1).mul(bound).requires_grad_();
  return in;
}

double MaxDiff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kDouble) - b.to(torch::kDouble))
      .abs()
      .max()
      .item<double>();
}

struct Case {
  CellKind kind;
  int64_t rows;  // 0: no rows at all
  double scale;  // of x: large values saturate the gates
};

class CellTest : public ::testing::TestWithParam<Case> {};

// Forward and every gradient against LibTorch's cell, in double precision
// (the reference) and float32.
TEST_P(CellTest, MatchesLibTorchsCellWithGradients) {
  const Case c = GetParam();
  torch::manual_seed(11);
  const int64_t X = 53, M = 37;
  Inputs in = Random(c.kind, c.rows, X, M, c.scale);
  Inputs ref = in.Clone();
  for (torch::Tensor* t :
       {&ref.x, &ref.h, &ref.w_ih, &ref.w_hh, &ref.b_ih, &ref.b_hh}) {
    *t = t->detach().to(torch::kDouble).requires_grad_();
  }
  torch::Tensor out =
      Cell(c.kind, in.x, in.h, in.w_ih, in.w_hh, in.b_ih, in.b_hh);
  torch::Tensor expected =
      c.kind == CellKind::kGru
          ? torch::gru_cell(ref.x, ref.h, ref.w_ih, ref.w_hh, ref.b_ih,
                            ref.b_hh)
          : torch::rnn_tanh_cell(ref.x, ref.h, ref.w_ih, ref.w_hh, ref.b_ih,
                                 ref.b_hh);
  ASSERT_EQ(out.scalar_type(), torch::kFloat);
  ASSERT_EQ(out.sizes(), expected.sizes());
  if (c.rows == 0) return;
  // As close to double precision as LibTorch's own float32 cell (whose
  // products round alike: large inputs carry their products' rounding).
  {
    torch::NoGradGuard no_grad;
    const torch::Tensor lib =
        CellOperators(c.kind, in.x, in.h, in.w_ih, in.w_hh, in.b_ih, in.b_hh);
    const double lib_error = MaxDiff(lib, expected);
    EXPECT_LT(MaxDiff(out, expected), std::max(2e-6, 2 * lib_error))
        << "LibTorch's float32 cell: " << lib_error;
  }
  const torch::Tensor g = torch::randn({c.rows, M});
  (out * g).sum().backward();
  (expected * g.to(torch::kDouble)).sum().backward();
  const std::vector<torch::Tensor> got = in.all(), want = ref.all();
  const char* names[] = {"x", "h", "w_ih", "w_hh", "b_ih", "b_hh"};
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_TRUE(got[i].grad().defined()) << names[i];
    const double tol =
        1e-5 * std::max(1.0, want[i].grad().abs().max().item<double>());
    EXPECT_LT(MaxDiff(got[i].grad(), want[i].grad()), tol) << names[i];
  }
}

INSTANTIATE_TEST_SUITE_P(Cells, CellTest,
                         ::testing::Values(Case{CellKind::kGru, 41, 1.0},
                                           Case{CellKind::kGru, 41,
                                                30.0},  // saturated gates
                                           Case{CellKind::kGru, 1, 1.0},
                                           Case{CellKind::kGru, 0, 1.0},
                                           Case{CellKind::kRnnTanh, 41, 1.0},
                                           Case{CellKind::kRnnTanh, 41, 30.0},
                                           Case{CellKind::kRnnTanh, 0, 1.0}));

// Only the gradients asked for are computed; the rest stay undefined
// (the memory updater's message and previous state are stored data).
TEST(CellTest, ComputesOnlyTheGradientsAskedFor) {
  torch::manual_seed(3);
  Inputs in = Random(CellKind::kGru, 9, 11, 7, 1.0);
  torch::Tensor x = in.x.detach(), h = in.h.detach();
  Cell(CellKind::kGru, x, h, in.w_ih, in.w_hh, in.b_ih, in.b_hh)
      .sum()
      .backward();
  EXPECT_FALSE(x.grad().defined());
  EXPECT_FALSE(h.grad().defined());
  EXPECT_TRUE(in.w_ih.grad().defined());
  EXPECT_TRUE(in.b_hh.grad().defined());
}

// Under bf16 autocast the products run in bf16 (the weights' casts from
// autocast's cache) and the gates in float32: the state is float32 and
// within bf16's rounding of the float32 cell; gradients reach the fp32
// weights.
TEST(CellTest, Bf16AutocastComputesGatesInFloat) {
  torch::manual_seed(5);
  Inputs in = Random(CellKind::kGru, 64, 40, 32, 1.0);
  Inputs ref = in.Clone();
  torch::Tensor out;
  {
    platform::AutocastScope bf16(true);
    out = Cell(CellKind::kGru, in.x, in.h, in.w_ih, in.w_hh, in.b_ih, in.b_hh);
  }
  const torch::Tensor expected =
      torch::gru_cell(ref.x, ref.h, ref.w_ih, ref.w_hh, ref.b_ih, ref.b_hh);
  EXPECT_EQ(out.scalar_type(), torch::kFloat);
  EXPECT_LT(MaxDiff(out, expected), 3e-2);
  EXPECT_GT(MaxDiff(out, expected), 0);  // the products did run in bf16
  out.sum().backward();
  expected.sum().backward();
  EXPECT_EQ(in.w_ih.grad().scalar_type(), torch::kFloat);
  const double scale = ref.w_ih.grad().abs().max().item<double>();
  EXPECT_LT(MaxDiff(in.w_ih.grad(), ref.w_ih.grad()), 3e-2 * scale);
  EXPECT_LT(MaxDiff(in.h.grad(), ref.h.grad()),
            3e-2 * ref.h.grad().abs().max().item<double>());
}

TEST(CellTest, RejectsMismatchedShapes) {
  Inputs in = Random(CellKind::kGru, 4, 6, 5, 1.0);
  EXPECT_THROW(
      Cell(CellKind::kRnnTanh, in.x, in.h, in.w_ih, in.w_hh, in.b_ih, in.b_hh),
      c10::Error);
  EXPECT_THROW(Cell(CellKind::kGru, in.x.narrow(0, 0, 3), in.h, in.w_ih,
                    in.w_hh, in.b_ih, in.b_hh),
               c10::Error);
}

// NaN in the input stays NaN in the state (the exponential's clamp must
// not turn it into a number).
TEST(CellTest, PropagatesNaN) {
  Inputs in = Random(CellKind::kGru, 3, 6, 5, 1.0);
  torch::NoGradGuard no_grad;
  in.x[1][2] = std::numeric_limits<float>::quiet_NaN();
  torch::Tensor out =
      Cell(CellKind::kGru, in.x, in.h, in.w_ih, in.w_hh, in.b_ih, in.b_hh);
  EXPECT_TRUE(out[1].isnan().all().item<bool>());
  EXPECT_FALSE(out[0].isnan().any().item<bool>());
}

}  // namespace
}  // namespace mnemo::model
