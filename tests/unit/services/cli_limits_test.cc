// Runs the real `mnemo` binary: every value outside a flag's range is a
// usage error (exit 2) naming the flag and the range, found before anything
// is written or started (docs/operations.md, exit codes).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "tests/unit/services/cli_test_util.h"

namespace {
namespace fs = std::filesystem;

using mnemo::cli_testing::Mnemo;
using mnemo::cli_testing::Result;

std::vector<std::string> Entries(const fs::path& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    names.push_back(e.path().filename().string());
  }
  return names;
}

class CliLimitsTest : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("mnemo_cli_limits_" + std::to_string(getpid()) + "_" +
            testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

// Issue 53 items 10-12: each memory-store value out of range exits 2 (not
// 1, not an abort while starting 100000 threads), naming the flag and its
// range, and writes nothing: the data directory is not even created.
TEST_F(CliLimitsTest, MemstoreValuesOutOfRangeAreUsageErrorsWritingNothing) {
  const fs::path data = dir_ / "shard";
  for (const auto& [args, message] :
       std::vector<std::pair<std::string, std::string>>{
           {"--shard-id 5 --num-shards 2",
            "--shard-id must be in [0, 1], got 5"},
           {"--shard-id -1", "--shard-id must be in [0, 0], got -1"},
           {"--num-shards 0", "--num-shards must be in [1, 65536], got 0"},
           {"--threads 0", "--threads must be in [1, 1024], got 0"},
           {"--threads 5000", "--threads must be in [1, 1024], got 5000"},
           {"--max-batch 0", "--max-batch must be in [1, 1073741824], got 0"},
           {"--cold-read-threads 100000",
            "--cold-read-threads must be in [-1, 256], got 100000"},
           {"--cold-read-threads -2",
            "--cold-read-threads must be in [-1, 256], got -2"},
           {"--hot-capacity-bytes -1",
            "--hot-capacity-bytes must be in [0, inf), got -1"},
           {"--journal-limit-bytes 0",
            "--journal-limit-bytes must be in [1, inf), got 0"},
           {"--max-message-bytes 100",
            "--max-message-bytes must be in [1056, 2147483647], got 100"},
           {"--max-message-bytes 4294967296",
            "--max-message-bytes must be in [1056, 2147483647]"}}) {
    const Result r = Mnemo("memstore --listen 127.0.0.1:0 --dim 4 --data-dir " +
                           data.string() + " " + args);
    EXPECT_EQ(r.code, 2) << args << ": " << r.output;
    EXPECT_THAT(r.output, testing::HasSubstr(message)) << args;
    EXPECT_FALSE(fs::exists(data)) << args << " created " << data;
  }
}

// Issue 53 item 11: a server refused while starting (a bad --shard-id, or
// a failure only the server finds: --num-nodes below the id map's) leaves
// no shard record in a fresh directory, so the corrected command starts;
// a started server records its shard, and another shard is then refused.
TEST_F(CliLimitsTest, ARefusedShardLeavesNoRecordAndTheCorrectedOneStarts) {
  const fs::path data = dir_ / "fresh";
  fs::create_directories(data);
  const std::string base =
      "memstore --listen 127.0.0.1:0 --dim 4 --data-dir " + data.string();
  Result r = Mnemo(base + " --shard-id 5 --num-shards 2");
  ASSERT_EQ(r.code, 2) << r.output;
  EXPECT_THAT(Entries(data), testing::IsEmpty());

  const fs::path map = dir_ / "id_map.csv";
  std::ofstream(map) << "dense_id,original_id\n0,10\n1,11\n2,12\n";
  r = Mnemo(base + " --shard-id 1 --num-shards 2 --id-map " + map.string() +
            " --num-nodes 1");
  ASSERT_EQ(r.code, 1) << r.output;
  EXPECT_THAT(r.output, testing::HasSubstr("num_nodes 1"));
  EXPECT_FALSE(fs::exists(data / "shard"));

  // The corrected command starts (and stops cleanly on SIGTERM: exit 0).
  r = Mnemo(base + " --shard-id 1 --num-shards 2",
            "timeout --preserve-status -s TERM 3");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_THAT(r.output, testing::HasSubstr("shard 1 of 2"));
  std::ifstream in(data / "shard");
  std::string recorded;
  std::getline(in, recorded);
  EXPECT_EQ(recorded, "1 of 2");
  r = Mnemo(base + " --shard-id 0 --num-shards 2");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_THAT(r.output, testing::HasSubstr("holds shard 1 of 2"));
}

// Issue 53 item 10: sizes no machine runs are refused at once, naming the
// flag and the range (a world of 2,000,000,000 aborted allocating it; 100000
// local workers failed after 22 s looking for ports).
TEST_F(CliLimitsTest, WorldSizesAndWorkerCountsBeyondAnyJobAreUsageErrors) {
  Result r = Mnemo(
      "coordinator --world-size 2000000000 --memstores "
      "127.0.0.1:1");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_THAT(r.output, testing::HasSubstr("--world-size must be >= 1 and <= "
                                           "65536, got 2000000000"));
  r = Mnemo("coordinator --memstores 127.0.0.1:1", "WORLD_SIZE=70000");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_THAT(r.output, testing::HasSubstr("WORLD_SIZE='70000' must be an "
                                           "integer in [1, 65536]"));

  const auto start = std::chrono::steady_clock::now();
  r = Mnemo("train --data collegemsg --workers 100000");
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_THAT(r.output,
              testing::HasSubstr("--workers must be in [1, 256] (the local "
                                 "launcher runs every worker on this host), "
                                 "got 100000"));
  EXPECT_LT(took, 10) << r.output;
}

// Widths and timeouts no real job uses: a memory store's --dim whose one
// state would not fit a gRPC message, timeouts past a day (1e16 s
// overflowed gRPC's deadlines into "Deadline Exceeded"). Exit 2, naming
// the flag and the range, writing nothing.
TEST_F(CliLimitsTest, WidthsAndTimeoutsBeyondAnyJobAreUsageErrors) {
  const fs::path data = dir_ / "store";
  Result r = Mnemo("memstore --data-dir " + data.string() +
                   " --dim 2000000000 --listen 127.0.0.1:0");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_THAT(r.output, testing::HasSubstr("--dim must be in [1, "));
  EXPECT_FALSE(fs::exists(data));
  for (const auto& [args, message] :
       std::vector<std::pair<std::string, std::string>>{
           {"coordinator --world-size 2 --heartbeat-timeout 1e16",
            "--heartbeat-timeout must be in (0, 86400] seconds"},
           {"coordinator --world-size 2 --heartbeat-timeout 0",
            "--heartbeat-timeout must be in (0, 86400] seconds"},
           {"coordinator --world-size 2 --join-timeout 1e12",
            "--join-timeout must be in [0, 86400] seconds"},
           {"healthcheck --timeout 1e16 127.0.0.1:5",
            "--timeout must be in (0, 86400] seconds"},
           {"train --data collegemsg --workers 2 --timeout 1e16",
            "--timeout must be in (0, 86400] seconds"}}) {
    r = Mnemo(args);
    EXPECT_EQ(r.code, 2) << args << ": " << r.output;
    EXPECT_THAT(r.output, testing::HasSubstr(message)) << args;
  }
}

}  // namespace
