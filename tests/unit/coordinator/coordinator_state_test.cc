#include "coordinator/coordinator_state.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "util/status_matchers.h"

namespace mnemo::coordinator {
namespace {

struct Fixture {
  double now = 0;
  CoordinatorState state;
  explicit Fixture(int world, std::unique_ptr<DecisionPolicy> policy =
                                  MakeAlwaysSyncPolicy())
      : state({world, "cfg-1", /*heartbeat_timeout_s=*/5, 0.5},
              std::move(policy), [this] { return now; }) {}
};

TEST(CoordinatorStateTest, JoinValidatesRankAndConfiguration) {
  Fixture f(2);
  EXPECT_THAT(f.state.Join(0, "a:1", "h", "cfg-1"), IsOk());
  EXPECT_THAT(f.state.Join(2, "a:2", "h", "cfg-1"),
              StatusIs(absl::StatusCode::kInvalidArgument, "world size is 2"));
  EXPECT_THAT(f.state.Join(1, "a:2", "h", "cfg-2"),
              StatusIs(absl::StatusCode::kFailedPrecondition, "cfg-2"));
  EXPECT_THAT(f.state.Join(0, "a:3", "h", "cfg-1"),
              StatusIs(absl::StatusCode::kAlreadyExists, "rank 0"));
  EXPECT_THAT(f.state.Join(1, "a:2", "h", "cfg-1"), IsOk());
  EXPECT_EQ(f.state.joined_count(), 2);
}

TEST(CoordinatorStateTest, BarrierReleasesEveryoneOnceAllArrive) {
  Fixture f(3);
  int released = 0;
  auto done = [&](absl::Status s) {
    EXPECT_THAT(s, IsOk());
    ++released;
  };
  f.state.ArriveAtBarrier("epoch", 0, done);
  f.state.ArriveAtBarrier("epoch", 2, done);
  EXPECT_EQ(released, 0);
  absl::Status twice;
  f.state.ArriveAtBarrier("epoch", 0, [&](absl::Status s) { twice = s; });
  EXPECT_THAT(twice, StatusIs(absl::StatusCode::kFailedPrecondition, "twice"));
  f.state.ArriveAtBarrier("epoch", 1, done);
  EXPECT_EQ(released, 3);
  // The next generation of the same barrier starts empty.
  f.state.ArriveAtBarrier("epoch", 0, done);
  EXPECT_EQ(released, 3);
}

TEST(CoordinatorStateTest, DecisionsAfterAllRanksReport) {
  Fixture f(2);
  std::vector<Decision> seen;
  f.state.Subscribe([&](const Decision& d) { seen.push_back(d); },
                    [](absl::Status) {});
  ASSERT_EQ(seen.size(), 1u);  // boundary 0
  EXPECT_TRUE(seen[0].sync);
  ASSERT_THAT(f.state.Report({0, 0, 2.0, 0.1, 10, 10, 0}), IsOk());
  EXPECT_EQ(seen.size(), 1u);
  ASSERT_THAT(f.state.Report({1, 0, 4.0, 0.2, 10, 10, 0}), IsOk());
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[1].boundary, 1);
  EXPECT_TRUE(seen[1].sync);
  EXPECT_DOUBLE_EQ(f.state.grad_norm_ema(), 3.0);
  EXPECT_EQ(f.state.decisions_sync(), 2);
  // A late subscriber gets the history first.
  std::vector<Decision> late;
  f.state.Subscribe([&](const Decision& d) { late.push_back(d); },
                    [](absl::Status) {});
  EXPECT_EQ(late.size(), 2u);
}

TEST(CoordinatorStateTest, NeverSyncPolicySkips) {
  Fixture f(1, MakeNeverSyncPolicy());
  std::vector<Decision> seen;
  f.state.Subscribe([&](const Decision& d) { seen.push_back(d); },
                    [](absl::Status) {});
  ASSERT_THAT(f.state.Report({0, 0, 1.0, 0.1, 1, 1, 0}), IsOk());
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_FALSE(seen[1].sync);
  EXPECT_EQ(f.state.decisions_skip(), 1);
}

TEST(CoordinatorStateTest, SilentWorkerFailsTheJobAndReleasesWaiters) {
  Fixture f(2);
  ASSERT_THAT(f.state.Join(0, "a:1", "h", "cfg-1"), IsOk());
  ASSERT_THAT(f.state.Join(1, "b:1", "h", "cfg-1"), IsOk());
  absl::Status barrier, stream_end;
  f.state.ArriveAtBarrier("b", 0, [&](absl::Status s) { barrier = s; });
  f.state.Subscribe([](const Decision&) {},
                    [&](absl::Status s) { stream_end = s; });
  f.now = 3;
  ASSERT_THAT(f.state.Heartbeat(0), IsOk());
  EXPECT_THAT(f.state.CheckLiveness(), IsOk());
  f.now = 7;  // rank 1 silent for 7 s > 5 s
  EXPECT_THAT(f.state.CheckLiveness(),
              StatusIs(absl::StatusCode::kUnavailable, "worker 1 (b:1)"));
  EXPECT_THAT(barrier, StatusIs(absl::StatusCode::kUnavailable, "worker 1"));
  EXPECT_THAT(stream_end, StatusIs(absl::StatusCode::kUnavailable, "worker 1"));
  EXPECT_THAT(f.state.Join(1, "b:1", "h", "cfg-1"),
              StatusIs(absl::StatusCode::kAborted, "worker 1"));
}

TEST(CoordinatorStateTest, ReportedErrorFailsTheJob) {
  Fixture f(2);
  ASSERT_THAT(f.state.Join(0, "a:1", "h", "cfg-1"), IsOk());
  f.state.ReportError(0, "out of memory");
  EXPECT_THAT(f.state.job_status(), StatusIs(absl::StatusCode::kAborted,
                                             "worker 0 failed: out of memory"));
  absl::Status b;
  f.state.ArriveAtBarrier("x", 1, [&](absl::Status s) { b = s; });
  EXPECT_THAT(b, StatusIs(absl::StatusCode::kAborted, "out of memory"));
}

TEST(CoordinatorStateTest, FinishedWorkersAreNotDeclaredDead) {
  Fixture f(1);
  ASSERT_THAT(f.state.Join(0, "a:1", "h", "cfg-1"), IsOk());
  ASSERT_THAT(f.state.Finish(0), IsOk());
  f.now = 100;
  EXPECT_THAT(f.state.CheckLiveness(), IsOk());
  EXPECT_TRUE(f.state.all_finished());
}

// A repeated report (a retried RPC) of the same (rank, batch) counts once: it
// must not stand in for another rank's report and release the decision early.
TEST(CoordinatorStateTest, RepeatedReportsAreIgnored) {
  Fixture f(2);
  std::vector<Decision> seen;
  f.state.Subscribe([&](const Decision& d) { seen.push_back(d); },
                    [](absl::Status) {});
  ASSERT_THAT(f.state.Report({0, 0, 2.0, 0.1, 10, 10, 0}), IsOk());
  ASSERT_THAT(f.state.Report({0, 0, 2.0, 0.1, 10, 10, 0}), IsOk());
  EXPECT_EQ(seen.size(), 1u) << "rank 0 twice is not both ranks";
  EXPECT_EQ(f.state.decisions_sync(), 1);
  ASSERT_THAT(f.state.Report({1, 0, 4.0, 0.2, 10, 10, 0}), IsOk());
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[1].boundary, 1);
  EXPECT_DOUBLE_EQ(f.state.grad_norm_ema(), 3.0);  // (2 + 4) / 2, not 8 / 3
  // Late repeats of a decided batch change nothing either.
  ASSERT_THAT(f.state.Report({1, 0, 4.0, 0.2, 10, 10, 0}), IsOk());
  ASSERT_THAT(f.state.Report({0, 0, 2.0, 0.1, 10, 10, 0}), IsOk());
  EXPECT_EQ(seen.size(), 2u);
  EXPECT_EQ(f.state.decisions_sync(), 2);
  EXPECT_EQ(f.state.rank_stats()[0].batches, 1);
  EXPECT_EQ(f.state.rank_stats()[1].batches, 1);
  // ... and batch 1 still needs both ranks.
  ASSERT_THAT(f.state.Report({1, 1, 4.0, 0.2, 10, 10, 0}), IsOk());
  ASSERT_THAT(f.state.Report({1, 1, 4.0, 0.2, 10, 10, 0}), IsOk());
  EXPECT_EQ(seen.size(), 2u);
  ASSERT_THAT(f.state.Report({0, 1, 2.0, 0.1, 10, 10, 0}), IsOk());
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_EQ(seen[2].boundary, 2);
}

