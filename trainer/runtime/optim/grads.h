// The gradients of a step's parameters: forgotten before a batch, defined
// for every parameter after it, and their norm.
#ifndef MNEMO_TRAINER_RUNTIME_OPTIM_GRADS_H_
#define MNEMO_TRAINER_RUNTIME_OPTIM_GRADS_H_

#include <torch/torch.h>

#include <cmath>
#include <vector>

#include "trainer/runtime/optim/adam_kernel.h"

namespace mnemo::runtime {

// Gives every parameter without a gradient a zero one. Parameters outside a
// batch's graph (the memory updater before any mail exists) would otherwise
// be skipped by Adam; with zeros, single-process, resumed and all-reduced
// runs step every parameter alike (zero_grad() in LibTorch 1.13 leaves
// defined zeros after the first step, as PyTorch 1.13 does).
inline void DefineZeroGrads(const std::vector<torch::Tensor>& params) {
  for (auto p : params) {
    if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
  }
}

// The L2 norm of the gradients on a GPU, as a 0-dim double tensor there:
// the norms in one multi-tensor kernel, summed there; nothing waits for it.
inline torch::Tensor GradNormOnDevice(
    const std::vector<torch::Tensor>& params) {
  std::vector<torch::Tensor> grads;
  for (const auto& p : params) grads.push_back(p.grad());
  return torch::stack(at::_foreach_norm(grads, 2))
      .to(torch::kDouble)
      .pow(2)
      .sum()
      .sqrt();
}

// L2 norm of all gradients together: one pass over each contiguous
// float32 gradient, summed in double (on a GPU: GradNormOnDevice).
inline double GradNorm(const std::vector<torch::Tensor>& params) {
  double sq = 0;
  for (const auto& p : params) {
    const torch::Tensor& g = p.grad();
    if (g.scalar_type() != torch::kFloat || !g.is_contiguous() ||
        !g.device().is_cpu()) {
      sq += g.pow(2).sum().item<double>();
      continue;
    }
    sq += SumOfSquares(g.data_ptr<float>(), g.numel());
  }
  return std::sqrt(sq);
}

// Forgets every gradient, so that the next backward pass hands its
// gradients over instead of adding them to zeros (LibTorch 1.13's
// zero_grad() fills each with zeros, and backward then adds: two passes
// per parameter per step). DefineZeroGrads gives the untouched ones zeros.
inline void ForgetGrads(const std::vector<torch::Tensor>& params) {
  for (auto p : params) p.mutable_grad() = torch::Tensor();
}

}  // namespace mnemo::runtime

#endif  // MNEMO_TRAINER_RUNTIME_OPTIM_GRADS_H_
