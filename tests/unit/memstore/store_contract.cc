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

// The event time the tests store with version `v`: a different number, so
// that a mix-up of the two shows.
double TimeOf(uint64_t v) { return 0.5 * static_cast<double>(v) + 0.25; }

// The state a test pushes for `id` at version `v` by `writer`.
std::vector<float> StateOf(int64_t id, uint64_t v, int32_t writer = 0,
                           int dim = kDim) {
  std::vector<float> s(dim);
  for (int k = 0; k < dim; ++k)
    s[k] = static_cast<float>(id * 1000 + v * 10 + writer) + 0.25f * k;
  return s;
}

struct Batch {
  std::vector<int64_t> ids;
  std::vector<float> states;
  std::vector<uint64_t> versions;
  std::vector<double> times;
  int32_t writer = 0;
  // Adds `id` at version `v` and time TimeOf(v) (or `t`).
  void Add(int64_t id, uint64_t v, int dim = kDim) {
    Add(id, v, TimeOf(v), dim);
  }
  void Add(int64_t id, uint64_t v, double t, int dim = kDim) {
    ids.push_back(id);
    versions.push_back(v);
    times.push_back(t);
    auto s = StateOf(id, v, writer, dim);
    states.insert(states.end(), s.begin(), s.end());
  }
};

absl::Status PushBatch(NodeStateStore& store, const Batch& b) {
  return store.Push(b.ids, b.states, b.versions, b.times, b.writer);
}

absl::Status PushOne(NodeStateStore& store, int64_t id, uint64_t v,
                     int32_t writer = 0) {
  Batch b;
  b.writer = writer;
  b.Add(id, v, store.dim());
  return PushBatch(store, b);
}

