// Host columns of numbers as float64 tensors and back: how checkpoints
// store what is not a tensor (times, flags, counters, history).
#ifndef MNEMO_TRAINER_PLATFORM_DOUBLES_H_
#define MNEMO_TRAINER_PLATFORM_DOUBLES_H_

#include <torch/torch.h>

#include <vector>

namespace mnemo::platform {

// `v` as a 1-d float64 tensor of its own (a copy).
template <typename T = double>
torch::Tensor DoublesToTensor(const std::vector<T>& v) {
  std::vector<double> d(v.begin(), v.end());
  return torch::from_blob(d.data(), {static_cast<int64_t>(d.size())},
                          torch::kDouble)
      .clone();
}

// A tensor's values (any device, any type) as `T`s, in order.
template <typename T = double>
std::vector<T> TensorToDoubles(const torch::Tensor& t) {
  torch::Tensor c = t.to(torch::kCPU, torch::kDouble).contiguous();
  return std::vector<T>(c.data_ptr<double>(), c.data_ptr<double>() + c.numel());
}

}  // namespace mnemo::platform

#endif  // MNEMO_TRAINER_PLATFORM_DOUBLES_H_
