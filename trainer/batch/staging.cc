#include "trainer/batch/staging.h"

#include <algorithm>
#include <cstring>

namespace mnemo::batch {
namespace {

int64_t AlignUp(int64_t bytes) {
  return (bytes + kStagingAlign - 1) / kStagingAlign * kStagingAlign;
}

int64_t TensorBytes(const torch::Tensor& t) {
  return t.numel() * static_cast<int64_t>(t.element_size());
}

}  // namespace

int64_t PackedBytes(const std::vector<torch::Tensor*>& tensors) {
  int64_t bytes = 0;
  for (const torch::Tensor* t : tensors) {
    if (t->defined()) bytes += AlignUp(TensorBytes(*t));
  }
  return bytes;
}

int64_t StagePacked(
    const std::vector<torch::Tensor*>& tensors, bool pinned,
    const std::function<torch::Tensor(const torch::Tensor&)>& transfer) {
  const int64_t total = PackedBytes(tensors);
  // One aligned block at least: a zero-sized buffer has no storage to view.
  torch::Tensor host = torch::empty(
      {std::max<int64_t>(total, kStagingAlign)},
      torch::TensorOptions().dtype(torch::kUInt8).pinned_memory(pinned));
  uint8_t* base = host.data_ptr<uint8_t>();
  std::vector<int64_t> offsets;
  offsets.reserve(tensors.size());
  int64_t offset = 0;
  for (torch::Tensor* t : tensors) {
    offsets.push_back(offset);
    if (!t->defined()) continue;
    TORCH_CHECK(t->device().is_cpu(),
                "StagePacked: a batch tensor is already on ", t->device());
    const torch::Tensor c = t->contiguous();
    const int64_t bytes = TensorBytes(c);
    if (bytes > 0) std::memcpy(base + offset, c.data_ptr(), bytes);
    offset += AlignUp(bytes);
  }
  torch::Tensor moved = transfer(host);
  TORCH_CHECK(moved.numel() == host.numel() && moved.dtype() == host.dtype(),
              "StagePacked: the transfer returned ", moved.numel(),
              " elements of ", moved.dtype(), " for ", host.numel(), " of ",
              host.dtype());
  for (size_t i = 0; i < tensors.size(); ++i) {
    torch::Tensor* t = tensors[i];
    if (!t->defined()) continue;
    const int64_t bytes = TensorBytes(*t);
    // A byte range of the buffer, reinterpreted: the offset is aligned for
    // every dtype, and the range holds whole elements.
    *t = moved.narrow(0, offsets[i], bytes)
             .view(t->scalar_type())
             .view(t->sizes());
  }
  return total;
}

}  // namespace mnemo::batch
