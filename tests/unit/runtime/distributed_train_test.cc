// The multi-worker runtime with real gloo collectives and a real node-state
// store, workers as threads in one process (the multi-process version with
// gRPC services is in tests/integration/).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <thread>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "coordinator/policy_spec.h"
#include "memstore/node_state_store.h"
#include "tests/unit/runtime/threaded_ranks.h"
#include "tests/unit/runtime/train_test_util.h"
#include "trainer/memory/record_layout.h"
#include "trainer/model/model_spec.h"
#include "trainer/plan/batch_plan.h"
#include "trainer/platform/cuda_device.h"
#include "trainer/runtime/cluster/distributed.h"
#include "trainer/runtime/cluster/local_cluster.h"
#include "trainer/runtime/train.h"
#include "util/status_matchers.h"

namespace mnemo::runtime {
namespace {

TrainOptions SmallRun() {
  TrainOptions o = testing::SmallRun();
  o.compute.threads = 1;
  o.data.max_events = 30000;
  o.checks.check_parameters = true;  // identical parameters after every step
  o.model.dropout = 0;  // dropout draws differ per rank; without it workers
                        // compute exactly what one process computes
  return o;
}
using testing::Quiet;

// `edge_dim`: the data's edge feature width (part of the record).
std::vector<absl::StatusOr<TrainResult>> RunWorkers(
    const std::string& policy, int world, const TrainOptions& base,
    std::function<void(int rank, TrainOptions*)> tweak = nullptr,
    int edge_dim = 0,
    std::function<TrainCallbacks(int rank)> callbacks = nullptr) {
  const int64_t record_dim =
      model::LayoutOf(base.model, edge_dim).RecordFloats();
  memstore::NodeStateStoreOptions so;
  so.dim = static_cast<int>(record_dim);
  auto store = memstore::Open(so);
  EXPECT_THAT(store, IsOk());
  c10d::TCPStoreOptions tso;
  tso.port = 0;
  tso.isServer = true;
  tso.waitWorkers = false;
  auto tcp = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", tso);
  auto spec = coordinator::ParsePolicySpec(policy);
  EXPECT_THAT(spec, IsOk());
  coordinator::DecisionParams decision;
  decision.tau_g = base.policy.deptgl.tau_grad;
  coordinator::CoordinatorState coord(
      {world, "cfg", 60, 0.1}, coordinator::MakeDecisionPolicy(*spec, decision),
      [] { return 0.0; });
  std::vector<absl::StatusOr<TrainResult>> results(
      world, absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      LocalClusterClient cluster(&coord, r, 60);
      DistributedContext ctx;
      ctx.rank = r;
      ctx.world_size = world;
      ctx.policy = *spec;
      ctx.master_port = tcp->getPort();
      ctx.store = store->get();
      ctx.cluster = &cluster;
      TrainOptions o = base;
      if (tweak) tweak(r, &o);
      o.distributed = &ctx;
      results[r] = Train(o, callbacks ? callbacks(r) : Quiet());
      if (!results[r].ok()) cluster.ReportError(results[r].status().ToString());
    });
  }
  for (auto& t : threads) t.join();
  return results;
}

// One worker going through the store for every batch computes exactly what
// the single-process engine computes: the record codec and the store's
// last-writer-wins semantics lose nothing.
TEST(DistributedTrainTest, OneVanillaWorkerEqualsSingleProcess) {
  TrainOptions o = SmallRun();
  auto single = Train(o, Quiet());
  ASSERT_THAT(single, IsOk());
  auto results = RunWorkers("vanilla", 1, o);
  ASSERT_THAT(results[0], IsOk());
  EXPECT_EQ(results[0]->epochs[0].train_loss, single->epochs[0].train_loss);
  EXPECT_EQ(results[0]->test.ap, single->test.ap);
  EXPECT_EQ(results[0]->parameter_checksum, single->parameter_checksum);
}

// A cluster computes what one process computes. Adam turns rounding
// differences (another summation order) into visibly different trajectories
// on this small run (one seed's AP varies by about 0.02), so equality is
// checked with a learning rate too small to move the parameters: then any
// lost or stale state shows in the loss and the AP.
TrainOptions FrozenRun() {
  TrainOptions o = SmallRun();
  o.optim.epochs = 1;
  o.optim.lr = 1e-9;
  return o;
}

void ExpectSameAsOneProcess(const std::string& policy) {
  const TrainOptions o = FrozenRun();
  auto single = Train(o, Quiet());
  ASSERT_THAT(single, IsOk());
  auto results = RunWorkers(policy, 2, o);
  for (auto& r : results) ASSERT_THAT(r, IsOk());
  const TrainResult& c = *results[0];
  std::printf(
      "%s: loss %.6f vs %.6f, val AP %.5f vs %.5f, test AP %.5f vs "
      "%.5f\n",
      c.policy.c_str(), c.epochs[0].train_loss, single->epochs[0].train_loss,
      c.epochs[0].val_ap, single->epochs[0].val_ap, c.test.ap, single->test.ap);
  EXPECT_EQ(results[0]->parameter_checksum, results[1]->parameter_checksum);
  EXPECT_NEAR(c.epochs[0].train_loss, single->epochs[0].train_loss, 1e-5);
  EXPECT_NEAR(c.epochs[0].val_ap, single->epochs[0].val_ap, 1e-3);
  EXPECT_NEAR(c.epochs[0].val_new_node_ap, single->epochs[0].val_new_node_ap,
              1e-3);
  EXPECT_NEAR(c.test.ap, single->test.ap, 1e-3);
  EXPECT_NEAR(c.test.new_node_ap, single->test.new_node_ap, 1e-3);
}

// A one-worker cluster on the run's device computes what one process on it
// computes: on a GPU machine the GPU (an NCCL gradient group of one, the
// gloo control group, states packed from and unpacked into GPU memory by
// the policies), elsewhere the CPU.
TEST(DistributedTrainTest, OneWorkerOnTheDeviceComputesWhatOneProcessDoes) {
  for (const char* policy : {"vanilla", "deptgl"}) {
    TrainOptions o = FrozenRun();
    if (platform::CudaDeviceCount() > 0)
      o.compute.device = *ParseDevice("cuda");
    auto single = Train(o, Quiet());
    ASSERT_THAT(single, IsOk());
    auto results = RunWorkers(policy, 1, o);
    ASSERT_THAT(results[0], IsOk()) << policy;
    EXPECT_NEAR(results[0]->epochs[0].train_loss, single->epochs[0].train_loss,
                1e-5)
        << policy;
    EXPECT_NEAR(results[0]->test.ap, single->test.ap, 1e-3) << policy;
    EXPECT_NEAR(results[0]->test.new_node_ap, single->test.new_node_ap, 1e-3)
        << policy;
  }
}

