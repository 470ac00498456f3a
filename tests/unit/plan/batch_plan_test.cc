#include "trainer/plan/batch_plan.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "trainer/data/neighbor_sampler.h"
#include "trainer/data/split.h"
#include "util/status_matchers.h"

namespace mnemo::plan {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// The project's default ownership (trainer/runtime/distributed.cc HashOwner),
// replicated so this test does not link the runtime.
int HashOwner(int64_t node, int world_size) {
  uint64_t x = static_cast<uint64_t>(node) + 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  x ^= x >> 31;
  return static_cast<int>(x % static_cast<uint64_t>(world_size));
}

OwnerFn TableOwner(std::vector<int> table) {
  return [table = std::move(table)](int64_t u) { return table[u]; };
}

data::EventLog MakeLog(int64_t num_nodes,
                       const std::vector<std::tuple<int, int, double>>& ev) {
  data::EventLog log;
  log.name = "test";
  log.num_nodes = num_nodes;
  for (const auto& [s, d, t] : ev) {
    log.src.push_back(s);
    log.dst.push_back(d);
    log.t.push_back(t);
  }
  for (int64_t u = 0; u < num_nodes; ++u) log.original_ids.push_back(u);
  return log;
}

std::vector<int64_t> Span2Vec(absl::Span<const int64_t> s) {
  return std::vector<int64_t>(s.begin(), s.end());
}

std::string TempDir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/mnemo_plan_" + name + "_" +
                          std::to_string(getpid());
  std::filesystem::remove_all(dir);
  return dir;
}

std::string SharedData(const std::string& file) {
  const char* d = std::getenv("MNEMO_SHARED_DATA");
  return std::string(d ? d : "../shared/data") + "/" + file;
}

// ---------------------------------------------------------------------------
// DepTGL Fig. 4 (decoded in ../shared/papers/deptgl-fig4.md). Log index i is
// the figure's e_i; index 0 is a filler event outside the training set.

struct Fig4 {
  data::EventLog log;
  std::vector<int64_t> train;
};

Fig4 MakeFig4() {
  const std::vector<std::pair<int, int>> edges = {
      {1, 2},                                           // e0 filler
      {0, 3}, {4, 2}, {5, 8}, {7, 3}, {4, 1}, {6, 5},   // batch r
      {5, 7}, {3, 6}, {8, 3}, {0, 7}, {2, 6}, {1, 4},   // batch r+1
      {8, 3}, {4, 2}, {7, 1}, {3, 5}, {2, 6}, {6, 0}};  // batch r+2
  std::vector<std::tuple<int, int, double>> ev;
  for (size_t i = 0; i < edges.size(); ++i) {
    ev.emplace_back(edges[i].first, edges[i].second, static_cast<double>(i));
  }
  Fig4 f{MakeLog(9, ev), {}};
  for (int64_t e = 1; e <= 18; ++e) f.train.push_back(e);
  return f;
}

// Worker 0 owns v0, v3, v6; the others own the rest.
int Fig4Owner(int64_t u, int world_size) {
  if (u == 0 || u == 3 || u == 6) return 0;
  return world_size == 2 ? 1 : 1 + static_cast<int>(u % (world_size - 1));
}

PlanOptions Fig4Options(int world_size) {
  PlanOptions o;
  o.kind = PlanKind::kDependencyScan;
  o.world_size = world_size;
  o.batch_size = 6;
  o.sync_every = 3;
  return o;
}

TEST(BatchPlanTest, Fig4MixedBatchesAndRefreshSet) {
  const Fig4 f = MakeFig4();
  for (int world_size : {2, 3}) {
    SCOPED_TRACE(world_size);
    PlanStats stats;
    const WorkerPlan plan = MakeWorkerPlan(
        f.log, f.train,
        [world_size](int64_t u) { return Fig4Owner(u, world_size); }, 0,
        Fig4Options(world_size), &stats);
    ASSERT_EQ(plan.num_batches(), 3);
    ASSERT_EQ(plan.num_windows(), 1);
    EXPECT_EQ(plan.sync_every, 3);

    const BatchView r = plan.batch(0);
    EXPECT_THAT(r.events, ElementsAre(1, 3, 4, 6));
    EXPECT_THAT(r.target, ElementsAre(1, 0, 0, 1));
    EXPECT_TRUE(r.boundary);
    EXPECT_THAT(r.refresh, ElementsAre(5, 7, 8));  // N_sync = {v5, v7, v8}

    const BatchView r1 = plan.batch(1);
    EXPECT_THAT(r1.events, ElementsAre(7, 8, 10));
    EXPECT_THAT(r1.target, ElementsAre(0, 1, 1));
    EXPECT_FALSE(r1.boundary);
    EXPECT_THAT(r1.refresh, IsEmpty());

    const BatchView r2 = plan.batch(2);
    EXPECT_THAT(r2.events, ElementsAre(16, 18));
    EXPECT_THAT(r2.target, ElementsAre(1, 1));
    EXPECT_FALSE(r2.boundary);

    EXPECT_EQ(stats.batches, 3);
    EXPECT_EQ(stats.windows, 1);
    EXPECT_EQ(stats.targets, 6);
    EXPECT_EQ(stats.auxiliaries, 3);
    EXPECT_EQ(stats.refresh_total, 3);
    EXPECT_EQ(stats.refresh_max, 3);
    EXPECT_FALSE(stats.from_cache);
  }
}

