#include "tests/unit/memstore/store_contract.h"

#include <gmock/gmock.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <thread>
#include <vector>

#include "util/status_matchers.h"

namespace mnemo::memstore::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::IsEmpty;

constexpr int kDim = 8;

// The state a test pushes for `id` at time `t` by `writer`.
std::vector<float> StateOf(int64_t id, double t, int32_t writer = 0,
                           int dim = kDim) {
  std::vector<float> s(dim);
  for (int k = 0; k < dim; ++k)
    s[k] = static_cast<float>(id * 1000 + t * 10 + writer) + 0.25f * k;
  return s;
}

struct Batch {
  std::vector<int64_t> ids;
  std::vector<float> states;
  std::vector<double> times;
  int32_t writer = 0;
  void Add(int64_t id, double t, int dim = kDim) {
    ids.push_back(id);
    times.push_back(t);
    auto s = StateOf(id, t, writer, dim);
    states.insert(states.end(), s.begin(), s.end());
  }
};

absl::Status PushBatch(NodeStateStore& store, const Batch& b) {
  return store.Push(b.ids, b.states, b.times, b.writer);
}

absl::Status PushOne(NodeStateStore& store, int64_t id, double t,
                     int32_t writer = 0) {
  Batch b;
  b.writer = writer;
  b.Add(id, t, store.dim());
  return PushBatch(store, b);
}

PulledStates MustPull(NodeStateStore& store, std::vector<int64_t> ids) {
  PulledStates out;
  EXPECT_THAT(store.Pull(ids, &out), IsOk());
  return out;
}

std::vector<float> Slice(const PulledStates& p, int i, int dim = kDim) {
  return std::vector<float>(p.states.begin() + i * dim,
                            p.states.begin() + (i + 1) * dim);
}

}  // namespace

std::unique_ptr<NodeStateStore> StoreContractTest::NewStore(int dim) {
  auto store = GetParam().factory(dim);
  EXPECT_THAT(store, IsOk());
  if (!store.ok()) return nullptr;
  return *std::move(store);
}

#define NEW_STORE(var, d)  \
  auto var = NewStore(d);  \
  ASSERT_NE(var, nullptr); \
  ASSERT_EQ(var->dim(), (d))

TEST_P(StoreContractTest, UnknownIdsReadZero) {
  NEW_STORE(store, kDim);
  PulledStates p = MustPull(*store, {5, 0, 123456789012});
  EXPECT_THAT(p.states, ElementsAreArray(std::vector<float>(3 * kDim, 0.f)));
  EXPECT_THAT(p.last_update, ElementsAre(0, 0, 0));
  EXPECT_THAT(p.version, ElementsAre(0, 0, 0));
  PulledStates empty = MustPull(*store, {});
  EXPECT_THAT(empty.states, IsEmpty());
}

TEST_P(StoreContractTest, PushThenPullRoundTrips) {
  NEW_STORE(store, kDim);
  Batch b;
  b.writer = 3;
  for (int64_t id : {int64_t{7}, int64_t{1}, int64_t{1} << 40, int64_t{0}})
    b.Add(id, 1.5 + id % 5);
  ASSERT_THAT(PushBatch(*store, b), IsOk());
  PulledStates p = MustPull(*store, {0, 7, 1LL << 40, 2, 1, 7});
  EXPECT_EQ(Slice(p, 0), StateOf(0, 1.5, 3));
  EXPECT_EQ(Slice(p, 1), StateOf(7, 1.5 + 2, 3));
  EXPECT_EQ(Slice(p, 2), StateOf(1LL << 40, 1.5 + (1LL << 40) % 5, 3));
  EXPECT_EQ(Slice(p, 3), std::vector<float>(kDim, 0.f));
  EXPECT_EQ(Slice(p, 4), StateOf(1, 2.5, 3));
  EXPECT_EQ(Slice(p, 5), StateOf(7, 3.5, 3));
  EXPECT_THAT(p.last_update,
              ElementsAre(1.5, 3.5, 1.5 + (1LL << 40) % 5, 0, 2.5, 3.5));
  EXPECT_THAT(p.version, ElementsAre(1, 1, 1, 0, 1, 1));
}

