// DepBloom's temporally bounded sub-chains (PlanKind::kSubChains): window
// graphs, the three partitioners, worker plans (padding, step counts, refresh
// and urgent sets), statistics, the plan cache, and the Fig. 5 metric on
// real data.
#include "trainer/plan/subchain_plan.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "trainer/data/split.h"
#include "trainer/plan/batch_plan.h"
#include "util/status_matchers.h"

namespace mnemo::plan {
namespace {

using ::testing::Each;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

data::EventLog MakeLog(int64_t num_nodes,
                       const std::vector<std::pair<int, int>>& edges) {
  data::EventLog log;
  log.name = "test";
  log.num_nodes = num_nodes;
  for (size_t i = 0; i < edges.size(); ++i) {
    log.src.push_back(edges[i].first);
    log.dst.push_back(edges[i].second);
    log.t.push_back(static_cast<double>(i));
  }
  for (int64_t u = 0; u < num_nodes; ++u) log.original_ids.push_back(u);
  return log;
}

std::vector<int64_t> AllEvents(const data::EventLog& log) {
  std::vector<int64_t> train(log.num_events());
  for (int64_t i = 0; i < log.num_events(); ++i) train[i] = i;
  return train;
}

std::string TempDir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/mnemo_subchain_" + name +
                          "_" + std::to_string(getpid());
  std::filesystem::remove_all(dir);
  return dir;
}

std::string SharedData(const std::string& file) {
  const char* d = std::getenv("MNEMO_SHARED_DATA");
  return std::string(d ? d : "../shared/data") + "/" + file;
}

// The partitioner's name, for traces and printed figures.
const char* Name(Partitioner p) { return PartitionerName(p).data(); }

PlanOptions SubChainOptions(int world_size, Partitioner partitioner,
                            int64_t window_events, int64_t batch_size) {
  PlanOptions o;
  o.kind = PlanKind::kSubChains;
  o.world_size = world_size;
  o.partitioner = partitioner;
  o.window_events = window_events;
  o.batch_size = batch_size;
  return o;
}

// Endpoints of `events`, ascending and distinct.
std::vector<int64_t> Endpoints(const data::EventLog& log,
                               const std::vector<int64_t>& events) {
  std::set<int64_t> nodes;
  for (const int64_t e : events) {
    nodes.insert(log.src[e]);
    nodes.insert(log.dst[e]);
  }
  return std::vector<int64_t>(nodes.begin(), nodes.end());
}

// A stream over `communities` * `size` nodes (ids shuffled, so communities
// are not id ranges): each event picks a community, a source in it and, with
// probability 1 - p_cross, a destination in it (else anywhere else).
struct Planted {
  data::EventLog log;
  std::vector<int> community;  // per node
};

Planted MakePlanted(int communities, int size, int64_t events, double p_cross,
                    uint64_t seed) {
  std::mt19937_64 rng(seed);
  const int n = communities * size;
  std::vector<int> ids(n);
  for (int i = 0; i < n; ++i) ids[i] = i;
  std::shuffle(ids.begin(), ids.end(), rng);
  Planted p;
  p.community.assign(n, 0);
  for (int i = 0; i < n; ++i) p.community[ids[i]] = i / size;
  std::uniform_int_distribution<int> pick_c(0, communities - 1);
  std::uniform_int_distribution<int> pick_m(0, size - 1);
  std::uniform_int_distribution<int> pick_any(0, n - 1);
  std::bernoulli_distribution cross(p_cross);
  std::vector<std::pair<int, int>> edges;
  for (int64_t i = 0; i < events; ++i) {
    const int c = pick_c(rng);
    const int u = ids[c * size + pick_m(rng)];
    int v;
    if (cross(rng)) {
      do {
        v = pick_any(rng);
      } while (p.community[v] == c);
    } else {
      do {
        v = ids[c * size + pick_m(rng)];
      } while (v == u);
    }
    edges.emplace_back(u, v);
  }
  p.log = MakeLog(n, edges);
  return p;
}

// A random stream with repeated pairs, self-loops and nodes of very
// different activity; `train` skips some log indices.
struct RandomStream {
  data::EventLog log;
  std::vector<int64_t> train;
};

RandomStream MakeRandomStream(int nodes, int64_t events, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> any(0, nodes - 1);
  std::uniform_int_distribution<int> hot(0, 4);
  std::uniform_int_distribution<int> dice(0, 9);
  std::vector<std::pair<int, int>> edges;
  for (int64_t i = 0; i < events; ++i) {
    const int u = dice(rng) < 3 ? hot(rng) : any(rng);
    const int v = dice(rng) == 0 ? u : any(rng);
    edges.emplace_back(u, v);
  }
  RandomStream s{MakeLog(nodes, edges), {}};
  for (int64_t i = 0; i < events; ++i) {
    if (dice(rng) != 0) s.train.push_back(i);
  }
  return s;
}

// ---------------------------------------------------------------------------
// Window graphs and the partitioners.

TEST(WindowGraphTest, WeightsAndAdjacency) {
  // Nodes by first appearance: 5 -> 0, 2 -> 1, 7 -> 2, 9 -> 3.
  const data::EventLog log =
      MakeLog(10, {{5, 2}, {2, 5}, {5, 7}, {7, 7}, {2, 5}, {9, 9}, {1, 2}});
  const std::vector<int64_t> events = {0, 1, 2, 3, 4, 5};  // not event 6
  const WindowGraph g = BuildWindowGraph(log, events);
  EXPECT_THAT(g.nodes, ElementsAre(5, 2, 7, 9));
  // 5: three events with 2, one with 7; 2: three; 7: one with 5 plus a
  // self-loop (counted once); 9: one self-loop.
  EXPECT_THAT(g.node_weight, ElementsAre(4, 3, 2, 1));
  EXPECT_EQ(g.total_node_weight(), 10);
  EXPECT_THAT(g.event_src, ElementsAre(0, 1, 0, 2, 1, 3));
  EXPECT_THAT(g.event_dst, ElementsAre(1, 0, 2, 2, 0, 3));
  EXPECT_THAT(g.offsets, ElementsAre(0, 2, 3, 4, 4));
  EXPECT_THAT(g.neighbors, ElementsAre(1, 2, 0, 0));
  EXPECT_THAT(g.edge_weight, ElementsAre(3, 1, 3, 1));
}

TEST(WindowGraphTest, SmallAndDegenerateGraphs) {
  for (const Partitioner p : {Partitioner::kMetis, Partitioner::kGreedy}) {
    SCOPED_TRACE(Name(p));
    // Fewer nodes than parts.
    const data::EventLog three = MakeLog(3, {{0, 1}, {1, 2}, {0, 1}});
    const WindowGraph g3 = BuildWindowGraph(three, AllEvents(three));
    bool fallback = true;
    std::vector<int32_t> part = PartitionWindowGraph(g3, 4, p, 0.05, &fallback);
    EXPECT_FALSE(fallback);
    ASSERT_EQ(part.size(), 3u);
    EXPECT_EQ(std::set<int32_t>(part.begin(), part.end()).size(), 3u);
    for (const int32_t x : part) EXPECT_TRUE(x >= 0 && x < 4);
    // Only self-loops: no edges at all; weights 3, 2, 1, 1 over 2 parts.
    const data::EventLog loops =
        MakeLog(4, {{0, 0}, {0, 0}, {1, 1}, {0, 0}, {2, 2}, {1, 1}, {3, 3}});
    const WindowGraph gl = BuildWindowGraph(loops, AllEvents(loops));
    EXPECT_TRUE(gl.neighbors.empty());
    part = PartitionWindowGraph(gl, 2, p, 0.05);
    EXPECT_THAT(part, ElementsAre(0, 1, 1, 0));
    // One part.
    part = PartitionWindowGraph(g3, 1, p, 0.05);
    EXPECT_THAT(part, ElementsAre(0, 0, 0));
  }
}

TEST(WindowGraphTest, IsolatedNodesAmongCommunities) {
  // Two 6-cliques joined by one edge, plus 6 nodes that only have
  // self-loops.
  std::vector<std::pair<int, int>> edges;
  for (int c = 0; c < 2; ++c) {
    for (int i = 0; i < 6; ++i) {
      for (int j = i + 1; j < 6; ++j) {
        for (int r = 0; r < 3; ++r) edges.emplace_back(6 * c + i, 6 * c + j);
      }
    }
  }
  edges.emplace_back(0, 6);
  for (int i = 12; i < 18; ++i) edges.emplace_back(i, i);
  const data::EventLog log = MakeLog(18, edges);
  const WindowGraph g = BuildWindowGraph(log, AllEvents(log));
  for (const Partitioner p : {Partitioner::kMetis, Partitioner::kGreedy}) {
    SCOPED_TRACE(Name(p));
    bool fallback = true;
    const std::vector<int32_t> part =
        PartitionWindowGraph(g, 2, p, 0.05, &fallback);
    EXPECT_FALSE(fallback);
    ASSERT_EQ(part.size(), 18u);
    // Each clique stays whole; the two cliques go to different parts.
    for (int i = 1; i < 6; ++i) {
      EXPECT_EQ(part[i], part[0]);
      EXPECT_EQ(part[6 + i], part[6]);
    }
    EXPECT_NE(part[0], part[6]);
  }
}

// METIS draws from libc's rand(), which other threads of a trainer (gRPC,
// libraries) also call: the partition must not depend on them. Another
// thread calls rand() throughout; every partition equals the one made
// before it started.
TEST(WindowGraphTest, MetisIgnoresOtherThreadsRand) {
  const Planted p = MakePlanted(8, 250, 20000, 0.1, 11);
  const WindowGraph g = BuildWindowGraph(p.log, AllEvents(p.log));
  const WindowGraph pieces = SplitNodes(g, 50);
  const std::vector<int32_t> quiet =
      PartitionWindowGraph(g, 4, Partitioner::kMetis, 0.05);
  const std::vector<int32_t> quiet_pieces =
      PartitionWindowGraph(pieces, 2, Partitioner::kMetis, 0.05);
  std::atomic<bool> stop{false};
  std::atomic<int64_t> draws{0};
  std::thread noise([&] {
    while (!stop.load()) {
      (void)rand();  // NOLINT(runtime/threadsafe_fn): the point of the test
      draws.fetch_add(1);
    }
  });
  for (int i = 0; i < 10; ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(PartitionWindowGraph(g, 4, Partitioner::kMetis, 0.05), quiet);
    EXPECT_EQ(PartitionWindowGraph(pieces, 2, Partitioner::kMetis, 0.05),
              quiet_pieces);
  }
  stop.store(true);
  noise.join();
  EXPECT_GT(draws.load(), 0);
  // rand() outside METIS is libc's: srand(s) replays its sequence.
  srand(5);                          // NOLINT(runtime/threadsafe_fn)
  const int a = rand(), b = rand();  // NOLINT(runtime/threadsafe_fn)
  srand(5);                          // NOLINT(runtime/threadsafe_fn)
  EXPECT_EQ(rand(), a);              // NOLINT(runtime/threadsafe_fn)
  EXPECT_EQ(rand(), b);              // NOLINT(runtime/threadsafe_fn)
}

TEST(CrossEventsTest, MatchesTheDefinition) {
  // Events: 0:(0,1) 1:(1,2) 2:(0,3) 3:(2,1) 4:(3,3) 5:(4,5)
  const data::EventLog log =
      MakeLog(6, {{0, 1}, {1, 2}, {0, 3}, {2, 1}, {3, 3}, {4, 5}});
  const WindowGraph g = BuildWindowGraph(log, AllEvents(log));
  const std::vector<int32_t> chain = {0, 1, 0, 1, 1, 0};
  WindowStats s;
  CountCrossEvents(g, chain, &s);
  // e0: first events of 0 and 1. e1: node 1's previous is e0 (chain 0) ->
  // cross. e2: node 0's previous e0 is chain 0 -> not. e3: previous of 2 is
  // e1 (1), of 1 is e1 (1) -> not. e4: previous of 3 is e2 (0) -> cross.
  // e5: first events.
  EXPECT_EQ(s.events, 6);
  EXPECT_EQ(s.nodes, 6);
  EXPECT_EQ(s.cross_events, 2);
  EXPECT_DOUBLE_EQ(s.cross_ratio, 2.0 / 6.0);
  // Nodes 1 and 3 have events in both chains: every event but e5 touches
  // one of them.
  EXPECT_EQ(s.shared_events, 5);
  EXPECT_DOUBLE_EQ(s.shared_ratio, 5.0 / 6.0);
}

// A hub (node 0) whose in-events come from sources in the other part.
TEST(AssignChainsTest, EachRuleByHand) {
  // Events: 0:(1,0) 1:(2,0) 2:(1,3) 3:(4,0) 4:(2,0) 5:(3,4)
  const data::EventLog log =
      MakeLog(5, {{1, 0}, {2, 0}, {1, 3}, {4, 0}, {2, 0}, {3, 4}});
  const WindowGraph g = BuildWindowGraph(log, AllEvents(log));
  ASSERT_THAT(g.nodes, ElementsAre(1, 0, 2, 3, 4));  // local ids by appearance
  // Local ids: 1->0, 0->1 (the hub, 4 events), 2->2, 3->3, 4->4.
  // Parts: the hub alone in part 0, the rest in part 1.
  const std::vector<int32_t> part = {1, 0, 1, 1, 1};
  // Plenty of room: no balance bound reached.
  EXPECT_THAT(AssignChains(g, part, 2, ChainAssignment::kSource, 10.0),
              ElementsAre(1, 1, 1, 1, 1, 1));
  // The hub's events go to its part; the others stay in theirs.
  EXPECT_THAT(AssignChains(g, part, 2, ChainAssignment::kHeavier, 10.0),
              ElementsAre(0, 0, 1, 0, 0, 1));
  // e0: no earlier events; heavier (the hub) -> 0. e1: node 2 new, the hub
  // last in 0 -> 0. e2: (1, 3): both in part 1 -> 1. e3: node 4 new, hub
  // in 0 -> 0. e4: node 2 last in 0, hub in 0 -> 0. e5: (3, 4): part 1;
  // node 3 last in 1, node 4 in 0: 1 broken either way -> part 1.
  EXPECT_THAT(AssignChains(g, part, 2, ChainAssignment::kFollow, 10.0),
              ElementsAre(0, 0, 1, 0, 0, 1));
  WindowStats source, heavier;
  CountCrossEvents(g, AssignChains(g, part, 2, ChainAssignment::kSource, 10.0),
                   &source);
  CountCrossEvents(g, AssignChains(g, part, 2, ChainAssignment::kHeavier, 10.0),
                   &heavier);
  EXPECT_EQ(source.cross_events, 0);  // every event in part 1
  // e2: node 1's previous (e0) in 0. e5: node 4's previous (e3) in 0.
  EXPECT_EQ(heavier.cross_events, 2);
}

TEST(AssignChainsTest, FollowKeepsAChainThatTheHeavierWouldBreak) {
  // Events: 0:(0,1) 1:(0,2) 2:(0,3) 3:(4,1) 4:(4,5) 5:(4,6) 6:(4,1)
  // Node 4 (4 events) is heavier than node 1 (3 events).
  const data::EventLog log =
      MakeLog(7, {{0, 1}, {0, 2}, {0, 3}, {4, 1}, {4, 5}, {4, 6}, {4, 1}});
  const WindowGraph g = BuildWindowGraph(log, AllEvents(log));
  ASSERT_THAT(g.nodes, ElementsAre(0, 1, 2, 3, 4, 5, 6));
  const std::vector<int32_t> part = {0, 0, 0, 0, 1, 1, 1};
  // e3 (4, 1): node 4 new, node 1 last in 0: follow keeps it in 0 (nothing
  // broken) where heavier sends it to node 4's part 1 (node 1 broken).
  const std::vector<int32_t> heavier =
      AssignChains(g, part, 2, ChainAssignment::kHeavier, 10.0);
  const std::vector<int32_t> follow =
      AssignChains(g, part, 2, ChainAssignment::kFollow, 10.0);
  EXPECT_EQ(heavier[3], 1);
  EXPECT_EQ(follow[3], 0);
  // The rule is greedy in time: keeping e3 with node 1 breaks node 4's
  // chain at e4 (its part is 1) and node 1's again at e6, where the heavier
  // rule broke node 1's once. On real windows it breaks fewer in all
  // (bench_subchains).
  WindowStats h, f;
  CountCrossEvents(g, heavier, &h);
  CountCrossEvents(g, follow, &f);
  EXPECT_EQ(h.cross_events, 1);
  EXPECT_EQ(f.cross_events, 2);
}

TEST(AssignChainsTest, EverySubChainWithinTheEventBound) {
  // Every event touches the hub: the heavier rule alone would put them all
  // in its part.
  std::vector<std::pair<int, int>> edges;
  for (int i = 0; i < 100; ++i) edges.push_back({1 + i % 9, 0});
  const data::EventLog log = MakeLog(10, edges);
  const WindowGraph g = BuildWindowGraph(log, AllEvents(log));
  std::vector<int32_t> part(g.num_nodes(), 1);
  part[1] = 0;  // the hub (local id 1: node 0 appears second)
  ASSERT_EQ(g.nodes[1], 0);
  for (const ChainAssignment a :
       {ChainAssignment::kHeavier, ChainAssignment::kFollow}) {
    for (const double imbalance : {0.0, 0.05, 0.5}) {
      SCOPED_TRACE(absl::StrFormat("%s %g", ChainAssignmentName(a), imbalance));
      const std::vector<int32_t> chain = AssignChains(g, part, 2, a, imbalance);
      const int64_t in0 = std::count(chain.begin(), chain.end(), 0);
      // max(ceil((1 + imbalance) * 100 / 2), 50 + 1)
      const int64_t bound = std::max<int64_t>(
          51, static_cast<int64_t>(std::ceil((1 + imbalance) * 50)));
      EXPECT_EQ(in0, bound);  // filled up to the bound, the rest elsewhere
      EXPECT_EQ(static_cast<int64_t>(chain.size()) - in0, 100 - bound);
    }
  }
}

TEST(SplitNodesTest, PiecesByHand) {
  // Events: 0:(0,1) 1:(0,2) 2:(0,3) 3:(0,1) 4:(2,3). Node 0 has 4 events:
  // pieces of 2 put e0, e1 in its first piece and e2, e3 in its second.
  const data::EventLog log =
      MakeLog(4, {{0, 1}, {0, 2}, {0, 3}, {0, 1}, {2, 3}});
  const WindowGraph g = BuildWindowGraph(log, AllEvents(log));
  ASSERT_THAT(g.nodes, ElementsAre(0, 1, 2, 3));
  const WindowGraph p = SplitNodes(g, 2);
  // Pieces: 0, 1 (node 0), 2 (node 1), 3 (node 2), 4 (node 3).
  EXPECT_THAT(p.nodes, ElementsAre(0, 0, 1, 2, 3));
  EXPECT_THAT(p.node_weight, ElementsAre(2, 2, 2, 2, 2));
  EXPECT_THAT(p.event_src, ElementsAre(0, 0, 1, 1, 3));
  EXPECT_THAT(p.event_dst, ElementsAre(2, 3, 4, 2, 4));
  // Event edges of weight 1, and the link 0-1 between node 0's pieces.
  EXPECT_THAT(p.offsets, ElementsAre(0, 3, 6, 8, 10, 12));
  EXPECT_THAT(p.neighbors, ElementsAre(1, 2, 3, 0, 2, 4, 0, 1, 0, 4, 1, 3));
  EXPECT_THAT(p.edge_weight, Each(1));
  EXPECT_EQ(p.total_node_weight(), g.total_node_weight());

  // Pieces as large as the heaviest node: the graph itself.
  const WindowGraph same = SplitNodes(g, 4);
  EXPECT_EQ(same.nodes, g.nodes);
  EXPECT_EQ(same.node_weight, g.node_weight);
  EXPECT_EQ(same.event_src, g.event_src);
  EXPECT_EQ(same.event_dst, g.event_dst);
  EXPECT_EQ(same.offsets, g.offsets);
  EXPECT_EQ(same.neighbors, g.neighbors);
  EXPECT_EQ(same.edge_weight, g.edge_weight);

  // Pieces of one event: a node of each event's endpoint, chained in time
  // (a self-loop is one piece).
  const data::EventLog loop = MakeLog(2, {{0, 1}, {1, 1}, {1, 0}});
  const WindowGraph h = SplitNodes(BuildWindowGraph(loop, AllEvents(loop)), 1);
  EXPECT_THAT(h.nodes, ElementsAre(0, 0, 1, 1, 1));
  EXPECT_THAT(h.event_src, ElementsAre(0, 3, 4));
  EXPECT_THAT(h.event_dst, ElementsAre(2, 3, 1));
  EXPECT_EQ(h.total_node_weight(), 5);
}

TEST(AssignChainsTest, ParsesItsNames) {
  for (const ChainAssignment a :
       {ChainAssignment::kSource, ChainAssignment::kHeavier,
        ChainAssignment::kFollow}) {
    auto parsed = ParseChainAssignment(ChainAssignmentName(a));
    ASSERT_THAT(parsed, IsOk());
    EXPECT_EQ(*parsed, a);
  }
  const auto bad = ParseChainAssignment("dest");
  EXPECT_THAT(
      bad, StatusIs(absl::StatusCode::kInvalidArgument, "--chain-assignment"));
  EXPECT_THAT(bad.status().message(), HasSubstr("heavier"));
}

// ---------------------------------------------------------------------------
// Worker plans.

// Checks every rank's plan against the partition and the contract of
// PlanKind::kSubChains.
void CheckPlans(const data::EventLog& log, const std::vector<int64_t>& train,
                const PlanOptions& o) {
  const SubChainPartition partition = PartitionSubChains(log, train, o);
  const int world = o.world_size;
  const int64_t n = static_cast<int64_t>(train.size());
  const int64_t nw = (n + o.window_events - 1) / o.window_events;
  ASSERT_EQ(partition.num_windows(), nw);
  ASSERT_EQ(partition.chain.size(), train.size());
  ASSERT_EQ(partition.stats.size(), static_cast<size_t>(nw));
  for (int64_t w = 0; w <= nw; ++w) {
    ASSERT_EQ(partition.window_begin[w], std::min(n, w * o.window_events));
  }
  // kTime deals batches in turn; whole-node partitions with the source rule
  // follow the source node; every node partition keeps each sub-chain
  // within the event bound of AssignChains.
  const bool by_source =
      o.chain_assignment == ChainAssignment::kSource &&
      (o.piece_events == 0 || o.partitioner == Partitioner::kGreedy);
  for (int64_t w = 0; w < nw; ++w) {
    std::map<int32_t, int32_t> src_chain;
    std::vector<int64_t> chain_events(world, 0);
    const int64_t len =
        partition.window_begin[w + 1] - partition.window_begin[w];
    for (int64_t i = partition.window_begin[w];
         i < partition.window_begin[w + 1]; ++i) {
      const int32_t c = partition.chain[i];
      ASSERT_TRUE(c >= 0 && c < world);
      ++chain_events[c];
      if (o.partitioner == Partitioner::kTime) {
        const int64_t slice =
            std::min<int64_t>(o.batch_size, (len + world - 1) / world);
        ASSERT_EQ(c, ((i - partition.window_begin[w]) / slice) % world);
      } else if (by_source) {
        auto [it, inserted] = src_chain.emplace(log.src[train[i]], c);
        ASSERT_EQ(it->second, c) << "window " << w << " position " << i;
      }
    }
    if (o.partitioner != Partitioner::kTime &&
        o.chain_assignment != ChainAssignment::kSource) {
      const int64_t bound = std::max<int64_t>(
          (len + world - 1) / world + 1,
          static_cast<int64_t>(std::ceil((1.0 + o.imbalance) *
                                         static_cast<double>(len) / world)));
      for (const int64_t e : chain_events) ASSERT_LE(e, bound);
    }
  }

  std::vector<WorkerPlan> plans;
  int64_t targets = 0;
  for (int rank = 0; rank < world; ++rank) {
    PlanStats stats;
    plans.push_back(MakeWorkerPlan(log, train, nullptr, rank, o, &stats));
    ASSERT_EQ(plans.back(), SubChainWorkerPlan(log, train, partition, rank, o));
    ASSERT_EQ(stats.window_stats.size(), partition.stats.size());
    for (size_t w = 0; w < partition.stats.size(); ++w) {
      WindowStats a = stats.window_stats[w], b = partition.stats[w];
      a.partition_seconds = b.partition_seconds = 0;
      EXPECT_EQ(a, b) << "window " << w;
    }
    EXPECT_EQ(stats.windows, nw);
    EXPECT_EQ(stats.auxiliaries, 0);
    targets += stats.targets;
  }
  EXPECT_EQ(targets, n);

  const WorkerPlan& p0 = plans[0];
  std::vector<int> seen(log.num_events(), 0);
  for (int rank = 0; rank < world; ++rank) {
    SCOPED_TRACE(rank);
    const WorkerPlan& p = plans[rank];
    ASSERT_EQ(p.rank, rank);
    ASSERT_EQ(p.sync_every, 0);
    ASSERT_EQ(p.num_windows(), nw);
    ASSERT_EQ(p.num_batches(), p0.num_batches());
    ASSERT_EQ(p.window_begin, p0.window_begin);
    ASSERT_EQ(p.step_event_counts, p0.step_event_counts);
    EXPECT_THAT(p.target, ::testing::Each(1));
    for (int64_t w = 0; w < nw; ++w) {
      SCOPED_TRACE(w);
      const int64_t b0 = p.window_first_batch(w), nb = p.window_batches(w);
      ASSERT_EQ(nb, partition.stats[w].steps);
      ASSERT_GE(nb, 1);
      // The sub-chain of this window, in time order.
      std::vector<int64_t> expected;
      for (int64_t i = partition.window_begin[w];
           i < partition.window_begin[w + 1]; ++i) {
        if (partition.chain[i] == rank) expected.push_back(train[i]);
      }
      std::vector<int64_t> got;
      for (int64_t b = b0; b < b0 + nb; ++b) {
        const BatchView v = p.batch(b);
        ASSERT_EQ(p.window_of(b), w);
        ASSERT_EQ(v.boundary, b == b0);
        // Full batches, then at most one partial one, then empty padding.
        const int64_t k = b - b0;
        const int64_t size = std::clamp<int64_t>(
            static_cast<int64_t>(expected.size()) - k * o.batch_size, 0,
            o.batch_size);
        ASSERT_EQ(static_cast<int64_t>(v.events.size()), size);
        got.insert(got.end(), v.events.begin(), v.events.end());
        if (v.boundary) {
          EXPECT_THAT(v.refresh, ElementsAreArray(Endpoints(log, expected)));
        } else {
          EXPECT_THAT(v.refresh, IsEmpty());
        }
      }
      ASSERT_EQ(got, expected);
      for (const int64_t e : got) ++seen[e];

      // The urgent set: every rank's first urgent_batches batches of w + 1.
      std::vector<int64_t> head;
      if (w + 1 < nw) {
        const int64_t nb1 = p.window_batches(w + 1);
        for (const WorkerPlan& q : plans) {
          for (int64_t k = 0; k < std::min<int64_t>(o.urgent_batches, nb1);
               ++k) {
            const BatchView v = q.batch(q.window_first_batch(w + 1) + k);
            head.insert(head.end(), v.events.begin(), v.events.end());
          }
        }
      }
      EXPECT_THAT(p.urgent(w), ElementsAreArray(Endpoints(log, head)));
    }
  }
  // Every training event exactly once; nothing else.
  std::vector<int> in_train(log.num_events(), 0);
  for (const int64_t e : train) in_train[e] = 1;
  EXPECT_EQ(seen, in_train);
  // Step counts: the workers' batch sizes summed, never 0.
  for (int64_t b = 0; b < p0.num_batches(); ++b) {
    int64_t sum = 0;
    for (const WorkerPlan& p : plans) {
      sum += static_cast<int64_t>(p.batch(b).events.size());
    }
    ASSERT_EQ(p0.step_events(b), sum) << "batch " << b;
    ASSERT_GT(sum, 0);
  }
}

TEST(SubChainPlanTest, StructureOverRandomStreams) {
  const RandomStream s = MakeRandomStream(60, 1500, 7);
  for (const Partitioner partitioner :
       {Partitioner::kMetis, Partitioner::kGreedy, Partitioner::kTime}) {
    for (const int world : {1, 2, 3, 4}) {
      for (const int64_t window : {100, 333, 5000}) {
        for (const int64_t bs : {1, 17, 64}) {
          for (const int urgent : {0, 1, 2}) {
            SCOPED_TRACE(::testing::Message()
                         << Name(partitioner) << " P " << world << " window "
                         << window << " bs " << bs << " urgent " << urgent);
            PlanOptions o = SubChainOptions(world, partitioner, window, bs);
            o.urgent_batches = urgent;
            CheckPlans(s.log, s.train, o);
            if (::testing::Test::HasFatalFailure()) return;
          }
        }
      }
    }
  }
}

TEST(SubChainPlanTest, StructureWithEveryChainRule) {
  const RandomStream s = MakeRandomStream(60, 1500, 7);
  for (const Partitioner partitioner :
       {Partitioner::kMetis, Partitioner::kGreedy}) {
    for (const ChainAssignment a :
         {ChainAssignment::kSource, ChainAssignment::kHeavier,
          ChainAssignment::kFollow}) {
      for (const int64_t pieces : {0, 1, 3}) {
        for (const int world : {2, 3}) {
          SCOPED_TRACE(::testing::Message()
                       << Name(partitioner) << " " << ChainAssignmentName(a)
                       << " pieces " << pieces << " P " << world);
          PlanOptions o = SubChainOptions(world, partitioner, 333, 17);
          o.chain_assignment = a;
          o.piece_events = pieces;
          CheckPlans(s.log, s.train, o);
          if (::testing::Test::HasFatalFailure()) return;
        }
      }
    }
  }
}

TEST(SubChainPlanTest, OneWorkerTrainsTheStream) {
  const RandomStream s = MakeRandomStream(40, 700, 3);
  for (const Partitioner partitioner :
       {Partitioner::kMetis, Partitioner::kGreedy, Partitioner::kTime}) {
    SCOPED_TRACE(Name(partitioner));
    const PlanOptions o = SubChainOptions(1, partitioner, 250, 60);
    PlanStats stats;
    const WorkerPlan plan =
        MakeWorkerPlan(s.log, s.train, nullptr, 0, o, &stats);
    EXPECT_EQ(plan.events, s.train);
    const int64_t n = static_cast<int64_t>(s.train.size());
    // Windows of 250: 5 batches of 60 (the last 10), then the remainder.
    ASSERT_EQ(plan.num_windows(), (n + 249) / 250);
    int64_t pos = 0;
    for (int64_t w = 0; w < plan.num_windows(); ++w) {
      const int64_t events = std::min<int64_t>(250, n - w * 250);
      ASSERT_EQ(plan.window_batches(w), (events + 59) / 60);
      for (int64_t k = 0; k < plan.window_batches(w); ++k) {
        const int64_t b = plan.window_first_batch(w) + k;
        const int64_t size = std::min<int64_t>(60, events - k * 60);
        EXPECT_EQ(plan.batch(b).events.size(), static_cast<size_t>(size));
        EXPECT_EQ(plan.step_events(b), size);
        pos += size;
      }
      EXPECT_DOUBLE_EQ(stats.window_stats[w].imbalance, 1.0);
      EXPECT_EQ(stats.window_stats[w].cross_events, 0);
    }
    EXPECT_EQ(pos, n);
    EXPECT_EQ(stats.empty_batches, 0);
    EXPECT_EQ(stats.cross_ratio, 0);
  }
}

TEST(SubChainPlanTest, PaddingAndUrgentSetsByHand) {
  // Two communities {0,1,2} and {3,4,5}. Window 1 (events 0-5) has 4 events
  // in the first and 2 in the second; window 2 (events 6-9) 3 in the second
  // and 1 in the first. kGreedy (traced by hand, capacity 1.5 * mean):
  // window 1 puts {0,1,2} in part 0, window 2 puts {3,4,5} in part 0.
  const data::EventLog log = MakeLog(6, {{0, 1},
                                         {3, 4},
                                         {1, 2},
                                         {0, 2},
                                         {4, 5},
                                         {2, 0},  //
                                         {3, 5},
                                         {5, 4},
                                         {1, 0},
                                         {4, 3}});
  const std::vector<int64_t> train = AllEvents(log);
  PlanOptions o = SubChainOptions(2, Partitioner::kGreedy, 6, 2);
  o.imbalance = 0.5;
  const SubChainPartition partition = PartitionSubChains(log, train, o);
  EXPECT_THAT(partition.chain, ElementsAre(0, 1, 0, 0, 1, 0, 0, 0, 1, 0));
  const WorkerPlan p0 = SubChainWorkerPlan(log, train, partition, 0, o);
  const WorkerPlan p1 = SubChainWorkerPlan(log, train, partition, 1, o);
  ASSERT_EQ(p0.num_batches(), 4);
  ASSERT_EQ(p1.num_batches(), 4);
  EXPECT_THAT(p0.window_begin, ElementsAre(0, 2, 4));
  EXPECT_THAT(p0.batch(0).events, ElementsAre(0, 2));
  EXPECT_THAT(p0.batch(1).events, ElementsAre(3, 5));
  EXPECT_THAT(p0.batch(2).events, ElementsAre(6, 7));
  EXPECT_THAT(p0.batch(3).events, ElementsAre(9));
  EXPECT_THAT(p1.batch(0).events, ElementsAre(1, 4));
  EXPECT_THAT(p1.batch(1).events, IsEmpty());  // padding
  EXPECT_THAT(p1.batch(2).events, ElementsAre(8));
  EXPECT_THAT(p1.batch(3).events, IsEmpty());  // padding
  for (const WorkerPlan* p : {&p0, &p1}) {
    EXPECT_TRUE(p->batch(0).boundary);
    EXPECT_FALSE(p->batch(1).boundary);
    EXPECT_TRUE(p->batch(2).boundary);
    EXPECT_FALSE(p->batch(3).boundary);
    EXPECT_THAT(p->step_event_counts, ElementsAre(4, 2, 3, 1));
    EXPECT_THAT(p->urgent(1), IsEmpty());
  }
  EXPECT_THAT(p0.batch(0).refresh, ElementsAre(0, 1, 2));
  EXPECT_THAT(p1.batch(0).refresh, ElementsAre(3, 4, 5));
  EXPECT_THAT(p0.batch(2).refresh, ElementsAre(3, 4, 5));
  EXPECT_THAT(p1.batch(2).refresh, ElementsAre(0, 1));
  // At the end of window 1: the nodes of every worker's first batch of
  // window 2 (worker 0 reads 3, 4, 5 first, worker 1 reads 0, 1), the same
  // set on both.
  EXPECT_THAT(p0.urgent(0), ElementsAre(0, 1, 3, 4, 5));
  EXPECT_THAT(p1.urgent(0), ElementsAre(0, 1, 3, 4, 5));
  o.urgent_batches = 0;
  EXPECT_THAT(SubChainWorkerPlan(log, train, partition, 0, o).urgent(0),
              IsEmpty());
  o.urgent_batches = 2;
  EXPECT_THAT(SubChainWorkerPlan(log, train, partition, 1, o).urgent(0),
              ElementsAre(0, 1, 3, 4, 5));

  const std::string text = Describe(log, p1, 0, 2);
  EXPECT_THAT(text, HasSubstr("batch 0: boundary, refresh 3 {3, 4, 5}, "
                              "urgent 5\n  e1(T) 3->4\n  e4(T) 4->5\n"
                              "batch 1:\n"));
}

TEST(SubChainPlanTest, TimePartitionDealsBatches) {
  const data::EventLog log = MakeLog(
      8, {{0, 1}, {2, 3}, {4, 5}, {6, 7}, {0, 2}, {1, 3}, {4, 6}, {5, 7}});
  const std::vector<int64_t> train = AllEvents(log);
  const PlanOptions o = SubChainOptions(2, Partitioner::kTime, 100, 3);
  const SubChainPartition partition = PartitionSubChains(log, train, o);
  EXPECT_THAT(partition.chain, ElementsAre(0, 0, 0, 1, 1, 1, 0, 0));
  const WorkerPlan p0 = SubChainWorkerPlan(log, train, partition, 0, o);
  const WorkerPlan p1 = SubChainWorkerPlan(log, train, partition, 1, o);
  ASSERT_EQ(p0.num_batches(), 2);
  EXPECT_THAT(p0.batch(0).events, ElementsAre(0, 1, 2));
  EXPECT_THAT(p0.batch(1).events, ElementsAre(6, 7));
  EXPECT_THAT(p1.batch(0).events, ElementsAre(3, 4, 5));
  EXPECT_THAT(p1.batch(1).events, IsEmpty());
  EXPECT_EQ(p0.step_events(0), 6);
  EXPECT_EQ(p0.step_events(1), 2);
  // e0-e3 touch new nodes. e4 (0,2) and e5 (1,3) are chain 1, their
  // nodes' previous events chain 0: cross. e6 (4,6) and e7 (5,7) are chain
  // 0, and 6 and 7 were last seen in e3 (chain 1): cross.
  EXPECT_EQ(partition.stats[0].cross_events, 4);
  // Only nodes 4 and 5 stay in one chain; e2 (4,5) is the one event that
  // touches no node of both.
  EXPECT_EQ(partition.stats[0].shared_events, 7);
  EXPECT_EQ(partition.stats[0].cut_events, 0);
  EXPECT_EQ(partition.stats[0].max_chain_events, 5);
  EXPECT_DOUBLE_EQ(partition.stats[0].imbalance, 5.0 / 4.0);
  EXPECT_EQ(partition.stats[0].steps, 2);
}

// Windows that do not hold a whole batch per worker are still split evenly:
// 2,500-event windows with 2,400-event batches and 2 workers give each
// worker 1,250 events of every window (dealing whole batches in turn gave
// worker 0 96% of them), and a last, shorter window is split evenly too.
TEST(SubChainPlanTest, TimePartitionBalancesShortWindows) {
  const data::EventLog log = MakeLog(50, [] {
    std::vector<std::pair<int, int>> edges;
    for (int i = 0; i < 6000; ++i) edges.emplace_back(i % 50, (7 * i + 1) % 50);
    return edges;
  }());
  const std::vector<int64_t> train = AllEvents(log);
  const PlanOptions o = SubChainOptions(2, Partitioner::kTime, 2500, 2400);
  const SubChainPartition partition = PartitionSubChains(log, train, o);
  ASSERT_EQ(partition.num_windows(), 3);
  EXPECT_EQ(partition.stats[2].events, 1000);
  for (int64_t w = 0; w < 3; ++w) {
    const WindowStats& st = partition.stats[w];
    EXPECT_EQ(st.max_chain_events, st.events / 2) << "window " << w;
    EXPECT_DOUBLE_EQ(st.imbalance, 1.0) << "window " << w;
    EXPECT_EQ(st.steps, 1) << "window " << w;
  }
}

// The planted-partition stream: 4 communities, 5% of events cross.
TEST(SubChainPlanTest, PlantedCommunitiesCutFarBelowTime) {
  const Planted planted = MakePlanted(4, 100, 40000, 0.05, 11);
  const std::vector<int64_t> train = AllEvents(planted.log);
  for (const int world : {2, 4}) {
    std::map<Partitioner, PlanStats> by;
    for (const Partitioner partitioner :
         {Partitioner::kMetis, Partitioner::kGreedy, Partitioner::kTime}) {
      const PlanOptions o = SubChainOptions(world, partitioner, 10000, 100);
      PlanStats stats;
      MakeWorkerPlan(planted.log, train, nullptr, 0, o, &stats);
      std::printf(
          "planted P=%d %-6s cross %.4f imbalance mean %.4f max %.4f "
          "weight imbalance %.4f partition %.2f ms\n",
          world, Name(partitioner), stats.cross_ratio, stats.mean_imbalance,
          stats.max_imbalance, stats.window_stats[0].weight_imbalance,
          stats.partition_seconds * 1e3);
      by[partitioner] = stats;
    }
    SCOPED_TRACE(world);
    const PlanStats& metis = by[Partitioner::kMetis];
    const PlanStats& greedy = by[Partitioner::kGreedy];
    const PlanStats& time = by[Partitioner::kTime];
    ASSERT_EQ(metis.window_stats.size(), 4u);
    EXPECT_GT(time.cross_ratio, 0.4);
    EXPECT_LT(metis.cross_ratio, 0.25 * time.cross_ratio);
    EXPECT_LT(greedy.cross_ratio, 0.5 * time.cross_ratio);
    for (const WindowStats& w : metis.window_stats) {
      EXPECT_FALSE(w.fallback);
      // METIS holds node weights within its bound (METIS allows itself a
      // little slack); the event load follows closely.
      EXPECT_LE(w.weight_imbalance, 1.05 + 0.01);
      EXPECT_LE(w.imbalance, 1.10);
      // The cut is the planted cross edges (about 5% of the events).
      EXPECT_LT(w.cut_events, w.events / 10);
    }
    for (const WindowStats& w : greedy.window_stats) {
      EXPECT_LE(w.weight_imbalance, 1.05 + 1e-9);
    }
  }
}

TEST(SubChainPlanTest, DeterministicAcrossRuns) {
  const Planted planted = MakePlanted(4, 50, 6000, 0.1, 5);
  const std::vector<int64_t> train = AllEvents(planted.log);
  for (const Partitioner partitioner :
       {Partitioner::kMetis, Partitioner::kGreedy, Partitioner::kTime}) {
    for (const int world : {2, 3, 4}) {
      SCOPED_TRACE(::testing::Message() << Name(partitioner) << " " << world);
      const PlanOptions o = SubChainOptions(world, partitioner, 2000, 50);
      for (int rank = 0; rank < world; ++rank) {
        EXPECT_EQ(MakeWorkerPlan(planted.log, train, nullptr, rank, o),
                  MakeWorkerPlan(planted.log, train, nullptr, rank, o));
      }
    }
  }
}

// A partition made elsewhere (rank 0's, broadcast by the runtime) plans
// exactly like partitioning here; any valid assignment is followed as
// given; a malformed one is refused.
TEST(SubChainPlanTest, GivenPartition) {
  const Planted planted = MakePlanted(3, 40, 3000, 0.1, 11);
  const std::vector<int64_t> train = AllEvents(planted.log);
  PlanOptions o = SubChainOptions(3, Partitioner::kMetis, 1000, 40);
  const std::vector<int32_t> chain =
      PartitionSubChains(planted.log, train, o).chain;
  PlanOptions given = o;
  given.given_chain = &chain;
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_EQ(MakeWorkerPlan(planted.log, train, nullptr, rank, given),
              MakeWorkerPlan(planted.log, train, nullptr, rank, o));
  }
  std::vector<int32_t> dealt(train.size());
  for (size_t i = 0; i < dealt.size(); ++i) dealt[i] = (i * 7) % 3;
  given.given_chain = &dealt;
  for (int rank = 0; rank < 3; ++rank) {
    const WorkerPlan p =
        MakeWorkerPlan(planted.log, train, nullptr, rank, given);
    int64_t targets = 0;
    for (int64_t b = 0; b < p.num_batches(); ++b) {
      for (const int64_t e : p.batch(b).events) {
        EXPECT_EQ(dealt[e], rank) << "event " << e;  // train[i] == i here
        ++targets;
      }
    }
    EXPECT_EQ(targets, std::count(dealt.begin(), dealt.end(), rank));
    // The urgent sets come from the given partition (every worker's first
    // batch of the next window), not from one this process would cut.
    for (int64_t w = 1; w < p.num_windows(); ++w) {
      std::vector<int64_t> head;
      std::vector<int> taken(3, 0);
      for (int64_t e = w * 1000;
           e < std::min<int64_t>((w + 1) * 1000, train.size()); ++e) {
        if (taken[dealt[e]]++ < 40) head.push_back(e);
      }
      EXPECT_THAT(p.urgent(w - 1),
                  ElementsAreArray(Endpoints(planted.log, head)))
          << "rank " << rank << ", window " << w;
    }
  }
  PlanStats stats;
  std::vector<int32_t> short_chain(train.size() - 1, 0);
  given.given_chain = &short_chain;
  EXPECT_THAT(
      LoadOrMakeWorkerPlan(planted.log, train, nullptr, 0, given, "", &stats),
      StatusIs(absl::StatusCode::kInvalidArgument, "given partition"));
  std::vector<int32_t> bad(train.size(), 3);
  given.given_chain = &bad;
  EXPECT_THAT(
      LoadOrMakeWorkerPlan(planted.log, train, nullptr, 0, given, "", &stats),
      StatusIs(absl::StatusCode::kInvalidArgument, "sub-chain 3"));
}

