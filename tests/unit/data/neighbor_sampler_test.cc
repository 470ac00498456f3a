#include "trainer/data/neighbor_sampler.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <limits>
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
// A serving process's neighbour index: a built twentieth, then batches of
// 200 events up to half the log and one large append, then room for new
// nodes. Every node holds
// what the whole log's graph holds for it, and samplers over both draw the
// same; the arrays are compacted as entries move (at most about three
// times the entries held).
TEST_F(NeighborSamplerTest, AppendedGraphIsTheWholeLogsGraph) {
  EventLog part = *log_;
  const int64_t n = log_->num_events(), built = n / 20;
  part.src.resize(built);
  part.dst.resize(built);
  part.t.resize(built);
  TemporalGraph g(part);
  std::vector<int64_t> ends;
  for (int64_t e = built + 200; e < n / 2; e += 200) ends.push_back(e);
  ends.push_back(n);
  size_t largest = 0;
  for (int64_t until : ends) {
    const int64_t before = part.num_events();
    for (int64_t e = before; e < until; ++e) {
      part.src.push_back(log_->src[e]);
      part.dst.push_back(log_->dst[e]);
      part.t.push_back(log_->t[e]);
    }
    g.Append(part, before);
    largest = std::max(largest, g.neighbors().size());
    EXPECT_EQ(g.num_entries(), 2 * until);
  }
  EXPECT_LE(largest, 3 * static_cast<size_t>(2 * n) + 1024 + 2 * 4 * n);
  part.num_nodes = log_->num_nodes + 5;
  g.Append(part, n);  // nothing new: only the room grows
  TemporalGraph whole(*log_);
  ASSERT_EQ(g.num_nodes(), log_->num_nodes + 5);
  EXPECT_TRUE(g.offsets().empty());
  const double end = std::numeric_limits<double>::infinity();
  for (int32_t v = 0; v < g.num_nodes(); ++v) {
    int64_t gb, ge, wb = 0, we = 0;
    g.Before(v, end, &gb, &ge);
    if (v < whole.num_nodes()) whole.Before(v, end, &wb, &we);
    ASSERT_EQ(ge - gb, we - wb) << v;
    for (int64_t i = 0; i < ge - gb; ++i) {
      ASSERT_EQ(g.neighbors()[gb + i], whole.neighbors()[wb + i]) << v;
      ASSERT_EQ(g.event_ids()[gb + i], whole.event_ids()[wb + i]) << v;
      ASSERT_EQ(g.times()[gb + i], whole.times()[wb + i]) << v;
    }
  }
  for (NeighborStrategy strategy :
       {NeighborStrategy::kRecent, NeighborStrategy::kUniform}) {
    NeighborSampler a(&g, 10, strategy, 3), b(&whole, 10, strategy, 3);
    std::vector<int32_t> nodes;
    std::vector<double> times;
    for (int64_t e = 0; e < n; e += 7) {
      nodes.push_back(log_->src[e]);
      times.push_back(log_->t[e]);
    }
    NeighborBlock x, y;
    a.Sample(nodes.data(), times.data(), nodes.size(), &x);
    b.Sample(nodes.data(), times.data(), nodes.size(), &y);
    EXPECT_EQ(x.nbr, y.nbr);
    EXPECT_EQ(x.eid, y.eid);
    EXPECT_EQ(x.t, y.t);
    EXPECT_EQ(x.count, y.count);
  }
}

// Appends that keep moving a few busy nodes' entries: the places they
// leave behind are reclaimed (the arrays shrink at least once), the arrays
// stay within three times the entries, and every node's entries are the
// whole log's.
TEST(TemporalGraphTest, AppendsReclaimTheRoomEntriesLeave) {
  EventLog log;
  log.num_nodes = 4;
  EventLog part = log;
  TemporalGraph g(part);
  size_t size = 0;
  bool shrank = false;
  for (int64_t e = 0; e < 20000; ++e) {
    log.src.push_back(static_cast<int32_t>(e % 3 == 0 ? 3 : 0));
    log.dst.push_back(static_cast<int32_t>(1 + e % 2));
    log.t.push_back(static_cast<double>(e / 5));
    if (e % 7 == 6) {
      const int64_t before = part.num_events();
      part = log;
      g.Append(part, before);
      shrank = shrank || g.neighbors().size() < size;
      size = g.neighbors().size();
      ASSERT_LE(size, 3 * static_cast<size_t>(g.num_entries()) + 1024);
    }
  }
  EXPECT_TRUE(shrank);
  // A batch appended and taken back (a refused ingestion): the graph holds
  // what it held; events it never appended are not taken.
  {
    EventLog more = part;
    for (int64_t e = 0; e < 9; ++e) {
      more.src.push_back(static_cast<int32_t>(e % 4));
      more.dst.push_back(static_cast<int32_t>((e + 1) % 4));
      more.t.push_back(1e6);
    }
    const int64_t entries = g.num_entries();
    g.Append(more, part.num_events());
    EXPECT_EQ(g.num_entries(), entries + 18);
    EXPECT_TRUE(g.RemoveAppended(more, part.num_events()));
    EXPECT_EQ(g.num_entries(), entries);
    EXPECT_FALSE(g.RemoveAppended(more, part.num_events()));
    EXPECT_EQ(g.num_entries(), entries);
  }
  TemporalGraph whole(part);
  for (int32_t v = 0; v < 4; ++v) {
    int64_t gb, ge, wb, we;
    g.Before(v, 1e9, &gb, &ge);
    whole.Before(v, 1e9, &wb, &we);
    ASSERT_EQ(ge - gb, we - wb) << v;
    EXPECT_TRUE(std::equal(g.event_ids().begin() + gb,
                           g.event_ids().begin() + ge,
                           whole.event_ids().begin() + wb))
        << v;
    EXPECT_TRUE(std::equal(g.neighbors().begin() + gb,
                           g.neighbors().begin() + ge,
                           whole.neighbors().begin() + wb))
        << v;
  }
}

}  // namespace
}  // namespace mnemo::data
