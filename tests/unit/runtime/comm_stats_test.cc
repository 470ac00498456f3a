// A cluster's statistics: every worker's CommStats gathered into the job's
// totals by each field's merge rule (sum, largest, the first worker's), and
// summary.json writing every group under the keys docs/outputs.md lists.
#include "trainer/runtime/cluster/comm_stats.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "trainer/data/event_log.h"
#include "trainer/data/split.h"
#include "trainer/runtime/cluster/control.h"
#include "trainer/runtime/report/summary.h"
#include "util/status_matchers.h"

namespace mnemo::runtime {
namespace {

// A control channel whose Sum adds what the other rank contributed
// (`other`), or records this rank's contribution (`mine`).
class TwoRankControl : public ControlChannel {
 public:
  std::vector<double> other, mine;
  absl::Status Broadcast(std::vector<double>*, int) override {
    return absl::OkStatus();
  }
  absl::Status Broadcast(std::vector<int32_t>*, int) override {
    return absl::OkStatus();
  }
  absl::Status Broadcast(std::string*, int) override {
    return absl::OkStatus();
  }
  absl::Status Sum(std::vector<double>* values) override {
    mine = *values;
    for (size_t i = 0; i < other.size() && i < values->size(); ++i) {
      (*values)[i] += other[i];
    }
    return absl::OkStatus();
  }
  double seconds() const override { return 0; }
};

CommStats Worker(double k) {
  CommStats c;
  c.store.states_pulled = static_cast<int64_t>(10 * k);
  c.store.seconds = 1.5 * k;
  c.eval.states_pulled = static_cast<int64_t>(3 * k);
  c.collectives.barrier_seconds = 0.25 * k;
  c.time.forward = 2 * k;
  c.policy.refreshes = static_cast<int64_t>(k);
  c.policy.boundaries = static_cast<int64_t>(5 + k);         // first worker's
  c.policy.refresh_nodes_max = static_cast<int64_t>(7 * k);  // largest
  c.policy.plan_seconds = 0.5 * k;                           // largest
  c.policy.cross_ratio = 0.1 * k;                            // first worker's
  c.working_set.spills = static_cast<int64_t>(4 * k);
  c.working_set.capacity_states = static_cast<int64_t>(100 * k);  // largest
  c.train_seconds = 10 * k;
  c.peak_rss_bytes = static_cast<int64_t>(1000 * k);  // largest
  c.train_loss = k;
  return c;
}

TEST(CommStatsTest, GatherMergesEveryFieldByItsRule) {
  // Rank 1's contribution, then rank 0's gather with it.
  TwoRankControl one;
  TrainResult ignored;
  ASSERT_THAT(GatherCommStats(&one, 1, 2, Worker(3), 0, &ignored), IsOk());
  TwoRankControl zero;
  zero.other = one.mine;
  TrainResult r;
  ASSERT_THAT(GatherCommStats(&zero, 0, 2, Worker(1), 0.75, &r), IsOk());
  ASSERT_EQ(r.per_worker.size(), 2u);
  EXPECT_EQ(r.per_worker[0].store.states_pulled, 10);
  EXPECT_EQ(r.per_worker[1].store.states_pulled, 30);
  EXPECT_EQ(r.per_worker[1].working_set.capacity_states, 300);
  const CommStats& t = r.comm;
  // Sums.
  EXPECT_EQ(t.store.states_pulled, 40);
  EXPECT_DOUBLE_EQ(t.store.seconds, 6.0);
  EXPECT_EQ(t.eval.states_pulled, 12);
  EXPECT_DOUBLE_EQ(t.collectives.barrier_seconds, 1.0);
  EXPECT_DOUBLE_EQ(t.time.forward, 8.0);
  EXPECT_EQ(t.policy.refreshes, 4);
  EXPECT_EQ(t.working_set.spills, 16);
  EXPECT_DOUBLE_EQ(t.train_seconds, 40.0);
  // The largest.
  EXPECT_EQ(t.policy.refresh_nodes_max, 21);
  EXPECT_DOUBLE_EQ(t.policy.plan_seconds, 1.5);
  EXPECT_EQ(t.working_set.capacity_states, 300);
  EXPECT_EQ(t.peak_rss_bytes, 3000);
  // The first worker's (the same everywhere), and the given loss.
  EXPECT_EQ(t.policy.boundaries, 6);
  EXPECT_DOUBLE_EQ(t.policy.cross_ratio, 0.1);
  EXPECT_DOUBLE_EQ(t.train_loss, 0.75);
  EXPECT_DOUBLE_EQ(t.share(), (6.0 + 1.0) / 40.0);
}

TEST(CommStatsTest, SummaryWritesEveryGroupUnderItsKeys) {
  data::EventLog log;
  log.name = "tiny";
  data::Split split;
  TrainOptions o;
  SummaryInfo info;
  info.options = &o;
  info.log = &log;
  info.split = &split;
  TrainResult r;
  r.comm = Worker(2);
  r.per_worker = {r.comm};
  const std::string json = SummaryJson(info, r);
  for (const char* key :
       {"\"sync_count\": 2", "\"states_pulled\": 20",
        "\"share\":", "\"barrier_wait_seconds\": 0.5", "\"time_seconds\"",
        "\"communication\":", "\"forward\": 4", "\"eval_states_pulled\": 6",
        "\"eval_pull_seconds\": 0", "\"plan\"", "\"boundaries\": 7",
        "\"refresh_nodes_max\": 14", "\"working_set\"", "\"spills\": 8",
        "\"capacity_states\": 200", "\"prefetch_unused\": 0"}) {
    EXPECT_THAT(json, ::testing::HasSubstr(key)) << key;
  }
}

}  // namespace
}  // namespace mnemo::runtime
