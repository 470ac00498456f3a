// Multi-process tests of `mnemo memstore`: push/pull through the client,
// kill -9 crash recovery (write-through: every acknowledged push survives;
// write-back: exactly the last checkpoint), and a dead server failing fast.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <thread>

#include "services/memstore_client.h"
#include "tests/integration/memstore_launcher.h"
#include "util/status_matchers.h"

namespace mnemo::testing {
namespace {

namespace fs = std::filesystem;
using services::MemstoreClient;
using services::MemstoreClientOptions;

constexpr int kDim = 8;
constexpr int kBatch = 64;

float Value(int64_t id, double t, int k) {
  return static_cast<float>(id) + 0.001f * k + static_cast<float>(t);
}

// One push: ids, states, versions, times.
struct Batch {
  std::vector<int64_t> ids;
  std::vector<float> s;
  std::vector<uint64_t> v;
  std::vector<double> t;
};

// Batch b writes ids [b*kBatch, (b+1)*kBatch) at version and time
// b + 1 + offset.
Batch MakeBatch(int64_t b, int64_t offset = 0) {
  Batch out;
  for (int64_t i = 0; i < kBatch; ++i) {
    const int64_t id = b * kBatch + i;
    out.ids.push_back(id);
    out.v.push_back(static_cast<uint64_t>(b + 1 + offset));
    out.t.push_back(static_cast<double>(b + 1 + offset));
    for (int k = 0; k < kDim; ++k) out.s.push_back(Value(id, out.t.back(), k));
  }
  return out;
}

absl::Status Push(MemstoreClient& c, const Batch& b) {
  return c.Push(b.ids, b.s, b.v, b.t, 0);
}

class MemstoreIntegrationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("mnemo_it_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    server_.reset();  // kills the server even when the test failed
    if (!HasFailure()) fs::remove_all(dir_);
  }

  void StartServer(const std::vector<std::string>& extra) {
    std::vector<std::string> args = {"--data-dir", (dir_ / "data").string(),
                                     "--dim", std::to_string(kDim)};
    args.insert(args.end(), extra.begin(), extra.end());
    auto p = MemstoreProcess::Start(MemstoreProcess::Binary(), args,
                                    (dir_ / "server.log").string());
    ASSERT_THAT(p, IsOk());
    server_ = *std::move(p);
  }

  std::unique_ptr<MemstoreClient> Client(double deadline = 5) {
    MemstoreClientOptions o;
    o.addresses = {server_->address()};
    o.dim = kDim;
    o.deadline_seconds = deadline;
    auto c = MemstoreClient::Connect(o);
    EXPECT_THAT(c, IsOk());
    return c.ok() ? *std::move(c) : nullptr;
  }

  // Checks that batch b (at version and time b+1+offset) is stored exactly.
  void ExpectBatch(MemstoreClient& c, int64_t b, int64_t offset = 0) {
    const Batch want = MakeBatch(b, offset);
    memstore::PulledStates p;
    ASSERT_THAT(c.Pull(want.ids, &p), IsOk());
    EXPECT_EQ(p.version, want.v) << "batch " << b;
    EXPECT_EQ(p.time, want.t) << "batch " << b;
    EXPECT_EQ(p.states, want.s) << "batch " << b;
  }

