#include "trainer/runtime/fused_adam.h"

#include <ATen/Parallel.h>

#include <cmath>
#include <string>

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
      const std::string key = c10::guts::to_string(p.unsafeGetTensorImpl());
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
      const float b1 = static_cast<float>(beta1);
      const float b2 = static_cast<float>(beta2);
      const float a1 = static_cast<float>(1 - beta1);
      const float a2 = static_cast<float>(1 - beta2);
      const float bc2 = static_cast<float>(bias_correction2_sqrt);
      const float eps = static_cast<float>(o.eps());
      const float neg_step = static_cast<float>(-step_size);
      float* pp = p.data_ptr<float>();
      float* mp = m.data_ptr<float>();
      float* vp = v.data_ptr<float>();
      const float* gp = grad.data_ptr<float>();
      at::parallel_for(0, p.numel(), 1 << 14, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
          const float g = gp[i];
          const float mi = mp[i] * b1 + a1 * g;
          const float vi = vp[i] * b2 + a2 * (g * g);
          mp[i] = mi;
          vp[i] = vi;
          pp[i] += neg_step * (mi / (std::sqrt(vi) / bc2 + eps));
        }
      });
    }
  }
  return loss;
}

}  // namespace mnemo::runtime