TEST(CoordinatorStateTest, ReportOutcomeNamesTheDecisionAndDuplicates) {
  Fixture f(2, MakeNeverSyncPolicy());
  CoordinatorState::ReportOutcome out;
  ASSERT_THAT(f.state.Report({0, 3, 1.0, 0.1, 1, 1, 0}, &out), IsOk());
  EXPECT_FALSE(out.duplicate);
  EXPECT_FALSE(out.decided);
  ASSERT_THAT(f.state.Report({0, 3, 1.0, 0.1, 1, 1, 0}, &out), IsOk());
  EXPECT_TRUE(out.duplicate);
  ASSERT_THAT(f.state.Report({1, 3, 1.0, 0.1, 1, 1, 0}, &out), IsOk());
  EXPECT_FALSE(out.duplicate);
  ASSERT_TRUE(out.decided);
  EXPECT_EQ(out.decision.boundary, 4);
  EXPECT_FALSE(out.decision.sync);
  ASSERT_THAT(f.state.Report({1, 3, 1.0, 0.1, 1, 1, 0}, &out), IsOk());
  EXPECT_TRUE(out.duplicate);
  EXPECT_FALSE(out.decided);
  EXPECT_THAT(f.state.Report({0, -1, 1.0, 0.1, 1, 1, 0}, &out),
              StatusIs(absl::StatusCode::kInvalidArgument, "batch -1"));
}

