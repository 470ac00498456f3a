// Moves a finished batch's host tensors to the training device as one
// buffer with one copy.
//
// The batch builder makes a batch's tensors on the host (about 35 of them:
// index, time and mask tensors, edge features). Copied one by one, each pays
// a pinned allocation and a copy launch; packed, the batch is one pinned
// buffer, one asynchronous copy and views of the device buffer. On a GPU the
// copy runs on a copy stream of its own, and the compute stream waits for it
// through an event: a batch built while the previous one still runs on the
// device travels beside that batch's kernels instead of behind them, and the
// host never waits for the copy.
#ifndef MNEMO_TRAINER_RUNTIME_BATCH_STAGING_H_
#define MNEMO_TRAINER_RUNTIME_BATCH_STAGING_H_

#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <vector>

namespace mnemo::runtime {

// Byte alignment of each tensor in a packed buffer (any dtype's, and a
// cache line's).
inline constexpr int64_t kStagingAlign = 64;

// Bytes one packed buffer needs for `tensors` (undefined ones take none).
int64_t PackedBytes(const std::vector<torch::Tensor*>& tensors);

// Replaces every defined tensor of `tensors` (on the host) by a view of one
// buffer on the device: packs their bytes into one host buffer (pinned when
// `pinned`: the source of an asynchronous copy must be), each at an offset
// aligned to kStagingAlign, hands it to `transfer`, which returns the
// buffer's copy on the device, and views that copy with each tensor's dtype
// and shape. Undefined tensors stay undefined. Returns the bytes moved.
int64_t StagePacked(
    const std::vector<torch::Tensor*>& tensors, bool pinned,
    const std::function<torch::Tensor(const torch::Tensor&)>& transfer);

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

}  // namespace mnemo::runtime

#endif  // MNEMO_TRAINER_RUNTIME_BATCH_STAGING_H_
