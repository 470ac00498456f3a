// Adam with one pass over each parameter's memory per step.
//
// LibTorch's Adam runs about ten tensor operations per parameter per step
// (two moment updates, square root, two divisions, the update), each a pass
// over the parameter; for TGN's 25 parameter tensors that was 5-7% of a
// training step on Wikipedia (mnemo train --profile). FusedAdam computes the
// same update (LibTorch's algorithm, bias corrections in double,
// element math in float) in one parallel loop per parameter and keeps its
// state in Adam's own AdamParamState, so checkpoints, load and resume are
// unchanged. Other options than lr, betas and eps (weight decay, amsgrad)
// and tensors that are not contiguous float32 take LibTorch's path.
#ifndef MNEMO_TRAINER_RUNTIME_FUSED_ADAM_H_
#define MNEMO_TRAINER_RUNTIME_FUSED_ADAM_H_

#include <torch/torch.h>

#include <vector>

namespace mnemo::runtime {

// The key of a parameter's entry in Optimizer::state(), as LibTorch's own
// optimizers look it up: the address of the parameter's TensorImpl.
inline void* OptimizerStateKey(const torch::Tensor& p) {
  return p.unsafeGetTensorImpl();
}

class FusedAdam : public torch::optim::Adam {
 public:
  FusedAdam(std::vector<torch::Tensor> params,
            torch::optim::AdamOptions options)
      : torch::optim::Adam(std::move(params), std::move(options)) {}

  torch::Tensor step(LossClosure closure = nullptr) override;
};

}  // namespace mnemo::runtime

#endif  // MNEMO_TRAINER_RUNTIME_FUSED_ADAM_H_
