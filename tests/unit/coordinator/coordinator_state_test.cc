#include "coordinator/coordinator_state.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "coordinator/policy_spec.h"
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

// A join that is not the job's worker (no configuration hash, or a second
// join for a live rank with any hash) is refused before the hash is
// compared, and the job goes on.
TEST(CoordinatorStateTest, ADuplicateOrEmptyJoinLeavesTheJobRunning) {
  Fixture f(2);
  ASSERT_THAT(f.state.Join(0, "a:1", "h", "cfg-1"), IsOk());
  EXPECT_THAT(f.state.Join(1, "", "", ""),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "no run "
                       "configuration"));
  EXPECT_THAT(f.state.Join(0, "intruder", "h", "cfg-2"),
              StatusIs(absl::StatusCode::kAlreadyExists, "rank 0"));
  EXPECT_THAT(f.state.job_status(), IsOk());
  EXPECT_EQ(f.state.workers()[0].address, "a:1");
  EXPECT_FALSE(f.state.workers()[1].joined);
  EXPECT_THAT(f.state.Join(1, "a:2", "h", "cfg-1"), IsOk());
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

PolicyView View(int64_t r, double g, double ema) {
  PolicyView v;
  v.boundary = 100 + r;
  v.world_size = 2;
  v.epoch_batch = r;
  v.grad_norm = g;
  v.grad_norm_ema = ema;
  return v;
}

// DepTGL Eq. 7 with tau_g = 1.6: skip iff r > 0, ema > 0, g < 1.6 ema.
TEST(GradientEmaPolicyTest, SkipsWhileStableAndSyncsOnSpikesAndEpochStarts) {
  auto p = MakeGradientEmaPolicy(1.6);
  EXPECT_EQ(p->name(), "gradient-ema");
  EXPECT_FALSE(p->Decide(View(5, 1.0, 1.0))) << "stable: skip";
  EXPECT_FALSE(p->Decide(View(5, 1.59, 1.0))) << "below 1.6 x EMA: skip";
  EXPECT_TRUE(p->Decide(View(5, 1.6, 1.0))) << "at 1.6 x EMA: sync";
  EXPECT_TRUE(p->Decide(View(5, 3.0, 1.0))) << "spike: sync";
  EXPECT_TRUE(p->Decide(View(0, 1.0, 1.0))) << "r = 0: memory restarts";
  EXPECT_TRUE(p->Decide(View(5, 1.0, 0.0))) << "no EMA yet: sync";
  EXPECT_TRUE(p->Decide(View(5, 0.0, 0.0)));
  // A larger threshold skips more.
  EXPECT_FALSE(MakeGradientEmaPolicy(4.0)->Decide(View(1, 3.0, 1.0)));
}

// Records every view it is asked about; decides with the wrapped policy.
class RecordingPolicy : public DecisionPolicy {
 public:
  RecordingPolicy(std::unique_ptr<DecisionPolicy> inner,
                  std::vector<PolicyView>* views)
      : inner_(std::move(inner)), views_(views) {}
  std::string name() const override { return inner_->name(); }
  bool Decide(const PolicyView& view) override {
    views_->push_back(view);
    return inner_->Decide(view);
  }

 private:
  std::unique_ptr<DecisionPolicy> inner_;
  std::vector<PolicyView>* views_;
};

BatchReport WindowReport(int rank, int64_t batch, int64_t epoch_batch,
                         bool last_of_epoch, int64_t batches, double g,
                         double ema) {
  BatchReport r;
  r.rank = rank;
  r.batch = batch;
  r.epoch_batch = epoch_batch;
  r.last_of_epoch = last_of_epoch;
  r.batches = batches;
  r.grad_norm = g;
  r.grad_norm_ema = ema;
  return r;
}