TEST(SubChainPlanTest, CacheRoundTripAndKey) {
  const std::string dir = TempDir("cache");
  const RandomStream s = MakeRandomStream(50, 2000, 9);
  const PlanOptions base = SubChainOptions(3, Partitioner::kMetis, 500, 40);
  std::vector<std::pair<std::string, PlanOptions>> variants;
  variants.emplace_back("base", base);
  variants.emplace_back("window", base);
  variants.back().second.window_events = 400;
  variants.emplace_back("greedy", base);
  variants.back().second.partitioner = Partitioner::kGreedy;
  variants.emplace_back("time", base);
  variants.back().second.partitioner = Partitioner::kTime;
  variants.emplace_back("imbalance", base);
  variants.back().second.imbalance = 0.1;
  variants.emplace_back("pieces", base);
  variants.back().second.piece_events = 1;
  variants.emplace_back("pieces4", base);
  variants.back().second.piece_events = 4;
  variants.emplace_back("follow", base);
  variants.back().second.chain_assignment = ChainAssignment::kFollow;
  variants.emplace_back("heavier", base);
  variants.back().second.chain_assignment = ChainAssignment::kHeavier;
  variants.emplace_back("urgent", base);
  variants.back().second.urgent_batches = 2;
  variants.emplace_back("batch", base);
  variants.back().second.batch_size = 41;
  std::set<std::string> paths;
  for (const auto& [name, o] : variants) {
    SCOPED_TRACE(name);
    for (int rank = 0; rank < o.world_size; ++rank) {
      PlanStats made, loaded;
      auto first =
          LoadOrMakeWorkerPlan(s.log, s.train, nullptr, rank, o, dir, &made);
      ASSERT_THAT(first, IsOk());
      EXPECT_FALSE(made.from_cache);
      ASSERT_FALSE(made.cache_path.empty());
      EXPECT_THAT(made.cache_path, HasSubstr("plan-sub_"));
      paths.insert(made.cache_path);
      auto second =
          LoadOrMakeWorkerPlan(s.log, s.train, nullptr, rank, o, dir, &loaded);
      ASSERT_THAT(second, IsOk());
      EXPECT_TRUE(loaded.from_cache);
      EXPECT_EQ(*second, *first);
      EXPECT_EQ(*first, MakeWorkerPlan(s.log, s.train, nullptr, rank, o));
      // Window statistics come back with the plan, timings included.
      EXPECT_EQ(loaded.window_stats, made.window_stats);
      EXPECT_EQ(loaded.cross_ratio, made.cross_ratio);
      EXPECT_EQ(loaded.partition_seconds, made.partition_seconds);
      EXPECT_EQ(loaded.empty_batches, made.empty_batches);
      EXPECT_EQ(loaded.batches, made.batches);
    }
  }
  size_t files = 0;
  for (const auto& [name, o] : variants) files += o.world_size;
  EXPECT_EQ(paths.size(), files);

  // A given partition is part of the key: a plan cached from one partition
  // is not served for another.
  std::vector<int32_t> dealt(s.train.size()), other(s.train.size());
  for (size_t i = 0; i < dealt.size(); ++i) {
    dealt[i] = static_cast<int32_t>(i % 3);
    other[i] = static_cast<int32_t>((i / 7) % 3);
  }
  for (const std::vector<int32_t>* chain : {&dealt, &other}) {
    PlanOptions o = base;
    o.given_chain = chain;
    PlanStats made, loaded;
    auto first =
        LoadOrMakeWorkerPlan(s.log, s.train, nullptr, 1, o, dir, &made);
    ASSERT_THAT(first, IsOk());
    EXPECT_FALSE(made.from_cache);
    EXPECT_EQ(*first, MakeWorkerPlan(s.log, s.train, nullptr, 1, o));
    auto second =
        LoadOrMakeWorkerPlan(s.log, s.train, nullptr, 1, o, dir, &loaded);
    ASSERT_THAT(second, IsOk());
    EXPECT_TRUE(loaded.from_cache);
    EXPECT_EQ(*second, *first);
  }
  std::filesystem::remove_all(dir);
}

