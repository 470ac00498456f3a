#include "trainer/runtime/optim/fused_adam.h"

#include <gtest/gtest.h>

#include <utility>
#include <vector>

namespace mnemo::runtime {
namespace {

// Random parameters of three shapes, and an equal copy of them.
std::pair<std::vector<torch::Tensor>, std::vector<torch::Tensor>>
TwinParameters(uint64_t seed) {
  torch::manual_seed(seed);
  std::vector<torch::Tensor> a = {torch::randn({40000}), torch::randn({7, 5}),
                                  torch::randn({3})};
  std::vector<torch::Tensor> b;
  for (auto& t : a) {
    t.requires_grad_();
    b.push_back(t.detach().clone().requires_grad_());
  }
  return {a, b};
}

// The same steps as LibTorch's Adam, to float rounding, with its state in
// the same place (what checkpoints read).
TEST(FusedAdamTest, StepsAsLibTorchAdam) {
  auto twins = TwinParameters(3);
  std::vector<torch::Tensor>& a = twins.first;
  std::vector<torch::Tensor>& b = twins.second;
  // A non-contiguous gradient takes LibTorch's path.
  FusedAdam fused(a, torch::optim::AdamOptions(1e-3));
  torch::optim::Adam plain(b, torch::optim::AdamOptions(1e-3));
  for (int step = 0; step < 5; ++step) {
    for (size_t i = 0; i < a.size(); ++i) {
      torch::Tensor g = torch::randn(a[i].sizes()) * (step + 1);
      a[i].mutable_grad() = i == 1 ? g.t().contiguous().t() : g.clone();
      b[i].mutable_grad() = g.clone();
    }
    fused.step();
    plain.step();
  }
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(torch::allclose(a[i], b[i], 1e-5, 1e-6))
        << i << " max diff " << (a[i] - b[i]).abs().max().item<float>();
    void* key = OptimizerStateKey(a[i]);
    ASSERT_EQ(fused.state().count(key), 1u);
    auto& st =
        static_cast<torch::optim::AdamParamState&>(*fused.state().at(key));
    EXPECT_EQ(st.step(), 5);
    auto& pst = static_cast<torch::optim::AdamParamState&>(
        *plain.state().at(OptimizerStateKey(b[i])));
    EXPECT_TRUE(torch::allclose(st.exp_avg_sq(), pst.exp_avg_sq(), 1e-5, 1e-7));
  }
}

// The GPU's path (LibTorch's fused multi-tensor kernel, its step counts
// kept on the device) steps as LibTorch's Adam too, also after the
// optimizer's state was replaced (a resumed run): run here on CPU tensors.
TEST(FusedAdamTest, MultiTensorPathStepsAsLibTorchAdam) {
  // Plain references, not a structured binding: lambdas capture them.
  auto twins = TwinParameters(4);
  std::vector<torch::Tensor>& a = twins.first;
  std::vector<torch::Tensor>& b = twins.second;
  FusedAdam fused(a, torch::optim::AdamOptions(1e-3).betas({0.8, 0.99}));
  fused.set_multi_tensor_on_cpu(true);
  torch::optim::Adam plain(b,
                           torch::optim::AdamOptions(1e-3).betas({0.8, 0.99}));
  auto steps = [&](int n) {
    for (int step = 0; step < n; ++step) {
      for (size_t i = 0; i < a.size(); ++i) {
        torch::Tensor g = torch::randn(a[i].sizes()) * (step + 1);
        a[i].mutable_grad() = g.clone();
        b[i].mutable_grad() = g.clone();
      }
      fused.step();
      plain.step();
    }
  };
  auto expect_same = [&](int64_t step) {
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_TRUE(torch::allclose(a[i], b[i], 1e-5, 1e-6))
          << i << " max diff " << (a[i] - b[i]).abs().max().item<float>();
      auto& st = static_cast<torch::optim::AdamParamState&>(
          *fused.state().at(OptimizerStateKey(a[i])));
      EXPECT_EQ(st.step(), step);
    }
  };
  steps(5);
  expect_same(5);
  // Replaced state, as a checkpoint load does: its step counts count.
  for (size_t i = 0; i < a.size(); ++i) {
    auto st = std::make_unique<torch::optim::AdamParamState>(
        static_cast<torch::optim::AdamParamState&>(
            *plain.state().at(OptimizerStateKey(b[i]))));
    st->exp_avg(st->exp_avg().clone());
    st->exp_avg_sq(st->exp_avg_sq().clone());
    st->step(40);
    static_cast<torch::optim::AdamParamState&>(
        *plain.state().at(OptimizerStateKey(b[i])))
        .step(40);
    fused.state()[OptimizerStateKey(a[i])] = std::move(st);
    a[i].detach().copy_(b[i].detach());
  }
  steps(3);
  expect_same(43);
}

TEST(FusedAdamTest, WeightDecayTakesLibTorchsPath) {
  torch::Tensor a = torch::ones({4}).requires_grad_();
  torch::Tensor b = torch::ones({4}).requires_grad_();
  FusedAdam fused({a}, torch::optim::AdamOptions(0.1).weight_decay(0.5));
  torch::optim::Adam plain({b},
                           torch::optim::AdamOptions(0.1).weight_decay(0.5));
  a.mutable_grad() = torch::full({4}, 0.25);
  b.mutable_grad() = torch::full({4}, 0.25);
  fused.step();
  plain.step();
  EXPECT_TRUE(torch::equal(a, b));
}

}  // namespace
}  // namespace mnemo::runtime
