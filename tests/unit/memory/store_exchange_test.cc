// StoreExchange over a real in-process node-state store: which of several
// workers' states of one node wins when they applied the same latest event
// (the version tie rule of StateVersions).
#include "trainer/memory/store_exchange.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "memstore/node_state_store.h"
#include "trainer/memory/node_memory.h"
#include "trainer/memory/node_memory_test_peer.h"
#include "trainer/plan/working_set.h"
#include "util/status_matchers.h"

namespace mnemo::memory {
namespace {

// What an exchange counts into.
struct Counters {
  StoreTraffic store;
  WorkingSetStats working_set;
};

constexpr int64_t kNodes = 4;
constexpr int64_t kNode = 1;     // the node every worker pushes
constexpr int64_t kEvent = 5;    // its latest event on every worker
constexpr int kOwner = 1;        // the rank that owns kNode
constexpr int64_t kEvents = 10;  // events in the log

RecordLayout Layout() {
  RecordLayout layout;
  layout.memory_dim = 2;
  layout.mail_dim = 2;
  return layout;
}

// One worker: its node memory, with kNode advanced to kEvent and a memory
// that says which rank computed it.
struct Worker {
  explicit Worker(int rank) : rank(rank) {
    state.Reset(Layout(), kNodes);
    state.memory()[kNode].fill_(static_cast<float>(rank + 1));
    NodeMemoryTestPeer(&state).last_event()[kNode] = kEvent;
    NodeMemoryTestPeer(&state).last_update()[kNode] = 3.0;
    NodeMemoryTestPeer(&state).mail_time()[kNode] = 3.0;
  }
  int rank;
  NodeMemory state;
  Counters comm;
};

// What `store` holds for `nodes`, pulled into a fresh memory of `num_nodes`
// by a worker that owns none of them.
NodeMemory PullFrom(memstore::NodeStateStore* store,
                    const std::vector<int64_t>& nodes,
                    const StateVersions& versions, int64_t num_nodes = kNodes) {
  NodeMemory pulled;
  pulled.Reset(Layout(), num_nodes);
  Counters comm;
  StoreExchange reader(
      store, &pulled, [](int64_t) { return false; }, 9, &comm.store,
      &comm.working_set);
  EXPECT_THAT(reader.Pull(nodes, versions), IsOk());
  return pulled;
}

// Pushes kNode from every worker, in `order`, into a fresh store; returns
// the rank whose state the store kept.
int Winner(std::vector<std::unique_ptr<Worker>>& workers,
           const std::vector<int>& order, const std::vector<int>& trainers) {
  memstore::NodeStateStoreOptions so;
  so.dim = static_cast<int>(Layout().RecordFloats());
  auto store = memstore::Open(so);
  EXPECT_THAT(store, IsOk());
  const StateVersions versions{kEvents, 1};
  for (int r : order) {
    Worker& w = *workers[r];
    StoreExchange sync(
        store->get(), &w.state,
        [r](int64_t u) { return u == kNode && r == kOwner; }, w.rank,
        &w.comm.store, &w.comm.working_set);
    sync.ClearTrained();
    for (int t : trainers) {
      if (t == r) sync.MarkTrained({kEvent - 1, kEvent}, {0, 1});
    }
    EXPECT_THAT(sync.Push({kNode}, versions), IsOk());
  }
  const NodeMemory pulled = PullFrom(store->get(), {kNode}, versions);
  EXPECT_EQ(pulled.last_event()[kNode], kEvent);
  return static_cast<int>(pulled.memory()[kNode][0].item<float>()) - 1;
}

std::vector<std::unique_ptr<Worker>> Workers(int n) {
  std::vector<std::unique_ptr<Worker>> w;
  for (int r = 0; r < n; ++r) w.push_back(std::make_unique<Worker>(r));
  return w;
}

TEST(StoreExchangeTest, TheWorkerThatTrainedTheLatestEventWinsTheTie) {
  // Rank 0 trained event 5 (not owning the node); the owner (1) and rank 2
  // replayed it. Rank 0's state wins in every push order.
  auto w = Workers(3);
  for (const std::vector<int>& order :
       {std::vector<int>{0, 1, 2}, {2, 1, 0}, {1, 0, 2}, {2, 0, 1}}) {
    EXPECT_EQ(Winner(w, order, /*trainers=*/{0}), 0);
  }
}

TEST(StoreExchangeTest, BetweenNonOwnersTheTrainerWinsNotTheHigherRank) {
  // Ranks 0 and 2 do not own the node; 0 trained the event, 2 replayed it.
  auto w = Workers(3);
  EXPECT_EQ(Winner(w, {0, 2}, {0}), 0);
  EXPECT_EQ(Winner(w, {2, 0}, {0}), 0);
}

TEST(StoreExchangeTest, WithoutATrainerTheOwnerWinsThenTheHigherRank) {
  auto w = Workers(3);
  EXPECT_EQ(Winner(w, {0, 1, 2}, {}), kOwner);
  EXPECT_EQ(Winner(w, {2, 1, 0}, {}), kOwner);
  EXPECT_EQ(Winner(w, {0, 2}, {}), 2);
}

TEST(StoreExchangeTest, MarksLastOneEpoch) {
  // A mark cleared at the epoch's start no longer wins: the owner does.
  auto w = Workers(2);
  memstore::NodeStateStoreOptions so;
  so.dim = static_cast<int>(Layout().RecordFloats());
  auto store = memstore::Open(so);
  ASSERT_THAT(store, IsOk());
  const StateVersions versions{kEvents, 1};
  StoreExchange s0(
      store->get(), &w[0]->state, [](int64_t) { return false; }, 0,
      &w[0]->comm.store, &w[0]->comm.working_set);
  s0.MarkTrained({kEvent}, {1});
  EXPECT_TRUE(s0.trained(kEvent));
  EXPECT_FALSE(s0.trained(kEvent - 1));
  s0.ClearTrained();
  EXPECT_FALSE(s0.trained(kEvent));
  ASSERT_THAT(s0.Push({kNode}, versions), IsOk());
  StoreExchange s1(
      store->get(), &w[1]->state, [](int64_t) { return true; }, 1,
      &w[1]->comm.store, &w[1]->comm.working_set);
  ASSERT_THAT(s1.Push({kNode}, versions), IsOk());
  NodeMemory pulled;
  pulled.Reset(Layout(), kNodes);
  Counters comm;
  StoreExchange reader(
      store->get(), &pulled, [](int64_t) { return false; }, 9, &comm.store,
      &comm.working_set);
  ASSERT_THAT(reader.Pull({kNode}, versions), IsOk());
  EXPECT_EQ(pulled.memory()[kNode][0].item<float>(), 2.0f);  // rank 1's
}

TEST(StoreExchangeTest, VersionsOrderEventsFirst) {
  // A later event wins over any tie bits of an earlier one.
  const StateVersions v{kEvents, 2};
  EXPECT_GT(v.Of(4, false, false), v.Of(3, true, true));
  EXPECT_GT(v.Of(0, false, false),
            (StateVersions{kEvents, 1}).Of(kEvents - 1, true, true));
  EXPECT_EQ(v.LastEvent(v.Of(7, true, false)), 7);
  EXPECT_EQ(v.LastEvent(v.Of(7, false, true)), 7);
  EXPECT_EQ(v.LastEvent(0), -1);
  EXPECT_EQ(v.LastEvent((StateVersions{kEvents, 1}).Of(7, true, true)), -1);
}

// An evaluation pass through a bounded working set over a shared store that
// holds every node's state: each batch reads some states (recorded) and
// advances some (as a pass does). Returns what every batch read, in order.
// `capacity` 0: every state held (no working set), the reference.
struct PassRun {
  std::vector<float> seen;
  Counters comm;
};

constexpr int64_t kPassNodes = 64;
constexpr int64_t kPassEvents = 1000;

std::vector<std::vector<int64_t>> PassBatches() {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int64_t> node(0, kPassNodes - 1);
  std::vector<std::vector<int64_t>> batches(40);
  for (auto& b : batches) {
    while (b.size() < 6) {
      const int64_t u = node(rng);
      if (std::find(b.begin(), b.end(), u) == b.end()) b.push_back(u);
    }
  }
  return batches;
}

PassRun RunPass(memstore::NodeStateStore* shared, int64_t capacity,
                int prefetch,
                // A batch's reads as predicted (they may differ from the
                // reads themselves).
                const std::vector<std::vector<int64_t>>& predicted) {
  const auto batches = PassBatches();
  const StateVersions versions{kPassEvents, 1};
  PassRun run;
  NodeMemory state;
  std::unique_ptr<plan::WorkingSetCache> cache;
  std::unique_ptr<memstore::NodeStateStore> spill;
  StoreExchange sync(
      shared, &state, [](int64_t) { return false; }, 0, &run.comm.store,
      &run.comm.working_set);
  plan::ReadPredictor reads;
  reads.num_batches = static_cast<int64_t>(predicted.size());
  reads.reads = [&predicted](int64_t b, std::vector<int64_t>* nodes) {
    nodes->insert(nodes->end(), predicted[b].begin(), predicted[b].end());
  };
  if (capacity > 0) {
    state.ResetCache(Layout(), kPassNodes, capacity);
    cache = std::make_unique<plan::WorkingSetCache>(kPassNodes, capacity,
                                                    plan::Eviction::kBelady);
    memstore::NodeStateStoreOptions so;
    so.dim = static_cast<int>(Layout().RecordFloats());
    auto opened = memstore::Open(so);
    EXPECT_THAT(opened, IsOk());
    spill = std::move(*opened);
    sync.SetWorkingSet(cache.get(), spill.get(), /*pulls_every_read=*/false);
    sync.BeginEvaluation(reads, prefetch);
    sync.Prefetch(0);
  } else {
    state.Reset(Layout(), kPassNodes);
    std::vector<int64_t> all(kPassNodes);
    std::iota(all.begin(), all.end(), 0);
    EXPECT_THAT(sync.Pull(all, versions), IsOk());
  }
  for (size_t b = 0; b < batches.size(); ++b) {
    std::vector<int64_t> nodes = batches[b];
    std::sort(nodes.begin(), nodes.end());
    sync.set_position(static_cast<int64_t>(b));
    EXPECT_THAT(sync.Acquire(nodes, versions), IsOk());
    sync.Prefetch(static_cast<int64_t>(b) + 1);
    for (const int64_t u : batches[b]) {
      const int64_t row = state.Row(u);
      EXPECT_GE(row, 0) << "node " << u << " not held in batch " << b;
      run.seen.push_back(state.memory()[row][0].item<float>());
      run.seen.push_back(static_cast<float>(state.last_event()[row]));
    }
    // The batch advances its first two nodes.
    std::vector<int32_t> changed;
    for (int i = 0; i < 2; ++i) {
      const int64_t u = batches[b][i];
      const int64_t row = state.Row(u);
      state.memory()[row].add_(1.0f);
      NodeMemoryTestPeer(&state).last_event()[row] =
          100 + static_cast<int64_t>(b);
      changed.push_back(static_cast<int32_t>(u));
    }
    sync.MarkChanged(changed);
  }
  return run;
}

TEST(StoreExchangeTest, EvaluationPrefetchReadsWhatAPullAtTheBatchReads) {
  // The shared store holds every node's state (memory u + 1, last event
  // u % 10).
  memstore::NodeStateStoreOptions so;
  so.dim = static_cast<int>(Layout().RecordFloats());
  auto store = memstore::Open(so);
  ASSERT_THAT(store, IsOk());
  {
    NodeMemory full;
    full.Reset(Layout(), kPassNodes);
    std::vector<int64_t> all(kPassNodes);
    for (int64_t u = 0; u < kPassNodes; ++u) {
      all[u] = u;
      full.memory()[u].fill_(static_cast<float>(u + 1));
      NodeMemoryTestPeer(&full).last_event()[u] = u % 10;
      NodeMemoryTestPeer(&full).last_update()[u] = 1.0;
    }
    Counters comm;
    StoreExchange writer(
        store->get(), &full, [](int64_t) { return true; }, 0, &comm.store,
        &comm.working_set);
    ASSERT_THAT(writer.Push(all, {kPassEvents, 1}), IsOk());
  }
  const auto batches = PassBatches();
  const PassRun reference = RunPass(store->get(), 0, 0, batches);
  const PassRun pulled = RunPass(store->get(), 10, 0, batches);
  const PassRun prefetched = RunPass(store->get(), 10, 1, batches);
  EXPECT_EQ(pulled.seen, reference.seen);
  EXPECT_EQ(prefetched.seen, reference.seen);
  // States spill and come back, so the prefetch must leave them out.
  EXPECT_GT(prefetched.comm.working_set.restores, 0);
  EXPECT_EQ(prefetched.comm.working_set.restores,
            pulled.comm.working_set.restores);
  // An exact prediction: every store miss came ahead, none was wasted.
  EXPECT_EQ(pulled.comm.working_set.prefetched, 0);
  EXPECT_GT(prefetched.comm.working_set.prefetched, 0);
  EXPECT_EQ(prefetched.comm.working_set.prefetch_unused, 0);
  EXPECT_EQ(prefetched.comm.working_set.prefetched,
            pulled.comm.store.states_pulled);
  EXPECT_EQ(prefetched.comm.store.states_pulled,
            pulled.comm.store.states_pulled);

  // Several batches ahead: a state coming for an earlier batch is not
  // pulled again for a later one, and a state that is dropped unchanged
  // before a later batch reads it again is pulled again at that batch.
  for (const int depth : {2, 4, 16}) {
    const PassRun deep = RunPass(store->get(), 10, depth, batches);
    EXPECT_EQ(deep.seen, reference.seen) << depth;
    EXPECT_EQ(deep.comm.working_set.restores, pulled.comm.working_set.restores)
        << depth;
    EXPECT_EQ(
        deep.comm.store.states_pulled - deep.comm.working_set.prefetch_unused,
        pulled.comm.store.states_pulled)
        << depth;
    EXPECT_GT(deep.comm.working_set.prefetched, 0) << depth;
  }

  // A prediction that is wrong for some batches (every third one predicts
  // another batch's reads): the misses it left out are pulled at the batch,
  // the states it named in vain are counted, and what batches read is
  // unchanged.
  auto wrong = batches;
  for (size_t b = 0; b < wrong.size(); b += 3) {
    wrong[b] = batches[(b + 5) % batches.size()];
  }
  const PassRun mispredicted = RunPass(store->get(), 10, 1, wrong);
  const PassRun mispredicted_pulled = RunPass(store->get(), 10, 0, wrong);
  EXPECT_EQ(mispredicted.seen, reference.seen);
  EXPECT_GT(mispredicted.comm.working_set.prefetch_unused, 0);
  // Some misses were pulled at their batch.
  EXPECT_GT(mispredicted.comm.store.states_pulled,
            mispredicted.comm.working_set.prefetched);
  // The store misses are those of the same pass without a prefetch; the
  // prefetch only adds the states it named in vain.
  EXPECT_EQ(mispredicted.comm.store.states_pulled -
                mispredicted.comm.working_set.prefetch_unused,
            mispredicted_pulled.comm.store.states_pulled);
}

// A push whose rows cannot be read back (on a GPU, a copy that failed with
// the batch's kernels) is an error naming it, not an exception on the
// pushing thread, and the store keeps what it held.
TEST(StoreExchangeTest, APushWhoseRowsFailIsAnError) {
  memstore::NodeStateStoreOptions so;
  so.dim = static_cast<int>(Layout().RecordFloats());
  auto store = memstore::Open(so);
  ASSERT_THAT(store, IsOk());
  const StateVersions versions{kEvents, 1};
  std::vector<std::unique_ptr<Worker>> workers;
  workers.push_back(std::make_unique<Worker>(0));
  Worker& w = *workers[0];
  StoreExchange sync(
      store->get(), &w.state, [](int64_t) { return true; }, 0, &w.comm.store,
      &w.comm.working_set);
  ASSERT_THAT(sync.Push({kNode}, versions), IsOk());  // memory 1
  w.state.memory()[kNode].fill_(7.0f);
  NodeMemoryTestPeer(&w.state).last_event()[kNode] = kEvent + 1;
  absl::Status status;
  PackedStates packed =
      sync.Pack({kNode}, versions, &status, /*rows_later=*/true);
  ASSERT_THAT(status, IsOk());
  ASSERT_EQ(packed.pending.size(), 1u);
  packed.pending[0].read = []() -> torch::Tensor {
    throw std::runtime_error("CUDA error: an illegal memory access");
  };
  const absl::Status pushed = sync.PushPacked(&packed);
  EXPECT_EQ(pushed.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(pushed.message()),
              ::testing::HasSubstr("copying them from the device failed"));
  EXPECT_THAT(std::string(pushed.message()),
              ::testing::HasSubstr("illegal memory access"));
  const NodeMemory pulled = PullFrom(store->get(), {kNode}, versions);
  EXPECT_EQ(pulled.last_event()[kNode], kEvent);
  EXPECT_EQ(pulled.memory()[kNode][0].item<float>(), 1.0f);
}

// A push packed with its rows left for later (what a push started beside
// the optimizer step does) sends the states as they were when packed: the
// memory changing afterwards (a later kernel, the next batch's pull) does
// not reach it. With a bounded working set Pack makes the states held a
// page (the capacity) at a time, each page with rows of its own, and every
// record gets its own node's rows.
TEST(StoreExchangeTest, PackWithRowsLaterPushesTheStatesAsPacked) {
  const StateVersions versions{kPassEvents, 1};
  std::vector<int64_t> nodes;
  for (int64_t u = 3; u < kPassNodes; u += 5) nodes.push_back(u);  // 13
  for (const int64_t capacity : {int64_t{0}, int64_t{5}}) {
    SCOPED_TRACE(capacity);
    memstore::NodeStateStoreOptions so;
    so.dim = static_cast<int>(Layout().RecordFloats());
    auto store = memstore::Open(so);
    ASSERT_THAT(store, IsOk());
    auto spill = memstore::Open(so);
    ASSERT_THAT(spill, IsOk());
    NodeMemory state;
    Counters comm;
    StoreExchange sync(
        store->get(), &state, [](int64_t) { return true; }, 0, &comm.store,
        &comm.working_set);
    std::unique_ptr<plan::WorkingSetCache> cache;
    if (capacity > 0) {
      state.ResetCache(Layout(), kPassNodes, capacity);
      cache = std::make_unique<plan::WorkingSetCache>(kPassNodes, capacity,
                                                      plan::Eviction::kLru);
      sync.SetWorkingSet(cache.get(), spill->get(),
                         /*pulls_every_read=*/false);
      sync.BeginEpoch({});
    } else {
      state.Reset(Layout(), kPassNodes);
    }
    // Each node advanced (memory u + 1, mail -(u + 1), latest event u), a
    // page at a time: a bounded memory spills the pages it drops.
    for (size_t i = 0; i < nodes.size(); i += 5) {
      const std::vector<int64_t> page(
          nodes.begin() + i, nodes.begin() + std::min(i + 5, nodes.size()));
      if (capacity > 0) {
        ASSERT_THAT(sync.Acquire(page, versions), IsOk());
      }
      std::vector<int32_t> changed;
      for (const int64_t u : page) {
        const int64_t row = state.Row(u);
        state.memory()[row].fill_(static_cast<float>(u + 1));
        state.mail()[row].fill_(-static_cast<float>(u + 1));
        NodeMemoryTestPeer(&state).last_event()[row] = u;
        NodeMemoryTestPeer(&state).last_update()[row] = 0.5 * u;
        NodeMemoryTestPeer(&state).mail_time()[row] = 1.0 * u;
        NodeMemoryTestPeer(&state).has_mail()[row] = 1;
        changed.push_back(static_cast<int32_t>(u));
      }
      sync.MarkChanged(changed);
    }
    absl::Status status;
    PackedStates packed =
        sync.Pack(nodes, versions, &status, /*rows_later=*/true);
    ASSERT_THAT(status, IsOk());
    EXPECT_EQ(packed.pending.size(), capacity > 0 ? 3u : 1u);
    // What the memory holds next is not what was packed.
    state.memory().add_(100.0f);
    state.mail().add_(100.0f);
    ASSERT_THAT(sync.PushPacked(&packed), IsOk());
    EXPECT_TRUE(packed.pending.empty());

    const NodeMemory pulled =
        PullFrom(store->get(), nodes, versions, kPassNodes);
    for (const int64_t u : nodes) {
      SCOPED_TRACE(u);
      EXPECT_TRUE(torch::equal(
          pulled.memory()[u],
          torch::full({Layout().memory_dim}, static_cast<float>(u + 1))));
      EXPECT_TRUE(torch::equal(
          pulled.mail()[u],
          torch::full({Layout().MailboxFloats()}, -static_cast<float>(u + 1))));
      EXPECT_EQ(pulled.last_event()[u], u);
      EXPECT_EQ(pulled.last_update()[u], 0.5 * u);
      EXPECT_EQ(pulled.mail_time()[u], 1.0 * u);
    }
  }
}

// A push on a thread of its own (StartPush) is waited for through its
// PushWork: the states it packed reach the store, it counts into its own
// traffic (the caller places it), and what runs after the push on its
// thread decides the work's status.
TEST(StoreExchangeTest, APushWorkIsWaitedForAndCountsItsOwnTraffic) {
  memstore::NodeStateStoreOptions so;
  so.dim = static_cast<int>(Layout().RecordFloats());
  auto store = memstore::Open(so);
  ASSERT_THAT(store, IsOk());
  const StateVersions versions{kEvents, 1};
  Worker w(0);
  StoreExchange sync(
      store->get(), &w.state, [](int64_t) { return true; }, 0, &w.comm.store,
      &w.comm.working_set);
  PushWork none;
  EXPECT_FALSE(none.pending());
  EXPECT_TRUE(none.Done());
  EXPECT_THAT(none.Wait(), IsOk());

  absl::Status status;
  PushWork work = sync.StartPush(sync.Pack({kNode}, versions, &status));
  ASSERT_THAT(status, IsOk());
  EXPECT_TRUE(work.pending());
  EXPECT_THAT(work.Wait(), IsOk());
  EXPECT_FALSE(work.pending());
  EXPECT_TRUE(work.Done());
  EXPECT_EQ(work.traffic().rpcs, 1);
  EXPECT_EQ(work.traffic().states_pushed, 1);
  EXPECT_EQ(work.traffic().bytes_pushed,
            Layout().RecordFloats() * static_cast<int64_t>(sizeof(float)));
  EXPECT_EQ(w.comm.store.states_pushed, 0);  // the exchange's own: untouched
  const NodeMemory pulled = PullFrom(store->get(), {kNode}, versions);
  EXPECT_EQ(pulled.last_event()[kNode], kEvent);
  EXPECT_EQ(pulled.memory()[kNode][0].item<float>(), 1.0f);

  absl::Status seen = absl::UnknownError("not run");
  PushWork then = sync.StartPush(
      sync.Pack({kNode}, versions, &status), [&seen](absl::Status pushed) {
        seen = pushed;
        return absl::UnavailableError("the barrier after the push failed");
      });
  EXPECT_EQ(then.Wait().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(seen, IsOk());
  {
    // Destroyed in flight: it waits for the push first.
    PushWork dropped = sync.StartPush(sync.Pack({kNode}, versions, &status));
  }
  EXPECT_EQ(PullFrom(store->get(), {kNode}, versions).last_event()[kNode],
            kEvent);
}

// A serving process's room for new nodes: the rows it had keep their
// states, the added ones are reset.
TEST(NodeMemoryTest, GrowKeepsTheRowsAndResetsTheNewOnes) {
  RecordLayout layout = Layout();
  layout.mailbox_slots = 3;
  NodeMemory state;
  state.Reset(layout, kNodes);
  state.memory()[kNode].fill_(2.0f);
  state.mail()[kNode].fill_(3.0f);
  NodeMemoryTestPeer(&state).last_event()[kNode] = kEvent;
  NodeMemoryTestPeer(&state).last_update()[kNode] = 4.0;
  state.Grow(kNodes + 3);
  ASSERT_EQ(state.num_rows(), kNodes + 3);
  EXPECT_EQ(state.memory().size(0), kNodes + 3);
  EXPECT_EQ(state.mail().size(0), kNodes + 3);
  EXPECT_EQ(state.slot_time().size(), (kNodes + 3) * 3);
  EXPECT_EQ(state.mails_received().size(), kNodes + 3);
  EXPECT_TRUE(state.memory()[kNode].eq(2.0f).all().item<bool>());
  EXPECT_TRUE(state.mail()[kNode].eq(3.0f).all().item<bool>());
  EXPECT_EQ(state.last_event()[kNode], kEvent);
  EXPECT_EQ(state.last_update()[kNode], 4.0);
  for (int64_t r = kNodes; r < kNodes + 3; ++r) {
    EXPECT_TRUE(state.IsReset(r)) << r;
    EXPECT_TRUE(state.memory()[r].eq(0.0f).all().item<bool>()) << r;
  }
  state.Grow(2);  // never shrinks
  EXPECT_EQ(state.num_rows(), kNodes + 3);
}

}  // namespace
}  // namespace mnemo::memory