// Two epochs of 10 batches, windows of K = 4 (the last of an epoch is
// shorter: 8, 9). Workers report at the end of each window only: the
// decisions are exactly the boundaries that start the next window, with the
// epoch-relative index r of that boundary.
TEST(CoordinatorStateTest, WindowReportsReleaseTheNextWindowsBoundary) {
  std::vector<PolicyView> views;
  Fixture f(
      2, std::make_unique<RecordingPolicy>(MakeGradientEmaPolicy(1.6), &views));
  std::vector<Decision> seen;
  f.state.Subscribe([&](const Decision& d) { seen.push_back(d); },
                    [](absl::Status) {});
  struct Window {
    int64_t last, epoch_batch;
    bool last_of_epoch;
    int64_t batches;
  };
  const std::vector<Window> windows = {{3, 3, false, 4},  {7, 7, false, 4},
                                       {9, 9, true, 2},   {13, 3, false, 4},
                                       {17, 7, false, 4}, {19, 9, true, 2}};
  for (const Window& w : windows) {
    const size_t before = seen.size();
    for (int rank = 0; rank < 2; ++rank) {
      // Rank 1 reports a slightly larger EMA: the policy sees the mean.
      ASSERT_THAT(f.state.Report(WindowReport(rank, w.last, w.epoch_batch,
                                              w.last_of_epoch, w.batches, 1.0,
                                              rank == 0 ? 0.9 : 1.1)),
                  IsOk());
      // Nothing before every rank has reported.
      EXPECT_EQ(seen.size(), before + rank);
    }
  }
  ASSERT_EQ(seen.size(), 1 + windows.size());
  ASSERT_EQ(views.size(), windows.size());
  const std::vector<int64_t> want_r = {4, 8, 0, 4, 8, 0};
  for (size_t i = 0; i < windows.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(seen[i + 1].boundary, windows[i].last + 1);
    EXPECT_EQ(views[i].boundary, windows[i].last + 1);
    EXPECT_EQ(views[i].epoch_batch, want_r[i]);
    EXPECT_DOUBLE_EQ(views[i].grad_norm, 1.0);
    EXPECT_DOUBLE_EQ(views[i].grad_norm_ema, 1.0);  // (0.9 + 1.1) / 2
    // Stable gradients: skip within an epoch, sync at every epoch start.
    EXPECT_EQ(seen[i + 1].sync, want_r[i] == 0);
  }
  EXPECT_EQ(views[1].batches_since_sync, 8);  // two skipped windows of 4
  EXPECT_EQ(views[2].batches_since_sync, 10);
  EXPECT_EQ(views[3].batches_since_sync, 4);  // boundary 10 synced
  EXPECT_EQ(f.state.decisions_sync(), 3);     // boundaries 0, 10, 20
  EXPECT_EQ(f.state.decisions_skip(), 4);
  EXPECT_EQ(f.state.rank_stats()[0].reports, 6);
  EXPECT_EQ(f.state.rank_stats()[0].batches, 20);

  // Batches a decided window covered count as decided: a late per-batch
  // report inside one is a duplicate and takes no decision.
  CoordinatorState::ReportOutcome out;
  ASSERT_THAT(f.state.Report(WindowReport(0, 5, 5, false, 1, 1.0, 1.0), &out),
              IsOk());
  EXPECT_TRUE(out.duplicate);
  ASSERT_THAT(f.state.Report(WindowReport(1, 16, 6, false, 1, 1.0, 1.0), &out),
              IsOk());
  EXPECT_TRUE(out.duplicate);
  EXPECT_EQ(seen.size(), 1 + windows.size());
}