// PushOne with an explicit event time.
absl::Status PushAt(NodeStateStore& store, int64_t id, uint64_t v, double t,
                    int32_t writer) {
  Batch b;
  b.writer = writer;
  b.Add(id, v, t, store.dim());
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

uint64_t UpdatesOf(NodeStateStore& store, int64_t id) {
  auto v = store.Get(id);
  EXPECT_THAT(v, IsOk());
  return v.ok() ? v->updates : 0;
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
  EXPECT_THAT(p.version, ElementsAre(0, 0, 0));
  EXPECT_THAT(p.time, ElementsAre(0, 0, 0));
  PulledStates empty = MustPull(*store, {});
  EXPECT_THAT(empty.states, IsEmpty());
}

TEST_P(StoreContractTest, PushThenPullRoundTrips) {
  NEW_STORE(store, kDim);
  Batch b;
  b.writer = 3;
  for (int64_t id : {int64_t{7}, int64_t{1}, int64_t{1} << 40, int64_t{0}})
    b.Add(id, 1 + id % 5);
  ASSERT_THAT(PushBatch(*store, b), IsOk());
  PulledStates p = MustPull(*store, {0, 7, 1LL << 40, 2, 1, 7});
  const uint64_t big = 1 + (1LL << 40) % 5;
  EXPECT_EQ(Slice(p, 0), StateOf(0, 1, 3));
  EXPECT_EQ(Slice(p, 1), StateOf(7, 3, 3));
  EXPECT_EQ(Slice(p, 2), StateOf(1LL << 40, big, 3));
  EXPECT_EQ(Slice(p, 3), std::vector<float>(kDim, 0.f));
  EXPECT_EQ(Slice(p, 4), StateOf(1, 2, 3));
  EXPECT_EQ(Slice(p, 5), StateOf(7, 3, 3));
  EXPECT_THAT(p.version, ElementsAre(1, 3, big, 0, 2, 3));
  EXPECT_THAT(p.time, ElementsAre(TimeOf(1), TimeOf(3), TimeOf(big), 0,
                                  TimeOf(2), TimeOf(3)));
  EXPECT_EQ(UpdatesOf(*store, 7), 1u);
}

TEST_P(StoreContractTest, OlderPushIsIgnored) {
  NEW_STORE(store, kDim);
  ASSERT_THAT(PushOne(*store, 4, 10), IsOk());
  ASSERT_THAT(PushOne(*store, 4, 9, /*writer=*/7), IsOk());
  PulledStates p = MustPull(*store, {4});
  EXPECT_EQ(Slice(p, 0), StateOf(4, 10));
  EXPECT_THAT(p.version, ElementsAre(10));
  EXPECT_THAT(p.time, ElementsAre(TimeOf(10)));
  EXPECT_EQ(UpdatesOf(*store, 4), 1u);
  ASSERT_THAT(PushOne(*store, 4, 11), IsOk());
  p = MustPull(*store, {4});
  EXPECT_EQ(Slice(p, 0), StateOf(4, 11));
  EXPECT_THAT(p.version, ElementsAre(11));
  EXPECT_EQ(UpdatesOf(*store, 4), 2u);
}

TEST_P(StoreContractTest, TiesGoToTheHigherWriter) {
  NEW_STORE(store, kDim);
  ASSERT_THAT(PushOne(*store, 4, 10, /*writer=*/2), IsOk());
  ASSERT_THAT(PushOne(*store, 4, 10, /*writer=*/1), IsOk());
  PulledStates p = MustPull(*store, {4});
  EXPECT_EQ(Slice(p, 0), StateOf(4, 10, 2));
  EXPECT_EQ(UpdatesOf(*store, 4), 1u);
  ASSERT_THAT(PushOne(*store, 4, 10, /*writer=*/5), IsOk());
  auto view = store->Get(4);
  ASSERT_THAT(view, IsOk());
  EXPECT_EQ(view->writer, 5);
  EXPECT_EQ(view->version, 10u);
  EXPECT_EQ(view->updates, 2u);
  EXPECT_EQ(view->state, StateOf(4, 10, 5));
}

// The bug this contract exists for: a node updated again at the same event
// time must take the update, whoever pushes it, as long as the version is
// higher.
TEST_P(StoreContractTest, SameTimeUpdatesWinByVersionForAnyWriter) {
  NEW_STORE(store, kDim);
  constexpr double kTime = 42.0;
  uint64_t v = 0;
  // The same writer, 20 times at one timestamp.
  for (int i = 0; i < 20; ++i) {
    ASSERT_THAT(PushAt(*store, 6, ++v, kTime, /*writer=*/3), IsOk());
    PulledStates p = MustPull(*store, {6});
    ASSERT_EQ(Slice(p, 0), StateOf(6, v, 3)) << "version " << v;
    ASSERT_THAT(p.version, ElementsAre(v));
    ASSERT_THAT(p.time, ElementsAre(kTime));
  }
  // Then a lower writer, 20 more times at the same timestamp.
  for (int i = 0; i < 20; ++i) {
    ASSERT_THAT(PushAt(*store, 6, ++v, kTime, /*writer=*/1), IsOk());
    PulledStates p = MustPull(*store, {6});
    ASSERT_EQ(Slice(p, 0), StateOf(6, v, 1)) << "version " << v;
    ASSERT_THAT(p.version, ElementsAre(v));
  }
  // And in one push: duplicates of one id at one time, rising versions.
  Batch b;
  b.writer = 0;
  for (int i = 0; i < 5; ++i) b.Add(6, ++v, kTime);
  ASSERT_THAT(PushBatch(*store, b), IsOk());
  auto view = store->Get(6);
  ASSERT_THAT(view, IsOk());
  EXPECT_EQ(view->state, StateOf(6, v, 0));
  EXPECT_EQ(view->version, v);
  EXPECT_EQ(view->time, kTime);
  EXPECT_EQ(view->writer, 0);
  EXPECT_EQ(view->updates, 45u);
  auto stats = store->Stats();
  ASSERT_THAT(stats, IsOk());
  EXPECT_EQ(stats->states_accepted, 45);
}

TEST_P(StoreContractTest, EqualVersionGoesToTheHigherWriterWhateverTheTime) {
  NEW_STORE(store, kDim);
  ASSERT_THAT(PushAt(*store, 3, 7, /*t=*/5.0, /*writer=*/2), IsOk());
  // Same version, lower writer, later time: ignored.
  ASSERT_THAT(PushAt(*store, 3, 7, /*t=*/9.0, /*writer=*/1), IsOk());
  auto view = store->Get(3);
  ASSERT_THAT(view, IsOk());
  EXPECT_EQ(view->state, StateOf(3, 7, 2));
  EXPECT_EQ(view->time, 5.0);
  EXPECT_EQ(view->writer, 2);
  EXPECT_EQ(view->updates, 1u);
  // Same version, higher writer, earlier time: wins.
  ASSERT_THAT(PushAt(*store, 3, 7, /*t=*/1.0, /*writer=*/4), IsOk());
  view = store->Get(3);
  ASSERT_THAT(view, IsOk());
  EXPECT_EQ(view->state, StateOf(3, 7, 4));
  EXPECT_EQ(view->version, 7u);
  EXPECT_EQ(view->time, 1.0);
  EXPECT_EQ(view->writer, 4);
  EXPECT_EQ(view->updates, 2u);
  // A lower version at a later time from the highest writer: ignored.
  ASSERT_THAT(PushAt(*store, 3, 6, /*t=*/100.0, /*writer=*/9), IsOk());
  EXPECT_EQ(store->Get(3)->state, StateOf(3, 7, 4));
}

TEST_P(StoreContractTest, RePushIsIdempotent) {
  NEW_STORE(store, kDim);
  Batch b;
  b.writer = 1;
  for (int64_t id = 0; id < 20; ++id) b.Add(id, 3 + id);
  ASSERT_THAT(PushBatch(*store, b), IsOk());
  PulledStates first = MustPull(*store, b.ids);
  ASSERT_THAT(PushBatch(*store, b), IsOk());
  ASSERT_THAT(PushBatch(*store, b), IsOk());
  PulledStates again = MustPull(*store, b.ids);
  EXPECT_EQ(first.states, again.states);
  EXPECT_EQ(first.version, again.version);
  EXPECT_EQ(first.time, again.time);
  EXPECT_EQ(UpdatesOf(*store, 5), 1u);
  auto stats = store->Stats();
  ASSERT_THAT(stats, IsOk());
  EXPECT_EQ(stats->states_accepted, 20);
}

TEST_P(StoreContractTest, OrderOfPushesDoesNotMatter) {
  // 40 pushes over 10 ids with random versions and writers, applied in two
  // different orders to two stores.
  std::mt19937 rng(42);
  std::vector<Batch> pushes;
  for (int i = 0; i < 40; ++i) {
    Batch b;
    b.writer = static_cast<int32_t>(rng() % 3);
    b.Add(rng() % 10, 1 + rng() % 6);
    if (i % 3 == 0) b.Add(rng() % 10, 1 + rng() % 6);
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
  EXPECT_EQ(pa.version, pb.version);
  EXPECT_EQ(pa.time, pb.time);
  auto la = a->ListRecent(100), lb = b->ListRecent(100);
  ASSERT_THAT(la, IsOk());
  ASSERT_THAT(lb, IsOk());
  ASSERT_EQ(la->size(), lb->size());
  for (size_t i = 0; i < la->size(); ++i) {
    EXPECT_EQ((*la)[i].id, (*lb)[i].id);
    EXPECT_EQ((*la)[i].writer, (*lb)[i].writer);
    EXPECT_EQ((*la)[i].version, (*lb)[i].version);
    EXPECT_EQ((*la)[i].state, (*lb)[i].state);
  }
}

TEST_P(StoreContractTest, UpdatesCountAcceptedPushes) {
  NEW_STORE(store, kDim);
  for (uint64_t v = 1; v <= 5; ++v) ASSERT_THAT(PushOne(*store, 9, v), IsOk());
  ASSERT_THAT(PushOne(*store, 9, 2), IsOk());  // ignored
  EXPECT_THAT(MustPull(*store, {9}).version, ElementsAre(5));
  EXPECT_EQ(UpdatesOf(*store, 9), 5u);
  EXPECT_THAT(MustPull(*store, {8}).version, ElementsAre(0));
}

TEST_P(StoreContractTest, DuplicatesInOnePushCompeteInOrder) {
  NEW_STORE(store, kDim);
  Batch b;
  b.Add(1, 2);
  b.Add(1, 1);  // older: ignored
  b.Add(2, 1);
  b.Add(2, 3);  // newer: wins, second accepted update
  ASSERT_THAT(PushBatch(*store, b), IsOk());
  PulledStates p = MustPull(*store, {1, 2});
  EXPECT_EQ(Slice(p, 0), StateOf(1, 2));
  EXPECT_EQ(Slice(p, 1), StateOf(2, 3));
  EXPECT_THAT(p.version, ElementsAre(2, 3));
  EXPECT_EQ(UpdatesOf(*store, 1), 1u);
  EXPECT_EQ(UpdatesOf(*store, 2), 2u);
}

TEST_P(StoreContractTest, RejectedPushesChangeNothing) {
  NEW_STORE(store, kDim);
  Batch good;
  for (int64_t id = 0; id < 6; ++id) good.Add(id, 1);
  ASSERT_THAT(PushBatch(*store, good), IsOk());
  const std::vector<int64_t> ids = {0, 1, 2, 3, 4, 5, 6};
  PulledStates before = MustPull(*store, ids);

  Batch b;
  for (int64_t id = 0; id < 7; ++id) b.Add(id, 5);
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
    bad.versions.pop_back();
    expect_invalid(bad, "short versions");
    bad = b;
    bad.versions.push_back(9);
    expect_invalid(bad, "long versions");
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
  EXPECT_EQ(before.version, after.version);
  EXPECT_EQ(before.time, after.time);
  EXPECT_THAT(store->Get(6), StatusIs(absl::StatusCode::kNotFound, ""));
  auto stats = store->Stats();
  ASSERT_THAT(stats, IsOk());
  EXPECT_EQ(stats->states_accepted, 6);
  EXPECT_EQ(stats->hot_states + stats->cold_states, 6);
}

// Version 0 means "never updated": no push may carry it, and a push that
// does is rejected whole, even where its other states would win.
TEST_P(StoreContractTest, VersionZeroIsRejected) {
  NEW_STORE(store, kDim);
  ASSERT_THAT(PushOne(*store, 1, 3), IsOk());
  const std::vector<int64_t> ids = {1, 2, 3};
  PulledStates before = MustPull(*store, ids);
  for (size_t zero_at : {0, 1, 2}) {
    Batch bad;
    bad.writer = 5;
    bad.Add(1, 8);
    bad.Add(2, 8);
    bad.Add(3, 8);
    bad.versions[zero_at] = 0;
    EXPECT_THAT(PushBatch(*store, bad),
                StatusIs(absl::StatusCode::kInvalidArgument, "version"))
        << "version 0 at " << zero_at;
  }
  EXPECT_THAT(PushOne(*store, 4, 0),
              StatusIs(absl::StatusCode::kInvalidArgument, "version"));
  PulledStates after = MustPull(*store, ids);
  EXPECT_EQ(before.states, after.states);
  EXPECT_EQ(before.version, after.version);
  EXPECT_EQ(before.time, after.time);
  EXPECT_EQ(UpdatesOf(*store, 1), 1u);
  EXPECT_THAT(store->Get(2), StatusIs(absl::StatusCode::kNotFound, ""));
  EXPECT_THAT(store->Get(4), StatusIs(absl::StatusCode::kNotFound, ""));
  auto stats = store->Stats();
  ASSERT_THAT(stats, IsOk());
  EXPECT_EQ(stats->states_accepted, 1);
  EXPECT_EQ(stats->hot_states + stats->cold_states, 1);
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
  ASSERT_THAT(PushOne(*store, 3, 4, /*writer=*/2), IsOk());
  auto v = store->Get(3);
  ASSERT_THAT(v, IsOk());
  EXPECT_EQ(v->id, 3);
  EXPECT_EQ(v->state, StateOf(3, 4, 2));
  EXPECT_EQ(v->version, 4u);
  EXPECT_EQ(v->time, TimeOf(4));
  EXPECT_EQ(v->updates, 1u);
  EXPECT_EQ(v->writer, 2);
  EXPECT_THAT(store->Get(4), StatusIs(absl::StatusCode::kNotFound, ""));
}

TEST_P(StoreContractTest, ListRecentIsByVersionThenId) {
  NEW_STORE(store, kDim);
  EXPECT_THAT(store->ListRecent(5), IsOk());
  EXPECT_THAT(*store->ListRecent(5), IsEmpty());
  // Pushed out of version order, with a tie (ids 4 and 2 at version 14).
  const std::vector<std::pair<int64_t, uint64_t>> pushes = {
      {1, 10}, {4, 14}, {3, 2}, {2, 14}, {5, 12}, {6, 1}};
  for (auto [id, v] : pushes) ASSERT_THAT(PushOne(*store, id, v), IsOk());
  auto top = store->ListRecent(4);
  ASSERT_THAT(top, IsOk());
  std::vector<int64_t> got;
  for (const auto& v : *top) got.push_back(v.id);
  EXPECT_THAT(got, ElementsAre(2, 4, 5, 1));
  EXPECT_EQ((*top)[0].state, StateOf(2, 14));
  EXPECT_EQ((*top)[0].version, 14u);
  EXPECT_EQ((*top)[0].time, TimeOf(14));
  auto all = store->ListRecent(100);
  ASSERT_THAT(all, IsOk());
  EXPECT_EQ(all->size(), 6u);
  EXPECT_EQ(all->back().id, 6);
  EXPECT_THAT(*store->ListRecent(0), IsEmpty());
  EXPECT_THAT(store->ListRecent(-1),
              StatusIs(absl::StatusCode::kInvalidArgument, ""));
}

TEST_P(StoreContractTest, ListRecentOrdersByVersionNotTime) {
  NEW_STORE(store, kDim);
  // Event times that run against the versions (and one repeated time).
  ASSERT_THAT(PushAt(*store, 10, 1, /*t=*/90.0, /*writer=*/0), IsOk());
  ASSERT_THAT(PushAt(*store, 11, 2, /*t=*/80.0, /*writer=*/0), IsOk());
  ASSERT_THAT(PushAt(*store, 12, 3, /*t=*/80.0, /*writer=*/0), IsOk());
  ASSERT_THAT(PushAt(*store, 13, 4, /*t=*/70.0, /*writer=*/1), IsOk());
  // A later update of node 10 at an earlier time makes it the newest.
  ASSERT_THAT(PushAt(*store, 10, 5, /*t=*/60.0, /*writer=*/0), IsOk());
  auto all = store->ListRecent(10);
  ASSERT_THAT(all, IsOk());
  std::vector<int64_t> got;
  std::vector<uint64_t> versions;
  for (const auto& v : *all) {
    got.push_back(v.id);
    versions.push_back(v.version);
  }
  EXPECT_THAT(got, ElementsAre(10, 13, 12, 11));
  EXPECT_THAT(versions, ElementsAre(5, 4, 3, 2));
  EXPECT_EQ((*all)[0].time, 60.0);
  EXPECT_EQ((*all)[0].updates, 2u);
}

TEST_P(StoreContractTest, StatsCountCallsAndStates) {
  NEW_STORE(store, kDim);
  Batch b;
  for (int64_t id = 0; id < 10; ++id) b.Add(id, 2);
  ASSERT_THAT(PushBatch(*store, b), IsOk());
  ASSERT_THAT(PushOne(*store, 3, 1), IsOk());  // loses
  ASSERT_THAT(PushOne(*store, 3, 3), IsOk());  // wins
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
  // must read back exactly, and newest-wins must still hold against cold
  // states.
  NEW_STORE(store, kDim);
  std::map<int64_t, uint64_t> latest;
  for (int round = 0; round < 3; ++round) {
    Batch b;
    b.writer = round;
    for (int64_t id = round; id < 300; id += 3 - round) {
      const uint64_t v = 10 * round + id % 7 + 2;
      b.Add(id * 11, v);
      latest[id * 11] = v;
    }
    ASSERT_THAT(PushBatch(*store, b), IsOk());
  }
  // Older than everything: ignored even for cold states.
  Batch old;
  old.writer = 9;
  for (auto [id, v] : latest) old.Add(id, 1);
  ASSERT_THAT(PushBatch(*store, old), IsOk());

  std::vector<int64_t> ids;
  for (auto [id, v] : latest) ids.push_back(id);
  std::reverse(ids.begin(), ids.end());
  ids.push_back(ids[5]);  // a duplicate
  for (int pass = 0; pass < 2; ++pass) {
    PulledStates p = MustPull(*store, ids);
    for (size_t i = 0; i < ids.size(); ++i) {
      const uint64_t v = latest[ids[i]];
      ASSERT_EQ(p.version[i], v) << ids[i];
      ASSERT_EQ(p.time[i], TimeOf(v)) << ids[i];
      const int32_t writer = static_cast<int32_t>((v - 2) / 10);
      ASSERT_EQ(Slice(p, static_cast<int>(i)), StateOf(ids[i], v, writer))
          << ids[i];
    }
  }
  auto v = store->Get(ids[0]);
  ASSERT_THAT(v, IsOk());
  EXPECT_EQ(v->version, latest[ids[0]]);
  EXPECT_EQ(v->time, TimeOf(latest[ids[0]]));
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
      for (int r = 1; r <= kRounds; ++r) {
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
    EXPECT_EQ(p.version[i], uint64_t{kRounds});
    EXPECT_EQ(Slice(p, i), StateOf(i, kRounds, kThreads - 1));
  }
}

TEST_P(StoreContractTest, WideStates) {
  constexpr int kWide = 172;
  NEW_STORE(store, kWide);
  Batch b;
  for (int64_t id = 0; id < 40; ++id) b.Add(id, 1 + id, kWide);
  ASSERT_THAT(PushBatch(*store, b), IsOk());
  PulledStates p = MustPull(*store, {39, 0});
  EXPECT_EQ(Slice(p, 0, kWide), StateOf(39, 40, 0, kWide));
  EXPECT_EQ(Slice(p, 1, kWide), StateOf(0, 1, 0, kWide));
}

TEST_P(StoreContractTest, CallsAfterCloseFail) {
  NEW_STORE(store, kDim);
  ASSERT_THAT(PushOne(*store, 1, 1), IsOk());
  ASSERT_THAT(store->Close(), IsOk());
  PulledStates out;
  EXPECT_THAT(store->Pull(std::vector<int64_t>{1}, &out),
              StatusIs(absl::StatusCode::kFailedPrecondition, ""));
  EXPECT_THAT(PushOne(*store, 1, 2),
              StatusIs(absl::StatusCode::kFailedPrecondition, ""));
  EXPECT_THAT(store->Get(1),
              StatusIs(absl::StatusCode::kFailedPrecondition, ""));
  EXPECT_THAT(store->Close(),
              StatusIs(absl::StatusCode::kFailedPrecondition, ""));
}

}  // namespace mnemo::memstore::testing