// The contract DecisionWriter (services/) and LocalClusterClient rely on to
// delete themselves: once Unsubscribe returns, no callback of theirs runs.
TEST(CoordinatorStateTest, UnsubscribeWaitsForADecisionInFlight) {
  Fixture f(1);
  absl::Notification entered, unsubscribed;
  std::atomic<bool> ran_after_unsubscribe{false};
  const int id = f.state.Subscribe(
      [&](const Decision& d) {
        if (d.boundary == 0) return;  // the history, on this thread
        entered.Notify();
        // Still running when Unsubscribe returns? (Before the fix it did
        // not wait: the notification comes at once.)
        if (unsubscribed.WaitForNotificationWithTimeout(absl::Seconds(0.5))) {
          ran_after_unsubscribe = true;
        }
      },
      [](absl::Status) {});
  std::thread reporter([&] {
    EXPECT_THAT(f.state.Report({0, 0, 1.0, 0.1, 1, 1, 0}), IsOk());
  });
  entered.WaitForNotification();
  f.state.Unsubscribe(id);
  unsubscribed.Notify();
  reporter.join();
  EXPECT_FALSE(ran_after_unsubscribe);
}

TEST(CoordinatorStateTest, UnsubscribeWaitsForAnEndInFlight) {
  Fixture f(1);
  absl::Notification entered, unsubscribed;
  std::atomic<bool> ran_after_unsubscribe{false};
  const int id = f.state.Subscribe(
      [](const Decision&) {},
      [&](absl::Status) {
        entered.Notify();
        if (unsubscribed.WaitForNotificationWithTimeout(absl::Seconds(0.5))) {
          ran_after_unsubscribe = true;
        }
      });
  std::thread failer([&] { f.state.ReportError(0, "boom"); });
  entered.WaitForNotification();
  f.state.Unsubscribe(id);  // the job failed: the subscription is gone
  unsubscribed.Notify();
  failer.join();
  EXPECT_FALSE(ran_after_unsubscribe);
}

