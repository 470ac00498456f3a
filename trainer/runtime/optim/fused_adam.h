// Adam with one pass over each parameter's memory per step.
//
// LibTorch's Adam runs about ten tensor operations per parameter per step
// (two moment updates, square root, two divisions, the update), each a pass
// over the parameter; for TGN's 25 parameter tensors that was 5-7% of a
// training step on Wikipedia (mnemo train --profile). FusedAdam computes the
// same update (LibTorch's algorithm, bias corrections in double,
// element math in float) in one parallel loop per parameter and keeps its
// state in Adam's own AdamParamState, so checkpoints, load and resume are
// unchanged. On a GPU the parameters of one device step together in
// LibTorch's fused multi-tensor Adam kernel (two launches per step, not
// about six per parameter), with the step counts it reads kept on the
// device beside the host's. Other options than lr, betas and eps (weight
// decay, amsgrad) and tensors that are not contiguous float32 take
// LibTorch's per-parameter path.
#ifndef MNEMO_TRAINER_RUNTIME_OPTIM_FUSED_ADAM_H_
#define MNEMO_TRAINER_RUNTIME_OPTIM_FUSED_ADAM_H_

#include <torch/torch.h>

#include <unordered_map>
#include <utility>
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

  // Tests: CPU parameters take the GPU's path (LibTorch's fused kernel has
  // a CPU version), so that the path is checked where no GPU is.
  void set_multi_tensor_on_cpu(bool on) { multi_tensor_on_cpu_ = on; }

 private:
  struct MultiTensorGroup;
  // One parameter group's step: each parameter's state advanced, then the
  // multi-tensor ones stepped per device in one kernel call each.
  void StepGroup(torch::optim::OptimizerParamGroup& group);
  // Adam's state of `p` (`key`: its state key), made (step 0, zero moments)
  // at its first step.
  torch::optim::AdamParamState& StateOf(void* key, const torch::Tensor& p);
  // Whether `p` steps in LibTorch's fused multi-tensor kernel: dense
  // float32 tensors on one device that is a GPU (or any, in tests).
  bool TakesMultiTensor(const torch::Tensor& p, const torch::Tensor& grad,
                        const torch::optim::AdamParamState& st) const;
  // Adds `p` (its state `st` at this step's count) to its device's group
  // in `multi`, with its device step count made current.
  void AddToMultiTensor(
      void* key, const torch::Tensor& p, const torch::Tensor& grad,
      const torch::optim::AdamParamState& st,
      std::vector<std::pair<torch::Device, MultiTensorGroup>>* multi);

  // The step count LibTorch's fused kernel reads for a parameter: a float
  // tensor on its device, and the value it holds (mirrored on the host, so
  // that keeping it current costs no transfer).
  struct DeviceStep {
    torch::Tensor count;
    int64_t value = -1;
  };
  std::unordered_map<void*, DeviceStep> device_steps_;
  bool multi_tensor_on_cpu_ = false;
};

}  // namespace mnemo::runtime

#endif  // MNEMO_TRAINER_RUNTIME_OPTIM_FUSED_ADAM_H_
