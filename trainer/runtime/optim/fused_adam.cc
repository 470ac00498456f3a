#include "trainer/runtime/optim/fused_adam.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "trainer/runtime/optim/adam_kernel.h"

namespace mnemo::runtime {
namespace {

bool Fusable(const torch::Tensor& t) {
  return t.scalar_type() == torch::kFloat && t.is_contiguous() &&
         t.device().is_cpu();
}

// What LibTorch's fused multi-tensor kernel takes: dense float32 tensors.
bool MultiTensorFusable(const torch::Tensor& t) {
  return t.scalar_type() == torch::kFloat && t.is_contiguous() &&
         t.layout() == torch::kStrided;
}

// Whether FusedAdam steps a group itself: options of lr, betas and eps
// only (no weight decay, no amsgrad; those take LibTorch's Adam::step).
bool StepsItself(const torch::optim::OptimizerParamGroup& group) {
  const auto& o =
      static_cast<const torch::optim::AdamOptions&>(group.options());
  return o.weight_decay() == 0 && !o.amsgrad();
}

// One parameter's step off the multi-tensor kernel: LibTorch's tensor
// operations, or for contiguous float32 CPU tensors the same element math
// in one parallel loop (AdamUpdate). `st` holds this step's count.
void StepParameter(const torch::Tensor& p, const torch::Tensor& grad,
                   torch::optim::AdamParamState& st,
                   const torch::optim::AdamOptions& o, double beta1,
                   double beta2) {
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
    return;
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

}  // namespace

// The parameters of one device (and one learning rate and betas) that
// step in one fused kernel call.
struct FusedAdam::MultiTensorGroup {
  std::vector<torch::Tensor> params, grads, exp_avgs, exp_avg_sqs;
  std::vector<torch::Tensor> counts;   // each parameter's step count
  std::vector<torch::Tensor> advance;  // the counts one step behind
};

torch::Tensor FusedAdam::step(LossClosure closure) {
  for (const auto& group : param_groups_) {
    if (!StepsItself(group)) return Adam::step(closure);
  }
  torch::NoGradGuard no_grad;
  torch::Tensor loss;
  if (closure != nullptr) {
    at::AutoGradMode enable_grad(true);
    loss = closure();
  }
  for (auto& group : param_groups_) StepGroup(group);
  return loss;
}

void FusedAdam::StepGroup(torch::optim::OptimizerParamGroup& group) {
  const auto& o =
      static_cast<const torch::optim::AdamOptions&>(group.options());
  const double beta1 = std::get<0>(o.betas()), beta2 = std::get<1>(o.betas());
  std::vector<std::pair<torch::Device, MultiTensorGroup>> multi;
  for (auto& p : group.params()) {
    if (!p.grad().defined()) continue;
    const torch::Tensor& grad = p.grad();
    void* const key = OptimizerStateKey(p);
    torch::optim::AdamParamState& st = StateOf(key, p);
    st.step(st.step() + 1);
    if (TakesMultiTensor(p, grad, st)) {
      AddToMultiTensor(key, p, grad, st, &multi);
    } else {
      StepParameter(p, grad, st, o, beta1, beta2);
    }
  }
  for (auto& entry : multi) {
    MultiTensorGroup& m = entry.second;
    if (!m.advance.empty()) at::_foreach_add_(m.advance, 1);
    at::_fused_adam_(m.params, m.grads, m.exp_avgs, m.exp_avg_sqs,
                     /*max_exp_avg_sqs=*/{}, m.counts, o.lr(), beta1, beta2,
                     /*weight_decay=*/0, o.eps(), /*amsgrad=*/false,
                     /*maximize=*/false);
  }
}

torch::optim::AdamParamState& FusedAdam::StateOf(void* key,
                                                 const torch::Tensor& p) {
  auto it = state_.find(key);
  if (it == state_.end()) {
    auto st = std::make_unique<torch::optim::AdamParamState>();
    st->step(0);
    st->exp_avg(torch::zeros_like(p, torch::MemoryFormat::Preserve));
    st->exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Preserve));
    it = state_.emplace(key, std::move(st)).first;
  }
  return static_cast<torch::optim::AdamParamState&>(*it->second);
}

bool FusedAdam::TakesMultiTensor(const torch::Tensor& p,
                                 const torch::Tensor& grad,
                                 const torch::optim::AdamParamState& st) const {
  return (!p.device().is_cpu() || multi_tensor_on_cpu_) &&
         MultiTensorFusable(p) && MultiTensorFusable(grad) &&
         MultiTensorFusable(st.exp_avg()) &&
         MultiTensorFusable(st.exp_avg_sq()) && grad.device() == p.device();
}

void FusedAdam::AddToMultiTensor(
    void* key, const torch::Tensor& p, const torch::Tensor& grad,
    const torch::optim::AdamParamState& st,
    std::vector<std::pair<torch::Device, MultiTensorGroup>>* multi) {
  // The kernel reads the step count from the device: kept there, advanced
  // in one multi-tensor add (StepGroup) when it is one behind, else set (a
  // resumed run, a restored optimizer) with a fill, which takes its value
  // as a kernel argument: no transfer either way.
  DeviceStep& ds = device_steps_[key];
  if (!ds.count.defined() || ds.count.device() != p.device()) {
    ds.count = torch::zeros({}, p.options());
    ds.value = 0;
  }
  auto where = std::find_if(multi->begin(), multi->end(),
                            [&](auto& d) { return d.first == p.device(); });
  if (where == multi->end()) {
    where = multi->insert(multi->end(), {p.device(), MultiTensorGroup()});
  }
  MultiTensorGroup& m = where->second;
  m.params.push_back(p);
  m.grads.push_back(grad);
  m.exp_avgs.push_back(st.exp_avg());
  m.exp_avg_sqs.push_back(st.exp_avg_sq());
  m.counts.push_back(ds.count);
  if (ds.value + 1 == st.step()) {
    m.advance.push_back(ds.count);
  } else {
    ds.count.fill_(static_cast<double>(st.step()));
  }
  ds.value = st.step();
}

}  // namespace mnemo::runtime