TEST_P(StoreContractTest, OlderPushIsIgnored) {
  NEW_STORE(store, kDim);
  ASSERT_THAT(PushOne(*store, 4, 10.0), IsOk());
  ASSERT_THAT(PushOne(*store, 4, 9.0, /*writer=*/7), IsOk());
  PulledStates p = MustPull(*store, {4});
  EXPECT_EQ(Slice(p, 0), StateOf(4, 10.0));
  EXPECT_THAT(p.last_update, ElementsAre(10.0));
  EXPECT_THAT(p.version, ElementsAre(1));
  ASSERT_THAT(PushOne(*store, 4, 11.0), IsOk());
  p = MustPull(*store, {4});
  EXPECT_EQ(Slice(p, 0), StateOf(4, 11.0));
  EXPECT_THAT(p.version, ElementsAre(2));
}

TEST_P(StoreContractTest, TiesGoToTheHigherWriter) {
  NEW_STORE(store, kDim);
  ASSERT_THAT(PushOne(*store, 4, 10.0, /*writer=*/2), IsOk());
  ASSERT_THAT(PushOne(*store, 4, 10.0, /*writer=*/1), IsOk());
  PulledStates p = MustPull(*store, {4});
  EXPECT_EQ(Slice(p, 0), StateOf(4, 10.0, 2));
  EXPECT_THAT(p.version, ElementsAre(1));
  ASSERT_THAT(PushOne(*store, 4, 10.0, /*writer=*/5), IsOk());
  auto view = store->Get(4);
  ASSERT_THAT(view, IsOk());
  EXPECT_EQ(view->writer, 5);
  EXPECT_EQ(view->version, 2u);
  EXPECT_EQ(view->state, StateOf(4, 10.0, 5));
}

TEST_P(StoreContractTest, RePushIsIdempotent) {
  NEW_STORE(store, kDim);
  Batch b;
  b.writer = 1;
  for (int64_t id = 0; id < 20; ++id) b.Add(id, 3.0 + id);
  ASSERT_THAT(PushBatch(*store, b), IsOk());
  PulledStates first = MustPull(*store, b.ids);
  ASSERT_THAT(PushBatch(*store, b), IsOk());
  ASSERT_THAT(PushBatch(*store, b), IsOk());
  PulledStates again = MustPull(*store, b.ids);
  EXPECT_EQ(first.states, again.states);
  EXPECT_EQ(first.last_update, again.last_update);
  EXPECT_EQ(first.version, again.version);
  auto stats = store->Stats();
  ASSERT_THAT(stats, IsOk());
  EXPECT_EQ(stats->states_accepted, 20);
}

TEST_P(StoreContractTest, OrderOfPushesDoesNotMatter) {
  // 40 pushes over 10 ids with random times and writers, applied in two
  // different orders to two stores.
  std::mt19937 rng(42);
  std::vector<Batch> pushes;
  for (int i = 0; i < 40; ++i) {
    Batch b;
    b.writer = static_cast<int32_t>(rng() % 3);
    b.Add(rng() % 10, static_cast<double>(rng() % 6));
    if (i % 3 == 0) b.Add(rng() % 10, static_cast<double>(rng() % 6));
    pushes.push_back(b);
  }
  NEW_STORE(a, kDim);
  NEW_STORE(b, kDim);
  for (const Batch& p : pushes) ASSERT_THAT(PushBatch(*a, p), IsOk());
  std::shuffle(pushes.begin(), pushes.end(), rng);
  for (const Batch& p : pushes) ASSERT_THAT(PushBatch(*b, p), IsOk());
  std::vector<int64_t> ids = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  PulledStates pa = MustPull(*a, ids), pb = MustPull(*b, ids);
  EXPECT_EQ(pa.states, pb.states);
  EXPECT_EQ(pa.last_update, pb.last_update);
  auto la = a->ListRecent(100), lb = b->ListRecent(100);
  ASSERT_THAT(la, IsOk());
  ASSERT_THAT(lb, IsOk());
  ASSERT_EQ(la->size(), lb->size());
  for (size_t i = 0; i < la->size(); ++i) {
    EXPECT_EQ((*la)[i].id, (*lb)[i].id);
    EXPECT_EQ((*la)[i].writer, (*lb)[i].writer);
    EXPECT_EQ((*la)[i].state, (*lb)[i].state);
  }
}