TEST(BatchPlanTest, Fig4Describe) {
  const Fig4 f = MakeFig4();
  const WorkerPlan plan = MakeWorkerPlan(
      f.log, f.train, [](int64_t u) { return Fig4Owner(u, 2); }, 0,
      Fig4Options(2));
  const std::string text = Describe(f.log, plan, 0, 3);
  EXPECT_EQ(text,
            "plan: rank 0, K 3, 3 batches, 1 windows, 9 events (6 targets, 3 "
            "auxiliaries), refresh 3 in all\n"
            "batch 0: boundary, refresh 3 {5, 7, 8}\n"
            "  e1(T) 0->3\n"
            "  e3(A) 5->8\n"
            "  e4(A) 7->3\n"
            "  e6(T) 6->5\n"
            "batch 1:\n"
            "  e7(A) 5->7\n"
            "  e8(T) 3->6\n"
            "  e10(T) 0->7\n"
            "batch 2:\n"
            "  e16(T) 3->5\n"
            "  e18(T) 6->0\n");
  // A range: clipped to the plan.
  const std::string tail = Describe(f.log, plan, 2, 10);
  EXPECT_THAT(tail, HasSubstr("batch 2:\n  e16(T) 3->5\n  e18(T) 6->0\n"));
  EXPECT_THAT(tail, ::testing::Not(HasSubstr("batch 1:")));
}

// Within a batch the scan goes from later to earlier events: a replayed
// event's endpoints are dependencies of EARLIER events of the same batch, not
// of later ones.
TEST(BatchPlanTest, ReverseScanWithinBatch) {
  // Worker 0 owns v0; v1, v2, v3 are remote. One batch:
  //   e0: 2->3  (updates v2 before e1 reads it: needed)
  //   e1: 1->2  (updates v1 before e2 reads it: needed)
  //   e2: 0->1  target, reads v1
  //   e3: 3->2  (after every read of v2, v3: not needed)
  const data::EventLog log =
      MakeLog(4, {{2, 3, 0.0}, {1, 2, 1.0}, {0, 1, 2.0}, {3, 2, 3.0}});
  PlanOptions o;
  o.world_size = 2;
  o.batch_size = 4;
  o.sync_every = 1;
  const WorkerPlan plan = MakeWorkerPlan(
      log, std::vector<int64_t>{0, 1, 2, 3},
      [](int64_t u) { return u == 0 ? 0 : 1; }, 0, o);
  EXPECT_THAT(plan.batch(0).events, ElementsAre(0, 1, 2));
  EXPECT_THAT(plan.batch(0).target, ElementsAre(0, 0, 1));
  EXPECT_THAT(plan.batch(0).refresh, ElementsAre(1, 2, 3));
}

TEST(BatchPlanTest, EmptyTrainingSetAndSingleWorker) {
  const Fig4 f = MakeFig4();
  for (PlanKind kind : {PlanKind::kOwnTargets, PlanKind::kFullReplay,
                        PlanKind::kDependencyScan}) {
    PlanOptions o = Fig4Options(1);
    o.kind = kind;
    const WorkerPlan empty = MakeWorkerPlan(f.log, {}, nullptr, 0, o);
    EXPECT_EQ(empty.num_batches(), 0);
    EXPECT_EQ(empty.num_windows(), 0);
    EXPECT_THAT(empty.batch_begin, ElementsAre(0));
    EXPECT_THAT(empty.refresh_begin, ElementsAre(0));

    PlanStats stats;
    const WorkerPlan one =
        MakeWorkerPlan(f.log, f.train, nullptr, 0, o, &stats);
    EXPECT_EQ(one.events, f.train);
    EXPECT_EQ(stats.targets, 18);
    EXPECT_EQ(stats.auxiliaries, 0);
    EXPECT_EQ(stats.refresh_total, 0);
  }
}

// Fig. 4's 18 training events as one process runs them: 5 batches of 4,
// 4, 4, 4 and 2 events.
WorkerPlan Fig4Chain(const Fig4& f) {
  PlanOptions o = Fig4Options(1);
  o.kind = PlanKind::kOwnTargets;
  o.batch_size = 4;
  return MakeWorkerPlan(
      f.log, f.train, [](int64_t) { return 0; }, 0, o);
}

// A pipeline group deals the chain's batches in turn: position k runs the
// chain's batches k, k + depth, ... of each window, a short last round
// padded with empty batches, and each round's step counts its batches'
// events together.
TEST(BatchPlanTest, DealToGroupDealsBatchesInTurn) {
  const Fig4 f = MakeFig4();
  const WorkerPlan chain = Fig4Chain(f);
  ASSERT_EQ(chain.num_batches(), 5);
  const WorkerPlan p0 = DealToGroup(chain, 2, 0, /*one_window=*/true);
  const WorkerPlan p1 = DealToGroup(chain, 2, 1, /*one_window=*/true);
  ASSERT_EQ(p0.num_batches(), 3);
  ASSERT_EQ(p1.num_batches(), 3);
  EXPECT_EQ(p0.num_windows(), 1);
  for (int64_t j = 0; j < 3; ++j) {
    EXPECT_THAT(Span2Vec(p0.batch(j).events),
                ElementsAreArray(chain.batch(2 * j).events));
  }
  EXPECT_THAT(Span2Vec(p1.batch(0).events),
              ElementsAreArray(chain.batch(1).events));
  EXPECT_THAT(Span2Vec(p1.batch(1).events),
              ElementsAreArray(chain.batch(3).events));
  EXPECT_THAT(p1.batch(2).events, IsEmpty());  // padding
  EXPECT_THAT(p0.step_event_counts, ElementsAre(8, 8, 2));
  EXPECT_EQ(p0.step_event_counts, p1.step_event_counts);
  EXPECT_TRUE(p0.batch(0).boundary);
  EXPECT_FALSE(p0.batch(1).boundary);
  // Every event once over the group.
  std::vector<int64_t> all = p0.events;
  all.insert(all.end(), p1.events.begin(), p1.events.end());
  std::sort(all.begin(), all.end());
  EXPECT_EQ(all, f.train);
  // Keeping the chain's windows (one batch each here), each window is one
  // round: the second position runs only padding.
  const WorkerPlan w1 = DealToGroup(chain, 2, 1, /*one_window=*/false);
  EXPECT_EQ(w1.num_windows(), 5);
  EXPECT_EQ(w1.num_batches(), 5);
  EXPECT_THAT(w1.events, IsEmpty());
  // A group of one is the chain itself.
  const WorkerPlan same = DealToGroup(chain, 1, 0, /*one_window=*/false);
  EXPECT_EQ(same.events, chain.events);
  EXPECT_EQ(same.batch_begin, chain.batch_begin);
  EXPECT_EQ(same.window_begin, chain.window_begin);
}