TEST(SubChainPlanTest, InvalidOptions) {
  const RandomStream s = MakeRandomStream(20, 100, 1);
  PlanStats stats;
  PlanOptions o = SubChainOptions(2, Partitioner::kMetis, 0, 10);
  EXPECT_THAT(LoadOrMakeWorkerPlan(s.log, s.train, nullptr, 0, o, "", &stats),
              StatusIs(absl::StatusCode::kInvalidArgument, "window_events"));
  o = SubChainOptions(2, Partitioner::kMetis, 50, 10);
  o.imbalance = -0.1;
  EXPECT_THAT(LoadOrMakeWorkerPlan(s.log, s.train, nullptr, 0, o, "", &stats),
              StatusIs(absl::StatusCode::kInvalidArgument, "imbalance"));
  o.imbalance = std::numeric_limits<double>::quiet_NaN();
  EXPECT_THAT(LoadOrMakeWorkerPlan(s.log, s.train, nullptr, 0, o, "", &stats),
              StatusIs(absl::StatusCode::kInvalidArgument, "imbalance"));
  o.imbalance = 0.05;
  o.urgent_batches = -1;
  EXPECT_THAT(LoadOrMakeWorkerPlan(s.log, s.train, nullptr, 0, o, "", &stats),
              StatusIs(absl::StatusCode::kInvalidArgument, "urgent_batches"));
  o.urgent_batches = 1;
  o.piece_events = -1;
  EXPECT_THAT(LoadOrMakeWorkerPlan(s.log, s.train, nullptr, 0, o, "", &stats),
              StatusIs(absl::StatusCode::kInvalidArgument, "piece_events"));
  o.piece_events = 1;
  // No owner function needed.
  EXPECT_THAT(LoadOrMakeWorkerPlan(s.log, s.train, nullptr, 1, o, "", &stats),
              IsOk());
  // An empty stream: no windows, no batches.
  const WorkerPlan empty = MakeWorkerPlan(s.log, {}, nullptr, 1, o);
  EXPECT_EQ(empty.num_batches(), 0);
  EXPECT_EQ(empty.num_windows(), 0);
}