TEST(DistributedTrainTest, VanillaComputesWhatOneProcessComputes) {
  ExpectSameAsOneProcess("vanilla");
}

TEST(DistributedTrainTest, FullCacheComputesWhatOneProcessComputes) {
  ExpectSameAsOneProcess("full-cache");
}

TEST(DistributedTrainTest, VanillaCountsItsTraffic) {
  TrainOptions o = SmallRun();
  auto results = RunWorkers("vanilla", 2, o);
  for (auto& r : results) ASSERT_THAT(r, IsOk());
  // Identical parameters on every worker after training.
  EXPECT_EQ(results[0]->parameter_checksum, results[1]->parameter_checksum);
  EXPECT_EQ(results[1]->epochs[0].val_ap, results[0]->epochs[0].val_ap);
  const CommStats& c = results[0]->comm;
  std::printf("vanilla 2 workers: pulled %ld states in %ld syncs, pushed %ld\n",
              (long)c.store.states_pulled, (long)c.policy.refreshes,
              (long)c.store.states_pushed);
  EXPECT_EQ(results[0]->workers, 2);
  EXPECT_EQ(results[0]->policy, "vanilla");
  EXPECT_GT(c.policy.refreshes, 0);
  EXPECT_GT(c.store.states_pulled, 0);
  EXPECT_GT(c.store.states_pushed, 0);
  EXPECT_EQ(
      c.store.bytes_pulled,
      c.store.states_pulled * model::LayoutOf(o.model, 0).RecordFloats() * 4);
  // 2 epochs of targets, split between the workers.
  EXPECT_EQ(c.target_events, results[0]->epochs[0].train_events * 2);
  ASSERT_EQ(results[0]->per_worker.size(), 2u);
}

// Gradients in buckets, each all-reduced as the backward pass produces it,
// train what one bucket after the pass trains: on 2 workers bit for bit
// (the parameters' checksum, losses and AP equal). On 3 the sums' order
// differs with the buckets, and Adam, which divides each step by the
// gradient's own scale, carries rounding into whole steps (trained for an
// epoch the parameters drift apart as with another seed): there the
// gradients are compared where the parameters cannot move (a learning rate
// of 1e-9), equal to rounding. Most buckets start during the backward
// pass. bf16 communication sends half the bytes and still trains.
TEST(DistributedTrainTest, BucketedGradientsTrainWhatOneBucketTrains) {
  TrainOptions o = SmallRun();
  o.optim.epochs = 1;
  for (int world : {2, 3}) {
    TrainOptions one = o;
    if (world == 3) one.optim.lr = 1e-9;
    one.gradients.bucket_mb = 0;
    TrainOptions many = one;
    many.gradients.bucket_mb = 0.01;  // ~10 KB: several buckets a step
    auto a = RunWorkers("vanilla", world, one);
    auto b = RunWorkers("vanilla", world, many);
    for (auto& r : a) ASSERT_THAT(r, IsOk());
    for (auto& r : b) ASSERT_THAT(r, IsOk());
    const CollectiveStats& ca = a[0]->comm.collectives;
    const CollectiveStats& cb = b[0]->comm.collectives;
    EXPECT_EQ(ca.allreduce_bytes, cb.allreduce_bytes) << world;
    EXPECT_GT(cb.allreduce_buckets, 3 * ca.allreduce_buckets) << world;
    EXPECT_GT(cb.allreduce_buckets_in_backward, cb.allreduce_buckets / 2)
        << world;
    const EpochResult& ea = a[0]->epochs[0];
    const EpochResult& eb = b[0]->epochs[0];
    if (world == 2) {
      EXPECT_EQ(a[0]->parameter_checksum, b[0]->parameter_checksum);
      EXPECT_EQ(ea.train_loss, eb.train_loss);
      EXPECT_EQ(ea.grad_norm_mean, eb.grad_norm_mean);
      EXPECT_EQ(a[0]->test.ap, b[0]->test.ap);
    } else {
      EXPECT_NE(ea.grad_norm_mean, 0);
      EXPECT_NEAR(ea.grad_norm_mean, eb.grad_norm_mean,
                  1e-6 * ea.grad_norm_mean);
      EXPECT_NEAR(ea.train_loss, eb.train_loss, 1e-7 * ea.train_loss);
    }
    if (world == 2) {
      TrainOptions half = many;
      half.gradients.comm = GradComm::kBf16;
      auto c = RunWorkers("vanilla", world, half);
      for (auto& r : c) ASSERT_THAT(r, IsOk());
      EXPECT_EQ(c[0]->comm.collectives.allreduce_bytes * 2, cb.allreduce_bytes);
      EXPECT_EQ(c[0]->parameter_checksum, c[1]->parameter_checksum);
      EXPECT_NE(c[0]->parameter_checksum, b[0]->parameter_checksum);
      EXPECT_NEAR(c[0]->test.ap, b[0]->test.ap, 0.03);
    }
  }
}

// The per-step parameter check catches workers that drift apart (here: a
// different learning rate on one of them).
TEST(DistributedTrainTest, ParameterCheckCatchesDivergence) {
  TrainOptions o = SmallRun();
  o.optim.epochs = 1;
  auto results = RunWorkers("vanilla", 2, o, [](int rank, TrainOptions* t) {
    if (rank == 1) t->optim.lr = 2e-3;
  });
  for (auto& r : results) {
    EXPECT_THAT(r, StatusIs(absl::StatusCode::kInternal,
                            "parameters differ across workers after batch 0"));
  }
}

TEST(DistributedTrainTest, FullCacheReplaysInsteadOfPulling) {
  TrainOptions o = SmallRun();
  auto results = RunWorkers("full-cache", 2, o);
  for (auto& r : results) ASSERT_THAT(r, IsOk());
  EXPECT_EQ(results[0]->parameter_checksum, results[1]->parameter_checksum);
  const CommStats& c = results[0]->comm;
  // No refresh during training; for the evaluation they share, each rank
  // pulls a slice of the states (and sends it to the other).
  EXPECT_EQ(c.store.states_pulled, 0);
  EXPECT_GT(results[0]->per_worker[0].eval.states_pulled, 0);
  EXPECT_GT(results[0]->per_worker[1].eval.states_pulled, 0);
  EXPECT_GT(c.replayed_events, 0);
}