// Epoch parallelism staggers the whole chain: worker k runs the chain's
// batch t - k at step t, and a step counts the events of every worker's
// batch at it.
TEST(BatchPlanTest, StaggerPlanRunsTheChainStepsLate) {
  const Fig4 f = MakeFig4();
  const WorkerPlan chain = Fig4Chain(f);
  const WorkerPlan w0 = StaggerPlan(chain, 2, 0);
  const WorkerPlan w1 = StaggerPlan(chain, 2, 1);
  ASSERT_EQ(w0.num_batches(), 6);
  ASSERT_EQ(w1.num_batches(), 6);
  EXPECT_EQ(w0.events, f.train);
  EXPECT_EQ(w1.events, f.train);
  EXPECT_THAT(w0.batch(5).events, IsEmpty());
  EXPECT_THAT(w1.batch(0).events, IsEmpty());
  EXPECT_THAT(Span2Vec(w1.batch(1).events),
              ElementsAreArray(chain.batch(0).events));
  EXPECT_THAT(w0.step_event_counts, ElementsAre(4, 8, 8, 8, 6, 2));
  EXPECT_EQ(w0.step_event_counts, w1.step_event_counts);
  EXPECT_EQ(w0.num_windows(), 1);
}

// ---------------------------------------------------------------------------
// Properties on random streams.

struct Stream {
  data::EventLog log;
  std::vector<int64_t> train;
  std::vector<int> owner;  // per node
};

Stream RandomStream(uint64_t seed, int world_size) {
  std::mt19937_64 rng(seed);
  const int n = 6 + static_cast<int>(rng() % 25);
  const int m = 60 + static_cast<int>(rng() % 240);
  const int hot = 1 + n / 5;  // skew: a few hub nodes
  auto node = [&] {
    return static_cast<int>(rng() % 10 < 4 ? rng() % hot : rng() % n);
  };
  std::vector<std::tuple<int, int, double>> ev;
  double t = 0;
  for (int i = 0; i < m; ++i) {
    if (rng() % 3 != 0) t += static_cast<double>(rng() % 5);  // ties
    ev.emplace_back(node(), node(), t);
  }
  Stream s{MakeLog(n, ev), {}, {}};
  for (int64_t e = 0; e < m; ++e) {
    if (rng() % 7 != 0) s.train.push_back(e);
  }
  for (int u = 0; u < n; ++u) {
    s.owner.push_back(seed % 2 ? HashOwner(u, world_size)
                               : static_cast<int>(rng() % world_size));
  }
  return s;
}

void CheckStructure(const Stream& s, const WorkerPlan& plan, int rank,
                    const PlanOptions& o) {
  const int64_t n = s.train.size();
  const int64_t nb = (n + o.batch_size - 1) / o.batch_size;
  const int k = o.kind == PlanKind::kDependencyScan ? o.sync_every : 1;
  ASSERT_EQ(plan.rank, rank);
  ASSERT_EQ(plan.sync_every, k);
  ASSERT_EQ(plan.num_batches(), nb);
  ASSERT_EQ(plan.num_windows(), (nb + k - 1) / k);
  ASSERT_EQ(plan.events.size(), plan.target.size());
  ASSERT_EQ(plan.batch_begin.back(), static_cast<int64_t>(plan.events.size()));
  ASSERT_EQ(plan.refresh_begin.back(),
            static_cast<int64_t>(plan.refresh.size()));
  for (int64_t b = 0; b < nb; ++b) {
    const BatchView v = plan.batch(b);
    const int64_t lo = b * o.batch_size;
    const int64_t hi = std::min(n, lo + o.batch_size);
    const std::set<int64_t> slice(s.train.begin() + lo, s.train.begin() + hi);
    ASSERT_EQ(v.boundary, b % k == 0);
    if (!v.boundary) {
      ASSERT_TRUE(v.refresh.empty());
    }
    ASSERT_TRUE(std::is_sorted(v.refresh.begin(), v.refresh.end()));
    ASSERT_EQ(std::adjacent_find(v.refresh.begin(), v.refresh.end()),
              v.refresh.end());
    for (size_t i = 0; i < v.events.size(); ++i) {
      const int64_t e = v.events[i];
      if (i > 0) {
        ASSERT_LT(v.events[i - 1], e) << "batch " << b;
      }
      ASSERT_TRUE(slice.count(e)) << "event " << e << " not in batch " << b;
      ASSERT_EQ(v.target[i], s.owner[s.log.src[e]] == rank ? 1 : 0);
    }
    for (const int64_t x : v.refresh) ASSERT_NE(s.owner[x], rank);
  }
}

