// The in-process ClusterClient: barriers with and without a deadline, and
// clients created and destroyed while decisions are being delivered.
#include "trainer/runtime/cluster/local_cluster.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "util/proc.h"
#include "util/status_matchers.h"

namespace mnemo::runtime {
namespace {

coordinator::CoordinatorState MakeState(int world) {
  return coordinator::CoordinatorState({world, "cfg", 60, 0.1},
                                       coordinator::MakeAlwaysSyncPolicy(),
                                       [] { return 0.0; });
}

// Rank 0 evaluates for longer than the clients' default timeout while rank
// 1 waits at Barrier(name, 0): the wait outlasts it.
TEST(LocalClusterTest, UnboundedBarrierOutlastsTheDefaultTimeout) {
  auto state = MakeState(2);
  LocalClusterClient c0(&state, 0, /*timeout_s=*/0.2);
  LocalClusterClient c1(&state, 1, /*timeout_s=*/0.2);
  absl::Status waited;
  std::thread waiter([&] { waited = c1.Barrier("evaluated-0", 0); });
  std::this_thread::sleep_for(std::chrono::milliseconds(600));
  EXPECT_THAT(c0.Barrier("evaluated-0", 0), IsOk());
  waiter.join();
  EXPECT_THAT(waited, IsOk());
}

TEST(LocalClusterTest, BoundedBarriersTimeOut) {
  auto state = MakeState(2);
  LocalClusterClient c0(&state, 0, /*timeout_s=*/0.2);
  const double t0 = MonotonicSeconds();
  EXPECT_THAT(c0.Barrier("a"),
              StatusIs(absl::StatusCode::kDeadlineExceeded, "barrier 'a'"));
  EXPECT_THAT(c0.Barrier("b", 0.1),
              StatusIs(absl::StatusCode::kDeadlineExceeded, "within 0.1 s"));
  EXPECT_LT(MonotonicSeconds() - t0, 5);
}

TEST(LocalClusterTest, JobFailureEndsAnUnboundedBarrier) {
  auto state = MakeState(2);
  LocalClusterClient c0(&state, 0, 0.2);
  LocalClusterClient c1(&state, 1, 0.2);
  absl::Status waited;
  std::thread waiter([&] { waited = c0.Barrier("evaluated-0", 0); });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  c1.ReportError("evaluation ran out of memory");
  waiter.join();
  EXPECT_THAT(waited,
              StatusIs(absl::StatusCode::kAborted, "ran out of memory"));
}

// A client's destructor unsubscribes while a report on another thread may be
// delivering a decision to it (AddressSanitizer: heap-use-after-free before
// CoordinatorState::Unsubscribe waited for deliveries in flight).
TEST(LocalClusterTest, ClientsComeAndGoWhileDecisionsAreDelivered) {
  constexpr int kWorld = 2, kBatches = 3000;
  auto state = MakeState(kWorld);
  std::atomic<bool> stop{false};
  std::thread reporter([&] {
    for (int64_t b = 0; b < kBatches; ++b) {
      for (int r = 0; r < kWorld; ++r) {
        ASSERT_THAT(state.Report({r, b, 1.0, 0.1, 1, 1, 0}), IsOk());
      }
    }
    stop = true;
  });
  std::vector<std::thread> churn;
  for (int t = 0; t < 2; ++t) {
    churn.emplace_back([&] {
      while (!stop.load()) {
        auto client = std::make_unique<LocalClusterClient>(&state, 0, 1);
        std::this_thread::yield();
        client.reset();
      }
    });
  }
  reporter.join();
  for (auto& t : churn) t.join();
  LocalClusterClient last(&state, 0, 1);
  EXPECT_THAT(last.WaitDecision(kBatches), IsOk());
}

}  // namespace
}  // namespace mnemo::runtime