TEST_P(StoreContractTest, VersionsCountAcceptedUpdates) {
  NEW_STORE(store, kDim);
  for (int t = 1; t <= 5; ++t) ASSERT_THAT(PushOne(*store, 9, t), IsOk());
  ASSERT_THAT(PushOne(*store, 9, 2.0), IsOk());  // ignored
  EXPECT_THAT(MustPull(*store, {9}).version, ElementsAre(5));
  EXPECT_THAT(MustPull(*store, {8}).version, ElementsAre(0));
}

TEST_P(StoreContractTest, DuplicatesInOnePushCompeteInOrder) {
  NEW_STORE(store, kDim);
  Batch b;
  b.Add(1, 2.0);
  b.Add(1, 1.0);  // older: ignored
  b.Add(2, 1.0);
  b.Add(2, 3.0);  // newer: wins, second accepted update
  ASSERT_THAT(PushBatch(*store, b), IsOk());
  PulledStates p = MustPull(*store, {1, 2});
  EXPECT_EQ(Slice(p, 0), StateOf(1, 2.0));
  EXPECT_EQ(Slice(p, 1), StateOf(2, 3.0));
  EXPECT_THAT(p.version, ElementsAre(1, 2));
}

TEST_P(StoreContractTest, RejectedPushesChangeNothing) {
  NEW_STORE(store, kDim);
  Batch good;
  for (int64_t id = 0; id < 6; ++id) good.Add(id, 1.0);
  ASSERT_THAT(PushBatch(*store, good), IsOk());
  const std::vector<int64_t> ids = {0, 1, 2, 3, 4, 5, 6};
  PulledStates before = MustPull(*store, ids);

  Batch b;
  for (int64_t id = 0; id < 7; ++id) b.Add(id, 5.0);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  auto expect_invalid = [&](Batch bad, const std::string& what) {
    EXPECT_THAT(PushBatch(*store, bad),
                StatusIs(absl::StatusCode::kInvalidArgument, ""))
        << what;
  };
  {
    Batch bad = b;
    bad.states.pop_back();
    expect_invalid(bad, "short states");
    bad = b;
    bad.states.push_back(1.f);
    expect_invalid(bad, "long states");
    bad = b;
    bad.times.pop_back();
    expect_invalid(bad, "short times");
    bad = b;
    bad.states[3 * kDim + 2] = static_cast<float>(nan);
    expect_invalid(bad, "NaN state");
    bad = b;
    bad.states.back() = static_cast<float>(-inf);
    expect_invalid(bad, "inf state");
    bad = b;
    bad.times[6] = nan;
    expect_invalid(bad, "NaN time");
    bad = b;
    bad.times[0] = inf;
    expect_invalid(bad, "inf time");
    bad = b;
    bad.ids[4] = -3;
    expect_invalid(bad, "negative id");
    bad = b;
    bad.writer = -1;
    expect_invalid(bad, "negative writer");
  }
  PulledStates after = MustPull(*store, ids);
  EXPECT_EQ(before.states, after.states);
  EXPECT_EQ(before.last_update, after.last_update);
  EXPECT_EQ(before.version, after.version);
  EXPECT_THAT(store->Get(6), StatusIs(absl::StatusCode::kNotFound, ""));
  auto stats = store->Stats();
  ASSERT_THAT(stats, IsOk());
  EXPECT_EQ(stats->states_accepted, 6);
  EXPECT_EQ(stats->hot_states + stats->cold_states, 6);
}

TEST_P(StoreContractTest, PullRejectsNegativeIds) {
  NEW_STORE(store, kDim);
  PulledStates out;
  EXPECT_THAT(store->Pull(std::vector<int64_t>{1, -1}, &out),
              StatusIs(absl::StatusCode::kInvalidArgument, ""));
}