// Algorithm 1's result, recomputed as the least fixpoint of its rule (not by
// a scan): event j (remote source) is auxiliary iff an endpoint of j is in F
// when j is visited, where F then holds the remote destinations of targets in
// batches >= batch(j) and the remote endpoints of auxiliary events in later
// batches or later in the same batch.
std::vector<uint8_t> FixpointAux(const Stream& s, int rank, int64_t wlo,
                                 int64_t whi, int64_t bs) {
  const auto& log = s.log;
  auto remote = [&](int x) { return s.owner[x] != rank; };
  std::vector<uint8_t> aux(whi - wlo, 0);
  for (bool changed = true; changed;) {
    changed = false;
    for (int64_t j = wlo; j < whi; ++j) {
      const int64_t ej = s.train[j];
      if (aux[j - wlo] || !remote(log.src[ej])) continue;
      bool hit = false;
      for (int64_t i = wlo; i < whi && !hit; ++i) {
        const int64_t ei = s.train[i];
        const int64_t bi = i / bs, bj = j / bs;
        const int ui = log.src[ei], vi = log.dst[ei];
        auto touches_j = [&](int x) {
          return x == log.src[ej] || x == log.dst[ej];
        };
        if (!remote(ui)) {  // a target: its remote destination
          hit = bi >= bj && remote(vi) && touches_j(vi);
        } else if (aux[i - wlo] && (bi > bj || (bi == bj && i > j))) {
          hit = touches_j(ui) || (remote(vi) && touches_j(vi));
        }
      }
      if (hit) aux[j - wlo] = changed = 1;
    }
  }
  return aux;
}

// The semantic guarantee, computed forward from the reads: a target reads its
// remote destination, a replayed event both remote endpoints; every earlier
// event of the window that updates a node read must be executed by the worker
// (target or replayed; a replayed one reads in turn), and every node read is
// in N_sync.
void CheckClosure(const Stream& s, const WorkerPlan& plan, int rank, int64_t w,
                  int64_t wlo, int64_t whi) {
  const auto& log = s.log;
  auto remote = [&](int x) { return s.owner[x] != rank; };
  std::set<int64_t> executed;
  for (int64_t b = w * plan.sync_every;
       b < std::min(plan.num_batches(), (w + 1) * plan.sync_every); ++b) {
    for (int64_t e : plan.batch(b).events) {
      ASSERT_TRUE(executed.insert(e).second) << "event " << e << " twice";
    }
  }
  const std::set<int64_t> refresh(
      plan.refresh.begin() + plan.refresh_begin[w],
      plan.refresh.begin() + plan.refresh_begin[w + 1]);
  std::set<std::pair<int, int64_t>> seen;  // (node, position) reads
  std::vector<std::pair<int, int64_t>> work;
  auto read = [&](int x, int64_t i) {
    if (remote(x) && seen.insert({x, i}).second) work.push_back({x, i});
  };
  for (int64_t i = wlo; i < whi; ++i) {
    const int64_t e = s.train[i];
    if (!remote(log.src[e])) read(log.dst[e], i);
  }
  while (!work.empty()) {
    const auto [x, i] = work.back();
    work.pop_back();
    ASSERT_TRUE(refresh.count(x)) << "node " << x << " read, not in N_sync";
    for (int64_t j = wlo; j < i; ++j) {
      const int64_t e = s.train[j];
      if (log.src[e] != x && log.dst[e] != x) continue;
      ASSERT_TRUE(executed.count(e))
          << "event " << e << " updates node " << x << " read at position " << i
          << " but is not executed by worker " << rank;
      if (remote(log.src[e])) {
        read(log.src[e], j);
        read(log.dst[e], j);
      }
    }
  }
}

TEST(BatchPlanTest, RandomStreamProperties) {
  int configs = 0;
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    for (int world_size : {2, 3, 4}) {
      const Stream s = RandomStream(seed * 7919 + world_size, world_size);
      const int64_t n = s.train.size();
      for (int k : {1, 2, 3, 5, 8}) {
        for (int64_t bs :
             {int64_t{7}, int64_t{10}, int64_t{16}, int64_t{33}, n}) {
          SCOPED_TRACE(::testing::Message()
                       << "seed " << seed << " W " << world_size << " K " << k
                       << " bs " << bs << " n " << n);
          ++configs;
          std::vector<int> target_count(s.log.num_events(), 0);
          for (int rank = 0; rank < world_size; ++rank) {
            PlanOptions o;
            o.world_size = world_size;
            o.batch_size = bs;
            o.sync_every = k;
            const OwnerFn owner = TableOwner(s.owner);

            o.kind = PlanKind::kDependencyScan;
            PlanStats stats;
            const WorkerPlan plan =
                MakeWorkerPlan(s.log, s.train, owner, rank, o, &stats);
            CheckStructure(s, plan, rank, o);
            if (::testing::Test::HasFatalFailure()) return;
            for (size_t i = 0; i < plan.events.size(); ++i) {
              target_count[plan.events[i]] += plan.target[i];
            }
            int64_t targets = 0, aux = 0, rmax = 0;
            for (int64_t w = 0; w < plan.num_windows(); ++w) {
              const int64_t wlo = w * k * bs;
              const int64_t whi = std::min(n, (w + 1) * k * bs);
              // Exactly Algorithm 1's result, and its refresh set.
              const std::vector<uint8_t> want_aux =
                  FixpointAux(s, rank, wlo, whi, bs);
              std::set<int64_t> want_refresh;
              std::vector<int64_t> want_events;
              std::vector<uint8_t> want_target;
              for (int64_t i = wlo; i < whi; ++i) {
                const int64_t e = s.train[i];
                const int u = s.log.src[e], v = s.log.dst[e];
                const bool tgt = s.owner[u] == rank;
                if (tgt && s.owner[v] != rank) want_refresh.insert(v);
                if (!tgt && want_aux[i - wlo]) {
                  want_refresh.insert(u);
                  if (s.owner[v] != rank) want_refresh.insert(v);
                }
                if (tgt || want_aux[i - wlo]) {
                  want_events.push_back(e);
                  want_target.push_back(tgt);
                  (tgt ? targets : aux)++;
                }
              }
              const int64_t b0 = w * k;
              const int64_t b1 = std::min(plan.num_batches(), b0 + k);
              const std::vector<int64_t> got_events(
                  plan.events.begin() + plan.batch_begin[b0],
                  plan.events.begin() + plan.batch_begin[b1]);
              const std::vector<uint8_t> got_target(
                  plan.target.begin() + plan.batch_begin[b0],
                  plan.target.begin() + plan.batch_begin[b1]);
              ASSERT_EQ(got_events, want_events) << "window " << w;
              ASSERT_EQ(got_target, want_target) << "window " << w;
              ASSERT_THAT(plan.batch(b0).refresh,
                          ElementsAreArray(want_refresh))
                  << "window " << w;
              rmax = std::max<int64_t>(rmax, want_refresh.size());
              CheckClosure(s, plan, rank, w, wlo, whi);
              if (::testing::Test::HasFatalFailure()) return;
            }
            EXPECT_EQ(stats.targets, targets);
            EXPECT_EQ(stats.auxiliaries, aux);
            EXPECT_EQ(stats.refresh_total,
                      static_cast<int64_t>(plan.refresh.size()));
            EXPECT_EQ(stats.refresh_max, rmax);
            EXPECT_EQ(stats.batches, plan.num_batches());
            EXPECT_EQ(stats.windows, plan.num_windows());

            // Vanilla: the targets only. Full-cache: the whole global batch.
            for (PlanKind kind :
                 {PlanKind::kOwnTargets, PlanKind::kFullReplay}) {
              o.kind = kind;
              const WorkerPlan p =
                  MakeWorkerPlan(s.log, s.train, owner, rank, o);
              CheckStructure(s, p, rank, o);
              if (::testing::Test::HasFatalFailure()) return;
              EXPECT_TRUE(p.refresh.empty());
              for (int64_t b = 0; b < p.num_batches(); ++b) {
                std::vector<int64_t> want;
                for (int64_t i = b * bs; i < std::min(n, (b + 1) * bs); ++i) {
                  const int64_t e = s.train[i];
                  if (kind == PlanKind::kFullReplay ||
                      s.owner[s.log.src[e]] == rank) {
                    want.push_back(e);
                  }
                }
                ASSERT_EQ(Span2Vec(p.batch(b).events), want) << "batch " << b;
              }
            }
          }
          // Every training event is a target of exactly one worker: its
          // source's owner (the per-event flag is checked in CheckStructure).
          for (int64_t e = 0, i = 0; e < s.log.num_events(); ++e) {
            const bool in_train = i < n && s.train[i] == e;
            i += in_train;
            ASSERT_EQ(target_count[e], in_train ? 1 : 0) << "event " << e;
          }
        }
      }
    }
  }
  EXPECT_EQ(configs, 6 * 3 * 5 * 5);
}