// A synthetic stream whose events share a few timestamps (many real ones
// do: USLegis has 12): `events` events among `nodes` nodes over `times`
// distinct timestamps.
std::string TiedTimestampFile(int events, int nodes, int times) {
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("mnemo_tied_" + std::to_string(getpid()) + ".txt"))
                               .string();
  std::ofstream out(path);
  std::mt19937 rng(5);
  for (int e = 0; e < events; ++e) {
    const int u = rng() % nodes;
    int v = rng() % nodes;
    if (v == u) v = (v + 1) % nodes;
    out << u << " " << v << " " << (e * times / events) * 3600 << "\n";
  }
  return path;
}

// Later updates of a node at the same timestamp as its stored state must
// replace it: states are versioned by event order, not time. One worker
// going through the store must compute exactly what one process computes.
TEST(DistributedTrainTest, OneVanillaWorkerEqualsSingleProcessOnTiedTimes) {
  TrainOptions o = SmallRun();
  o.data.dataset = TiedTimestampFile(6000, 150, 10);
  o.data.max_events = 0;
  o.optim.epochs = 1;
  auto single = Train(o, Quiet());
  ASSERT_THAT(single, IsOk());
  auto results = RunWorkers("vanilla", 1, o);
  ASSERT_THAT(results[0], IsOk());
  EXPECT_EQ(results[0]->epochs[0].train_loss, single->epochs[0].train_loss);
  EXPECT_EQ(results[0]->epochs[0].val_ap, single->epochs[0].val_ap);
  EXPECT_EQ(results[0]->test.ap, single->test.ap);
  EXPECT_EQ(results[0]->parameter_checksum, single->parameter_checksum);
}

// Frozen for bit-for-bit comparisons of every batch: a learning rate whose
// steps vanish in fp32 rounding (1e-9 moves the parameters' last bits).
TrainOptions BitFrozenRun() {
  TrainOptions o = FrozenRun();
  o.optim.lr = 1e-30;
  o.data.max_events = 12000;
  return o;
}

// Callbacks that record, in order, the loss of every batch with targets (a
// padding batch computes none) into `losses`.
TrainCallbacks LossRecorder(std::vector<double>* losses) {
  TrainCallbacks c = Quiet();
  c.batch = [losses](const TrainCallbacks::Batch& b) {
    if (b.target_events > 0) losses->push_back(b.loss);
  };
  return c;
}

// PipeTGL's pipeline keeps one process's memory order: with parameters too
// slow to move (a learning rate whose steps vanish in fp32 rounding), every
// batch computes bit for bit the loss one process computes for it, on 2
// and 3 workers, with and without the critical-path split: each batch read
// exactly the node memory one process's batch reads (its endpoints'
// states and mail through the memory update, its neighbours' through the
// embedding). The store ends the epoch holding the complete memory, so the
// test figures, computed from it, are one process's too.
TEST(DistributedTrainTest, PipeTglReadsTheMemoryOneProcessReads) {
  TrainOptions o = BitFrozenRun();
  std::vector<double> single_losses;
  auto single = Train(o, LossRecorder(&single_losses));
  ASSERT_THAT(single, IsOk());
  ASSERT_GT(single_losses.size(), 6u);
  for (int world : {2, 3}) {
    for (bool critical : {false, true}) {
      SCOPED_TRACE(absl::StrCat(world, " workers, critical path ", critical));
      TrainOptions p = o;
      p.policy.depbloom.critical_path = critical;
      std::vector<std::vector<double>> losses(world);
      auto results = RunWorkers("pipetgl", world, p, nullptr, 0, [&](int r) {
        return LossRecorder(&losses[r]);
      });
      for (auto& r : results) ASSERT_THAT(r, IsOk());
      for (size_t i = 0; i < single_losses.size(); ++i) {
        const std::vector<double>& mine = losses[i % world];
        ASSERT_LT(i / world, mine.size()) << "batch " << i;
        EXPECT_EQ(mine[i / world], single_losses[i]) << "batch " << i;
      }
      EXPECT_EQ(results[0]->test.ap, single->test.ap);
      EXPECT_EQ(results[0]->test.new_node_ap, single->test.new_node_ap);
      const PipelineCounters& c = results[0]->comm.pipeline;
      EXPECT_EQ(c.handoffs_sent, c.handoffs_received);
      EXPECT_EQ(c.handoffs_sent,
                static_cast<int64_t>((single_losses.size() + world - 1) /
                                     world * world) -
                    1);
      EXPECT_GT(c.parameter_passes, 0);
      EXPECT_EQ(c.urgent_states_sent > 0, critical);
    }
  }
}

// A pipeline's workers hold every state handed on to them: a bounded
// working set is refused before anything runs, naming both flags, and so
// is a depth that does not divide the workers.
TEST(DistributedTrainTest, PipelinesRefuseWhatTheyCannotRun) {
  TrainOptions o = SmallRun();
  o.optim.epochs = 1;
  o.working_set.budget_bytes =
      5000 * memory::HeldStateBytes(model::LayoutOf(o.model, 0));
  for (auto& r : RunWorkers("pipetgl", 2, o)) {
    EXPECT_THAT(r, StatusIs(absl::StatusCode::kInvalidArgument,
                            "--policy pipetgl does not run with "
                            "--memory-cache-bytes"));
  }
  TrainOptions g = o;
  g.policy.depbloom.pipeline_depth = 2;
  for (auto& r : RunWorkers("depbloom", 2, g)) {
    EXPECT_THAT(r, StatusIs(absl::StatusCode::kInvalidArgument,
                            "--pipeline-depth > 1 does not run with "
                            "--memory-cache-bytes"));
  }
  g.working_set.budget_bytes = 0;
  g.policy.depbloom.pipeline_depth = 3;
  for (auto& r : RunWorkers("depbloom", 2, g)) {
    EXPECT_THAT(r, StatusIs(absl::StatusCode::kInvalidArgument,
                            "--pipeline-depth 3 does not divide the 2 "
                            "workers"));
  }
}

