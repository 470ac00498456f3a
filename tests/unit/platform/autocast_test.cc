// AutocastRegion's cast cache: one bf16 cast per weight for the whole
// region (Pause and Resume keep it), a fresh one after End, and casts made
// with gradients off (evaluation) never used by a later region.
#include "trainer/platform/autocast.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/grad_mode.h>
#include <torch/csrc/autograd/variable.h>

#include <deque>
#include <unordered_set>

namespace mnemo::platform {
namespace {

using torch::autograd::Node;

// The node of `y`'s graph that feeds `w`'s gradient accumulator (under
// autocast: the backward of w's bf16 cast), or null.
const Node* CastOf(const at::Tensor& y, const at::Tensor& w) {
  const auto acc = torch::autograd::impl::grad_accumulator(w);
  std::deque<Node*> open = {y.grad_fn().get()};
  std::unordered_set<Node*> seen;
  while (!open.empty()) {
    Node* n = open.front();
    open.pop_front();
    if (n == nullptr || !seen.insert(n).second) continue;
    for (const auto& e : n->next_edges()) {
      if (e.function == acc) return n;
      open.push_back(e.function.get());
    }
  }
  return nullptr;
}

TEST(AutocastRegionTest, OneCastPerWeightPerRegion) {
  at::manual_seed(1);
  const at::Tensor x = at::randn({8, 16});
  const at::Tensor w = at::randn({4, 16}).requires_grad_();
  AutocastRegion region;
  region.Begin(true, at::kCPU);
  const at::Tensor y1 = at::linear(x, w);
  EXPECT_EQ(y1.scalar_type(), at::kBFloat16);
  region.Pause();
  EXPECT_EQ(at::linear(x, w).scalar_type(), at::kFloat);  // paused: fp32
  region.Resume();
  const at::Tensor y2 = at::linear(x, w);
  const Node* cast = CastOf(y1, w);
  ASSERT_NE(cast, nullptr);
  EXPECT_EQ(CastOf(y2, w), cast);  // the same cast, made once
  region.End();
  region.Begin(true, at::kCPU);
  const at::Tensor y3 = at::linear(x, w);
  EXPECT_NE(CastOf(y3, w), cast);  // a new region casts again
  // The gradient reaches the fp32 weight through the cached cast.
  (y1.sum() + y2.sum() + y3.sum()).to(at::kFloat).backward();
  ASSERT_TRUE(w.grad().defined());
  EXPECT_EQ(w.grad().scalar_type(), at::kFloat);
  region.End();
}

TEST(AutocastRegionTest, CastsWithoutGradientsEndWithTheirRegion) {
  const at::Tensor x = at::randn({8, 16});
  const at::Tensor w = at::randn({4, 16}).requires_grad_();
  {
    at::NoGradGuard no_grad;  // an evaluation pass's region
    AutocastRegion eval;
    eval.Begin(true, at::kCPU);
    EXPECT_FALSE(at::linear(x, w).requires_grad());
  }  // ends: its casts are dropped
  AutocastRegion train;
  train.Begin(true, at::kCPU);
  const at::Tensor y = at::linear(x, w);
  ASSERT_TRUE(y.requires_grad());
  y.sum().to(at::kFloat).backward();
  EXPECT_TRUE(w.grad().defined());
}

}  // namespace
}  // namespace mnemo::platform