// The other kinds fill window_begin and step_event_counts too.
TEST(SubChainPlanTest, OtherKindsHaveWindowsAndStepCounts) {
  const RandomStream s = MakeRandomStream(30, 500, 4);
  for (const PlanKind kind : {PlanKind::kOwnTargets, PlanKind::kFullReplay,
                              PlanKind::kDependencyScan}) {
    PlanOptions o;
    o.kind = kind;
    o.world_size = 3;
    o.batch_size = 40;
    o.sync_every = 4;
    const auto owner = [](int64_t u) { return static_cast<int>(u % 3); };
    std::vector<WorkerPlan> plans;
    for (int rank = 0; rank < 3; ++rank) {
      plans.push_back(MakeWorkerPlan(s.log, s.train, owner, rank, o));
    }
    const int64_t n = static_cast<int64_t>(s.train.size());
    const int64_t k = kind == PlanKind::kDependencyScan ? 4 : 1;
    for (const WorkerPlan& p : plans) {
      ASSERT_EQ(p.num_batches(), (n + 39) / 40);
      ASSERT_EQ(p.num_windows(), (p.num_batches() + k - 1) / k);
      for (int64_t b = 0; b < p.num_batches(); ++b) {
        EXPECT_EQ(p.window_of(b), b / k);
        EXPECT_EQ(p.batch(b).boundary, b % k == 0);
        int64_t targets = 0;
        for (const WorkerPlan& q : plans) {
          for (const uint8_t t : q.batch(b).target) targets += t;
        }
        EXPECT_EQ(p.step_events(b), targets);
      }
      for (int64_t w = 0; w < p.num_windows(); ++w) {
        EXPECT_EQ(p.window_first_batch(w), w * k);
        EXPECT_EQ(p.window_batches(w),
                  std::min(p.num_batches(), (w + 1) * k) - w * k);
        EXPECT_THAT(p.urgent(w), IsEmpty());
      }
    }
  }
}

