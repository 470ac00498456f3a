#include "trainer/runtime/fused_adam.h"

#include <ATen/Parallel.h>

#include <cmath>

#include "trainer/runtime/adam_kernel.h"

namespace mnemo::runtime {
namespace {

bool Fusable(const torch::Tensor& t) {
  return t.scalar_type() == torch::kFloat && t.is_contiguous() &&
         t.device().is_cpu();
}

}  // namespace

torch::Tensor FusedAdam::step(LossClosure closure) {
  for (const auto& group : param_groups_) {
    const auto& o =
        static_cast<const torch::optim::AdamOptions&>(group.options());
    if (o.weight_decay() != 0 || o.amsgrad()) return Adam::step(closure);
  }
  torch::NoGradGuard no_grad;
  torch::Tensor loss;
  if (closure != nullptr) {
    at::AutoGradMode enable_grad(true);
    loss = closure();
  }
  for (auto& group : param_groups_) {
    const auto& o =
        static_cast<const torch::optim::AdamOptions&>(group.options());
    const double beta1 = std::get<0>(o.betas()), beta2 = std::get<1>(o.betas());
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      const torch::Tensor& grad = p.grad();
      void* const key = OptimizerStateKey(p);
      auto it = state_.find(key);
      if (it == state_.end()) {
        auto st = std::make_unique<torch::optim::AdamParamState>();
        st->step(0);
        st->exp_avg(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        st->exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        it = state_.emplace(key, std::move(st)).first;
      }
      auto& st = static_cast<torch::optim::AdamParamState&>(*it->second);
      st.step(st.step() + 1);
      const double bias_correction1 = 1 - std::pow(beta1, st.step());
      const double bias_correction2 = 1 - std::pow(beta2, st.step());
      const double step_size = o.lr() / bias_correction1;
      const double bias_correction2_sqrt = std::sqrt(bias_correction2);
      torch::Tensor m = st.exp_avg(), v = st.exp_avg_sq();
      if (!Fusable(p) || !Fusable(grad) || !Fusable(m) || !Fusable(v)) {
        m.mul_(beta1).add_(grad, 1 - beta1);
        v.mul_(beta2).addcmul_(grad, grad, 1 - beta2);
        torch::Tensor denom = (v.sqrt() / bias_correction2_sqrt).add_(o.eps());
        p.addcdiv_(m, denom, -step_size);
        continue;
      }
      // The scalars as the tensor operations above see them: float.
      AdamScalars sc;
      sc.beta1 = static_cast<float>(beta1);
      sc.beta2 = static_cast<float>(beta2);
      sc.one_minus_beta1 = static_cast<float>(1 - beta1);
      sc.one_minus_beta2 = static_cast<float>(1 - beta2);
      sc.bias_correction2_sqrt = static_cast<float>(bias_correction2_sqrt);
      sc.eps = static_cast<float>(o.eps());
      sc.neg_step_size = static_cast<float>(-step_size);
      float* pp = p.data_ptr<float>();
      float* mp = m.data_ptr<float>();
      float* vp = v.data_ptr<float>();
      const float* gp = grad.data_ptr<float>();
      at::parallel_for(0, p.numel(), 1 << 15, [&](int64_t b, int64_t e) {
        AdamUpdate(pp, mp, vp, gp, b, e, sc);
      });
    }
  }
  return loss;
}

}  // namespace mnemo::runtime
