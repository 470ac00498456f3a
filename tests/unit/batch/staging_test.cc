// A batch packed into one buffer, moved with one transfer and viewed back:
// the staging logic of a GPU batch, run on the CPU with a transfer that
// copies into a new buffer as a device copy would (gpu_test runs the CUDA
// copy stream itself).
#include "trainer/batch/staging.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <vector>

namespace mnemo::runtime {
namespace {

// The transfer of a CPU test: a copy into a buffer of its own, counted.
struct CountingCopy {
  int calls = 0;
  torch::Tensor last;
  torch::Tensor operator()(const torch::Tensor& host) {
    ++calls;
    last = host.clone();
    return last;
  }
};

TEST(BatchStagingTest, MixedTensorsTravelAsOneBuffer) {
  torch::manual_seed(3);
  torch::Tensor rows = torch::arange(7, torch::kInt64);        // 56 bytes
  torch::Tensor dt = torch::rand({3, 5});                      // 60 bytes
  torch::Tensor mask = torch::rand({3, 4}) > 0.5;              // 12 bytes
  torch::Tensor half = torch::rand({9}).to(torch::kBFloat16);  // 18 bytes
  torch::Tensor empty = torch::empty({0, 10}, torch::kInt64);  // none
  torch::Tensor scalar = torch::tensor(2.5);                   // 0-dim
  torch::Tensor strided = torch::rand({4, 6}).t();             // not contig.
  torch::Tensor undefined;
  const std::vector<torch::Tensor> before = {
      rows.clone(),  dt.clone(),     mask.clone(),   half.clone(),
      empty.clone(), scalar.clone(), strided.clone()};
  std::vector<torch::Tensor*> tensors = {&rows,      &dt,    &mask,   &half,
                                         &undefined, &empty, &scalar, &strided};
  CountingCopy copy;
  const int64_t bytes =
      batch::StagePacked(tensors, /*pinned=*/false,
                         [&](const torch::Tensor& h) { return copy(h); });
  EXPECT_EQ(copy.calls, 1);
  // Each defined tensor at a 64-byte boundary: five of at most 64 bytes,
  // the 96 of `strided` in 128, none for `empty`.
  EXPECT_EQ(bytes, 5 * batch::kStagingAlign + 2 * batch::kStagingAlign);
  EXPECT_EQ(bytes, copy.last.numel());
  EXPECT_FALSE(undefined.defined());
  const std::vector<torch::Tensor> after = {rows,  dt,     mask,   half,
                                            empty, scalar, strided};
  for (size_t i = 0; i < after.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(after[i].scalar_type(), before[i].scalar_type());
    EXPECT_EQ(after[i].sizes(), before[i].sizes());
    EXPECT_TRUE(torch::equal(after[i], before[i]));
    if (after[i].numel() > 0) {
      // A view of the transferred buffer, not the host's.
      EXPECT_EQ(after[i].storage().data_ptr().get(),
                copy.last.storage().data_ptr().get());
      EXPECT_EQ(after[i].storage_offset() * after[i].element_size() %
                    batch::kStagingAlign,
                0);
    }
  }
}

TEST(BatchStagingTest, TheBufferIsTheTransfersNotTheHosts) {
  torch::Tensor a = torch::full({4}, 7, torch::kInt64);
  std::vector<torch::Tensor*> tensors = {&a};
  torch::Tensor host_seen;
  batch::StagePacked(tensors, /*pinned=*/false, [&](const torch::Tensor& h) {
    host_seen = h;
    return h.clone();
  });
  // The host buffer may be reused once the copy is done: the batch must
  // not depend on it.
  host_seen.zero_();
  EXPECT_TRUE(torch::equal(a, torch::full({4}, 7, torch::kInt64)));
}

TEST(BatchStagingTest, NothingDefinedStillMakesOneTransfer) {
  torch::Tensor u1, u2;
  std::vector<torch::Tensor*> tensors = {&u1, &u2};
  CountingCopy copy;
  EXPECT_EQ(batch::StagePacked(tensors, false,
                               [&](const torch::Tensor& h) { return copy(h); }),
            0);
  EXPECT_EQ(copy.calls, 1);
  EXPECT_FALSE(u1.defined());
  EXPECT_FALSE(u2.defined());
}

TEST(BatchStagingTest, ATransferOfTheWrongSizeIsAnError) {
  torch::Tensor a = torch::ones({16});
  std::vector<torch::Tensor*> tensors = {&a};
  EXPECT_THROW(
      batch::StagePacked(tensors, false,
                         [](const torch::Tensor& h) {
                           return h.narrow(0, 0, h.numel() / 2).clone();
                         }),
      c10::Error);
}

TEST(BatchStagingTest, PackedBytesRoundsEachTensorUp) {
  torch::Tensor a = torch::ones({1}, torch::kInt8);    // 1 byte -> 64
  torch::Tensor b = torch::ones({17}, torch::kFloat);  // 68 bytes -> 128
  torch::Tensor u;
  EXPECT_EQ(batch::PackedBytes({&a, &b, &u}), 64 + 128);
}

}  // namespace
}  // namespace mnemo::runtime