// neighbor_reads adds exactly the remote recent neighbours of the targets'
// endpoints (NeighborSampler, kRecent) to the refresh sets; events unchanged.
TEST(BatchPlanTest, NeighborReadsExtendRefreshSets) {
  for (uint64_t seed : {3, 4, 5}) {
    for (int world_size : {2, 3}) {
      const Stream s = RandomStream(seed, world_size);
      const data::TemporalGraph graph(s.log, s.train);
      for (int reads : {1, 3, 10}) {
        SCOPED_TRACE(::testing::Message() << "seed " << seed << " W "
                                          << world_size << " reads " << reads);
        data::NeighborSampler sampler(&graph, reads,
                                      data::NeighborStrategy::kRecent);
        const int k = 3;
        const int64_t bs = 10, n = s.train.size();
        for (int rank = 0; rank < world_size; ++rank) {
          PlanOptions o;
          o.world_size = world_size;
          o.batch_size = bs;
          o.sync_every = k;
          const WorkerPlan base =
              MakeWorkerPlan(s.log, s.train, TableOwner(s.owner), rank, o);
          o.neighbor_reads = reads;
          o.graph = &graph;
          const WorkerPlan plan =
              MakeWorkerPlan(s.log, s.train, TableOwner(s.owner), rank, o);
          EXPECT_EQ(plan.events, base.events);
          EXPECT_EQ(plan.target, base.target);
          EXPECT_EQ(plan.batch_begin, base.batch_begin);
          for (int64_t w = 0; w < plan.num_windows(); ++w) {
            std::set<int64_t> want(
                base.refresh.begin() + base.refresh_begin[w],
                base.refresh.begin() + base.refresh_begin[w + 1]);
            std::vector<int32_t> nodes;
            std::vector<double> times;
            for (int64_t i = w * k * bs; i < std::min(n, (w + 1) * k * bs);
                 ++i) {
              const int64_t e = s.train[i];
              if (s.owner[s.log.src[e]] != rank) continue;
              for (int32_t x : {s.log.src[e], s.log.dst[e]}) {
                nodes.push_back(x);
                times.push_back(s.log.t[e]);
              }
            }
            data::NeighborBlock block;
            sampler.Sample(nodes.data(), times.data(), nodes.size(), &block);
            for (size_t q = 0; q < nodes.size(); ++q) {
              for (int j = 0; j < block.count[q]; ++j) {
                const int32_t x = block.nbr[q * reads + j];
                if (s.owner[x] != rank) want.insert(x);
              }
            }
            ASSERT_THAT(plan.batch(w * k).refresh, ElementsAreArray(want))
                << "window " << w;
          }
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------
// The plan cache.

class PlanCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = TempDir(
        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    s_ = RandomStream(11, 3);
    graph_ = std::make_unique<data::TemporalGraph>(s_.log, s_.train);
    o_.world_size = 3;
    o_.batch_size = 9;
    o_.sync_every = 2;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  absl::StatusOr<WorkerPlan> Load(const data::EventLog& log,
                                  const std::vector<int64_t>& train,
                                  const OwnerFn& owner, int rank,
                                  const PlanOptions& o, PlanStats* stats) {
    return LoadOrMakeWorkerPlan(log, train, owner, rank, o, dir_, stats);
  }

  std::string dir_;
  Stream s_;
  std::unique_ptr<data::TemporalGraph> graph_;
  PlanOptions o_;
};

TEST_F(PlanCacheTest, SecondCallLoadsTheSamePlan) {
  const OwnerFn owner = TableOwner(s_.owner);
  PlanStats made;
  auto first = Load(s_.log, s_.train, owner, 1, o_, &made);
  ASSERT_THAT(first, IsOk());
  EXPECT_FALSE(made.from_cache);
  ASSERT_FALSE(made.cache_path.empty());
  EXPECT_TRUE(std::filesystem::exists(made.cache_path));
  EXPECT_EQ(*first, MakeWorkerPlan(s_.log, s_.train, owner, 1, o_));

  PlanStats loaded;
  auto second = Load(s_.log, s_.train, owner, 1, o_, &loaded);
  ASSERT_THAT(second, IsOk());
  EXPECT_TRUE(loaded.from_cache);
  EXPECT_EQ(loaded.cache_path, made.cache_path);
  EXPECT_EQ(*second, *first);
  EXPECT_EQ(loaded.targets, made.targets);
  EXPECT_EQ(loaded.auxiliaries, made.auxiliaries);
  EXPECT_EQ(loaded.refresh_total, made.refresh_total);
  EXPECT_EQ(loaded.refresh_max, made.refresh_max);
  EXPECT_EQ(loaded.windows, made.windows);
  // No temp files left behind.
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir_)) {
    EXPECT_THAT(entry.path().string(), ::testing::Not(HasSubstr(".tmp")));
    ++files;
  }
  EXPECT_EQ(files, 1);

  // Without a cache dir: planned, nothing stored.
  PlanStats none;
  auto uncached =
      LoadOrMakeWorkerPlan(s_.log, s_.train, owner, 1, o_, "", &none);
  ASSERT_THAT(uncached, IsOk());
  EXPECT_FALSE(none.from_cache);
  EXPECT_TRUE(none.cache_path.empty());
  EXPECT_EQ(*uncached, *first);
}

TEST_F(PlanCacheTest, EveryKeyComponentReplans) {
  const OwnerFn owner = TableOwner(s_.owner);
  PlanOptions with_graph = o_;
  with_graph.neighbor_reads = 2;
  with_graph.graph = graph_.get();

  // Variants: (log, train, owner, rank, options).
  struct Variant {
    std::string name;
    data::EventLog log;
    std::vector<int64_t> train;
    OwnerFn owner;
    int rank;
    PlanOptions options;
  };
  std::vector<Variant> variants;
  auto add = [&](std::string name) -> Variant& {
    variants.push_back({std::move(name), s_.log, s_.train, owner, 1, o_});
    return variants.back();
  };
  add("base");
  add("rank").rank = 2;
  add("world size").options.world_size = 4;
  add("K").options.sync_every = 3;
  add("batch size").options.batch_size = 10;
  add("kind own").options.kind = PlanKind::kOwnTargets;
  add("kind full").options.kind = PlanKind::kFullReplay;
  add("neighbor reads").options = with_graph;
  {
    Variant& v = add("neighbor reads 3");
    v.options = with_graph;
    v.options.neighbor_reads = 3;
  }
  // The same graph options over a graph with other content.
  std::vector<int64_t> fewer(s_.train.begin(), s_.train.end() - 5);
  const data::TemporalGraph other_graph(s_.log, fewer);
  {
    Variant& v = add("graph content");
    v.options = with_graph;
    v.options.graph = &other_graph;
  }
  {
    std::vector<int> table = s_.owner;
    table[s_.log.src[s_.train[0]]] = (table[s_.log.src[s_.train[0]]] + 1) % 3;
    add("ownership").owner = TableOwner(table);
  }
  add("one event fewer").train.pop_back();
  const int32_t nodes = static_cast<int32_t>(s_.log.num_nodes);
  {
    data::EventLog& log = add("a destination changed").log;
    const int64_t e = s_.train[3];
    log.dst.set(e, (log.dst[e] + 1) % nodes);
  }
  {
    data::EventLog& log = add("a source changed").log;
    const int64_t e = s_.train[5];
    log.src.set(e, (log.src[e] + 1) % nodes);
  }
  {
    data::EventLog& log = add("a time changed").log;
    log.t.set(s_.train.back(), log.t[s_.train.back()] + 1);
  }
  {
    // The same training events (src, dst, t) under other log indices: a
    // filler event first shifts every index by one.
    Variant& v = add("shifted event ids");
    auto shifted = [](const auto& column, auto first) {
      auto values = column.ToVector();
      values.insert(values.begin(), first);
      return values;
    };
    v.log.src = shifted(v.log.src, 0);
    v.log.dst = shifted(v.log.dst, 0);
    v.log.t = shifted(v.log.t, v.log.t.front());
    for (int64_t& e : v.train) ++e;
  }
  {
    Variant& v = add("more nodes");
    v.log.num_nodes += 1;
    v.owner = [owner, n = s_.log.num_nodes](int64_t u) {
      return u < n ? owner(u) : 0;
    };
  }
  for (const Variant& v : variants) {
    SCOPED_TRACE(v.name);
    PlanStats stats;
    auto plan = Load(v.log, v.train, v.owner, v.rank, v.options, &stats);
    ASSERT_THAT(plan, IsOk());
    EXPECT_FALSE(stats.from_cache);
    EXPECT_FALSE(stats.cache_path.empty());
    EXPECT_EQ(*plan,
              MakeWorkerPlan(v.log, v.train, v.owner, v.rank, v.options));
  }
  // Each variant has its own file: all load now.
  std::set<std::string> paths;
  for (const Variant& v : variants) {
    SCOPED_TRACE(v.name);
    PlanStats stats;
    auto plan = Load(v.log, v.train, v.owner, v.rank, v.options, &stats);
    ASSERT_THAT(plan, IsOk());
    EXPECT_TRUE(stats.from_cache);
    EXPECT_EQ(*plan,
              MakeWorkerPlan(v.log, v.train, v.owner, v.rank, v.options));
    paths.insert(stats.cache_path);
  }
  EXPECT_EQ(paths.size(), variants.size());
}

TEST_F(PlanCacheTest, CorruptFilesAreReplannedAndRewritten) {
  const OwnerFn owner = TableOwner(s_.owner);
  PlanStats stats;
  auto good = Load(s_.log, s_.train, owner, 0, o_, &stats);
  ASSERT_THAT(good, IsOk());
  const std::string path = stats.cache_path;
  ASSERT_FALSE(path.empty());
  const auto size = std::filesystem::file_size(path);

  std::vector<std::pair<std::string, std::function<void()>>> damages = {
      {"truncated to half",
       [&] { std::filesystem::resize_file(path, size / 2); }},
      {"last word cut", [&] { std::filesystem::resize_file(path, size - 8); }},
      {"one byte cut", [&] { std::filesystem::resize_file(path, size - 1); }},
      {"empty", [&] { std::filesystem::resize_file(path, 0); }},
      {"extended", [&] { std::filesystem::resize_file(path, size + 8); }},
      {"a byte flipped in the middle",
       [&] {
         std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
         f.seekg(size / 2);
         char c;
         f.read(&c, 1);
         c ^= 0x10;
         f.seekp(size / 2);
         f.write(&c, 1);
       }},
      {"garbage of the same size",
       [&] {
         std::ofstream f(path, std::ios::binary | std::ios::trunc);
         f << std::string(size, 'x');
       }},
  };
  for (const auto& [name, damage] : damages) {
    SCOPED_TRACE(name);
    damage();
    PlanStats replanned;
    auto plan = Load(s_.log, s_.train, owner, 0, o_, &replanned);
    ASSERT_THAT(plan, IsOk());
    EXPECT_FALSE(replanned.from_cache);
    EXPECT_EQ(replanned.cache_path, path);
    EXPECT_EQ(*plan, *good);
    PlanStats reloaded;
    plan = Load(s_.log, s_.train, owner, 0, o_, &reloaded);
    ASSERT_THAT(plan, IsOk());
    EXPECT_TRUE(reloaded.from_cache);
    EXPECT_EQ(*plan, *good);
  }
}

TEST_F(PlanCacheTest, UnwritableCacheDirStillPlans) {
  std::filesystem::create_directories(dir_);
  const std::string file = dir_ + "/a_file";
  std::ofstream(file) << "not a directory";
  PlanStats stats;
  auto plan = LoadOrMakeWorkerPlan(s_.log, s_.train, TableOwner(s_.owner), 2,
                                   o_, file + "/cache", &stats);
  ASSERT_THAT(plan, IsOk());
  EXPECT_FALSE(stats.from_cache);
  EXPECT_TRUE(stats.cache_path.empty());
  EXPECT_EQ(*plan,
            MakeWorkerPlan(s_.log, s_.train, TableOwner(s_.owner), 2, o_));
  EXPECT_GT(stats.targets, 0);
}

TEST_F(PlanCacheTest, InvalidInputs) {
  const OwnerFn owner = TableOwner(s_.owner);
  PlanStats stats;
  EXPECT_THAT(Load(s_.log, s_.train, owner, 3, o_, &stats),
              StatusIs(absl::StatusCode::kInvalidArgument, "rank 3"));
  PlanOptions o = o_;
  o.batch_size = 0;
  EXPECT_THAT(Load(s_.log, s_.train, owner, 0, o, &stats),
              StatusIs(absl::StatusCode::kInvalidArgument, "batch_size"));
  o = o_;
  o.sync_every = 0;
  EXPECT_THAT(Load(s_.log, s_.train, owner, 0, o, &stats),
              StatusIs(absl::StatusCode::kInvalidArgument, "sync_every"));
  o = o_;
  o.neighbor_reads = 4;
  EXPECT_THAT(Load(s_.log, s_.train, owner, 0, o, &stats),
              StatusIs(absl::StatusCode::kInvalidArgument, "TemporalGraph"));
  std::vector<int64_t> unsorted = s_.train;
  std::swap(unsorted[0], unsorted[1]);
  EXPECT_THAT(Load(s_.log, unsorted, owner, 0, o_, &stats),
              StatusIs(absl::StatusCode::kInvalidArgument, "ascending"));
  std::vector<int64_t> outside = s_.train;
  outside.push_back(s_.log.num_events());
  EXPECT_THAT(Load(s_.log, outside, owner, 0, o_, &stats),
              StatusIs(absl::StatusCode::kInvalidArgument, "ascending"));
  EXPECT_THAT(Load(
                  s_.log, s_.train, [](int64_t) { return 3; }, 0, o_, &stats),
              StatusIs(absl::StatusCode::kInvalidArgument, "owner("));
  EXPECT_THAT(Load(s_.log, s_.train, nullptr, 0, o_, &stats),
              StatusIs(absl::StatusCode::kInvalidArgument, "owner"));
  EXPECT_FALSE(std::filesystem::exists(dir_));
}

// ---------------------------------------------------------------------------
// Real data: plan times and sizes (printed for the test log), and the
// closure property checked in linear time per window.

// For every remote node x read by an executed event at position i of the
// window (a target reads its destination, a replayed event both endpoints),
// every event of the window before i touching x is executed and x is in the
// refresh set.
void CheckClosureLinear(const data::EventLog& log,
                        absl::Span<const int64_t> train,
                        const std::vector<int32_t>& own, const WorkerPlan& plan,
                        int rank, int64_t bs) {
  const int64_t n = train.size();
  const int k = plan.sync_every;
  std::vector<int64_t> last_read(log.num_nodes, -1);
  std::vector<uint8_t> executed;
  for (int64_t w = 0; w < plan.num_windows(); ++w) {
    const int64_t wlo = w * k * bs, whi = std::min(n, (w + 1) * k * bs);
    executed.assign(whi - wlo, 0);
    std::fill(last_read.begin(), last_read.end(), -1);
    const int64_t b0 = w * k, b1 = std::min(plan.num_batches(), b0 + k);
    // Positions of the executed events (both lists ascending).
    int64_t i = wlo;
    for (int64_t j = plan.batch_begin[b0]; j < plan.batch_begin[b1]; ++j) {
      while (i < whi && train[i] < plan.events[j]) ++i;
      ASSERT_LT(i, whi);
      ASSERT_EQ(train[i], plan.events[j]);
      executed[i - wlo] = 1;
    }
    const BatchView first = plan.batch(b0);
    std::vector<uint8_t> in_refresh(log.num_nodes, 0);
    for (int64_t x : first.refresh) in_refresh[x] = 1;
    for (i = wlo; i < whi; ++i) {
      if (!executed[i - wlo]) continue;
      const int64_t e = train[i];
      const int32_t u = log.src[e], v = log.dst[e];
      if (own[u] != rank) last_read[u] = i;
      if (own[v] != rank) last_read[v] = i;
    }
    for (i = wlo; i < whi; ++i) {
      const int64_t e = train[i];
      for (int32_t x : {log.src[e], log.dst[e]}) {
        if (own[x] == rank || last_read[x] < 0) continue;
        ASSERT_TRUE(in_refresh[x]) << "window " << w << " node " << x;
        if (i < last_read[x]) {
          ASSERT_TRUE(executed[i - wlo])
              << "window " << w << " event " << e << " node " << x;
        }
      }
    }
  }
}

TEST(BatchPlanRealDataTest, PlanTimesAndStats) {
  struct Case {
    const char* file;
    size_t train_size;
  };
  const std::string cache = TempDir("real");
  for (const Case& c : {Case{"wikipedia.txt.gz", 81029},
                        Case{"sx-mathoverflow.txt.gz", 264240}}) {
    auto log = data::LoadEventLog(SharedData(c.file), {});
    ASSERT_THAT(log, IsOk());
    const data::Split split = data::MakeSplit(*log, {});
    ASSERT_EQ(split.train.size(), c.train_size);
    const data::TemporalGraph graph(*log, split.train);
    std::printf("%s: %zu training events, %lld nodes\n", c.file,
                split.train.size(), static_cast<long long>(log->num_nodes));
    std::printf("  %-5s %-9s %2s %4s %8s %8s %8s %8s %8s %8s %10s\n", "W",
                "kind", "nr", "rank", "ms", "targets", "aux", "windows",
                "refr_sum", "refr_max", "cache");
    for (int world_size : {2, 3}) {
      std::vector<int32_t> own(log->num_nodes);
      for (int64_t u = 0; u < log->num_nodes; ++u) {
        own[u] = HashOwner(u, world_size);
      }
      const OwnerFn owner = [world_size](int64_t u) {
        return HashOwner(u, world_size);
      };
      struct Run {
        PlanKind kind;
        int neighbor_reads;
      };
      for (const Run run :
           {Run{PlanKind::kDependencyScan, 0},
            Run{PlanKind::kDependencyScan, 10}, Run{PlanKind::kOwnTargets, 0},
            Run{PlanKind::kFullReplay, 0}}) {
        PlanOptions o;
        o.kind = run.kind;
        o.world_size = world_size;
        o.batch_size = 600;
        o.sync_every = 6;
        o.neighbor_reads = run.neighbor_reads;
        o.graph = &graph;
        const char* kind = run.kind == PlanKind::kDependencyScan ? "scan"
                           : run.kind == PlanKind::kOwnTargets   ? "own"
                                                                 : "full";
        int64_t targets = 0;
        for (int rank = 0; rank < world_size; ++rank) {
          PlanStats made, loaded;
          const WorkerPlan plan =
              MakeWorkerPlan(*log, split.train, owner, rank, o, &made);
          auto cached = LoadOrMakeWorkerPlan(*log, split.train, owner, rank, o,
                                             cache, &loaded);
          ASSERT_THAT(cached, IsOk());
          ASSERT_EQ(*cached, plan);
          EXPECT_FALSE(loaded.from_cache);
          auto again = LoadOrMakeWorkerPlan(*log, split.train, owner, rank, o,
                                            cache, &loaded);
          ASSERT_THAT(again, IsOk());
          EXPECT_TRUE(loaded.from_cache);
          EXPECT_EQ(*again, plan);
          EXPECT_EQ(made.batches,
                    (static_cast<int64_t>(c.train_size) + 599) / 600);
          std::printf(
              "  %-5d %-9s %2d %4d %8.2f %8lld %8lld %8lld %8lld %8lld "
              "%7.2f ms\n",
              world_size, kind, run.neighbor_reads, rank, made.seconds * 1e3,
              static_cast<long long>(made.targets),
              static_cast<long long>(made.auxiliaries),
              static_cast<long long>(made.windows),
              static_cast<long long>(made.refresh_total),
              static_cast<long long>(made.refresh_max), loaded.seconds * 1e3);
          targets += made.targets;
          if (run.kind == PlanKind::kDependencyScan &&
              run.neighbor_reads == 0) {
            CheckClosureLinear(*log, split.train, own, plan, rank, 600);
            if (::testing::Test::HasFatalFailure()) return;
          }
        }
        EXPECT_EQ(targets, static_cast<int64_t>(c.train_size));
      }
    }
    std::fflush(stdout);
  }
  std::filesystem::remove_all(cache);
}

}  // namespace
}  // namespace mnemo::plan