TEST_P(StoreContractTest, GetReturnsNotFoundForNeverUpdated) {
  NEW_STORE(store, kDim);
  EXPECT_THAT(store->Get(3), StatusIs(absl::StatusCode::kNotFound, ""));
  ASSERT_THAT(PushOne(*store, 3, 4.0, /*writer=*/2), IsOk());
  auto v = store->Get(3);
  ASSERT_THAT(v, IsOk());
  EXPECT_EQ(v->id, 3);
  EXPECT_EQ(v->state, StateOf(3, 4.0, 2));
  EXPECT_EQ(v->last_update, 4.0);
  EXPECT_EQ(v->version, 1u);
  EXPECT_EQ(v->writer, 2);
  EXPECT_THAT(store->Get(4), StatusIs(absl::StatusCode::kNotFound, ""));
}

TEST_P(StoreContractTest, ListRecentIsByLastUpdateThenId) {
  NEW_STORE(store, kDim);
  EXPECT_THAT(store->ListRecent(5), IsOk());
  EXPECT_THAT(*store->ListRecent(5), IsEmpty());
  // Pushed out of time order, with a tie (ids 4 and 2 at t=7).
  const std::vector<std::pair<int64_t, double>> pushes = {
      {1, 5.0}, {4, 7.0}, {3, 1.0}, {2, 7.0}, {5, 6.0}, {6, 0.5}};
  for (auto [id, t] : pushes) ASSERT_THAT(PushOne(*store, id, t), IsOk());
  auto top = store->ListRecent(4);
  ASSERT_THAT(top, IsOk());
  std::vector<int64_t> got;
  for (const auto& v : *top) got.push_back(v.id);
  EXPECT_THAT(got, ElementsAre(2, 4, 5, 1));
  EXPECT_EQ((*top)[0].state, StateOf(2, 7.0));
  EXPECT_EQ((*top)[0].last_update, 7.0);
  auto all = store->ListRecent(100);
  ASSERT_THAT(all, IsOk());
  EXPECT_EQ(all->size(), 6u);
  EXPECT_EQ(all->back().id, 6);
  EXPECT_THAT(*store->ListRecent(0), IsEmpty());
  EXPECT_THAT(store->ListRecent(-1),
              StatusIs(absl::StatusCode::kInvalidArgument, ""));
}

TEST_P(StoreContractTest, StatsCountCallsAndStates) {
  NEW_STORE(store, kDim);
  Batch b;
  for (int64_t id = 0; id < 10; ++id) b.Add(id, 2.0);
  ASSERT_THAT(PushBatch(*store, b), IsOk());
  ASSERT_THAT(PushOne(*store, 3, 1.0), IsOk());  // loses
  ASSERT_THAT(PushOne(*store, 3, 3.0), IsOk());  // wins
  MustPull(*store, {0, 1, 2, 50});
  MustPull(*store, {3});
  auto s = store->Stats();
  ASSERT_THAT(s, IsOk());
  EXPECT_EQ(s->dim, kDim);
  EXPECT_EQ(s->hot_states + s->cold_states, 10);
  EXPECT_EQ(s->pushes, 3);
  EXPECT_EQ(s->states_pushed, 12);
  EXPECT_EQ(s->states_accepted, 11);
  EXPECT_EQ(s->pulls, 2);
  EXPECT_EQ(s->states_pulled, 5);
  EXPECT_EQ(s->hot_hits + s->cold_hits, 4);
  EXPECT_EQ(s->misses, 1);
  EXPECT_FALSE(s->write_policy.empty());
  if (s->hot_capacity_bytes > 0) {
    EXPECT_LE(s->hot_bytes,
              std::max<int64_t>(s->hot_capacity_bytes, kDim * sizeof(float)));
  }
  EXPECT_EQ(s->hot_bytes, s->hot_states * kDim * int64_t{sizeof(float)});
}

