// StateSync over a real in-process node-state store: which of several
// workers' states of one node wins when they applied the same latest event
// (the version tie rule of memory::StateVersions).
#include "trainer/runtime/state_sync.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "memstore/node_state_store.h"
#include "trainer/memory/node_memory.h"
#include "util/status_matchers.h"

namespace mnemo::runtime {
namespace {

constexpr int64_t kNodes = 4;
constexpr int64_t kNode = 1;     // the node every worker pushes
constexpr int64_t kEvent = 5;    // its latest event on every worker
constexpr int kOwner = 1;        // the rank that owns kNode
constexpr int64_t kEvents = 10;  // events in the log

memory::RecordLayout Layout() {
  memory::RecordLayout layout;
  layout.memory_dim = 2;
  layout.mail_dim = 2;
  return layout;
}

// One worker: its node memory, with kNode advanced to kEvent and a memory
// that says which rank computed it.
struct Worker {
  explicit Worker(int rank) : rank(rank) {
    state.Reset(Layout(), kNodes);
    state.memory[kNode].fill_(static_cast<float>(rank + 1));
    state.last_event[kNode] = kEvent;
    state.last_update[kNode] = 3.0;
    state.mail_time[kNode] = 3.0;
  }
  int rank;
  memory::NodeMemory state;
  CommStats comm;
};

// Pushes kNode from every worker, in `order`, into a fresh store; returns
// the rank whose state the store kept.
int Winner(std::vector<std::unique_ptr<Worker>>& workers,
           const std::vector<int>& order, const std::vector<int>& trainers) {
  memstore::NodeStateStoreOptions so;
  so.dim = static_cast<int>(Layout().RecordFloats());
  auto store = memstore::Open(so);
  EXPECT_THAT(store, IsOk());
  const memory::StateVersions versions{kEvents, 1};
  for (int r : order) {
    Worker& w = *workers[r];
    StateSync sync(
        store->get(), &w.state,
        [r](int64_t u) { return u == kNode && r == kOwner; }, w.rank, &w.comm);
    sync.ClearTrained();
    for (int t : trainers) {
      if (t == r) sync.MarkTrained({kEvent - 1, kEvent}, {0, 1});
    }
    EXPECT_THAT(sync.Push({kNode}, versions), IsOk());
  }
  memory::NodeMemory pulled;
  pulled.Reset(Layout(), kNodes);
  CommStats comm;
  StateSync reader(
      store->get(), &pulled, [](int64_t) { return false; }, 9, &comm);
  EXPECT_THAT(reader.Pull({kNode}, versions), IsOk());
  EXPECT_EQ(pulled.last_event[kNode], kEvent);
  return static_cast<int>(pulled.memory[kNode][0].item<float>()) - 1;
}

std::vector<std::unique_ptr<Worker>> Workers(int n) {
  std::vector<std::unique_ptr<Worker>> w;
  for (int r = 0; r < n; ++r) w.push_back(std::make_unique<Worker>(r));
  return w;
}

TEST(StateSyncTest, TheWorkerThatTrainedTheLatestEventWinsTheTie) {
  // Rank 0 trained event 5 (not owning the node); the owner (1) and rank 2
  // replayed it. Rank 0's state wins in every push order.
  auto w = Workers(3);
  for (const std::vector<int>& order :
       {std::vector<int>{0, 1, 2}, {2, 1, 0}, {1, 0, 2}, {2, 0, 1}}) {
    EXPECT_EQ(Winner(w, order, /*trainers=*/{0}), 0);
  }
}

TEST(StateSyncTest, BetweenNonOwnersTheTrainerWinsNotTheHigherRank) {
  // Ranks 0 and 2 do not own the node; 0 trained the event, 2 replayed it.
  auto w = Workers(3);
  EXPECT_EQ(Winner(w, {0, 2}, {0}), 0);
  EXPECT_EQ(Winner(w, {2, 0}, {0}), 0);
}

TEST(StateSyncTest, WithoutATrainerTheOwnerWinsThenTheHigherRank) {
  auto w = Workers(3);
  EXPECT_EQ(Winner(w, {0, 1, 2}, {}), kOwner);
  EXPECT_EQ(Winner(w, {2, 1, 0}, {}), kOwner);
  EXPECT_EQ(Winner(w, {0, 2}, {}), 2);
}

TEST(StateSyncTest, MarksLastOneEpoch) {
  // A mark cleared at the epoch's start no longer wins: the owner does.
  auto w = Workers(2);
  memstore::NodeStateStoreOptions so;
  so.dim = static_cast<int>(Layout().RecordFloats());
  auto store = memstore::Open(so);
  ASSERT_THAT(store, IsOk());
  const memory::StateVersions versions{kEvents, 1};
  StateSync s0(
      store->get(), &w[0]->state, [](int64_t) { return false; }, 0,
      &w[0]->comm);
  s0.MarkTrained({kEvent}, {1});
  EXPECT_TRUE(s0.trained(kEvent));
  EXPECT_FALSE(s0.trained(kEvent - 1));
  s0.ClearTrained();
  EXPECT_FALSE(s0.trained(kEvent));
  ASSERT_THAT(s0.Push({kNode}, versions), IsOk());
  StateSync s1(
      store->get(), &w[1]->state, [](int64_t) { return true; }, 1, &w[1]->comm);
  ASSERT_THAT(s1.Push({kNode}, versions), IsOk());
  memory::NodeMemory pulled;
  pulled.Reset(Layout(), kNodes);
  CommStats comm;
  StateSync reader(
      store->get(), &pulled, [](int64_t) { return false; }, 9, &comm);
  ASSERT_THAT(reader.Pull({kNode}, versions), IsOk());
  EXPECT_EQ(pulled.memory[kNode][0].item<float>(), 2.0f);  // rank 1's
}

TEST(StateSyncTest, VersionsOrderEventsFirst) {
  // A later event wins over any tie bits of an earlier one.
  const memory::StateVersions v{kEvents, 2};
  EXPECT_GT(v.Of(4, false, false), v.Of(3, true, true));
  EXPECT_GT(v.Of(0, false, false),
            (memory::StateVersions{kEvents, 1}).Of(kEvents - 1, true, true));
  EXPECT_EQ(v.LastEvent(v.Of(7, true, false)), 7);
  EXPECT_EQ(v.LastEvent(v.Of(7, false, true)), 7);
  EXPECT_EQ(v.LastEvent(0), -1);
  EXPECT_EQ(v.LastEvent((memory::StateVersions{kEvents, 1}).Of(7, true, true)),
            -1);
}

}  // namespace
}  // namespace mnemo::runtime