// DistTGL's epoch parallelism: every worker trains the whole stream in
// order on its own memory, a step behind the one before, with its own
// negatives. With frozen parameters worker 0 computes one process's losses
// batch for batch and its memory, written to the store, gives one
// process's test figures; worker 1 trains the same batches against other
// negatives.
TEST(DistributedTrainTest, DistTglEpochWorkersTrainTheWholeStream) {
  TrainOptions o = BitFrozenRun();
  std::vector<double> single_losses;
  auto single = Train(o, LossRecorder(&single_losses));
  ASSERT_THAT(single, IsOk());
  std::vector<std::vector<double>> losses(2);
  auto results = RunWorkers("disttgl-epoch", 2, o, nullptr, 0,
                            [&](int r) { return LossRecorder(&losses[r]); });
  for (auto& r : results) ASSERT_THAT(r, IsOk());
  EXPECT_EQ(losses[0], single_losses);
  ASSERT_EQ(losses[1].size(), single_losses.size());
  EXPECT_NE(losses[1], single_losses);  // other negatives
  EXPECT_EQ(results[0]->test.ap, single->test.ap);
  EXPECT_EQ(results[0]->test.new_node_ap, single->test.new_node_ap);
  EXPECT_EQ(results[0]->comm.store.states_pulled, 0);
}

// DepBloom's pipelines keep their sub-chain's memory order: one sub-chain
// run by a group of 2 (--pipeline-depth 2 on 2 workers) computes, batch for
// batch, the losses one worker running that sub-chain alone computes, with
// and without the critical-path split (frozen parameters, as above); and
// windows still synchronize through the store.
TEST(DistributedTrainTest, DepBloomPipelineRunsItsSubChainInOrder) {
  TrainOptions o = BitFrozenRun();
  o.optim.batch_size = 300;
  o.policy.depbloom.window_events = 2000;
  std::vector<double> alone;
  auto one = RunWorkers("depbloom", 1, o, nullptr, 0,
                        [&](int) { return LossRecorder(&alone); });
  ASSERT_THAT(one[0], IsOk());
  ASSERT_GT(one[0]->comm.policy.boundaries_refreshed, 1);
  for (bool critical : {false, true}) {
    SCOPED_TRACE(absl::StrCat("critical path ", critical));
    TrainOptions p = o;
    p.policy.depbloom.pipeline_depth = 2;
    p.policy.depbloom.critical_path = critical;
    std::vector<std::vector<double>> losses(2);
    auto results = RunWorkers("depbloom", 2, p, nullptr, 0,
                              [&](int r) { return LossRecorder(&losses[r]); });
    for (auto& r : results) ASSERT_THAT(r, IsOk());
    // Batches alternate between the two within each window: merge them
    // back in the sub-chain's order by matching the per-window deal.
    std::vector<double> merged;
    size_t at[2] = {0, 0};
    const int64_t total = losses[0].size() + losses[1].size();
    ASSERT_EQ(total, static_cast<int64_t>(alone.size()));
    for (size_t i = 0; i < alone.size(); ++i) {
      // The one-worker batch i is the group's batch i: the group's
      // workers take turns within a window, so the loss is either the
      // next of worker 0's or of worker 1's.
      bool matched = false;
      for (int k = 0; k < 2 && !matched; ++k) {
        if (at[k] < losses[k].size() && losses[k][at[k]] == alone[i]) {
          ++at[k];
          matched = true;
        }
      }
      EXPECT_TRUE(matched) << "batch " << i << ": " << alone[i];
      if (!matched) break;
    }
    EXPECT_EQ(results[0]->test.ap, one[0]->test.ap);
    EXPECT_GT(results[0]->comm.pipeline.handoffs_sent, 0);
    EXPECT_EQ(results[0]->comm.pipeline.parameter_passes, 0);
  }
}

// USLegis (12 distinct timestamps, a 1-wide edge feature): two vanilla
// workers stay within 0.02 validation AP of one process (before states were
// versioned by event order, 84% of node updates were dropped and the gap
// was about 0.1).
TEST(DistributedTrainTest, TwoVanillaWorkersMatchSingleOnUsLegis) {
  TrainOptions o = SmallRun();
  o.data.dataset = "uslegis";
  o.data.max_events = 0;
  o.optim.epochs = 1;
  o.optim.seed = 1;
  auto single = Train(o, Quiet());
  ASSERT_THAT(single, IsOk());
  auto results = RunWorkers("vanilla", 2, o, nullptr, /*edge_dim=*/1);
  for (auto& r : results) ASSERT_THAT(r, IsOk());
  std::printf("USLegis val AP: single %.4f, vanilla x2 %.4f\n",
              single->epochs[0].val_ap, results[0]->epochs[0].val_ap);
  EXPECT_NEAR(results[0]->epochs[0].val_ap, single->epochs[0].val_ap, 0.02);
  // With frozen parameters the two compute the same memory exactly.
  o.optim.lr = 1e-9;
  auto frozen_single = Train(o, Quiet());
  ASSERT_THAT(frozen_single, IsOk());
  auto frozen = RunWorkers("vanilla", 2, o, nullptr, /*edge_dim=*/1);
  ASSERT_THAT(frozen[0], IsOk());
  EXPECT_NEAR(frozen[0]->epochs[0].train_loss,
              frozen_single->epochs[0].train_loss, 1e-5);
  EXPECT_NEAR(frozen[0]->epochs[0].val_ap, frozen_single->epochs[0].val_ap,
              1e-3);
}

// The summary's train loss of a cluster run is the global batches' mean (as
// one process reports it), not rank 0's own; per_worker keeps each rank's.
TEST(DistributedTrainTest, TrainLossIsTheGlobalMean) {
  TrainOptions o = SmallRun();
  o.optim.epochs = 1;
  // Adam turns rounding noise in near-zero gradients into full-size steps,
  // so a full-cache cluster drifts from one process by about 0.01 in loss;
  // a negligible learning rate keeps the parameters (and losses) equal.
  o.optim.lr = 1e-9;
  auto single = Train(o, Quiet());
  ASSERT_THAT(single, IsOk());
  auto results = RunWorkers("full-cache", 2, o);
  for (auto& r : results) ASSERT_THAT(r, IsOk());
  const TrainResult& r = *results[0];
  ASSERT_EQ(r.per_worker.size(), 2u);
  EXPECT_EQ(results[1]->epochs[0].train_loss, r.epochs[0].train_loss);
  // Full-cache workers compute what one process computes (no dropout), so
  // the global mean matches the single run's loss to rounding.
  EXPECT_NEAR(r.epochs[0].train_loss, single->epochs[0].train_loss, 1e-5);
  EXPECT_GT(std::abs(r.per_worker[0].train_loss - r.epochs[0].train_loss),
            1e-4);
  EXPECT_NE(r.per_worker[0].train_loss, r.per_worker[1].train_loss);
}

