// DepBloom's window boundaries (trainer/runtime/policies/depbloom.cc) driven
// batch by batch on two workers (threads) with a real node-state store, a
// real in-process coordinator and hand-made sub-chains: which states each
// worker pulls, and when. The model is left out: "training" a batch applies
// its events to the worker's node memory (latest event and time), which is
// what the store's versions order.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <memory>
#include <thread>

#include "coordinator/coordinator_state.h"
#include "coordinator/policy_spec.h"
#include "memstore/node_state_store.h"
#include "trainer/data/event_log.h"
#include "trainer/memory/node_memory.h"
#include "trainer/memory/node_memory_test_peer.h"
#include "trainer/memory/store_exchange.h"
#include "trainer/plan/batch_plan.h"
#include "trainer/plan/subchain_plan.h"
#include "trainer/runtime/cluster/local_cluster.h"
#include "trainer/runtime/policies/policy.h"
#include "util/status_matchers.h"

namespace mnemo::runtime {
namespace {

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

// What one worker saw in one batch.
struct BatchSeen {
  int64_t pulled = 0;  // states this batch's Fetch pulled
  // Per extra read of the batch: the latest event of its state after
  // Fetch (-1: never updated here).
  std::map<int64_t, int64_t> extra_last_event;
};

// Runs one epoch of DepBloom on 2 workers over `log`, with the sub-chain of
// every event given, batches of `batch_size` and windows of `window`
// events. extra[rank][batch]: nodes that batch reads besides its events'
// endpoints (temporal neighbours, negatives). Returns per rank, per batch,
// what it saw.
std::vector<std::vector<BatchSeen>> RunDepBloom(
    const data::EventLog& log, const std::vector<int32_t>& chain,
    int64_t batch_size, int64_t window,
    const std::map<int, std::map<int64_t, std::vector<int64_t>>>& extra) {
  constexpr int kWorld = 2;
  const std::vector<int64_t> train = [&] {
    std::vector<int64_t> t(log.num_events());
    for (int64_t i = 0; i < log.num_events(); ++i) t[i] = i;
    return t;
  }();
  memory::RecordLayout layout;
  layout.memory_dim = 2;
  layout.mail_dim = 2;
  memstore::NodeStateStoreOptions so;
  so.dim = static_cast<int>(layout.RecordFloats());
  auto store = memstore::Open(so);
  EXPECT_THAT(store, IsOk());
  auto spec = coordinator::ParsePolicySpec("depbloom");
  EXPECT_THAT(spec, IsOk());
  coordinator::CoordinatorState coord(
      {kWorld, "cfg", 60, 0.1},
      coordinator::MakeDecisionPolicy(*spec, coordinator::DecisionParams()),
      [] { return 0.0; });

  PolicyOptions po;
  po.depbloom.window_events = window;
  po.depbloom.urgent_batches = 1;
  po.depbloom.critical_path = true;
  plan::PlanOptions plan_options;
  plan_options.kind = plan::PlanKind::kSubChains;
  plan_options.world_size = kWorld;
  plan_options.batch_size = batch_size;
  plan_options.window_events = window;
  plan_options.given_chain = &chain;
  const plan::SubChainPartition partition =
      plan::PartitionSubChains(log, train, plan_options);
  TrainOptions train_options;

  std::vector<std::vector<BatchSeen>> seen(kWorld);
  std::vector<std::thread> threads;
  for (int r = 0; r < kWorld; ++r) {
    threads.emplace_back([&, r] {
      const plan::WorkerPlan plan =
          plan::SubChainWorkerPlan(log, train, partition, r, plan_options);
      LocalClusterClient cluster(&coord, r, 60);
      DistributedContext ctx;
      ctx.rank = r;
      ctx.world_size = kWorld;
      ctx.policy = *spec;
      ctx.store = store->get();
      ctx.cluster = &cluster;
      memory::NodeMemory state;
      state.Reset(layout, log.num_nodes);
      CommStats comm;
      std::function<int(int64_t)> owner = [](int64_t u) {
        return static_cast<int>(u % 2);
      };
      memory::StoreExchange sync(
          store->get(), &state, [&](int64_t u) { return owner(u) == r; }, r,
          &comm.store, &comm.working_set);
      PolicyEnv env;
      env.options = &train_options;
      env.dist = &ctx;
      env.rank = r;
      env.world = kWorld;
      env.log = &log;
      env.train = &train;
      env.exchange = &sync;
      env.comm = &comm;
      env.owner = owner;
      auto policy = MakeTrainingPolicy(*spec, po, env);
      ASSERT_THAT(policy, IsOk());
      (*policy)->SetPlan(&plan);
      (*policy)->BeginEpoch(1);
      memory::StateVersions versions{log.num_events(), 1};
      int64_t pulled_before = 0;
      for (int64_t b = 0; b < plan.num_batches(); ++b) {
        BatchContext c;
        c.epoch = 1;
        c.epoch_batch = b;
        c.num_batches = plan.num_batches();
        c.global_batch = b;
        c.view = plan.batch(b);
        c.events.assign(c.view.events.begin(), c.view.events.end());
        c.target.assign(c.view.target.begin(), c.view.target.end());
        c.versions = versions;
        ASSERT_THAT((*policy)->Plan(&c), IsOk());
        std::vector<int64_t> nodes;
        for (const int64_t e : c.events) {
          nodes.push_back(log.src[e]);
          nodes.push_back(log.dst[e]);
        }
        std::vector<int64_t> extras;
        if (auto it = extra.find(r); it != extra.end()) {
          if (auto jt = it->second.find(b); jt != it->second.end()) {
            extras = jt->second;
          }
        }
        nodes.insert(nodes.end(), extras.begin(), extras.end());
        std::sort(nodes.begin(), nodes.end());
        nodes.erase(std::unique(nodes.begin(), nodes.end()), nodes.end());
        ASSERT_THAT((*policy)->Fetch(c, nodes), IsOk())
            << "rank " << r << " batch " << b;
        BatchSeen s;
        const int64_t pulled = comm.policy.refresh_nodes_total;
        s.pulled = pulled - pulled_before;
        pulled_before = pulled;
        for (const int64_t u : extras) {
          s.extra_last_event[u] = state.last_event()[state.Row(u)];
        }
        seen[r].push_back(s);
        // "Training": the batch's events advance their endpoints.
        std::vector<int32_t> advanced;
        for (const int64_t e : c.events) {
          for (const int64_t u : {log.src[e], log.dst[e]}) {
            memory::NodeMemoryTestPeer(&state).last_event()[state.Row(u)] = e;
            memory::NodeMemoryTestPeer(&state).last_update()[state.Row(u)] =
                log.t[e];
            advanced.push_back(static_cast<int32_t>(u));
          }
        }
        BatchOutcome o;
        o.targets = static_cast<int64_t>(c.events.size());
        o.advanced = &advanced;
        ASSERT_THAT((*policy)->Report(c, o), IsOk());
      }
      ASSERT_THAT((*policy)->EndEpoch(versions), IsOk());
    });
  }
  for (auto& t : threads) t.join();
  return seen;
}

// A worker whose sub-chain is empty in a window (its first batch of the
// window is padding) must not carry that window's urgent set into the next
// window: there its first batch pulls only the next window's urgent states.
// Node 8 is in the urgent set of window 0 (worker 0 reads it first in
// window 1) but not in that of window 1; worker 1 reads it (as a neighbour)
// in its first batch of window 2, where it must wait for the background
// push and be pulled by the next batch that reads it.
TEST(DepBloomPolicyTest, EmptyFirstBatchLeavesNoUrgentMarks) {
  const data::EventLog log = MakeLog(12, {{0, 1},
                                          {2, 3},
                                          {4, 5},
                                          {6, 7},  // window 0
                                          {8, 9},
                                          {0, 2},
                                          {1, 3},
                                          {8, 0},  // window 1: all worker 0
                                          {0, 1},
                                          {2, 3},
                                          {4, 5},
                                          {6, 7}});  // window 2
  const std::vector<int32_t> chain = {0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 1, 1};
  // Batch size 1: window 0 is batches 0-1, window 1 batches 2-5 (worker
  // 1's are empty), window 2 batches 6 (boundary) and 7.
  auto seen = RunDepBloom(log, chain, 1, 4, {{1, {{6, {8}}, {7, {8}}}}});
  ASSERT_EQ(seen[1].size(), 8u);
  // Batch 6 reads 4, 5 (urgent: its own first batch) and 8 (not urgent).
  EXPECT_EQ(seen[1][6].pulled, 2);
  // Batch 7 reads 6, 7 and 8, pulled after the background push: worker 0's
  // state of 8 after event 7.
  EXPECT_EQ(seen[1][7].pulled, 3);
  EXPECT_EQ(seen[1][7].extra_last_event.at(8), 7);
}

// A window of one batch has no later batch to pull the states its first
// batch reads outside the urgent set: its boundary pushes everything before
// the barrier and the batch pulls every state it reads. Worker 1 reads node
// 0 (advanced by worker 0 in window 0, not in window 1's urgent set) in the
// only batch of window 1 and must see worker 0's state of it.
TEST(DepBloomPolicyTest, OneBatchWindowPullsEveryRead) {
  const data::EventLog log = MakeLog(12, {{0, 1},
                                          {2, 3},
                                          {4, 5},
                                          {6, 7},  // window 0
                                          {8, 9},
                                          {9, 8},
                                          {10, 11},
                                          {11, 10}});  // window 1
  const std::vector<int32_t> chain = {0, 0, 1, 1, 0, 0, 1, 1};
  auto seen = RunDepBloom(log, chain, 2, 4, {{1, {{1, {0}}}}});
  ASSERT_EQ(seen[1].size(), 2u);
  EXPECT_EQ(seen[1][1].extra_last_event.at(0), 0);
  EXPECT_EQ(seen[1][1].pulled, 3);  // 10, 11 and 0
}

}  // namespace
}  // namespace mnemo::runtime
