#include "trainer/data/neighbor_sampler.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <random>

#include "trainer/data/split.h"
#include "util/status_matchers.h"

namespace mnemo::data {
namespace {

struct Entry {
  int32_t nbr;
  int64_t eid;
  double t;
};

// Brute force: all entries of `node` strictly before `t` over `events`, in
// (time, event id) order.
std::vector<Entry> Scan(const EventLog& log, const std::vector<int64_t>& events,
                        int32_t node, double t) {
  std::vector<Entry> out;
  for (int64_t e : events) {
    if (log.t[e] >= t) continue;
    if (log.src[e] == node) out.push_back({log.dst[e], e, log.t[e]});
    if (log.dst[e] == node) out.push_back({log.src[e], e, log.t[e]});
  }
  return out;
}

class NeighborSamplerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const char* d = std::getenv("MNEMO_SHARED_DATA");
    auto log = LoadEventLog(
        std::string(d ? d : "../shared/data") + "/CollegeMsg.txt.gz", {});
    ASSERT_THAT(log, IsOk());
    log_ = new EventLog(*std::move(log));
  }
  static void TearDownTestSuite() { delete log_; }
  static EventLog* log_;
};
EventLog* NeighborSamplerTest::log_ = nullptr;

TEST_F(NeighborSamplerTest, CsrShape) {
  TemporalGraph g(*log_);
  EXPECT_EQ(g.num_nodes(), log_->num_nodes);
  EXPECT_EQ(g.num_entries(), 2 * log_->num_events());
  for (int64_t v = 0; v < g.num_nodes(); ++v) {
    for (int64_t i = g.offsets()[v] + 1; i < g.offsets()[v + 1]; ++i) {
      ASSERT_LE(g.times()[i - 1], g.times()[i]);
      if (g.times()[i - 1] == g.times()[i]) {
        ASSERT_LE(g.event_ids()[i - 1], g.event_ids()[i]);
      }
    }
  }
}

TEST_F(NeighborSamplerTest, RecentMatchesBruteForce) {
  const Split split = MakeSplit(*log_, {});
  std::vector<int64_t> all(log_->num_events());
  for (int64_t e = 0; e < log_->num_events(); ++e) all[e] = e;
  for (const std::vector<int64_t>* events :
       {static_cast<const std::vector<int64_t>*>(&all), &split.train}) {
    TemporalGraph g(*log_, *events);
    constexpr int kK = 10;
    NeighborSampler sampler(&g, kK, NeighborStrategy::kRecent);
    std::mt19937_64 rng(7);
    const double t_max = log_->t.back() + 1;
    constexpr int kQueries = 300;
    std::vector<int32_t> nodes(kQueries);
    std::vector<double> times(kQueries);
    for (int q = 0; q < kQueries; ++q) {
      nodes[q] = static_cast<int32_t>(rng() % log_->num_nodes);
      // Half the queries at an event time of the node (ties matter).
      times[q] = (q % 2) ? std::uniform_real_distribution<double>(0, t_max)(rng)
                         : log_->t[rng() % log_->num_events()];
    }
    NeighborBlock block;
    sampler.Sample(nodes.data(), times.data(), kQueries, &block);
    ASSERT_EQ(block.k, kK);
    for (int q = 0; q < kQueries; ++q) {
      const std::vector<Entry> want = Scan(*log_, *events, nodes[q], times[q]);
      const int n = std::min<int>(kK, want.size());
      ASSERT_EQ(block.count[q], n) << q;
      for (int i = 0; i < n; ++i) {
        const Entry& w = want[want.size() - n + i];
        EXPECT_EQ(block.nbr[q * kK + i], w.nbr);
        EXPECT_EQ(block.eid[q * kK + i], w.eid);
        EXPECT_EQ(block.t[q * kK + i], w.t);
      }
      for (int i = n; i < kK; ++i) {
        EXPECT_EQ(block.nbr[q * kK + i], -1);
        EXPECT_EQ(block.eid[q * kK + i], -1);
        EXPECT_EQ(block.t[q * kK + i], 0);
      }
    }
  }
}