// DepTGL: refreshes only at window boundaries (K batches), decided by the
// coordinator; each ablation switches off what it names.
TEST(DistributedTrainTest, DepTglAblations) {
  TrainOptions o = SmallRun();
  o.optim.epochs = 1;
  o.policy.deptgl.sync_every = 4;
  // Eq. 9 compares measured compute times: at the default tau_c only a
  // spike prunes, and a worker may see none. tau_c = 0 (the paper's Table
  // VII) makes every batch after the first heavy on every worker, whatever
  // the timings.
  o.policy.deptgl.tau_load = 0;
  struct Case {
    std::string policy;
    bool skips, prunes;
  };
  for (const Case& c :
       {Case{"deptgl:replay", false, false},
        Case{"deptgl:replay+sync", true, false}, Case{"deptgl", true, true}}) {
    auto results = RunWorkers(c.policy, 2, o);
    for (auto& r : results) ASSERT_THAT(r, IsOk()) << c.policy;
    EXPECT_EQ(results[0]->parameter_checksum, results[1]->parameter_checksum);
    EXPECT_EQ(results[0]->policy, c.policy);
    const int64_t batches =
        (results[0]->epochs[0].train_events + o.optim.batch_size - 1) /
        o.optim.batch_size;
    for (const CommStats& w : results[0]->per_worker) {
      std::printf(
          "%s: boundaries %ld (refreshed %ld, skipped %ld), syncs %ld, "
          "pulled %ld states, heavy %ld, pruned %ld, aux %ld\n",
          c.policy.c_str(), (long)w.policy.boundaries,
          (long)w.policy.boundaries_refreshed,
          (long)w.policy.boundaries_skipped, (long)w.policy.refreshes,
          (long)w.store.states_pulled, (long)w.policy.heavy_load_batches,
          (long)w.policy.pruned, (long)w.replayed_events);
      // One candidate boundary per window of K batches.
      EXPECT_EQ(w.policy.boundaries,
                (batches + o.policy.deptgl.sync_every - 1) /
                    o.policy.deptgl.sync_every);
      EXPECT_EQ(w.policy.boundaries_refreshed + w.policy.boundaries_skipped,
                w.policy.boundaries);
      // Refreshes (none at r = 0: memory restarts) plus the final sync.
      EXPECT_EQ(w.policy.refreshes, w.policy.boundaries_refreshed - 1 + 1);
      EXPECT_EQ(w.policy.boundaries_skipped > 0, c.skips);
      EXPECT_EQ(w.policy.pruned > 0, c.prunes);
      EXPECT_GT(w.replayed_events + w.policy.pruned, 0);
    }
  }
}

// tau_c decides how often a worker is in heavy-load mode (Eq. 9 literally:
// with 0.5 almost every batch; with a large threshold none).
TEST(DistributedTrainTest, DepTglLoadThreshold) {
  TrainOptions o = SmallRun();
  o.optim.epochs = 1;
  o.policy.deptgl.tau_load = 1e9;
  auto calm = RunWorkers("deptgl", 2, o);
  ASSERT_THAT(calm[0], IsOk());
  EXPECT_EQ(calm[0]->comm.policy.heavy_load_batches, 0);
  EXPECT_EQ(calm[0]->comm.policy.pruned, 0);
  o.policy.deptgl.tau_load = 0.5;
  auto busy = RunWorkers("deptgl", 2, o);
  ASSERT_THAT(busy[0], IsOk());
  const CommStats& w = busy[0]->per_worker[0];
  EXPECT_GT(w.policy.heavy_load_batches,
            w.target_events / o.optim.batch_size / 2);
}

// DepBloom: every worker runs the same number of steps (parameters stay
// identical), windows refresh at their boundaries, urgent states go first
// and the rest in the background (or everything at once without the
// critical-path optimization); IMR adds its refinement module.
TEST(DistributedTrainTest, DepBloomVariants) {
  TrainOptions o = SmallRun();
  o.optim.epochs = 1;
  o.optim.batch_size = 800;
  o.policy.depbloom.window_events = 4000;
  struct Case {
    plan::Partitioner partitioner;
    bool critical_path;
    int refine_chunks;
  };
  for (const Case& c : {Case{plan::Partitioner::kMetis, true, 4},
                        Case{plan::Partitioner::kTime, true, 1},
                        Case{plan::Partitioner::kGreedy, false, 4}}) {
    TrainOptions v = o;
    v.policy.depbloom.partitioner = c.partitioner;
    v.policy.depbloom.critical_path = c.critical_path;
    v.policy.depbloom.refine_chunks = c.refine_chunks;
    auto results = RunWorkers("depbloom", 2, v);
    for (auto& r : results) {
      ASSERT_THAT(r, IsOk()) << plan::PartitionerName(c.partitioner);
    }
    EXPECT_EQ(results[0]->parameter_checksum, results[1]->parameter_checksum);
    const CommStats& w = results[0]->per_worker[0];
    std::printf(
        "depbloom %s cp=%d IMR(%d): windows %ld, urgent %ld, non-urgent %ld, "
        "pulled %ld, cross %.3f, imbalance %.3f, test AP %.4f\n",
        std::string(plan::PartitionerName(c.partitioner)).c_str(),
        c.critical_path, c.refine_chunks, (long)w.policy.boundaries,
        (long)w.policy.urgent_states, (long)w.policy.nonurgent_states,
        (long)w.store.states_pulled, w.policy.cross_ratio, w.policy.imbalance,
        results[0]->test.ap);
    EXPECT_GT(w.policy.boundaries, 2);
    EXPECT_GT(w.store.states_pulled, 0);
    EXPECT_GT(w.policy.urgent_states, 0);
    EXPECT_GT(w.policy.cross_ratio, 0);
    EXPECT_GT(results[0]->test.ap, 0.6);
    // Rank 0 cuts the partition every rank plans from: its time is
    // reported (it read 0 when every rank planned from the given one).
    if (c.partitioner != plan::Partitioner::kTime) {
      EXPECT_GT(w.policy.partition_seconds, 0);
    }
  }
}

