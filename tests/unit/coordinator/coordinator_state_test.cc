#include "coordinator/coordinator_state.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace mnemo::coordinator