TEST_F(NeighborSamplerTest, UniformReturnsValidEntriesBeforeT) {
  TemporalGraph g(*log_);
  constexpr int kK = 8;
  NeighborSampler sampler(&g, kK, NeighborStrategy::kUniform, 3);
  std::mt19937_64 rng(11);
  constexpr int kQueries = 500;
  std::vector<int32_t> nodes(kQueries);
  std::vector<double> times(kQueries);
  for (int q = 0; q < kQueries; ++q) {
    nodes[q] = static_cast<int32_t>(rng() % log_->num_nodes);
    times[q] = log_->t[rng() % log_->num_events()];
  }
  NeighborBlock block;
  sampler.Sample(nodes.data(), times.data(), kQueries, &block);
  for (int q = 0; q < kQueries; ++q) {
    int64_t b, e;
    g.Before(nodes[q], times[q], &b, &e);
    ASSERT_EQ(block.count[q], e > b ? kK : 0);
    for (int i = 0; i < block.count[q]; ++i) {
      const int64_t eid = block.eid[q * kK + i];
      ASSERT_GE(eid, 0);
      EXPECT_LT(log_->t[eid], times[q]);
      EXPECT_EQ(block.t[q * kK + i], log_->t[eid]);
      const bool is_src = log_->src[eid] == nodes[q];
      const bool is_dst = log_->dst[eid] == nodes[q];
      ASSERT_TRUE(is_src || is_dst);
      EXPECT_EQ(block.nbr[q * kK + i],
                is_src ? log_->dst[eid] : log_->src[eid]);
      if (i > 0) {
        EXPECT_LE(block.t[q * kK + i - 1], block.t[q * kK + i]);
      }
    }
    for (int i = block.count[q]; i < kK; ++i)
      EXPECT_EQ(block.nbr[q * kK + i], -1);
  }
}

TEST_F(NeighborSamplerTest, WindowsMatchBruteForce) {
  TemporalGraph g(*log_);
  std::mt19937_64 rng(13);
  constexpr int kQueries = 400, kK = 6;
  std::vector<int32_t> nodes(kQueries);
  std::vector<double> from(kQueries), to(kQueries);
  std::vector<int64_t> all(log_->num_events());
  for (int64_t e = 0; e < log_->num_events(); ++e) all[e] = e;
  for (int q = 0; q < kQueries; ++q) {
    // Windows that start and end at event times (ties matter), some empty.
    const int64_t e = rng() % log_->num_events();
    nodes[q] = q % 2 ? log_->src[e] : log_->dst[e];
    to[q] = log_->t[e];
    from[q] = q % 7 == 0 ? to[q] : log_->t[rng() % (e + 1)];
  }
  for (NeighborStrategy strategy :
       {NeighborStrategy::kRecent, NeighborStrategy::kUniform}) {
    NeighborSampler sampler(&g, kK, strategy, 5);
    NeighborBlock block;
    sampler.SampleBetween(nodes.data(), from.data(), to.data(), kQueries,
                          &block);
    for (int q = 0; q < kQueries; ++q) {
      std::vector<Entry> want;
      for (const Entry& x : Scan(*log_, all, nodes[q], to[q])) {
        if (x.t >= from[q]) want.push_back(x);
      }
      const int n = strategy == NeighborStrategy::kRecent
                        ? std::min<int>(kK, want.size())
                        : (want.empty() ? 0 : kK);
      ASSERT_EQ(block.count[q], n) << q;
      for (int i = 0; i < n; ++i) {
        const double t = block.t[q * kK + i];
        EXPECT_GE(t, from[q]) << q;
        EXPECT_LT(t, to[q]) << q;
        if (strategy == NeighborStrategy::kRecent) {
          EXPECT_EQ(block.eid[q * kK + i], want[want.size() - n + i].eid);
        }
      }
    }
  }
}

TEST_F(NeighborSamplerTest, OutOfRangeNodeHasNoNeighbours) {
  TemporalGraph g(*log_);
  int64_t b, e;
  g.Before(-1, 1e18, &b, &e);
  EXPECT_EQ(b, e);
  g.Before(static_cast<int32_t>(log_->num_nodes), 1e18, &b, &e);
  EXPECT_EQ(b, e);
}

// A serving process's index: the first half's graph, then the rest
// appended in two pieces (and room for nodes the first half never named),
// is the graph of every event.
TEST_F(NeighborSamplerTest, AppendedGraphIsTheWholeLogsGraph) {
  EventLog part = *log_;
  const int64_t n = log_->num_events(), half = n / 2;
  part.src.resize(half);
  part.dst.resize(half);
  part.t.resize(half);
  TemporalGraph g(part);
  for (int64_t until : {half + (n - half) / 3, n}) {
    const int64_t before = part.num_events();
    for (int64_t e = before; e < until; ++e) {
      part.src.push_back(log_->src[e]);
      part.dst.push_back(log_->dst[e]);
      part.t.push_back(log_->t[e]);
    }
    g.Append(part, before);
  }
  part.num_nodes = log_->num_nodes + 5;
  g.Append(part, n);  // nothing new: only the room grows
  TemporalGraph whole(*log_);
  EXPECT_EQ(g.num_nodes(), log_->num_nodes + 5);
  EXPECT_TRUE(std::equal(whole.offsets().begin(), whole.offsets().end(),
                         g.offsets().begin()));
  EXPECT_EQ(g.neighbors(), whole.neighbors());
  EXPECT_EQ(g.event_ids(), whole.event_ids());
  EXPECT_EQ(g.times(), whole.times());
}

}  // namespace
}  // namespace mnemo::data