// A bounded working set (--memory-cache-bytes) computes exactly what an
// unbounded run computes under every policy: a dropped state is pulled
// again (vanilla) or spilled to the worker's own store and restored.
TEST(DistributedTrainTest, BoundedWorkingSetComputesWhatUnboundedDoes) {
  TrainOptions o = SmallRun();
  o.optim.epochs = 1;
  struct Case {
    std::string policy;
    int64_t batch_size, states;
    model::ModelKind model = model::ModelKind::kTgn;
  };
  for (const Case& c :
       {Case{"vanilla", 200, 700}, Case{"full-cache", 200, 700},
        Case{"deptgl:replay+sync", 200, 700}, Case{"depbloom", 800, 800},
        Case{"depbloom", 800, 800, model::ModelKind::kApan}}) {
    TrainOptions v = o;
    v.model.kind = c.model;
    v.optim.batch_size = c.batch_size;
    v.policy.depbloom.window_events = 4000;
    auto unbounded = RunWorkers(c.policy, 2, v);
    for (auto& r : unbounded) ASSERT_THAT(r, IsOk()) << c.policy;
    int64_t misses[2] = {0, 0};
    for (const plan::Eviction rule :
         {plan::Eviction::kBelady, plan::Eviction::kLru}) {
      TrainOptions b = v;
      b.working_set.budget_bytes =
          c.states *
          memory::HeldStateBytes(model::LayoutOf(v.model, /*edge_dim=*/0));
      b.working_set.eviction = rule;
      auto bounded = RunWorkers(c.policy, 2, b);
      for (auto& r : bounded) ASSERT_THAT(r, IsOk()) << c.policy;
      const std::string what =
          c.policy + " " + std::string(plan::EvictionName(rule));
      EXPECT_EQ(bounded[0]->epochs[0].train_loss,
                unbounded[0]->epochs[0].train_loss)
          << what;
      EXPECT_EQ(bounded[0]->epochs[0].val_ap, unbounded[0]->epochs[0].val_ap)
          << what;
      EXPECT_EQ(bounded[0]->epochs[0].val_new_node_ap,
                unbounded[0]->epochs[0].val_new_node_ap)
          << what;
      EXPECT_EQ(bounded[0]->test.ap, unbounded[0]->test.ap) << what;
      EXPECT_EQ(bounded[0]->test.new_node_ap, unbounded[0]->test.new_node_ap)
          << what;
      EXPECT_EQ(bounded[0]->parameter_checksum,
                unbounded[0]->parameter_checksum)
          << what;
      // Rank 0 evaluated through its working set: it never held more than
      // the budget, fewer states than the whole memory (which the unbounded
      // ranks pull once per epoch, a slice each).
      const CommStats& leader = bounded[0]->per_worker[0];
      EXPECT_LE(leader.working_set.peak_states, c.states) << what;
      EXPECT_LT(leader.working_set.peak_states,
                unbounded[0]->comm.eval.states_pulled)
          << what;
      EXPECT_GT(leader.eval.states_pulled, 0) << what;
      EXPECT_GT(leader.eval.states_pushed, 0) << what;  // epoch 1 is best
      const CommStats& w = bounded[0]->per_worker[1];
      std::printf(
          "%s: capacity %ld, peak %ld, reads %ld, hits %ld, misses %ld, "
          "evictions %ld, spills %ld, restores %ld\n",
          what.c_str(), (long)w.working_set.capacity_states,
          (long)w.working_set.peak_states, (long)w.working_set.reads,
          (long)w.working_set.hits, (long)w.working_set.misses,
          (long)w.working_set.evictions, (long)w.working_set.spills,
          (long)w.working_set.restores);
      EXPECT_EQ(w.working_set.capacity_states, c.states) << what;
      EXPECT_LE(w.working_set.peak_states, c.states) << what;
      EXPECT_GT(w.working_set.evictions, 0) << what;
      EXPECT_EQ(w.working_set.hits + w.working_set.misses, w.working_set.reads)
          << what;
      if (c.policy == "vanilla") {
        EXPECT_EQ(w.working_set.spills, 0) << what;  // it pulls every read
      } else {
        EXPECT_GT(w.working_set.spills, 0) << what;
        EXPECT_GT(w.working_set.restores, 0) << what;
      }
      misses[rule == plan::Eviction::kLru] = w.working_set.misses;
    }
    EXPECT_LE(misses[0], misses[1]) << c.policy << ": Belady against LRU";
  }
}

// A worker prepares its next batch (samples it) while one computes, where
// the policy allows it: the cluster computes exactly what it computes when
// each batch is prepared in turn, with every state in memory and with a
// bounded working set. DepTGL prepares nothing ahead (its next batch
// depends on this one's compute time; without pruning, as here, its runs
// are deterministic and comparable).
TEST(DistributedTrainTest, PreparingAheadComputesWhatInOrderDoes) {
  TrainOptions o = SmallRun();
  o.optim.epochs = 1;
  o.policy.depbloom.window_events = 4000;
  struct Case {
    std::string policy;
    int64_t batch_size, states;
    const char* lookahead;
  };
  for (const Case& c : {Case{"vanilla", 200, 0, "prepare"},
                        Case{"full-cache", 200, 0, "prepare"},
                        Case{"depbloom", 800, 0, "prepare"},
                        Case{"vanilla", 200, 700, "prepare"},
                        Case{"deptgl:replay+sync", 200, 0, "none"}}) {
    TrainOptions v = o;
    v.optim.batch_size = c.batch_size;
    v.working_set.budget_bytes =
        c.states *
        memory::HeldStateBytes(model::LayoutOf(v.model, /*edge_dim=*/0));
    const std::string what = c.policy + (c.states ? " bounded" : "");
    auto ahead = RunWorkers(c.policy, 2, v);
    for (auto& r : ahead) ASSERT_THAT(r, IsOk()) << what;
    v.checks.prepare_ahead = false;
    auto in_order = RunWorkers(c.policy, 2, v);
    for (auto& r : in_order) ASSERT_THAT(r, IsOk()) << what;
    EXPECT_EQ(ahead[0]->epochs[0].train_loss, in_order[0]->epochs[0].train_loss)
        << what;
    EXPECT_EQ(ahead[0]->epochs[0].val_ap, in_order[0]->epochs[0].val_ap)
        << what;
    EXPECT_EQ(ahead[0]->test.ap, in_order[0]->test.ap) << what;
    EXPECT_EQ(ahead[0]->parameter_checksum, in_order[0]->parameter_checksum)
        << what;
    EXPECT_EQ(ahead[0]->comm.store.states_pulled,
              in_order[0]->comm.store.states_pulled)
        << what;
    EXPECT_THAT(ahead[0]->summary_json,
                ::testing::HasSubstr(
                    absl::StrCat("\"batch_lookahead\": \"", c.lookahead, "\"")))
        << what;
  }
}

