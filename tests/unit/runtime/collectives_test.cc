// Real c10d gloo collectives between ranks (threads) on loopback, with the
// rendezvous store hosted separately as the coordinator does.
#include "trainer/runtime/cluster/collectives.h"

#include <gtest/gtest.h>

#include <thread>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "tests/unit/runtime/threaded_ranks.h"
#include "trainer/platform/cuda_device.h"
#include "trainer/runtime/cluster/grad_buckets.h"
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

TEST(CollectivesTest, AllReduceAndBroadcastAcrossThreeRanks) {
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
      // The gradients' way: sums started, then waited for, then divided.
      status[r] = (*c)->StartAllReduceSum(a);
      if (status[r].ok()) status[r] = (*c)->StartAllReduceSum(b);
      if (status[r].ok()) status[r] = (*c)->WaitStarted();
      if (!status[r].ok()) return;
      a.div_(kWorld);
      b.div_(kWorld);
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
      status[r] = (*grads)->StartAllReduceSum(g);
      if (status[r].ok()) status[r] = (*grads)->WaitStarted();
      g.div_(kWorld);
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

// A small two-layer network's parameters and one rank's loss for them
// (different data per rank and step), with a parameter no loss reaches.
struct TinyNet {
  std::vector<torch::Tensor> params;
  TinyNet() {
    // A generator of its own: ranks build their nets at once in threads,
    // and draws from the global one would interleave (each rank's
    // parameters another's).
    torch::Generator gen = at::detail::createCPUGenerator(7);
    params = {at::randn({10}, gen),  // never used
              at::randn({64, 32}, gen), at::randn({64}, gen),
              at::randn({16, 64}, gen), at::randn({16}, gen)};
    for (auto& p : params) p.set_requires_grad(true);
  }
  torch::Tensor Loss(int rank, int step) const {
    torch::Generator gen = at::detail::createCPUGenerator(100 * step + rank);
    torch::Tensor x = at::randn({8, 32}, gen);
    torch::Tensor h = torch::relu(torch::addmm(params[2], x, params[1].t()));
    return torch::addmm(params[4], h, params[3].t()).pow(2).mean() * (rank + 1);
  }
};

// What the ranks' mean gradient is, computed in one place without any
// collective: each rank's gradients from its own copy, summed, divided.
std::vector<torch::Tensor> MeanGradients(int world, int step,
                                         int rank_without_loss = -1) {
  torch::set_num_threads(1);  // as RunBuckets' ranks compute
  std::vector<torch::Tensor> sum;
  for (int r = 0; r < world; ++r) {
    TinyNet net;
    std::vector<torch::Tensor> g;
    if (r == rank_without_loss) {
      for (auto& p : net.params) g.push_back(torch::zeros_like(p));
    } else {
      net.Loss(r, step).backward();
      for (auto& p : net.params) {
        g.push_back(p.grad().defined() ? p.grad() : torch::zeros_like(p));
      }
    }
    if (sum.empty()) {
      sum = g;
    } else {
      for (size_t i = 0; i < g.size(); ++i) sum[i] = sum[i] + g[i];
    }
  }
  for (auto& t : sum) t.div_(world);
  return sum;
}

struct BucketRun {
  absl::Status status;
  std::vector<std::vector<torch::Tensor>> grads;  // per step
  std::vector<int> started_early;                 // per step
  int buckets = 0;
  int64_t bytes = 0;
  std::vector<std::vector<int>> layout;
  std::vector<int64_t> bucket_bytes;
};

// `world` ranks (threads) run `steps` backward passes each through
// gradient buckets; `rank_without_loss` runs none at step 1.
std::vector<BucketRun> RunBuckets(int world, int64_t bucket_bytes,
                                  GradComm comm, int steps,
                                  int rank_without_loss = -1) {
  auto store = HostStore(world);
  std::vector<BucketRun> runs(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      // One intra-op thread (OpenMP's thread count is each thread's own),
      // as MeanGradients computes: the same products, split the same way.
      torch::set_num_threads(1);
      BucketRun& run = runs[r];
      auto c = Collectives::Connect(RankOptions(*store, r, world));
      if (!c.ok()) {
        run.status = c.status();
        return;
      }
      TinyNet net;
      auto b = GradientBuckets::Make(c->get(), net.params, bucket_bytes, comm);
      if (!b.ok()) {
        run.status = b.status();
        return;
      }
      GradientBuckets& buckets = **b;
      run.buckets = buckets.num_buckets();
      for (int k = 0; k < buckets.num_buckets(); ++k) {
        run.layout.push_back(buckets.bucket_params(k));
        run.bucket_bytes.push_back(buckets.bucket_bytes(k));
      }
      for (int step = 0; step < steps; ++step) {
        // The parameters themselves do not change (the reference is
        // computed from fresh copies); what is checked is that the
        // gradients stay the buckets' views from step to step.
        buckets.Zero();
        if (!(step == 1 && r == rank_without_loss)) {
          net.Loss(r, step).backward();
        }
        run.status = buckets.Flush();
        run.started_early.push_back(buckets.started_early());
        if (run.status.ok()) run.status = buckets.Wait();
        if (!run.status.ok()) return;
        std::vector<torch::Tensor> g;
        for (auto& p : net.params) g.push_back(p.grad().clone());
        run.grads.push_back(g);
      }
      run.bytes = (*c)->bytes_reduced();
    });
  }
  for (auto& t : threads) t.join();
  return runs;
}

