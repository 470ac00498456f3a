#include "trainer/data/split.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <set>

#include "util/status_matchers.h"

namespace mnemo::data {
namespace {

using ::testing::DoubleNear;

TEST(QuantileTest, MatchesNumpyLinear) {
  // numpy.quantile([0, 1, 3, 10], [0.70, 0.85]) == [3.7, 6.85]:
  // pos = q * 3 = 2.1 -> 3 + 0.1 * 7; 2.55 -> 3 + 0.55 * 7.
  const std::vector<double> t = {0, 1, 3, 10};
  EXPECT_THAT(Quantile(t, 0.70), DoubleNear(3.7, 1e-12));
  EXPECT_THAT(Quantile(t, 0.85), DoubleNear(6.85, 1e-12));
  EXPECT_EQ(Quantile(t, 0.0), 0);
  EXPECT_EQ(Quantile(t, 1.0), 10);
  EXPECT_EQ(Quantile({5}, 0.7), 5);
  EXPECT_EQ(Quantile({}, 0.7), 0);
}

// A hand-built log: 20 events at t = 0..19 between 8 nodes.
EventLog SmallLog() {
  EventLog log;
  const int32_t src[] = {0, 1, 2, 3, 0, 1, 2, 3, 0, 1,
                         2, 3, 4, 5, 0, 6, 1, 7, 4, 2};
  const int32_t dst[] = {1, 2, 3, 0, 2, 3, 0, 1, 3, 0,
                         1, 2, 0, 1, 5, 2, 7, 3, 6, 4};
  for (int e = 0; e < 20; ++e) {
    log.src.push_back(src[e]);
    log.dst.push_back(dst[e]);
    log.t.push_back(e);
  }
  log.num_nodes = 8;
  return log;
}

void CheckInvariants(const EventLog& log, const Split& s) {
  // Time ordering and disjointness of the three sets.
  for (int64_t e : s.train) EXPECT_LE(log.t[e], s.val_time);
  for (int64_t e : s.val) {
    EXPECT_GT(log.t[e], s.val_time);
    EXPECT_LE(log.t[e], s.test_time);
  }
  for (int64_t e : s.test) EXPECT_GT(log.t[e], s.test_time);
  EXPECT_TRUE(std::is_sorted(s.train.begin(), s.train.end()));
  EXPECT_TRUE(std::is_sorted(s.val.begin(), s.val.end()));
  EXPECT_TRUE(std::is_sorted(s.test.begin(), s.test.end()));
  // Held-out nodes never appear in train; new nodes are exactly those
  // missing from train.
  std::vector<uint8_t> in_train(log.num_nodes, 0);
  for (int64_t e : s.train) {
    EXPECT_FALSE(s.held_out_node[log.src[e]]);
    EXPECT_FALSE(s.held_out_node[log.dst[e]]);
    in_train[log.src[e]] = in_train[log.dst[e]] = 1;
  }
  for (int64_t v = 0; v < log.num_nodes; ++v) {
    EXPECT_EQ(s.new_node[v], !in_train[v]) << v;
    if (s.held_out_node[v]) {
      EXPECT_TRUE(s.new_node[v]);
    }
  }
  auto expect_new = [&](const std::vector<int64_t>& all,
                        const std::vector<int64_t>& nn) {
    std::vector<int64_t> want;
    for (int64_t e : all)
      if (s.new_node[log.src[e]] || s.new_node[log.dst[e]]) want.push_back(e);
    EXPECT_EQ(nn, want);
  };
  expect_new(s.val, s.new_node_val);
  expect_new(s.test, s.new_node_test);
  // Every event is in val/test or train, or was dropped from train because
  // of a held-out endpoint.
  int64_t dropped = 0;
  for (int64_t e = 0; e < log.num_events(); ++e)
    if (log.t[e] <= s.val_time &&
        (s.held_out_node[log.src[e]] || s.held_out_node[log.dst[e]]))
      ++dropped;
  EXPECT_EQ(
      static_cast<int64_t>(s.train.size() + s.val.size() + s.test.size()) +
          dropped,
      log.num_events());
  // Destinations.
  std::set<int32_t> td, ad;
  for (int64_t e : s.train) td.insert(log.dst[e]);
  for (int64_t e = 0; e < log.num_events(); ++e) ad.insert(log.dst[e]);
  EXPECT_EQ(s.train_destinations, std::vector<int32_t>(td.begin(), td.end()));
  EXPECT_EQ(s.all_destinations, std::vector<int32_t>(ad.begin(), ad.end()));
}

TEST(SplitTest, SmallLogByHand) {
  const EventLog log = SmallLog();
  SplitOptions o;
  o.new_node_fraction = 0.25;  // floor(0.25 * 8) = 2 held-out nodes
  const Split s = MakeSplit(log, o);
  // numpy.quantile(range(20), [.7, .85]) == [13.3, 16.15].
  EXPECT_THAT(s.val_time, DoubleNear(13.3, 1e-12));
  EXPECT_THAT(s.test_time, DoubleNear(16.15, 1e-12));
  EXPECT_EQ(s.val.size(), 3u);   // t = 14, 15, 16
  EXPECT_EQ(s.test.size(), 3u);  // t = 17, 18, 19
  // Candidates: nodes of events with t > 13.3 = {0,5,6,2,1,7,3,4}.
  EXPECT_EQ(std::count(s.held_out_node.begin(), s.held_out_node.end(), 1), 2);
  CheckInvariants(log, s);
  // Nodes 6 and 7 appear only after val_time: always new.
  EXPECT_TRUE(s.new_node[6]);
  EXPECT_TRUE(s.new_node[7]);
}

TEST(SplitTest, NoHoldOut) {
  const EventLog log = SmallLog();
  SplitOptions o;
  o.new_node_fraction = 0;
  const Split s = MakeSplit(log, o);
  EXPECT_EQ(s.train.size(), 14u);  // t = 0..13
  EXPECT_EQ(std::count(s.held_out_node.begin(), s.held_out_node.end(), 1), 0);
  CheckInvariants(log, s);
  // Nodes 6 and 7 first appear at t = 15 and 16.
  EXPECT_EQ(s.new_node_val, std::vector<int64_t>({15, 16}));
  EXPECT_EQ(s.new_node_test, std::vector<int64_t>({17, 18}));
}

TEST(SplitTest, SeedIsDeterministic) {
  const EventLog log = SmallLog();
  SplitOptions o;
  o.new_node_fraction = 0.25;
  EXPECT_EQ(MakeSplit(log, o).held_out_node, MakeSplit(log, o).held_out_node);
}

TEST(SplitTest, WikipediaLikeReference) {
  const char* d = std::getenv("MNEMO_SHARED_DATA");
  auto log = LoadEventLog(
      std::string(d ? d : "../shared/data") + "/wikipedia.txt.gz", {});
  ASSERT_THAT(log, IsOk());
  const Split s = MakeSplit(*log, {});
  CheckInvariants(*log, s);
  // The TGN reference's split of Wikipedia exactly: its hold-out is redrawn
  // with Python's random.sample (python_random.h).
  EXPECT_EQ(s.train.size(), 81029u);
  EXPECT_EQ(s.val.size(), 23621u);
  EXPECT_EQ(s.test.size(), 23621u);
  EXPECT_EQ(s.new_node_val.size(), 12016u);
  EXPECT_EQ(s.new_node_test.size(), 11715u);
  EXPECT_EQ(std::count(s.held_out_node.begin(), s.held_out_node.end(), 1), 922);
  // The Fisher-Yates draw holds out as many nodes, others.
  SplitOptions own;
  own.reference_draw = false;
  const Split o = MakeSplit(*log, own);
  CheckInvariants(*log, o);
  EXPECT_EQ(std::count(o.held_out_node.begin(), o.held_out_node.end(), 1), 922);
  EXPECT_NE(o.train.size(), s.train.size());
}

// Train sizes of the reference's draw on the other datasets, as its
// utils/data_processing.py computes them (CPython 3.11 with numpy, reading
// the same files).
TEST(SplitTest, ReferenceDrawOnEveryDataset) {
  const char* d = std::getenv("MNEMO_SHARED_DATA");
  const std::string dir = d ? d : "../shared/data";
  const std::pair<const char*, size_t> cases[] = {
      {"/sx-mathoverflow.txt.gz", 264240},
      {"/CollegeMsg.txt.gz", 34352},
      {"/soc-sign-bitcoinalpha.konect.gz", 13207},
      {"/USLegis.txt.gz", 36427}};
  for (const auto& [file, train] : cases) {
    auto log = LoadEventLog(dir + file, {});
    ASSERT_THAT(log, IsOk());
    EXPECT_EQ(MakeSplit(*log, {}).train.size(), train) << file;
  }
}

}  // namespace
}  // namespace mnemo::data