// A working set smaller than one batch's reads stops the run with a clear
// error: before training when an evaluation batch would not fit (known from
// the data), at the training batch that does not fit otherwise. One process
// has no store to bound its memory with.
TEST(DistributedTrainTest, WorkingSetTooSmallIsRefused) {
  TrainOptions o = SmallRun();
  o.optim.epochs = 1;
  const int64_t bytes = memory::HeldStateBytes(model::LayoutOf(o.model, 0));
  o.working_set.budget_bytes = 50 * bytes;
  {
    // The leader refuses at setup; the other worker stops with it.
    auto r = RunWorkers("vanilla", 2, o);
    EXPECT_THAT(r[0], StatusIs(absl::StatusCode::kInvalidArgument,
                               "holds 50 node states"));
    EXPECT_THAT(r[0], StatusIs(absl::StatusCode::kInvalidArgument,
                               "validation batch 0 (of 200 events) reads"));
    EXPECT_FALSE(r[1].ok());
  }
  // Room for every evaluation batch, not for a training batch of 2000.
  o.working_set.budget_bytes = 700 * bytes;
  o.optim.batch_size = 2000;
  int refused = 0;  // the other worker may see its peer gone first
  for (auto& r : RunWorkers("vanilla", 2, o)) {
    ASSERT_FALSE(r.ok());
    refused += absl::StrContains(
        r.status().message(), "--memory-cache-bytes is too small for batch 0");
  }
  EXPECT_GE(refused, 1);
  // TGB's ranking reads every candidate destination's state at once.
  TrainOptions tgb = o;
  tgb.optim.batch_size = 200;
  tgb.eval.protocol = Protocol::kTgb;
  tgb.eval.tgb_negatives = 20;
  for (auto& r : RunWorkers("vanilla", 2, tgb)) {
    EXPECT_THAT(r, StatusIs(absl::StatusCode::kInvalidArgument,
                            "--protocol tgb does not run with "
                            "--memory-cache-bytes"));
  }
  EXPECT_THAT(Train(o, Quiet()),
              StatusIs(absl::StatusCode::kInvalidArgument, "--workers N"));
}

// Whole-job checkpoints: a 2-worker DepTGL job (its boundary decisions
// depend on the gradient-norm EMA, which crosses epochs: the checkpoint
// carries it) stopped after epoch 2 and resumed on fresh stores and a fresh
// coordinator ends exactly where an uninterrupted 3-epoch job ends. A single
// process can take the cluster's checkpoint over (another worker count: it
// continues, it does not reproduce).
// Equal, NaN included (figures a protocol does not compute).
void ExpectSame(double a, double b, const std::string& what) {
  EXPECT_TRUE((std::isnan(a) && std::isnan(b)) || a == b)
      << what << ": " << a << " against " << b;
}

void ExpectSameEvaluation(const TrainResult& a, const TrainResult& b,
                          const std::string& what) {
  ASSERT_EQ(a.epochs.size(), b.epochs.size()) << what;
  for (size_t i = 0; i < a.epochs.size(); ++i) {
    const EpochResult &x = a.epochs[i], &y = b.epochs[i];
    const std::string e = absl::StrCat(what, ", epoch ", i + 1, " ");
    ExpectSame(x.train_loss, y.train_loss, e + "train_loss");
    ExpectSame(x.val_ap, y.val_ap, e + "val_ap");
    ExpectSame(x.val_auc, y.val_auc, e + "val_auc");
    ExpectSame(x.val_ap_batch_mean, y.val_ap_batch_mean, e + "ap_batch_mean");
    ExpectSame(x.val_new_node_ap, y.val_new_node_ap, e + "new_node_ap");
    ExpectSame(x.val_new_node_auc, y.val_new_node_auc, e + "new_node_auc");
    ExpectSame(x.val_new_node_ap_batch_mean, y.val_new_node_ap_batch_mean,
               e + "new_node_ap_batch_mean");
    ExpectSame(x.val_loss, y.val_loss, e + "val_loss");
    ExpectSame(x.val_mrr, y.val_mrr, e + "val_mrr");
  }
  EXPECT_EQ(a.best_epoch, b.best_epoch) << what;
  const TestResult &x = a.test, &y = b.test;
  ExpectSame(x.ap, y.ap, what + " test ap");
  ExpectSame(x.auc, y.auc, what + " test auc");
  ExpectSame(x.ap_batch_mean, y.ap_batch_mean, what + " test ap_batch_mean");
  ExpectSame(x.auc_batch_mean, y.auc_batch_mean, what + " auc_batch_mean");
  ExpectSame(x.new_node_ap, y.new_node_ap, what + " test new_node_ap");
  ExpectSame(x.new_node_auc, y.new_node_auc, what + " test new_node_auc");
  ExpectSame(x.new_node_ap_batch_mean, y.new_node_ap_batch_mean,
             what + " test new_node_ap_batch_mean");
  EXPECT_EQ(x.events, y.events) << what;
  EXPECT_EQ(x.new_node_events, y.new_node_events) << what;
  ExpectSame(a.parameter_checksum, b.parameter_checksum, what + " checksum");
}