// Gradients in buckets hold, after each step's wait, the ranks' mean: with
// 2 ranks bit for bit what the sum of both divided by 2 gives (the
// division by a power of two is exact), with 3 to rounding; a rank that
// runs no backward pass contributes zeros; the buckets start during the
// backward pass except the one holding the parameter no loss reaches.
TEST(GradientBucketsTest, BucketsHoldTheRanksMean) {
  for (int world : {2, 3}) {
    for (int64_t bucket_bytes : {int64_t{0}, int64_t{4096}, int64_t{1}}) {
      const auto runs =
          RunBuckets(world, bucket_bytes, GradComm::kFp32, /*steps=*/3,
                     /*rank_without_loss=*/world - 1);
      const std::string what =
          absl::StrCat(world, " ranks, buckets of ", bucket_bytes, " bytes");
      for (int r = 0; r < world; ++r) {
        ASSERT_THAT(runs[r].status, IsOk()) << what;
        for (int step = 0; step < 3; ++step) {
          const auto want =
              MeanGradients(world, step, step == 1 ? world - 1 : -1);
          for (size_t i = 0; i < want.size(); ++i) {
            const torch::Tensor& got = runs[r].grads[step][i];
            if (world == 2) {
              EXPECT_TRUE(torch::equal(got, want[i]))
                  << what << ", step " << step << ", parameter " << i;
            } else {
              EXPECT_TRUE(torch::allclose(got, want[i], 1e-5, 1e-6))
                  << what << ", step " << step << ", parameter " << i;
            }
          }
        }
        if (bucket_bytes == 1) {
          // One parameter a bucket, the last parameter's first; the
          // unused one (index 0) is the last bucket, started at the end.
          ASSERT_EQ(runs[r].buckets, 5) << what;
          EXPECT_EQ(runs[r].layout[0], std::vector<int>{4}) << what;
          EXPECT_EQ(runs[r].layout[4], std::vector<int>{0}) << what;
          EXPECT_EQ(runs[r].started_early[0], 4) << what;
        }
        if (bucket_bytes == 0) {
          EXPECT_EQ(runs[r].buckets, 1) << what;
        }
        if (bucket_bytes == 4096) {
          // No bucket over the size unless it holds one parameter (the
          // 8 KiB [64, 32] weight).
          for (int k = 0; k < runs[r].buckets; ++k) {
            EXPECT_TRUE(runs[r].bucket_bytes[k] <= 4096 ||
                        runs[r].layout[k].size() == 1)
                << what << ", bucket " << k;
          }
        }
        // Every parameter in exactly one bucket, in reverse order.
        std::vector<int> order;
        for (const auto& b : runs[r].layout) {
          order.insert(order.end(), b.begin(), b.end());
        }
        EXPECT_EQ(order, (std::vector<int>{4, 3, 2, 1, 0})) << what;
        // The rank without a loss at step 1 started nothing early then.
        if (r == world - 1) {
          EXPECT_EQ(runs[r].started_early[1], 0) << what;
        }
      }
    }
  }
}

// bf16 communication: half the bytes of fp32's, and the mean to bf16's
// precision, back in the fp32 gradients.
TEST(GradientBucketsTest, Bf16CommunicationHalvesTheBytes) {
  const auto fp32 = RunBuckets(2, 4096, GradComm::kFp32, /*steps=*/1);
  const auto bf16 = RunBuckets(2, 4096, GradComm::kBf16, /*steps=*/1);
  const auto want = MeanGradients(2, 0);
  for (int r = 0; r < 2; ++r) {
    ASSERT_THAT(fp32[r].status, IsOk());
    ASSERT_THAT(bf16[r].status, IsOk());
    EXPECT_EQ(bf16[r].bytes * 2, fp32[r].bytes);
    for (size_t i = 0; i < want.size(); ++i) {
      const torch::Tensor& got = bf16[r].grads[0][i];
      EXPECT_EQ(got.scalar_type(), torch::kFloat);
      // Each rank's share and the sum rounded to bf16 (8 significant
      // bits): within 1% of the gradient's largest element.
      const double scale = want[i].abs().max().item<double>();
      EXPECT_LE((got - want[i]).abs().max().item<double>(), 1e-2 * scale) << i;
      // It did travel as bf16 (parameter 0's gradient is zero: exact).
      if (i > 0) {
        EXPECT_FALSE(torch::equal(got, want[i])) << i;
      }
    }
  }
}

}  // namespace
}  // namespace mnemo::runtime
