// Real c10d gloo collectives between ranks (threads) on loopback, with the
// rendezvous store hosted separately as the coordinator does.
#include "trainer/runtime/cluster/collectives.h"

#include <gtest/gtest.h>

#include <thread>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "trainer/platform/cuda_device.h"
#include "util/status_matchers.h"

namespace mnemo::runtime {
namespace {

c10::intrusive_ptr<c10d::TCPStore> HostStore(int world_size) {
  c10d::TCPStoreOptions so;
  so.port = 0;  // any free port
  so.isServer = true;
  so.waitWorkers = false;
  so.numWorkers = world_size;
  return c10::make_intrusive<c10d::TCPStore>("127.0.0.1", so);
}

// Rank `rank` of `world` over the store `store` hosts.
CollectiveOptions RankOptions(const c10d::TCPStore& store, int rank,
                              int world) {
  CollectiveOptions o;
  o.master_port = store.getPort();
  o.rank = rank;
  o.world_size = world;
  o.timeout = std::chrono::milliseconds(20000);
  return o;
}

TEST(CollectivesTest, AllReduceMeanAndBroadcastAcrossThreeRanks) {
  constexpr int kWorld = 3;
  auto store = HostStore(kWorld);
  std::vector<std::thread> threads;
  std::vector<std::vector<float>> results(kWorld);
  std::vector<float> bcast(kWorld);
  std::vector<absl::Status> status(kWorld);
  for (int r = 0; r < kWorld; ++r) {
    threads.emplace_back([&, r] {
      auto c = Collectives::Connect(RankOptions(*store, r, kWorld));
      if (!c.ok()) {
        status[r] = c.status();
        return;
      }
      torch::Tensor a = torch::full({2, 2}, float(r));
      torch::Tensor b = torch::full({3}, float(10 * r));
      status[r] = (*c)->AllReduceMean({a, b});
      if (!status[r].ok()) return;
      results[r] = {a[0][0].item<float>(), a[1][1].item<float>(),
                    b[2].item<float>()};
      torch::Tensor x = torch::full({1}, float(100 + r));
      status[r] = (*c)->Broadcast({x}, 2);
      bcast[r] = x.item<float>();
      if (status[r].ok()) status[r] = (*c)->Barrier();
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < kWorld; ++r) {
    ASSERT_THAT(status[r], IsOk());
    EXPECT_FLOAT_EQ(results[r][0], 1.0f);  // mean of 0, 1, 2
    EXPECT_FLOAT_EQ(results[r][1], 1.0f);
    EXPECT_FLOAT_EQ(results[r][2], 10.0f);
    EXPECT_FLOAT_EQ(bcast[r], 102.0f);
  }
}

// A cluster worker's two groups (the gradients' and the control
// collectives') share one store under different prefixes and run apart:
// each all-reduce gets its own group's values, and each counts its own
// bytes.
TEST(CollectivesTest, TwoGroupsShareOneStore) {
  constexpr int kWorld = 2;
  auto store = HostStore(kWorld);
  std::vector<std::thread> threads;
  std::vector<absl::Status> status(kWorld);
  std::vector<float> grad(kWorld), control(kWorld);
  std::vector<int64_t> grad_bytes(kWorld), control_bytes(kWorld);
  for (int r = 0; r < kWorld; ++r) {
    threads.emplace_back([&, r] {
      const CollectiveOptions o = RankOptions(*store, r, kWorld);
      CollectiveOptions co = o;
      co.prefix = "mnemo-control";
      auto ctl = Collectives::Connect(co);
      auto grads = Collectives::Connect(o);
      if (!ctl.ok() || !grads.ok()) {
        status[r] = ctl.ok() ? grads.status() : ctl.status();
        return;
      }
      EXPECT_STREQ((*grads)->backend_name(), "gloo");
      torch::Tensor g = torch::full({8}, float(r + 1));
      torch::Tensor c = torch::full({1}, float(100 * (r + 1)), torch::kDouble);
      status[r] = (*grads)->AllReduceMean({g});
      if (status[r].ok()) status[r] = (*ctl)->AllReduceSum(c);
      if (status[r].ok()) status[r] = (*grads)->Barrier();
      grad[r] = g[0].item<float>();
      control[r] = c.item<float>();
      grad_bytes[r] = (*grads)->bytes_reduced();
      control_bytes[r] = (*ctl)->bytes_reduced();
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < kWorld; ++r) {
    ASSERT_THAT(status[r], IsOk());
    EXPECT_FLOAT_EQ(grad[r], 1.5f);      // mean of 1 and 2
    EXPECT_FLOAT_EQ(control[r], 300.f);  // sum of 100 and 200
    EXPECT_EQ(grad_bytes[r], 8 * 4);
    EXPECT_EQ(control_bytes[r], 8);
  }
}

// On a machine without a GPU an NCCL group is refused with an error that
// names it (the engine forms one only for --device cuda).
TEST(CollectivesTest, NcclWithoutAGpuIsAClearError) {
  if (platform::CudaDeviceCount() > 0) GTEST_SKIP() << "a GPU is present";
  auto store = HostStore(1);
  CollectiveOptions o;
  o.master_port = store->getPort();
  o.backend = CollectiveOptions::Backend::kNccl;
  o.timeout = std::chrono::milliseconds(5000);
  EXPECT_THAT(Collectives::Connect(o),
              StatusIs(absl::StatusCode::kUnavailable, "nccl process group"));
}

TEST(CollectivesTest, MissingPeerTimesOutWithAClearError) {
  auto store = HostStore(2);
  CollectiveOptions o;
  o.master_port = store->getPort();
  o.rank = 0;
  o.world_size = 2;
  o.timeout = std::chrono::milliseconds(1500);
  auto c = Collectives::Connect(o);  // rank 1 never comes
  EXPECT_THAT(c, StatusIs(absl::StatusCode::kUnavailable, "rank 0 of 2"));
}

TEST(CollectivesTest, RejectsBadRank) {
  CollectiveOptions o;
  o.rank = 3;
  o.world_size = 2;
  EXPECT_THAT(Collectives::Connect(o),
              StatusIs(absl::StatusCode::kInvalidArgument, "rank 3"));
}

}  // namespace
}  // namespace mnemo::runtime