// The workers share each validation and test (every rank replays the
// batches before its range, eval/eval_share.h) and get exactly the figures
// rank 0 alone gets: for each model, several policies, 3 workers, and
// splits forced to either end (a replay as costly as scoring, or free).
TEST(DistributedTrainTest, SharedEvaluationEqualsLeaderAlone) {
  struct Case {
    const char* policy;
    int world;
    const char* model;
    double replay_cost;  // < 0: measured
  };
  for (const Case& c :
       {Case{"vanilla", 2, "tgn", -1}, Case{"vanilla", 2, "tgn", 0.0},
        Case{"vanilla", 2, "tgn", 1.0},
        Case{"deptgl:replay+sync", 2, "jodie", -1},
        Case{"full-cache", 3, "apan", 0.3}, Case{"pipetgl", 2, "tgn", -1},
        Case{"vanilla", 2, "tgat", -1}, Case{"vanilla", 3, "dysat", 0.5}}) {
    const std::string what = absl::StrCat(c.policy, " x", c.world, " ", c.model,
                                          " cost ", c.replay_cost);
    TrainOptions o = SmallRun();
    o.data.max_events = 12000;
    o.model.kind = *model::ParseModelKind(c.model);
    o.eval.share_replay_cost = c.replay_cost;
    TrainOptions leader = o;
    leader.eval.shared = false;
    auto alone = RunWorkers(c.policy, c.world, leader);
    auto shared = RunWorkers(c.policy, c.world, o);
    for (int r = 0; r < c.world; ++r) {
      ASSERT_THAT(alone[r], IsOk()) << what;
      ASSERT_THAT(shared[r], IsOk()) << what;
    }
    ExpectSameEvaluation(*alone[0], *shared[0], what);
    // Every rank has the figures, and each scored a part.
    for (int r = 1; r < c.world; ++r) {
      ExpectSame(shared[r]->test.ap, shared[0]->test.ap, what + " rank test");
    }
    ASSERT_EQ(shared[0]->per_worker.size(), static_cast<size_t>(c.world));
    EXPECT_GT(shared[0]->per_worker[0].eval.scored_batches, 0) << what;
    EXPECT_GT(shared[0]->per_worker[c.world - 1].eval.scored_batches, 0)
        << what;
    EXPECT_EQ(alone[0]->per_worker[c.world - 1].eval.scored_batches, 0) << what;
    EXPECT_GT(shared[0]->per_worker[0].eval.memory_bytes_received, 0) << what;
  }
}

TEST(DistributedTrainTest, ResumedClusterEqualsAnUninterruptedOne) {
  const std::string policy = "deptgl:replay+sync";  // no timing-based pruning
  const std::filesystem::path root =
      std::filesystem::temp_directory_path() /
      ("mnemo_dist_resume_" + std::to_string(getpid()));
  std::filesystem::remove_all(root);
  TrainOptions o = SmallRun();
  o.optim.epochs = 3;
  o.policy.deptgl.sync_every = 4;
  // A learning rate at which an early epoch stays the best: its test
  // figures then cross the checkpoint (the bounded job below keeps no
  // memory).
  o.optim.lr = 0.01;
  o.run.out_dir = (root / "full").string();
  auto full = RunWorkers(policy, 2, o);
  for (auto& r : full) ASSERT_THAT(r, IsOk());
  ASSERT_GT(full[0]->per_worker[0].policy.boundaries_skipped, 0);

  o.run.out_dir = (root / "part").string();
  o.optim.epochs = 2;
  for (auto& r : RunWorkers(policy, 2, o)) ASSERT_THAT(r, IsOk());
  EXPECT_TRUE(std::filesystem::exists(root / "part" / "checkpoints" /
                                      "epoch-0002" / "manifest.yaml"));
  o.optim.epochs = 3;
  o.run.resume_dir = o.run.out_dir;
  auto resumed = RunWorkers(policy, 2, o);
  for (auto& r : resumed) ASSERT_THAT(r, IsOk());
  ASSERT_EQ(resumed[0]->epochs.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(resumed[0]->epochs[i].train_loss, full[0]->epochs[i].train_loss)
        << i;
    EXPECT_EQ(resumed[0]->epochs[i].val_ap, full[0]->epochs[i].val_ap) << i;
  }
  EXPECT_EQ(resumed[0]->test.ap, full[0]->test.ap);
  EXPECT_EQ(resumed[0]->test.new_node_ap, full[0]->test.new_node_ap);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(resumed[r]->parameter_checksum, full[r]->parameter_checksum);
  }

  // The same job with a bounded working set (the leader tests each best
  // epoch when it evaluates it, and checkpoints those figures instead of a
  // memory) resumes to the unbounded job's result too.
  TrainOptions bounded = o;
  bounded.run.resume_dir.clear();
  bounded.run.out_dir = (root / "bounded").string();
  bounded.optim.epochs = 2;
  bounded.working_set.budget_bytes =
      700 * memory::HeldStateBytes(model::LayoutOf(o.model, 0));
  for (auto& r : RunWorkers(policy, 2, bounded)) ASSERT_THAT(r, IsOk());
  bounded.optim.epochs = 3;
  bounded.run.resume_dir = bounded.run.out_dir;
  auto bounded_resumed = RunWorkers(policy, 2, bounded);
  for (auto& r : bounded_resumed) ASSERT_THAT(r, IsOk());
  ASSERT_EQ(bounded_resumed[0]->epochs.size(), 3u);
  std::printf("best epoch %d of 3, test AP %.5f\n", full[0]->best_epoch,
              full[0]->test.ap);
  // Epoch 1 or 2: tested before the part run's checkpoint (epoch 2). Which
  // one moves with rounding (a fused kernel made it 2 on one machine).
  EXPECT_LE(full[0]->best_epoch, 2);
  EXPECT_EQ(bounded_resumed[0]->best_epoch, full[0]->best_epoch);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(bounded_resumed[0]->epochs[i].val_ap, full[0]->epochs[i].val_ap)
        << i;
  }
  EXPECT_EQ(bounded_resumed[0]->test.ap, full[0]->test.ap);
  EXPECT_EQ(bounded_resumed[0]->test.new_node_ap, full[0]->test.new_node_ap);
  EXPECT_EQ(bounded_resumed[0]->parameter_checksum,
            full[0]->parameter_checksum);

  TrainOptions single = o;
  single.run.out_dir = (root / "single").string();
  single.optim.epochs = 4;
  auto taken_over = Train(single, Quiet());
  ASSERT_THAT(taken_over, IsOk());
  ASSERT_EQ(taken_over->epochs.size(), 4u);
  EXPECT_EQ(taken_over->epochs[2].val_ap, full[0]->epochs[2].val_ap);
  std::filesystem::remove_all(root);
}

}  // namespace
}  // namespace mnemo::runtime