TEST(CoordinatorStateTest, UnsubscribeFromItsOwnCallbackDoesNotDeadlock) {
  Fixture f(1);
  int id = -1;
  int calls = 0;
  id = f.state.Subscribe(
      [&](const Decision& d) {
        ++calls;
        if (d.boundary == 1) f.state.Unsubscribe(id);
      },
      [](absl::Status) {});
  ASSERT_THAT(f.state.Report({0, 0, 1.0, 0.1, 1, 1, 0}), IsOk());
  ASSERT_THAT(f.state.Report({0, 1, 1.0, 0.1, 1, 1, 0}), IsOk());
  EXPECT_EQ(calls, 2);  // boundaries 0 and 1; none after Unsubscribe
}

// Subscribers come and go (subscribe, unsubscribe, delete what their
// callbacks use) while ranks report and the job fails. A callback running on
// a deleted subscriber reads kDead or freed memory (AddressSanitizer:
// heap-use-after-free).
TEST(CoordinatorStateTest, SubscribersComeAndGoWhileDecisionsAreDelivered) {
  constexpr uint64_t kAlive = 0xA11CEA11CEull, kDead = 0xDEADDEADull;
  struct Probe {
    char padding[64] = {};  // keeps `magic` clear of the allocator's links
    volatile uint64_t magic = kAlive;
    ~Probe() { magic = kDead; }
  };
  std::atomic<int64_t> violations{0}, delivered{0};
  auto touch = [&](const Probe* p) {
    // Read, linger a little (so that a deletion can overlap the call), read.
    int alive = 0;
    for (int i = 0; i < 64; ++i) alive += p->magic == kAlive;
    if (alive != 64) ++violations;
    ++delivered;
  };
  constexpr int kRounds = 20, kReporters = 3, kSubscribers = 3;
  constexpr int kWorld = 2, kBatches = 2000;
  for (int round = 0; round < kRounds; ++round) {
    CoordinatorState state({kWorld, "cfg", 60, 0.1}, MakeAlwaysSyncPolicy(),
                           [] { return 0.0; });
    std::atomic<int64_t> next_batch{0};
    std::atomic<bool> stop{false};
    std::vector<std::thread> reporters, subscribers;
    for (int t = 0; t < kReporters; ++t) {
      reporters.emplace_back([&] {
        for (int64_t b = next_batch++; b < kBatches; b = next_batch++) {
          for (int r = 0; r < kWorld; ++r) {
            ASSERT_THAT(state.Report({r, b, 1.0, 0.1, 1, 1, 0}), IsOk());
          }
        }
      });
    }
    for (int t = 0; t < kSubscribers; ++t) {
      subscribers.emplace_back([&] {
        while (!stop.load()) {
          auto* probe = new Probe;
          const int id = state.Subscribe(
              [&touch, probe](const Decision&) { touch(probe); },
              [&touch, probe](absl::Status) { touch(probe); });
          std::this_thread::yield();
          state.Unsubscribe(id);
          delete probe;
        }
      });
    }
    for (auto& t : reporters) t.join();
    state.ReportError(0, "the end of the round");  // on_end races Unsubscribe
    stop = true;
    for (auto& t : subscribers) t.join();
  }
  EXPECT_EQ(violations.load(), 0);
  EXPECT_GT(delivered.load(), 0);
}

}  // namespace
}  // namespace mnemo::coordinator
