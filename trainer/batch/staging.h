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
#ifndef MNEMO_TRAINER_BATCH_STAGING_H_
#define MNEMO_TRAINER_BATCH_STAGING_H_

#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <vector>

namespace mnemo::batch {

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

}  // namespace mnemo::batch

#endif  // MNEMO_TRAINER_BATCH_STAGING_H_