TEST_P(StoreContractTest, ManyStatesSurviveTiering) {
  // More states than the tiny-capacity backends hold hot: they spill and
  // must read back exactly, and LWW must still hold against cold states.
  NEW_STORE(store, kDim);
  std::map<int64_t, double> latest;
  for (int round = 0; round < 3; ++round) {
    Batch b;
    b.writer = round;
    for (int64_t id = round; id < 300; id += 3 - round) {
      b.Add(id * 11, 10.0 * round + id % 7);
      latest[id * 11] = 10.0 * round + id % 7;
    }
    ASSERT_THAT(PushBatch(*store, b), IsOk());
  }
  // Older than everything: ignored even for cold states.
  Batch old;
  old.writer = 9;
  for (auto [id, t] : latest) old.Add(id, -1.0);
  ASSERT_THAT(PushBatch(*store, old), IsOk());

  std::vector<int64_t> ids;
  for (auto [id, t] : latest) ids.push_back(id);
  std::reverse(ids.begin(), ids.end());
  ids.push_back(ids[5]);  // a duplicate
  for (int pass = 0; pass < 2; ++pass) {
    PulledStates p = MustPull(*store, ids);
    for (size_t i = 0; i < ids.size(); ++i) {
      const double t = latest[ids[i]];
      ASSERT_EQ(p.last_update[i], t) << ids[i];
      const int32_t writer = static_cast<int32_t>(t / 10);
      ASSERT_EQ(Slice(p, static_cast<int>(i)), StateOf(ids[i], t, writer))
          << ids[i];
    }
  }
  auto v = store->Get(ids[0]);
  ASSERT_THAT(v, IsOk());
  EXPECT_EQ(v->last_update, latest[ids[0]]);
  auto s = store->Stats();
  ASSERT_THAT(s, IsOk());
  EXPECT_EQ(s->hot_states + s->cold_states,
            static_cast<int64_t>(latest.size()));
}

TEST_P(StoreContractTest, ConcurrentPushesKeepTheNewest) {
  NEW_STORE(store, kDim);
  constexpr int kThreads = 4, kRounds = 50, kIds = 64;
  std::vector<std::thread> threads;
  for (int w = 0; w < kThreads; ++w) {
    threads.emplace_back([&, w] {
      for (int r = 0; r < kRounds; ++r) {
        Batch b;
        b.writer = w;
        for (int64_t id = 0; id < kIds; ++id) b.Add(id, r);
        EXPECT_THAT(PushBatch(*store, b), IsOk());
        PulledStates out;
        EXPECT_THAT(store->Pull(b.ids, &out), IsOk());
      }
    });
  }
  for (auto& t : threads) t.join();
  std::vector<int64_t> ids(kIds);
  for (int64_t i = 0; i < kIds; ++i) ids[i] = i;
  PulledStates p = MustPull(*store, ids);
  for (int i = 0; i < kIds; ++i) {
    EXPECT_EQ(p.last_update[i], kRounds - 1);
    EXPECT_EQ(Slice(p, i), StateOf(i, kRounds - 1, kThreads - 1));
  }
}

TEST_P(StoreContractTest, WideStates) {
  constexpr int kWide = 172;
  NEW_STORE(store, kWide);
  Batch b;
  for (int64_t id = 0; id < 40; ++id) b.Add(id, 1.0 + id, kWide);
  ASSERT_THAT(PushBatch(*store, b), IsOk());
  PulledStates p = MustPull(*store, {39, 0});
  EXPECT_EQ(Slice(p, 0, kWide), StateOf(39, 40.0, 0, kWide));
  EXPECT_EQ(Slice(p, 1, kWide), StateOf(0, 1.0, 0, kWide));
}

TEST_P(StoreContractTest, CallsAfterCloseFail) {
  NEW_STORE(store, kDim);
  ASSERT_THAT(PushOne(*store, 1, 1.0), IsOk());
  ASSERT_THAT(store->Close(), IsOk());
  PulledStates out;
  EXPECT_THAT(store->Pull(std::vector<int64_t>{1}, &out),
              StatusIs(absl::StatusCode::kFailedPrecondition, ""));
  EXPECT_THAT(PushOne(*store, 1, 2.0),
              StatusIs(absl::StatusCode::kFailedPrecondition, ""));
  EXPECT_THAT(store->Get(1),
              StatusIs(absl::StatusCode::kFailedPrecondition, ""));
  EXPECT_THAT(store->Close(),
              StatusIs(absl::StatusCode::kFailedPrecondition, ""));
}

}  // namespace mnemo::memstore::testing
