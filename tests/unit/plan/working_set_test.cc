#include "trainer/plan/working_set.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "util/status_matchers.h"

namespace mnemo::plan {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

BatchNodes Batches(const std::vector<std::vector<int64_t>>& batches) {
  BatchNodes out;
  for (const auto& b : batches) out.Add(b);
  return out;
}

BatchNodes NoWrites(int64_t n) {
  BatchNodes out;
  for (int64_t b = 0; b < n; ++b) out.Add({});
  return out;
}

std::vector<int64_t> Vec(absl::Span<const int64_t> s) {
  return std::vector<int64_t>(s.begin(), s.end());
}

// Replays `ws` over `reads`: each batch drops then pulls what the plan says;
// everything the batch reads is held, nothing held twice or over capacity,
// nothing dropped that the batch reads, and the counters add up.
void CheckReplay(const BatchNodes& reads, const WorkingSet& ws,
                 int64_t capacity) {
  std::set<int64_t> held;
  int64_t misses = 0, evictions = 0, peak = 0;
  ASSERT_EQ(ws.load.num_batches(), reads.num_batches());
  ASSERT_EQ(ws.evict.num_batches(), reads.num_batches());
  for (int64_t b = 0; b < reads.num_batches(); ++b) {
    SCOPED_TRACE(b);
    const std::set<int64_t> batch(reads.batch(b).begin(), reads.batch(b).end());
    for (const int64_t u : ws.evict.batch(b)) {
      ASSERT_EQ(held.erase(u), 1u) << "dropped " << u << " not held";
      ASSERT_FALSE(batch.contains(u)) << "dropped " << u << " the batch reads";
      ++evictions;
    }
    for (const int64_t u : ws.load.batch(b)) {
      ASSERT_TRUE(held.insert(u).second) << "pulled " << u << " already held";
      ++misses;
    }
    EXPECT_TRUE(
        std::is_sorted(ws.load.batch(b).begin(), ws.load.batch(b).end()));
    EXPECT_TRUE(
        std::is_sorted(ws.evict.batch(b).begin(), ws.evict.batch(b).end()));
    ASSERT_LE(static_cast<int64_t>(held.size()), capacity);
    peak = std::max<int64_t>(peak, static_cast<int64_t>(held.size()));
    for (const int64_t u : batch) ASSERT_TRUE(held.contains(u)) << u;
  }
  EXPECT_EQ(ws.stats.misses, misses);
  EXPECT_EQ(ws.stats.evictions, evictions);
  EXPECT_EQ(ws.stats.peak_states, peak);
  EXPECT_EQ(ws.stats.reads, static_cast<int64_t>(reads.nodes.size()));
  EXPECT_EQ(ws.stats.hits + ws.stats.misses, ws.stats.reads);
}

// The fewest pulls any schedule needs (demand pulls, any drops), by
// dynamic programming over the held sets: small instances only.
int64_t OptimalMisses(const BatchNodes& reads, int64_t capacity) {
  std::map<std::set<int64_t>, int64_t> best = {{{}, 0}};
  for (int64_t b = 0; b < reads.num_batches(); ++b) {
    const std::set<int64_t> batch(reads.batch(b).begin(), reads.batch(b).end());
    std::map<std::set<int64_t>, int64_t> next;
    for (const auto& [held, cost] : best) {
      int64_t pulls = 0;
      for (const int64_t u : batch) pulls += !held.contains(u);
      // Keep the batch plus any subset of the other held states that fits.
      std::vector<int64_t> others;
      for (const int64_t u : held) {
        if (!batch.contains(u)) others.push_back(u);
      }
      const int64_t room = capacity - static_cast<int64_t>(batch.size());
      for (uint32_t mask = 0; mask < (1u << others.size()); ++mask) {
        if (__builtin_popcount(mask) > room) continue;
        std::set<int64_t> kept = batch;
        for (size_t i = 0; i < others.size(); ++i) {
          if (mask & (1u << i)) kept.insert(others[i]);
        }
        auto [it, inserted] = next.try_emplace(kept, cost + pulls);
        if (!inserted) it->second = std::min(it->second, cost + pulls);
      }
    }
    best = std::move(next);
  }
  int64_t out = std::numeric_limits<int64_t>::max();
  for (const auto& [held, cost] : best) out = std::min(out, cost);
  return out;
}

TEST(WorkingSetTest, EachRuleByHand) {
  // Capacity 2; batches {1, 2}, {3}, {1}, {2}.
  const BatchNodes reads = Batches({{1, 2}, {3}, {1}, {2}});
  auto belady = PlanWorkingSet(reads, NoWrites(4), 2, Eviction::kBelady);
  ASSERT_THAT(belady, IsOk());
  // b1: 1 is read again at b2, 2 at b3: drop 2. b3: 1 and 3 are never read
  // again: drop the lower id.
  EXPECT_THAT(Vec(belady->evict.batch(1)), ElementsAre(2));
  EXPECT_THAT(Vec(belady->evict.batch(3)), ElementsAre(1));
  EXPECT_THAT(Vec(belady->load.batch(2)), IsEmpty());
  EXPECT_EQ(belady->stats.misses, 4);
  EXPECT_EQ(belady->stats.hits, 1);
  CheckReplay(reads, *belady, 2);

  auto lru = PlanWorkingSet(reads, NoWrites(4), 2, Eviction::kLru);
  ASSERT_THAT(lru, IsOk());
  // b1: 1 and 2 last read at b0: drop the lower id. b2: 2 (b0) before 3
  // (b1). b3: 3 (b1) before 1 (b2).
  EXPECT_THAT(Vec(lru->evict.batch(1)), ElementsAre(1));
  EXPECT_THAT(Vec(lru->evict.batch(2)), ElementsAre(2));
  EXPECT_THAT(Vec(lru->evict.batch(3)), ElementsAre(3));
  EXPECT_EQ(lru->stats.misses, 5);
  EXPECT_EQ(lru->stats.hits, 0);
  CheckReplay(reads, *lru, 2);
}

TEST(WorkingSetTest, DirtyStatesArePushedWhenDropped) {
  // Batch 0 advances 1; batch 1 reads 3 and 4 (capacity 2): both 1 and 2
  // go, 1 dirty. Batch 2 reads 1 again, advances it: dirty until the end.
  const BatchNodes reads = Batches({{1, 2}, {3, 4}, {1}});
  const BatchNodes writes = Batches({{1}, {}, {1}});
  auto ws = PlanWorkingSet(reads, writes, 2, Eviction::kBelady);
  ASSERT_THAT(ws, IsOk());
  EXPECT_THAT(Vec(ws->evict.batch(1)), ElementsAre(1, 2));
  EXPECT_EQ(ws->stats.evictions, 3);  // 1, 2, then 3 or 4 for 1
  EXPECT_EQ(ws->stats.dirty_evictions, 1);
  CheckReplay(reads, *ws, 2);
}

TEST(WorkingSetTest, UnboundedHoldsEverythingOnce) {
  std::mt19937_64 rng(3);
  BatchNodes reads;
  std::set<int64_t> distinct;
  for (int b = 0; b < 50; ++b) {
    std::set<int64_t> batch;
    for (int i = 0; i < 8; ++i) batch.insert(rng() % 100);
    distinct.insert(batch.begin(), batch.end());
    reads.Add(std::vector<int64_t>(batch.begin(), batch.end()));
  }
  for (const Eviction rule : {Eviction::kBelady, Eviction::kLru}) {
    auto ws = PlanWorkingSet(reads, NoWrites(50), 1000, rule);
    ASSERT_THAT(ws, IsOk());
    EXPECT_EQ(ws->stats.misses, static_cast<int64_t>(distinct.size()));
    EXPECT_EQ(ws->stats.evictions, 0);
    CheckReplay(reads, *ws, 1000);
  }
}

// `batches` batches of 1 to `capacity` distinct nodes among `nodes` (at
// least `capacity`).
BatchNodes RandomReads(std::mt19937_64* rng, int nodes, int64_t capacity,
                       int batches) {
  BatchNodes reads;
  for (int b = 0; b < batches; ++b) {
    std::set<int64_t> batch;
    const int size = 1 + static_cast<int>((*rng)() % capacity);
    while (static_cast<int>(batch.size()) < size)
      batch.insert((*rng)() % nodes);
    reads.Add(std::vector<int64_t>(batch.begin(), batch.end()));
  }
  return reads;
}

// Belady over the plan pulls the fewest states any schedule can (checked
// against the optimum on small random instances), and never more than LRU.
TEST(WorkingSetTest, BeladyIsOptimalAndBeatsLru) {
  std::mt19937_64 rng(11);
  int64_t belady_total = 0, lru_total = 0;
  for (int instance = 0; instance < 300; ++instance) {
    const int nodes = 3 + static_cast<int>(rng() % 4);             // 3..6
    const int64_t capacity = 2 + static_cast<int64_t>(rng() % 2);  // 2..3
    const int batches = 3 + static_cast<int>(rng() % 8);
    const BatchNodes reads = RandomReads(&rng, nodes, capacity, batches);
    SCOPED_TRACE(instance);
    auto belady =
        PlanWorkingSet(reads, NoWrites(batches), capacity, Eviction::kBelady);
    auto lru =
        PlanWorkingSet(reads, NoWrites(batches), capacity, Eviction::kLru);
    ASSERT_THAT(belady, IsOk());
    ASSERT_THAT(lru, IsOk());
    CheckReplay(reads, *belady, capacity);
    CheckReplay(reads, *lru, capacity);
    EXPECT_EQ(belady->stats.misses, OptimalMisses(reads, capacity));
    EXPECT_LE(belady->stats.misses, lru->stats.misses);
    belady_total += belady->stats.misses;
    lru_total += lru->stats.misses;
  }
  EXPECT_LT(belady_total, lru_total);
}

// The online cache, told the reads ahead, drops and loads exactly what the
// plan does, batch by batch, under either rule: `instances` random
// streams of 5 + [0, `more_batches`) batches.
void ExpectOnlineMatchesThePlan(uint64_t seed, int instances,
                                int more_batches) {
  std::mt19937_64 rng(seed);
  for (int instance = 0; instance < instances; ++instance) {
    const int nodes = 8 + static_cast<int>(rng() % 20);
    const int64_t capacity = 3 + static_cast<int64_t>(rng() % 4);
    const int batches = 5 + static_cast<int>(rng() % more_batches);
    const BatchNodes reads = RandomReads(&rng, nodes, capacity, batches);
    for (const Eviction rule : {Eviction::kBelady, Eviction::kLru}) {
      SCOPED_TRACE(testing::Message() << instance << " " << EvictionName(rule));
      auto planned = PlanWorkingSet(reads, NoWrites(batches), capacity, rule);
      ASSERT_THAT(planned, IsOk());
      WorkingSetCache cache(nodes, capacity, rule);
      cache.Reset(reads);
      for (int b = 0; b < batches; ++b) {
        std::vector<int64_t> misses, victims;
        const auto batch = reads.batch(b);
        ASSERT_THAT(cache.Acquire(b, batch, &misses, &victims), IsOk());
        const auto load = planned->load.batch(b);
        const auto evict = planned->evict.batch(b);
        ASSERT_EQ(misses, std::vector<int64_t>(load.begin(), load.end()))
            << "batch " << b;
        ASSERT_EQ(victims, std::vector<int64_t>(evict.begin(), evict.end()))
            << "batch " << b;
        for (const int64_t u : batch) EXPECT_TRUE(cache.held(u));
        EXPECT_LE(cache.size(), capacity);
      }
      EXPECT_EQ(cache.stats().misses, planned->stats.misses);
      EXPECT_EQ(cache.stats().evictions, planned->stats.evictions);
      EXPECT_EQ(cache.stats().hits, planned->stats.hits);
    }
  }
}

TEST(WorkingSetCacheTest, OnlineMatchesThePlan) {
  ExpectOnlineMatchesThePlan(5, 200, 30);
}

// Streams long enough that the cache's heap of held states collects many
// outdated entries and is compacted many times.
TEST(WorkingSetCacheTest, OnlineMatchesThePlanOverLongStreams) {
  ExpectOnlineMatchesThePlan(9, 10, 6000);
}

// Reads the prediction missed are served; a state predicted never to be
// read again goes first; what a step needs is never dropped; a step larger
// than the cache is refused; Reset forgets what was held.
TEST(WorkingSetCacheTest, UnpredictedReadsAndLimits) {
  WorkingSetCache cache(10, 3, Eviction::kBelady);
  cache.Reset(Batches({{1, 2, 3}, {1}, {2}, {1, 2}}));
  std::vector<int64_t> misses, victims;
  ASSERT_THAT(
      cache.Acquire(0, std::vector<int64_t>{1, 2, 3}, &misses, &victims),
      IsOk());
  EXPECT_THAT(misses, ElementsAre(1, 2, 3));
  EXPECT_THAT(victims, IsEmpty());
  // Node 7 was not predicted; 3 is never read again: it goes.
  misses.clear();
  ASSERT_THAT(cache.Acquire(1, std::vector<int64_t>{1, 7}, &misses, &victims),
              IsOk());
  EXPECT_THAT(misses, ElementsAre(7));
  EXPECT_THAT(victims, ElementsAre(3));
  // Now 7 (never predicted) goes before 2 (read at position 2).
  misses.clear();
  victims.clear();
  ASSERT_THAT(cache.Acquire(1, std::vector<int64_t>{1, 8}, &misses, &victims),
              IsOk());
  EXPECT_THAT(victims, ElementsAre(7));
  EXPECT_THAT(
      cache.Acquire(2, std::vector<int64_t>{1, 2, 3, 4}, &misses, &victims),
      StatusIs(absl::StatusCode::kInvalidArgument,
               "a step needs 4 node states at once and the working "
               "set holds 3"));
  cache.Reset(BatchNodes());
  EXPECT_EQ(cache.size(), 0);
  EXPECT_FALSE(cache.held(1));
  EXPECT_EQ(cache.stats().misses, 5);  // counters run on
}

// Belady looks ahead a window of about `window_reads` predicted reads (at
// least one batch), asking the predictor for one batch at a time: a held
// state not read within the window ranks as one never read again.
TEST(WorkingSetCacheTest, LooksAheadAWindowOfReads) {
  const BatchNodes reads = Batches({{1, 2}, {3}, {1}, {2}});
  for (const int64_t window : {int64_t{1}, int64_t{2}, int64_t{100}}) {
    SCOPED_TRACE(window);
    std::vector<int64_t> asked;
    ReadPredictor p;
    p.num_batches = reads.num_batches();
    p.reads = [&](int64_t b, std::vector<int64_t>* nodes) {
      asked.push_back(b);
      const auto batch = reads.batch(b);
      nodes->insert(nodes->end(), batch.begin(), batch.end());
    };
    WorkingSetCache cache(5, 2, Eviction::kBelady);
    cache.Reset(p, window);
    std::vector<std::vector<int64_t>> dropped;
    for (int64_t b = 0; b < reads.num_batches(); ++b) {
      std::vector<int64_t> misses, victims;
      ASSERT_THAT(cache.Acquire(b, reads.batch(b), &misses, &victims), IsOk());
      dropped.push_back(victims);
    }
    // Every batch predicted once.
    EXPECT_THAT(asked, ElementsAre(0, 1, 2, 3));
    if (window == 1) {
      // Batch 1 sees only itself: 1 and 2 tie (never read within it) and
      // the lower id goes; batch 2 then misses 1.
      EXPECT_THAT(dropped[1], ElementsAre(1));
      EXPECT_EQ(cache.stats().misses, 5);
    } else {
      // Batch 1's window reaches batch 2, which reads 1: 2 goes.
      EXPECT_THAT(dropped[1], ElementsAre(2));
      EXPECT_EQ(cache.stats().misses, 4);
    }
  }
}

TEST(WorkingSetTest, BadInputNamesWhatAndWhere) {
  const BatchNodes reads = Batches({{1, 2}, {3, 4, 5}});
  EXPECT_THAT(PlanWorkingSet(reads, NoWrites(2), 2, Eviction::kLru),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "batch 1 reads 3 node states but the cache holds 2"));
  EXPECT_THAT(PlanWorkingSet(reads, NoWrites(1), 3, Eviction::kLru),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "2 batches of reads but 1 of writes"));
  EXPECT_THAT(PlanWorkingSet(reads, Batches({{1}, {6}}), 3, Eviction::kLru),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "batch 1 writes node 6 without reading it"));
  EXPECT_THAT(
      PlanWorkingSet(Batches({{1}, {2, 2}}), NoWrites(2), 3, Eviction::kLru),
      StatusIs(absl::StatusCode::kInvalidArgument,
               "batch 1 reads node 2 twice"));
  EXPECT_THAT(
      PlanWorkingSet(Batches({{-1}}), NoWrites(1), 3, Eviction::kBelady),
      StatusIs(absl::StatusCode::kInvalidArgument, "batch 0 reads node -1"));
  for (const Eviction e : {Eviction::kBelady, Eviction::kLru}) {
    auto parsed = ParseEviction(EvictionName(e));
    ASSERT_THAT(parsed, IsOk());
    EXPECT_EQ(*parsed, e);
  }
  EXPECT_THAT(ParseEviction("fifo"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "--memory-eviction must be belady or lru, got 'fifo'"));
}

}  // namespace
}  // namespace mnemo::plan
