// The served model with its memory in a memory store (`mnemo serve
// --memstore`): a push that fails part way applies nothing, and the store
// is written again before it is read, so what follows is what a server
// that holds its memory itself computes.
#include "trainer/serve/serving_model.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "memstore/node_state_store.h"
#include "tests/unit/runtime/train_test_util.h"
#include "trainer/runtime/checkpoint/resume_point.h"

namespace mnemo::serve {
namespace {

namespace fs = std::filesystem;

// A real store whose next push, when armed, writes its first half and then
// fails: a cluster where one shard took its part of the push and another
// was down.
class HalfPushStore : public memstore::NodeStateStore {
 public:
  explicit HalfPushStore(std::unique_ptr<memstore::NodeStateStore> inner)
      : inner_(std::move(inner)) {}
  void FailNextPush() { fail_ = true; }
  int64_t failed_pushes() const { return failed_; }

  absl::Status Pull(absl::Span<const int64_t> ids,
                    memstore::PulledStates* out) override {
    return inner_->Pull(ids, out);
  }
  absl::Status Push(absl::Span<const int64_t> ids,
                    absl::Span<const float> states,
                    absl::Span<const uint64_t> versions,
                    absl::Span<const double> times, int32_t writer) override {
    if (!fail_) return inner_->Push(ids, states, versions, times, writer);
    fail_ = false;
    ++failed_;
    const size_t half = ids.size() / 2;
    const size_t dim = ids.empty() ? 0 : states.size() / ids.size();
    absl::Status s =
        inner_->Push(ids.subspan(0, half), states.subspan(0, half * dim),
                     versions.subspan(0, half), times.subspan(0, half), writer);
    if (!s.ok()) return s;
    return absl::UnavailableError("shard 1 is down (injected)");
  }
  absl::StatusOr<memstore::NodeStateView> Get(int64_t id) override {
    return inner_->Get(id);
  }
  absl::StatusOr<std::vector<memstore::NodeStateView>> ListRecent(
      int64_t n) override {
    return inner_->ListRecent(n);
  }
  absl::StatusOr<memstore::StoreStats> Stats() override {
    return inner_->Stats();
  }
  absl::Status Checkpoint(const std::string& dir) override {
    return inner_->Checkpoint(dir);
  }
  absl::Status Close() override { return inner_->Close(); }
  int dim() const override { return inner_->dim(); }

 private:
  std::unique_ptr<memstore::NodeStateStore> inner_;
  bool fail_ = false;
  int64_t failed_ = 0;
};

class ServingModelStoreTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(fs::temp_directory_path() /
                        ("mnemo_serving_model_" + std::to_string(getpid())));
    runtime::TrainOptions o = runtime::testing::SmallRun();
    o.optim.epochs = 1;
    o.run.out_dir = (*dir_ / "run").string();
    auto trained = runtime::Train(o, runtime::testing::Quiet());
    ASSERT_TRUE(trained.ok()) << trained.status();
    auto point = runtime::FindResumePoint(o.run.out_dir);
    ASSERT_TRUE(point.ok()) << point.status();
    options_ = new ServingOptions;
    options_->train = o;
    options_->checkpoint = point->FileFor(0, 1);
    options_->replay_test = false;
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
    delete options_;
  }

  // The test period's events [first, first + n) as an ingested batch.
  static services::DecodedBatch Batch(const ServingModel& m, int64_t first,
                                      int64_t n) {
    const data::EventLog& log = m.task().log;
    services::DecodedBatch b;
    for (int64_t e = m.test_begin() + first; e < m.test_begin() + first + n;
         ++e) {
      b.src.push_back(log.src[e]);
      b.dst.push_back(log.dst[e]);
      b.t.push_back(log.t[e]);
      b.negative.push_back(-1);
      for (int j = 0; j < log.edge_feature_dim; ++j) {
        b.features.push_back(log.edge_feature(e)[j]);
      }
    }
    return b;
  }

  static fs::path* dir_;
  static ServingOptions* options_;
};

fs::path* ServingModelStoreTest::dir_ = nullptr;
ServingOptions* ServingModelStoreTest::options_ = nullptr;

TEST_F(ServingModelStoreTest, APushThatFailsPartWayAppliesNothing) {
  auto local = ServingModel::Load(*options_);
  ASSERT_TRUE(local.ok()) << local.status();
  // A store of another record width is refused, naming the right one.
  memstore::NodeStateStoreOptions so;
  so.dim = 1;
  {
    auto narrow = memstore::Open(so);
    ASSERT_TRUE(narrow.ok());
    ServingOptions o = *options_;
    o.store = narrow->get();
    auto refused = ServingModel::Load(o);
    ASSERT_FALSE(refused.ok());
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
    const std::string msg(refused.status().message());
    const size_t at = msg.rfind("--dim ");
    ASSERT_NE(at, std::string::npos) << msg;
    so.dim = std::stoi(msg.substr(at + 6));
  }
  auto inner = memstore::Open(so);
  ASSERT_TRUE(inner.ok()) << inner.status();
  HalfPushStore store(*std::move(inner));
  ServingOptions o = *options_;
  o.store = &store;
  auto stored = ServingModel::Load(o);
  ASSERT_TRUE(stored.ok()) << stored.status();
  ServingModel& a = **local;
  ServingModel& b = **stored;

  auto same = [](const absl::StatusOr<Ingested>& x,
                 const absl::StatusOr<Ingested>& y) {
    ASSERT_TRUE(x.ok()) << x.status();
    ASSERT_TRUE(y.ok()) << y.status();
    EXPECT_EQ(x->negative, y->negative);
    ASSERT_EQ(x->pos.size(), y->pos.size());
    for (size_t i = 0; i < x->pos.size(); ++i) {
      EXPECT_NEAR(x->pos[i], y->pos[i], 1e-6) << i;
      EXPECT_NEAR(x->neg[i], y->neg[i], 1e-6) << i;
    }
  };
  same(a.Ingest(Batch(a, 0, 100)), b.Ingest(Batch(b, 0, 100)));

  // The second batch's push: half of its states reach the store.
  store.FailNextPush();
  const absl::StatusOr<Ingested> failed = b.Ingest(Batch(b, 100, 100));
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(failed.status().message()),
              ::testing::HasSubstr("nothing applied"));
  EXPECT_EQ(store.failed_pushes(), 1);
  EXPECT_EQ(b.version().events_applied, 100);
  EXPECT_EQ(b.now(), a.now());

  // Sent again, it computes what it would have; so do the batches after,
  // and a query.
  same(a.Ingest(Batch(a, 100, 100)), b.Ingest(Batch(b, 100, 100)));
  same(a.Ingest(Batch(a, 200, 100)), b.Ingest(Batch(b, 200, 100)));
  const std::vector<int32_t> src(8, a.task().log.src[a.test_begin() + 300]);
  std::vector<int32_t> dst(8);
  std::iota(dst.begin(), dst.end(), 0);
  const std::vector<double> t(8, a.now());
  auto qa = a.Score(src, dst, t);
  auto qb = b.Score(src, dst, t);
  ASSERT_TRUE(qa.ok() && qb.ok());
  for (size_t i = 0; i < qa->logits.size(); ++i) {
    EXPECT_NEAR(qa->logits[i], qb->logits[i], 1e-6) << i;
  }
}

}  // namespace
}  // namespace mnemo::serve