// ---------------------------------------------------------------------------
// Real data: DepBloom Fig. 5's metric per partitioner.

// Per window the share of cross events (previous event of an endpoint in
// another sub-chain; the brief's reading of Fig. 5), of shared events (an
// endpoint has events in another sub-chain too), of cut events (source and
// destination in different parts), the load imbalance and the partitioning
// time, with the follow rule and node pieces of one event.
// On Wikipedia METIS breaks far fewer dependencies than dealing batches in
// turn. On sx-mathoverflow (a denser user-user graph with hubs) METIS over
// whole nodes with the source rule, DepBloom's own choice, breaks more than
// time (2,400-event batches keep most consecutive events of a node
// together); over pieces it breaks fewer.
TEST(SubChainRealDataTest, CrossRatioImbalanceAndTime) {
  struct Case {
    const char* file;
    std::vector<int64_t> windows;
  };
  for (const Case& c : {Case{"wikipedia.txt.gz", {20000, 80000}},
                        Case{"sx-mathoverflow.txt.gz", {20000}}}) {
    auto log = data::LoadEventLog(SharedData(c.file), {});
    ASSERT_THAT(log, IsOk());
    const data::Split split = data::MakeSplit(*log, {});
    std::printf("%s: %zu training events, %lld nodes\n", c.file,
                split.train.size(), static_cast<long long>(log->num_nodes));
    std::printf("  %2s %7s %-7s %7s %8s %8s %8s %8s %8s %8s %6s\n", "P",
                "window", "part", "windows", "cross", "shared", "cut",
                "imb_mean", "imb_max", "part_ms", "steps");
    const bool wikipedia = std::string(c.file) == "wikipedia.txt.gz";
    for (const int world : {2}) {
      for (const int64_t window : c.windows) {
        std::map<Partitioner, PlanStats> by;
        std::map<Partitioner, int64_t> cuts;
        for (const Partitioner partitioner :
             {Partitioner::kMetis, Partitioner::kGreedy, Partitioner::kTime}) {
          PlanOptions o = SubChainOptions(world, partitioner, window, 2400);
          o.chain_assignment = ChainAssignment::kFollow;
          o.piece_events = 1;
          PlanStats stats;
          const WorkerPlan plan =
              MakeWorkerPlan(*log, split.train, nullptr, 0, o, &stats);
          int64_t events = 0, cut = 0;
          for (const WindowStats& w : stats.window_stats) {
            events += w.events;
            cut += w.cut_events;
            EXPECT_FALSE(w.fallback);
            if (partitioner != Partitioner::kTime) {
              EXPECT_LE(w.weight_imbalance, 1.05 + 1e-3);
            }
          }
          EXPECT_EQ(events, static_cast<int64_t>(split.train.size()));
          const std::string cut_share =
              partitioner == Partitioner::kTime
                  ? "-"
                  : absl::StrFormat("%.2f%%", 100.0 * static_cast<double>(cut) /
                                                  static_cast<double>(events));
          std::printf(
              "  %2d %7lld %-7s %7lld %7.2f%% %7.2f%% %8s %8.4f %8.4f "
              "%8.2f %6lld\n",
              world, static_cast<long long>(window), Name(partitioner),
              static_cast<long long>(stats.windows), 100 * stats.cross_ratio,
              100 * stats.shared_ratio, cut_share.c_str(), stats.mean_imbalance,
              stats.max_imbalance, stats.partition_seconds * 1e3,
              static_cast<long long>(plan.num_batches()));
          by[partitioner] = stats;
          cuts[partitioner] = cut;
        }
        // DepBloom's own choice (the default): whole nodes, the source's
        // part.
        const PlanOptions paper =
            SubChainOptions(world, Partitioner::kMetis, window, 2400);
        PlanStats whole;
        MakeWorkerPlan(*log, split.train, nullptr, 0, paper, &whole);
        std::printf(
            "  %2d %7lld %-7s %7lld %7.2f%% %7.2f%% (metis, whole "
            "nodes, source rule)\n",
            world, static_cast<long long>(window), "paper",
            static_cast<long long>(whole.windows), 100 * whole.cross_ratio,
            100 * whole.shared_ratio);
        const PlanStats& metis = by[Partitioner::kMetis];
        const PlanStats& greedy = by[Partitioner::kGreedy];
        const PlanStats& time = by[Partitioner::kTime];
        EXPECT_LT(cuts[Partitioner::kMetis], cuts[Partitioner::kGreedy]);
        EXPECT_LT(metis.cross_ratio, greedy.cross_ratio);
        EXPECT_LT(metis.shared_ratio, time.shared_ratio);
        EXPECT_LT(metis.cross_ratio, whole.cross_ratio);
        EXPECT_LT(metis.cross_ratio, time.cross_ratio);
        if (!wikipedia) {
          EXPECT_GT(whole.cross_ratio, time.cross_ratio);
        }
        if (wikipedia) {
          EXPECT_LT(metis.cross_ratio, 0.5 * time.cross_ratio);
          EXPECT_LT(metis.cross_ratio, 0.05);
          EXPECT_LT(greedy.cross_ratio, time.cross_ratio);
        }
      }
    }
    std::fflush(stdout);
  }
}

}  // namespace
}  // namespace mnemo::plan
