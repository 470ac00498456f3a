// End-to-end training runs on real data (CollegeMsg): the model learns,
// checkpoint/resume reproduces an uninterrupted run, bad options fail.
#include "trainer/runtime/train.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <sstream>

#include "tests/unit/runtime/train_test_util.h"
#include "trainer/data/event_log.h"
#include "trainer/model/model.h"
#include "trainer/platform/cuda_device.h"
#include "trainer/runtime/checkpoint/checkpoint.h"
#include "trainer/runtime/optim/fused_adam.h"
#include "util/status_matchers.h"

namespace mnemo::runtime {
namespace {
namespace fs = std::filesystem;
using testing::Quiet;
using testing::SharedData;
using testing::SmallRun;

fs::path TempDir(const std::string& name) {
  fs::path p = fs::temp_directory_path() /
               ("mnemo_train_test_" + name + "_" + std::to_string(getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

TEST(TrainTest, TgnLearnsOnCollegeMsg) {
  TrainOptions o = SmallRun();
  auto r = Train(o, Quiet());
  ASSERT_THAT(r, IsOk());
  ASSERT_EQ(r->epochs.size(), 2u);
  EXPECT_GT(r->test.ap, 0.75);
  EXPECT_GT(r->test.auc, 0.75);
  EXPECT_GT(r->test.new_node_ap, 0.6);
  EXPECT_GT(r->epochs[0].grad_norm_mean, 0);
  // One optimizer step per training batch.
  EXPECT_EQ(r->epochs[0].steps,
            (r->epochs[0].train_events + o.optim.batch_size - 1) /
                o.optim.batch_size);
  EXPECT_GT(r->test.events, 0);
}

TEST(TrainTest, JodieLearnsOnCollegeMsg) {
  TrainOptions o = SmallRun();
  o.model.kind = model::ModelKind::kJodie;
  o.optim.epochs = 3;
  auto r = Train(o, Quiet());
  ASSERT_THAT(r, IsOk());
  EXPECT_GT(r->test.ap, 0.6);
}

TEST(TrainTest, ResumeGivesTheSameResultAsAnUninterruptedRun) {
  TrainOptions o = SmallRun();
  o.data.max_events = 15000;
  o.optim.epochs = 3;
  fs::path full = TempDir("full"), part = TempDir("part");
  o.run.out_dir = full.string();
  auto uninterrupted = Train(o, Quiet());
  ASSERT_THAT(uninterrupted, IsOk());

  o.run.out_dir = part.string();
  o.optim.epochs = 1;
  ASSERT_THAT(Train(o, Quiet()), IsOk());
  o.optim.epochs = 3;
  o.run.resume_dir = part.string();
  auto resumed = Train(o, Quiet());
  ASSERT_THAT(resumed, IsOk());

  ASSERT_EQ(resumed->epochs.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(resumed->epochs[i].train_loss,
              uninterrupted->epochs[i].train_loss);
    EXPECT_EQ(resumed->epochs[i].val_ap, uninterrupted->epochs[i].val_ap);
    // The checkpoint's history keeps each epoch's steps.
    EXPECT_EQ(resumed->epochs[i].steps, uninterrupted->epochs[i].steps);
    EXPECT_GT(resumed->epochs[i].steps, 0);
  }
  EXPECT_EQ(resumed->best_epoch, uninterrupted->best_epoch);
  EXPECT_EQ(resumed->test.ap, uninterrupted->test.ap);
  EXPECT_EQ(resumed->test.new_node_ap, uninterrupted->test.new_node_ap);
  EXPECT_TRUE(fs::exists(part / "summary.json"));
  EXPECT_TRUE(fs::exists(part / "metrics.csv"));
  EXPECT_TRUE(fs::exists(part / "id_map.csv"));
  EXPECT_TRUE(fs::exists(part / "checkpoints" / "epoch-0003.pt"));
  std::ifstream in(part / "summary.json");
  std::stringstream ss;
  ss << in.rdbuf();
  for (const char* key :
       {"\"dataset\"", "\"model\"", "\"policy\"", "\"workers\"", "\"config\"",
        "\"epochs\"", "\"val_new_node_auc\"", "\"train_events_per_second\"",
        "\"test\"", "\"ap_batch_mean\"", "\"new_node_ap_batch_mean\"",
        "\"time_breakdown_seconds\"", "\"peak_rss_bytes\"", "\"version\"",
        "\"device\": \"cpu\"", "\"gpu_name\"", "\"peak_gpu_bytes\""}) {
    EXPECT_NE(ss.str().find(key), std::string::npos) << key;
  }
  fs::remove_all(full);
  fs::remove_all(part);
}

// A mailbox (APAN: ring slots, their times, counts) survives a checkpoint:
// resumed, the run equals the uninterrupted one.
TEST(TrainTest, ApanResumeGivesTheSameResult) {
  TrainOptions o = SmallRun();
  o.model.kind = model::ModelKind::kApan;
  o.data.max_events = 6000;
  o.optim.epochs = 2;
  fs::path full = TempDir("apan_full"), part = TempDir("apan_part");
  o.run.out_dir = full.string();
  auto uninterrupted = Train(o, Quiet());
  ASSERT_THAT(uninterrupted, IsOk());
  o.run.out_dir = part.string();
  o.optim.epochs = 1;
  ASSERT_THAT(Train(o, Quiet()), IsOk());
  o.optim.epochs = 2;
  o.run.resume_dir = part.string();
  auto resumed = Train(o, Quiet());
  ASSERT_THAT(resumed, IsOk());
  ASSERT_EQ(resumed->epochs.size(), 2u);
  EXPECT_EQ(resumed->epochs[1].train_loss, uninterrupted->epochs[1].train_loss);
  EXPECT_EQ(resumed->test.ap, uninterrupted->test.ap);
  EXPECT_EQ(resumed->test.new_node_ap, uninterrupted->test.new_node_ap);
  fs::remove_all(full);
  fs::remove_all(part);
}

TEST(TrainTest, SameSeedSameResult) {
  TrainOptions o = SmallRun();
  o.data.max_events = 8000;
  o.optim.epochs = 1;
  auto a = Train(o, Quiet());
  auto b = Train(o, Quiet());
  ASSERT_THAT(a, IsOk());
  ASSERT_THAT(b, IsOk());
  EXPECT_EQ(a->epochs[0].train_loss, b->epochs[0].train_loss);
  EXPECT_EQ(a->test.ap, b->test.ap);
  o.optim.seed = 8;
  auto c = Train(o, Quiet());
  ASSERT_THAT(c, IsOk());
  EXPECT_NE(a->epochs[0].train_loss, c->epochs[0].train_loss);
}

// The loop builds the next batch (samples its neighbours, builds its
// tensors and stages them) while one computes: it must compute exactly
// what the loop that builds each batch in turn computes, for every kind of
// batch (neighbours, time deltas, a mailbox, snapshots).
TEST(TrainTest, PreparingAheadComputesWhatInOrderDoes) {
  for (const model::ModelKind kind :
       {model::ModelKind::kTgn, model::ModelKind::kJodie,
        model::ModelKind::kApan, model::ModelKind::kTgat,
        model::ModelKind::kDysat}) {
    const std::string name(model::ModelName(kind));
    TrainOptions o = SmallRun();
    o.model.kind = kind;
    o.data.max_events = 6000;
    o.optim.epochs = 2;
    auto ahead = Train(o, Quiet());
    ASSERT_THAT(ahead, IsOk()) << name;
    o.checks.prepare_ahead = false;
    auto in_order = Train(o, Quiet());
    ASSERT_THAT(in_order, IsOk()) << name;
    for (int e = 0; e < 2; ++e) {
      EXPECT_EQ(ahead->epochs[e].train_loss, in_order->epochs[e].train_loss)
          << name << " epoch " << e + 1;
      EXPECT_EQ(ahead->epochs[e].grad_norm_mean,
                in_order->epochs[e].grad_norm_mean)
          << name << " epoch " << e + 1;
      EXPECT_EQ(ahead->epochs[e].val_ap, in_order->epochs[e].val_ap) << name;
    }
    EXPECT_EQ(ahead->test.ap, in_order->test.ap) << name;
    EXPECT_EQ(ahead->test.new_node_ap, in_order->test.new_node_ap) << name;
    EXPECT_EQ(ahead->parameter_checksum, in_order->parameter_checksum) << name;
    EXPECT_THAT(ahead->summary_json,
                ::testing::HasSubstr("\"batch_lookahead\": \"prepare+stage\""))
        << name;
    EXPECT_THAT(in_order->summary_json,
                ::testing::HasSubstr("\"batch_lookahead\": \"none\""))
        << name;
    // The phases are still timed, each on its own.
    for (const auto& [phase, seconds] : ahead->time_breakdown_seconds) {
      if (phase == "evaluation" || phase == "load") continue;
      if (phase == "memory_update" && (kind == model::ModelKind::kTgat ||
                                       kind == model::ModelKind::kDysat)) {
        continue;
      }
      EXPECT_GT(seconds, 0) << name << " " << phase;
    }
  }
}

// A diverging run (here: a learning rate of 1e10) used to hang in the AUC
// computation on NaN scores; it stops with an error naming where, and keeps
// the last good checkpoint.
TEST(TrainTest, DivergenceStopsWithAClearError) {
  TrainOptions o = SmallRun();
  o.optim.lr = 1e10;
  o.optim.epochs = 3;
  fs::path out = TempDir("diverge");
  o.run.out_dir = out.string();
  auto r = Train(o, Quiet());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(r.status().message()),
              ::testing::AllOf(::testing::HasSubstr("epoch "),
                               ::testing::HasSubstr("not finite"),
                               ::testing::HasSubstr("--lr")))
      << r.status();
  EXPECT_FALSE(fs::exists(out / "summary.json"));
  fs::remove_all(out);
}

// NaN or inf in Adam's saved state, in a file whose checksum holds (it was
// taken after the damage), is refused when the checkpoint loads, naming the
// file and the tensor, like parameters and memory that are not finite: not
// loaded, to fail at the next batch blaming that same file as the last good
// one.
TEST(TrainTest, NonFiniteOptimizerStateIsRefused) {
  TrainOptions o = SmallRun();
  o.data.max_events = 3000;
  o.optim.epochs = 1;
  const fs::path out = TempDir("adam_state");
  o.run.out_dir = out.string();
  ASSERT_THAT(Train(o, Quiet()), IsOk());
  const std::string file = (out / "checkpoints" / "epoch-0001.pt").string();
  std::string good;
  {
    std::ifstream in(file, std::ios::binary);
    good.assign(std::istreambuf_iterator<char>(in), {});
  }
  data::LoadOptions lo;
  lo.max_events = o.data.max_events;
  auto log = data::LoadEventLog(SharedData() + "/CollegeMsg.txt.gz", lo);
  ASSERT_THAT(log, IsOk());
  for (const std::string state : {"exp_avg", "exp_avg_sq"}) {
    model::ModelOptions mo = model::WithDefaults(o.model);
    mo.num_nodes = log->num_nodes;
    model::Model m = model::MakeModel(mo);
    torch::optim::Adam adam(m->parameters(), torch::optim::AdamOptions(1e-3));
    TrainingRecord record;
    auto loaded = LoadCheckpointFile(file, *m, adam, log->num_nodes,
                                     m->layout(), &record, nullptr);
    ASSERT_THAT(loaded, IsOk());
    const torch::Tensor p = m->parameters().back();
    auto& st = static_cast<torch::optim::AdamParamState&>(
        *adam.state().at(OptimizerStateKey(p)));
    torch::Tensor t = state == "exp_avg" ? st.exp_avg() : st.exp_avg_sq();
    t.view({-1})[0] = state == "exp_avg"
                          ? std::nan("")
                          : std::numeric_limits<float>::infinity();
    ASSERT_THAT(SaveCheckpoint(o.run.out_dir, 1, o.optim.seed, *m, adam, record,
                               loaded->meta),
                IsOk());
    TrainOptions resume = o;
    resume.optim.epochs = 2;
    resume.run.resume_dir = o.run.out_dir;
    auto r = Train(resume, Quiet());
    EXPECT_TRUE(absl::IsDataLoss(r.status())) << state << ": " << r.status();
    EXPECT_THAT(r.status().message(), ::testing::HasSubstr(file));
    EXPECT_THAT(r.status().message(),
                ::testing::HasSubstr("optimizer state " + state));
    EXPECT_FALSE(fs::exists(out / "checkpoints" / "epoch-0002.pt"));
    std::ofstream(file, std::ios::binary | std::ios::trunc) << good;
  }
  fs::remove_all(out);
}

// --profile: the operator table of the first epoch's batches; a file that
// cannot be written is an error naming the flag.
TEST(TrainTest, ProfileWritesAnOperatorTable) {
  TrainOptions o = SmallRun();
  o.data.max_events = 6000;
  o.optim.epochs = 1;
  const fs::path dir = TempDir("profile");
  o.run.profile_path = (dir / "profile.md").string();
  o.run.profile_batches = 3;
  ASSERT_THAT(Train(o, Quiet()), IsOk());
  std::ifstream in(o.run.profile_path);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_THAT(text.str(), ::testing::HasSubstr("3 training batches"));
  EXPECT_THAT(text.str(), ::testing::HasSubstr("| aten::mm |"));

  o.run.profile_path = (dir / "missing" / "profile.md").string();
  EXPECT_THAT(Train(o, Quiet()),
              StatusIs(absl::StatusCode::kPermissionDenied, "--profile"));
  fs::remove_all(dir);
}

// The names the CLI parses (services/cli/train_flags.cc) and summary.json and
// the run-configuration text write back; a bad one names its flag.
TEST(TrainTest, OptionNamesRoundTrip) {
  for (Protocol p : {Protocol::kTgnReference, Protocol::kMnemo}) {
    auto parsed = ParseProtocol(ProtocolName(p));
    ASSERT_THAT(parsed, IsOk());
    EXPECT_EQ(*parsed, p);
  }
  for (Precision p : {Precision::kFp32, Precision::kBf16}) {
    auto parsed = ParsePrecision(PrecisionName(p));
    ASSERT_THAT(parsed, IsOk());
    EXPECT_EQ(*parsed, p);
  }
  for (PushScope p : {PushScope::kAdvanced, PushScope::kOwned}) {
    auto parsed = ParsePushScope(PushScopeName(p));
    ASSERT_THAT(parsed, IsOk());
    EXPECT_EQ(*parsed, p);
  }
  for (SyncScope p : {SyncScope::kReads, SyncScope::kFrontier}) {
    auto parsed = ParseSyncScope(SyncScopeName(p));
    ASSERT_THAT(parsed, IsOk());
    EXPECT_EQ(*parsed, p);
  }
  for (auto p :
       {data::NeighborStrategy::kRecent, data::NeighborStrategy::kUniform}) {
    auto parsed = data::ParseNeighborStrategy(data::NeighborStrategyName(p));
    ASSERT_THAT(parsed, IsOk());
    EXPECT_EQ(*parsed, p);
  }
  for (auto p : {plan::Partitioner::kMetis, plan::Partitioner::kGreedy,
                 plan::Partitioner::kTime}) {
    auto parsed = plan::ParsePartitioner(plan::PartitionerName(p));
    ASSERT_THAT(parsed, IsOk());
    EXPECT_EQ(*parsed, p);
  }
  for (const char* name : {"cpu", "cuda", "cuda:0", "cuda:12"}) {
    auto parsed = ParseDevice(name);
    ASSERT_THAT(parsed, IsOk()) << name;
    EXPECT_EQ(DeviceName(*parsed), name);
  }
  EXPECT_EQ(ParseDevice("cuda:3")->index, 3);
  EXPECT_EQ(ParseDevice("cuda")->index, -1);
  for (const char* bad : {"gpu", "cuda:", "cuda:-1", "cuda:1x", "CPU", ""}) {
    EXPECT_THAT(ParseDevice(bad),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         "--device must be cpu, cuda or cuda:N"))
        << bad;
  }
  EXPECT_EQ(DeviceName(TrainOptions().compute.device), "cpu");
  EXPECT_EQ(ProtocolName(TrainOptions().eval.protocol), "tgn-reference");
  EXPECT_THAT(
      ParseProtocol("x"),
      StatusIs(absl::StatusCode::kInvalidArgument,
               "--protocol must be tgn-reference, mnemo or tgb, got 'x'"));
  EXPECT_THAT(ParsePrecision("fp16"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "--precision must be fp32 or bf16, got 'fp16'"));
  EXPECT_THAT(ParsePushScope("all"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "--push-scope must be advanced or owned, got 'all'"));
  EXPECT_THAT(ParseSyncScope(""),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "--sync-scope must be reads or frontier, got ''"));
  EXPECT_THAT(data::ParseNeighborStrategy("Recent"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "--neighbor-strategy must be recent or uniform"));
  EXPECT_THAT(plan::ParsePartitioner("kway"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "--partitioner must be metis, greedy or time"));
}

// What the options leave open, WithModelDefaults fills from the model.
TEST(TrainTest, ModelDefaultsFillWhatIsLeftOpen) {
  TrainOptions o;
  EXPECT_FALSE(o.model.neighbor_strategy.has_value());
  TrainOptions d = WithModelDefaults(o);  // tgn
  EXPECT_EQ(d.model.neighbor_strategy, data::NeighborStrategy::kRecent);
  EXPECT_DOUBLE_EQ(d.model.dropout, 0.2);
  o.model.kind = model::ModelKind::kTgat;
  d = WithModelDefaults(o);
  EXPECT_EQ(d.model.neighbor_strategy, data::NeighborStrategy::kUniform);
  EXPECT_DOUBLE_EQ(d.model.dropout, 0.1);
  o.model.kind = model::ModelKind::kApan;
  d = WithModelDefaults(o);
  EXPECT_EQ(d.model.neighbor_strategy, data::NeighborStrategy::kRecent);
  EXPECT_DOUBLE_EQ(d.model.dropout, 0.1);
  // Given values stay.
  o.model.kind = model::ModelKind::kTgat;
  o.model.neighbor_strategy = data::NeighborStrategy::kRecent;
  o.model.dropout = 0.3;
  d = WithModelDefaults(o);
  EXPECT_EQ(d.model.neighbor_strategy, data::NeighborStrategy::kRecent);
  EXPECT_DOUBLE_EQ(d.model.dropout, 0.3);
}

// --device cuda on a machine without a GPU (CI's): an error that says why
// and what to do, before any data is read.
TEST(TrainTest, CudaWithoutAGpuSaysWhy) {
  if (platform::CudaDeviceCount() > 0) GTEST_SKIP() << "a GPU is present";
  TrainOptions o = SmallRun();
  o.compute.device = *ParseDevice("cuda");
  absl::StatusOr<TrainResult> r = Train(o, Quiet());
  EXPECT_THAT(r, StatusIs(absl::StatusCode::kFailedPrecondition,
                          "--device cuda: no CUDA GPU"));
  EXPECT_THAT(r,
              StatusIs(absl::StatusCode::kFailedPrecondition, "--device cpu"));
}

TEST(TrainTest, BadOptionsAreRejected) {
  TrainOptions o = SmallRun();
  // An unknown --model (or --protocol, ...) cannot reach Train(): the CLI
  // parses the names into enums (cli_test EachBadChoiceIsAUsageError).
  o.model.memory_dim = 33;  // 33 + 32 not divisible by 2 heads
  EXPECT_THAT(Train(o, Quiet()),
              StatusIs(absl::StatusCode::kInvalidArgument, "--heads"));
  // The new models' own options, each named.
  o = SmallRun();
  o.model.kind = model::ModelKind::kTgat;
  o.model.layers = 3;
  EXPECT_THAT(Train(o, Quiet()),
              StatusIs(absl::StatusCode::kInvalidArgument, "--layers"));
  o = SmallRun();
  o.model.kind = model::ModelKind::kTgat;
  o.model.embedding_dim = 33;  // not divisible by 2 heads
  EXPECT_THAT(Train(o, Quiet()),
              StatusIs(absl::StatusCode::kInvalidArgument, "--embedding-dim"));
  o = SmallRun();
  o.model.kind = model::ModelKind::kApan;
  o.model.mailbox = 1;
  EXPECT_THAT(Train(o, Quiet()),
              StatusIs(absl::StatusCode::kInvalidArgument, "--mailbox"));
  o = SmallRun();
  o.model.kind = model::ModelKind::kDysat;
  o.model.snapshots = 0;
  EXPECT_THAT(Train(o, Quiet()),
              StatusIs(absl::StatusCode::kInvalidArgument, "--snapshots"));
  o = SmallRun();
  o.model.kind = model::ModelKind::kDysat;
  o.model.snapshot_span = 0;
  EXPECT_THAT(Train(o, Quiet()),
              StatusIs(absl::StatusCode::kInvalidArgument, "--snapshot-span"));
  o = SmallRun();
  o.model.kind = model::ModelKind::kDysat;
  o.model.layers = 3;
  EXPECT_THAT(Train(o, Quiet()),
              StatusIs(absl::StatusCode::kInvalidArgument, "--layers"));
  o = SmallRun();
  o.model.dropout = -0.5;  // -1 alone means the model's default
  EXPECT_THAT(Train(o, Quiet()),
              StatusIs(absl::StatusCode::kInvalidArgument, "--dropout"));
  o = SmallRun();
  o.data.dataset = "no-such-dataset";
  EXPECT_THAT(Train(o, Quiet()),
              StatusIs(absl::StatusCode::kNotFound, "no-such-dataset"));
  o = SmallRun();
  o.run.resume_dir = TempDir("empty").string();
  EXPECT_THAT(Train(o, Quiet()),
              StatusIs(absl::StatusCode::kNotFound, "no checkpoint"));
}

// --protocol tgb end to end: validation and test report MRR and Hits@10
// (AP is not computed), the drawn negatives are written under OUT and a
// later run reads them back (same negatives, so the same seed gives the
// same MRR), whatever its --seed.
TEST(TrainTest, TgbProtocolRanksAndKeepsItsNegatives) {
  TrainOptions o = SmallRun();
  o.model.kind = model::ModelKind::kJodie;
  o.data.max_events = 4000;
  o.eval.protocol = Protocol::kTgb;
  o.eval.tgb_negatives = 20;
  const fs::path out = TempDir("tgb");
  o.run.out_dir = out.string();
  auto first = Train(o, Quiet());
  ASSERT_THAT(first, IsOk());
  EXPECT_GT(first->test.mrr, 0.0);
  EXPECT_LE(first->test.mrr, 1.0);
  EXPECT_GE(first->test.hits_at_10, first->test.mrr);
  EXPECT_TRUE(std::isnan(first->test.ap));
  for (const EpochResult& e : first->epochs) {
    EXPECT_GT(e.val_mrr, 0.0);
    EXPECT_TRUE(std::isnan(e.val_ap));
  }
  const fs::path negs = out / "tgb_negatives";
  EXPECT_TRUE(
      fs::exists(negs / "collegemsg_4000ev_hist_rnd_val_k20_seed42.ns"));
  EXPECT_TRUE(
      fs::exists(negs / "collegemsg_4000ev_hist_rnd_test_k20_seed42.ns"));
  // A second run with the first's negatives: the same figures.
  TrainOptions again = o;
  again.run.out_dir = TempDir("tgb_again").string();
  again.eval.tgb_negatives_dir = negs.string();
  auto second = Train(again, Quiet());
  ASSERT_THAT(second, IsOk());
  EXPECT_EQ(second->test.mrr, first->test.mrr);
  EXPECT_FALSE(fs::exists(fs::path(again.run.out_dir) / "tgb_negatives"));
  // Another --tgb-seed draws other negatives.
  TrainOptions reseeded = again;
  reseeded.run.out_dir = TempDir("tgb_seed").string();
  reseeded.eval.tgb_negatives_dir.clear();
  reseeded.eval.tgb_seed = 43;
  auto third = Train(reseeded, Quiet());
  ASSERT_THAT(third, IsOk());
  EXPECT_NE(third->test.mrr, first->test.mrr);
}

}  // namespace
}  // namespace mnemo::runtime