  fs::path dir_;
  std::unique_ptr<MemstoreProcess> server_;
};

TEST_F(MemstoreIntegrationTest, PushPullQueryAndCleanShutdown) {
  StartServer({"--write-policy", "write-back"});
  auto c = Client();
  ASSERT_NE(c, nullptr);
  for (int64_t b = 0; b < 4; ++b) ASSERT_THAT(Push(*c, MakeBatch(b)), IsOk());
  for (int64_t b = 0; b < 4; ++b) ExpectBatch(*c, b);
  auto recent = c->ListRecent(3);
  ASSERT_THAT(recent, IsOk());
  ASSERT_EQ(recent->size(), 3u);
  EXPECT_EQ((*recent)[0].version, 4u);
  EXPECT_EQ((*recent)[0].time, 4.0);
  // mnemo query prints the node.
  const std::string cmd = MemstoreProcess::Binary() + " query --memstore " +
                          server_->address() + " --node 70 --json";
  FILE* f = popen(cmd.c_str(), "r");
  char buf[4096];
  std::string out;
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
  EXPECT_EQ(pclose(f), 0);
  for (const char* field : {"\"dense_id\": 70", "\"version\": 2", "\"time\": 2",
                            "\"updates\": 1", "\"writer\": 0"}) {
    EXPECT_NE(out.find(field), std::string::npos) << field << " in " << out;
  }
  // SIGTERM: write-back flushes, so a restart has everything.
  const int status = server_->Kill(SIGTERM);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << server_->Log();
  StartServer({"--write-policy", "write-back"});
  c = Client();
  for (int64_t b = 0; b < 4; ++b) ExpectBatch(*c, b);
}

TEST_F(MemstoreIntegrationTest, WriteThroughKeepsEveryAcknowledgedPush) {
  StartServer({"--write-policy", "write-through"});
  const fs::path expected = dir_ / "expected_state";
  std::atomic<bool> done{false};
  int64_t acknowledged = 0;
  {
    auto c = Client(/*deadline=*/2);
    ASSERT_NE(c, nullptr);
    std::mt19937 rng(std::random_device{}());
    const int kill_after_ms = std::uniform_int_distribution<int>(50, 400)(rng);
    std::thread killer([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(kill_after_ms));
      server_->Kill(SIGKILL);
    });
    FILE* log = std::fopen(expected.c_str(), "w");
    ASSERT_NE(log, nullptr);
    for (int64_t b = 0; b < 1000000 && !done; ++b) {
      if (!Push(*c, MakeBatch(b)).ok()) break;  // the server is gone
      // Acknowledged: record it durably before the next push.
      std::fprintf(log, "%lld\n", static_cast<long long>(b));
      std::fflush(log);
      fsync(fileno(log));
      ++acknowledged;
    }
    std::fclose(log);
    killer.join();
  }
  ASSERT_GT(acknowledged, 0) << "the server died before any push";
  StartServer({"--write-policy", "write-through"});
  auto c = Client();
  std::ifstream in(expected);
  int64_t b, checked = 0;
  while (in >> b) {
    ExpectBatch(*c, b);
    ++checked;
  }
  EXPECT_EQ(checked, acknowledged);
}

TEST_F(MemstoreIntegrationTest, WriteBackRecoversExactlyTheCheckpoint) {
  StartServer({"--write-policy", "write-back"});
  auto c = Client();
  for (int64_t b = 0; b < 3; ++b) ASSERT_THAT(Push(*c, MakeBatch(b)), IsOk());
  ASSERT_THAT(c->Checkpoint("ckpt1"), IsOk());
  // After the checkpoint: newer states for batch 1, and a new batch 3.
  ASSERT_THAT(Push(*c, MakeBatch(1, /*offset=*/10)), IsOk());
  ASSERT_THAT(Push(*c, MakeBatch(3)), IsOk());
  ExpectBatch(*c, 1, 10);
  server_->Kill(SIGKILL);

  StartServer({"--write-policy", "write-back"});
  c = Client();
  for (int64_t b = 0; b < 3; ++b) ExpectBatch(*c, b);  // batch 1 as before
  memstore::PulledStates p;
  ASSERT_THAT(c->Pull(MakeBatch(3).ids, &p), IsOk());
  EXPECT_EQ(p.version, std::vector<uint64_t>(kBatch, 0));
  EXPECT_EQ(p.time, std::vector<double>(kBatch, 0.0));
  EXPECT_TRUE(fs::exists(dir_ / "data" / "checkpoints" / "ckpt1"));
}

TEST_F(MemstoreIntegrationTest, DeadServerFailsWithinTheDeadline) {
  StartServer({});
  auto c = Client(/*deadline=*/1.5);
  ASSERT_NE(c, nullptr);
  ASSERT_THAT(c->Stats(), IsOk());
  server_->Kill(SIGKILL);
  const auto t0 = std::chrono::steady_clock::now();
  memstore::PulledStates p;
  EXPECT_THAT(c->Pull(std::vector<int64_t>{1}, &p),
              StatusIs(absl::StatusCode::kUnavailable, ""));
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
                .count(),
            3.0);
  const std::string cmd = MemstoreProcess::Binary() +
                          " healthcheck --timeout 1 127.0.0.1:1 >/dev/null";
  EXPECT_NE(std::system(cmd.c_str()), 0);
}

}  // namespace
}  // namespace mnemo::testing
