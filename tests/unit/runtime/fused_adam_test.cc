#include "trainer/runtime/fused_adam.h"

#include <gtest/gtest.h>

namespace mnemo::runtime {
namespace {

// The same steps as LibTorch's Adam, to float rounding, with its state in
// the same place (what checkpoints read).
TEST(FusedAdamTest, StepsAsLibTorchAdam) {
  torch::manual_seed(3);
  std::vector<torch::Tensor> a = {torch::randn({40000}), torch::randn({7, 5}),
                                  torch::randn({3})};
  std::vector<torch::Tensor> b;
  for (auto& t : a) {
    t.requires_grad_();
    b.push_back(t.detach().clone().requires_grad_());
  }
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
