// Copies between the host and a CUDA device that never make the host wait
// for the device's queued work. Defined in cuda_device.cc, the one file that
// sees CUDA's headers; call them only with CUDA tensors and devices.
#ifndef MNEMO_TRAINER_PLATFORM_CUDA_TRANSFER_H_
#define MNEMO_TRAINER_PLATFORM_CUDA_TRANSFER_H_

#include <torch/types.h>

#include <functional>

namespace mnemo::platform {

// `transfer` for a CUDA device: copies `host` (a pinned buffer) to `device`
// on that device's copy stream, asynchronously, and makes the device's
// current (compute) stream wait for the copy through an event, so that
// every kernel queued after this call reads the copy. The device buffer is
// recorded as used by the compute stream, so the allocator does not hand
// it out again before that stream is done with it. Defined in
// cuda_device.cc, the one file that sees CUDA's headers; call it only for a
// CUDA device.
torch::Tensor CopyToDeviceOnCopyStream(const torch::Tensor& host,
                                       torch::Device device);

// The other way, for a few values the host must read (a batch's loss and
// gradient norm): copies `device` (a CUDA tensor) into pinned host memory
// on the current stream, after the work queued on it so far, and returns
// at once. The returned call waits for that copy alone (not for work
// queued after it, nor for other streams) and gives the host tensor.
// Defined in cuda_device.cc; call it only for a CUDA tensor.
std::function<torch::Tensor()> ReadToHostLater(const torch::Tensor& device);

}  // namespace mnemo::platform

#endif  // MNEMO_TRAINER_PLATFORM_CUDA_TRANSFER_H_