// A spike within the window's last batch syncs the next boundary; reports
// without an EMA fall back on the coordinator's own.
TEST(CoordinatorStateTest, WindowReportsSyncOnASpikeAndWithoutAnEma) {
  std::vector<PolicyView> views;
  Fixture f(
      2, std::make_unique<RecordingPolicy>(MakeGradientEmaPolicy(1.6), &views));
  CoordinatorState::ReportOutcome out;
  // Stable: skip.
  ASSERT_THAT(f.state.Report(WindowReport(0, 3, 3, false, 4, 1.0, 1.0)),
              IsOk());
  ASSERT_THAT(f.state.Report(WindowReport(1, 3, 3, false, 4, 1.0, 1.0), &out),
              IsOk());
  ASSERT_TRUE(out.decided);
  EXPECT_FALSE(out.decision.sync);
  EXPECT_EQ(out.view.epoch_batch, 4);
  // Spike: 2.0 >= 1.6 x 1.0 syncs.
  ASSERT_THAT(f.state.Report(WindowReport(0, 7, 7, false, 4, 2.0, 1.0)),
              IsOk());
  ASSERT_THAT(f.state.Report(WindowReport(1, 7, 7, false, 4, 2.0, 1.0), &out),
              IsOk());
  ASSERT_TRUE(out.decided);
  EXPECT_TRUE(out.decision.sync);
  EXPECT_EQ(out.decision.boundary, 8);
  // No worker EMA: the coordinator's own (alpha 0.5 over 1, 2, 2 = 1.75).
  ASSERT_THAT(f.state.Report(WindowReport(0, 11, 11, false, 4, 2.0, 0)),
              IsOk());
  ASSERT_THAT(f.state.Report(WindowReport(1, 11, 11, false, 4, 2.0, 0), &out),
              IsOk());
  ASSERT_TRUE(out.decided);
  EXPECT_DOUBLE_EQ(out.view.grad_norm_ema, 1.75);
  EXPECT_DOUBLE_EQ(f.state.grad_norm_ema(), 1.75);
  EXPECT_FALSE(out.decision.sync);  // 2.0 < 1.6 x 1.75
  ASSERT_EQ(views.size(), 3u);
}

// Per-batch reports that carry no epoch position (epoch_batch 0, as older
// workers send) cover one batch each and give r = 1: vanilla and full-cache
// do not look at it.
TEST(CoordinatorStateTest, ReportsDefaultToOneBatchEach) {
  std::vector<PolicyView> views;
  Fixture f(1,
            std::make_unique<RecordingPolicy>(MakeAlwaysSyncPolicy(), &views));
  ASSERT_THAT(f.state.Report({0, 0, 1.0, 0.1, 1, 1, 0}), IsOk());
  ASSERT_THAT(f.state.Report({0, 1, 1.0, 0.1, 1, 1, 0}), IsOk());
  ASSERT_EQ(views.size(), 2u);
  EXPECT_EQ(views[1].boundary, 2);
  EXPECT_EQ(views[1].epoch_batch, 1);
  EXPECT_EQ(views[1].batches_since_sync, 1);
  EXPECT_EQ(f.state.rank_stats()[0].batches, 2);
}

TEST(CoordinatorStateTest, WindowReportsOutOfOrderAndMalformed) {
  Fixture f(1, MakeNeverSyncPolicy());
  std::vector<Decision> seen;
  f.state.Subscribe([&](const Decision& d) { seen.push_back(d); },
                    [](absl::Status) {});
  // The second window is decided before the first; then the first.
  ASSERT_THAT(f.state.Report(WindowReport(0, 7, 7, false, 4, 1, 1)), IsOk());
  ASSERT_THAT(f.state.Report(WindowReport(0, 3, 3, false, 4, 1, 1)), IsOk());
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_EQ(seen[1].boundary, 8);
  EXPECT_EQ(seen[2].boundary, 4);
  CoordinatorState::ReportOutcome out;
  for (int64_t b = 0; b < 8; ++b) {
    ASSERT_THAT(f.state.Report(WindowReport(0, b, b, false, 1, 1, 1), &out),
                IsOk());
    EXPECT_TRUE(out.duplicate) << b;
  }
  ASSERT_THAT(f.state.Report(WindowReport(0, 8, 8, false, 1, 1, 1), &out),
              IsOk());
  EXPECT_TRUE(out.decided);
  EXPECT_THAT(f.state.Report(WindowReport(0, 20, 0, false, 0, 1, 1)),
              StatusIs(absl::StatusCode::kInvalidArgument, "covers 0"));
  EXPECT_THAT(f.state.Report(WindowReport(0, 2, 2, false, 4, 1, 1)),
              StatusIs(absl::StatusCode::kInvalidArgument, "at most 3"));
  EXPECT_THAT(f.state.Report(WindowReport(0, 20, -1, false, 1, 1, 1)),
              StatusIs(absl::StatusCode::kInvalidArgument, "epoch batch -1"));
  BatchReport heavy = WindowReport(0, 20, 0, false, 2, 1, 1);
  heavy.heavy_load_batches = 3;
  EXPECT_THAT(f.state.Report(heavy),
              StatusIs(absl::StatusCode::kInvalidArgument, "heavy-load"));
  heavy.heavy_load_batches = 2;
  heavy.pruned = 17;
  ASSERT_THAT(f.state.Report(heavy), IsOk());
  EXPECT_EQ(f.state.rank_stats()[0].heavy_load_batches, 2);
  EXPECT_EQ(f.state.rank_stats()[0].pruned, 17);
}

TEST(PolicySpecTest, ParsesEveryName) {
  struct Case {
    std::string name;
    PolicyKind policy;
    bool gradient_sync, prune;
    std::string decisions;
  };
  const std::vector<Case> cases = {
      {"vanilla", PolicyKind::kVanilla, false, false, "always-sync"},
      {"full-cache", PolicyKind::kFullCache, false, false, "never-sync"},
      {"deptgl", PolicyKind::kDepTgl, true, true, "gradient-ema"},
      {"deptgl:replay", PolicyKind::kDepTgl, false, false, "always-sync"},
      {"deptgl:replay+sync", PolicyKind::kDepTgl, true, false, "gradient-ema"},
      {"depbloom", PolicyKind::kDepBloom, false, false, "always-sync"},
      {"pipetgl", PolicyKind::kPipeTgl, false, false, "always-sync"},
      {"disttgl-epoch", PolicyKind::kDistTglEpoch, false, false, "always-sync"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    auto spec = ParsePolicySpec(c.name);
    ASSERT_THAT(spec, IsOk());
    EXPECT_EQ(spec->policy, c.policy);
    EXPECT_EQ(spec->name, c.name);
    EXPECT_EQ(spec->gradient_sync, c.gradient_sync);
    EXPECT_EQ(spec->prune, c.prune);
    EXPECT_EQ(MakeDecisionPolicy(*spec, {})->name(), c.decisions);
    EXPECT_THAT(PolicyNames(), ::testing::HasSubstr(c.name));
  }
  EXPECT_EQ(PolicyNames(),
            "vanilla, full-cache, deptgl, deptgl:replay, deptgl:replay+sync, "
            "depbloom, pipetgl, disttgl-epoch");
  EXPECT_EQ(PolicyKindName(PolicyKind::kDepTgl), "deptgl");
  EXPECT_EQ(PolicyKindName(PolicyKind::kPipeTgl), "pipetgl");
  for (const char* bad :
       {"", "DepTGL", "deptgl:sync", "full_cache", "vanilla "}) {
    EXPECT_THAT(
        ParsePolicySpec(bad),
        StatusIs(absl::StatusCode::kInvalidArgument, "deptgl:replay+sync"))
        << bad;
  }
}

// MakeDecisionPolicy passes tau_g on: deptgl with tau 1.6 skips a boundary
// at 1.5 x EMA, with tau 1.2 it syncs.
TEST(PolicySpecTest, DecisionPolicyUsesTauG) {
  auto spec = ParsePolicySpec("deptgl");
  ASSERT_THAT(spec, IsOk());
  EXPECT_FALSE(MakeDecisionPolicy(*spec, {})->Decide(View(3, 1.5, 1.0)));
  DecisionParams strict;
  strict.tau_g = 1.2;
  EXPECT_TRUE(MakeDecisionPolicy(*spec, strict)->Decide(View(3, 1.5, 1.0)));
  auto replay = ParsePolicySpec("deptgl:replay");
  ASSERT_THAT(replay, IsOk());
  EXPECT_TRUE(MakeDecisionPolicy(*replay, {})->Decide(View(3, 1.0, 1.0)));
  auto full = ParsePolicySpec("full-cache");
  ASSERT_THAT(full, IsOk());
  EXPECT_FALSE(MakeDecisionPolicy(*full, {})->Decide(View(0, 9.0, 1.0)));
}

}  // namespace
}  // namespace mnemo::coordinator
