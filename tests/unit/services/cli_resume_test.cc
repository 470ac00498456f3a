// Runs the real `mnemo` binary as users do: what a run leaves in its --out
// directory and what --resume makes of it (summary.json, a full disk, cut
// checkpoints, a missing directory, changed data, event files changed
// while a run maps them).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tests/unit/services/cli_test_util.h"

namespace {
namespace fs = std::filesystem;

using mnemo::cli_testing::CliTest;
using mnemo::cli_testing::Mnemo;
using mnemo::cli_testing::ReadFile;
using mnemo::cli_testing::Result;
using mnemo::cli_testing::SharedData;
using testing::HasSubstr;
using testing::Not;

// The number after "key": in a summary.json (NaN when absent or null).
double SummaryNumber(const std::string& summary, const std::string& key) {
  const size_t at = summary.find("\"" + key + "\": ");
  if (at == std::string::npos) return std::nan("");
  return std::strtod(summary.c_str() + at + key.size() + 4, nullptr);
}

int Count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos;
       at = text.find(what, at + 1)) {
    ++n;
  }
  return n;
}

// The .tmp files under `dir`.
std::vector<std::string> TempFiles(const fs::path& dir) {
  std::vector<std::string> left;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.path().extension() == ".tmp") left.push_back(e.path().string());
  }
  return left;
}

// A run that stopped early (patience) is finished: resumed with the same
// flags it trains nothing and leaves its summary.json as it was, timings
// and null validation MRRs included; a summary that is missing is written
// again from the checkpoint, with the run's timings (the checkpoints carry
// them) and every epoch's figures as they were.
TEST_F(CliTest, EarlyStoppedRunKeepsItsSummaryOnResume) {
  const std::string train =
      SmallTrain() + " --epochs 10 --lr 0.01 --patience 1 --out ";
  const std::string out = (dir_ / "run").string();
  Result r = Mnemo(train + out);
  ASSERT_EQ(r.code, 0) << r.output;
  ASSERT_THAT(r.output, HasSubstr("early stopping"));
  const std::string summary = ReadFile(out + "/summary.json");
  const int epochs = Count(summary, "\"val_new_node_ap_batch_mean\": ");
  ASSERT_LT(epochs, 10);
  EXPECT_EQ(Count(summary, "\"val_mrr\": null"), epochs);
  r = Mnemo(train + out + " --resume " + out);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("stopped early"));
  EXPECT_THAT(r.output, HasSubstr("summary.json stands"));
  EXPECT_EQ(ReadFile(out + "/summary.json"), summary);
  // The summary is gone (a disk that filled as it was written): the best
  // epoch is tested again and the summary written, the same figures.
  fs::remove(out + "/summary.json");
  r = Mnemo(train + out + " --resume " + out);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("has no summary.json"));
  const std::string again = ReadFile(out + "/summary.json");
  EXPECT_EQ(Count(again, "\"val_mrr\": null"), epochs);
  EXPECT_EQ(SummaryNumber(again, "best_epoch"),
            SummaryNumber(summary, "best_epoch"));
  EXPECT_EQ(SummaryNumber(again, "ap"), SummaryNumber(summary, "ap"));
  for (const char* stage : {"data_preparation", "forward", "backward"}) {
    EXPECT_GE(SummaryNumber(again, stage), SummaryNumber(summary, stage))
        << stage;
    EXPECT_GT(SummaryNumber(again, stage), 0) << stage;
  }
}

// time_breakdown_seconds sums every session of a run: a run resumed after
// one epoch reports both epochs' training stages.
TEST_F(CliTest, ResumedSummaryCountsTheWholeRunsTime) {
  const std::string out = (dir_ / "run").string();
  Result r = Mnemo(SmallTrain() + " --out " + out);
  ASSERT_EQ(r.code, 0) << r.output;
  const std::string first = ReadFile(out + "/summary.json");
  r = Mnemo(SmallTrain() + " --epochs 3 --resume " + out);
  ASSERT_EQ(r.code, 0) << r.output;
  const std::string resumed = ReadFile(out + "/summary.json");
  // Three epochs of about the same time against one.
  EXPECT_GT(SummaryNumber(resumed, "forward"),
            1.5 * SummaryNumber(first, "forward"));
  EXPECT_GT(SummaryNumber(resumed, "evaluation"),
            SummaryNumber(first, "evaluation"));
}

// A disk that fills while summary.json is written: the error names the
// file and the cause, nothing half written is left, and once there is
// room --resume writes the summary (it does not claim one stands). Needs a
// small tmpfs (root).
TEST_F(CliTest, FullDiskAtTheSummaryLeavesNothingBehind) {
  // The checkpoint's size, from a run elsewhere (the same flags: the same
  // bytes but for the run id).
  const std::string probe = (dir_ / "probe").string();
  Result r = Mnemo(SmallTrain() + " --out " + probe);
  ASSERT_EQ(r.code, 0) << r.output;
  const uintmax_t checkpoint =
      fs::file_size(probe + "/checkpoints/epoch-0001.pt");
  const fs::path disk = dir_ / "disk";
  fs::create_directories(disk);
  // Room for LOCK (a page) and the checkpoint, not for the summary.
  const uintmax_t pages = (checkpoint + 4095) / 4096 + 1;
  if (std::system(("mount -t tmpfs -o size=" + std::to_string(pages * 4096) +
                   " mnemo-test " + disk.string() + " 2>&1")
                      .c_str()) != 0) {
    GTEST_SKIP() << "cannot mount a tmpfs here (needs root)";
  }
  const std::string out = (disk / "run").string();
  r = Mnemo(SmallTrain() + " --out " + out);
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr("cannot write " + out +
                                  "/summary.json: No space left on device"));
  EXPECT_THAT(TempFiles(disk), testing::IsEmpty());
  EXPECT_FALSE(fs::exists(out + "/summary.json"));
  ASSERT_TRUE(fs::exists(out + "/checkpoints/epoch-0001.pt"));
  // Room again: the finished run has no summary, so --resume writes it.
  ASSERT_EQ(std::system(("mount -o remount,size=4m " + disk.string()).c_str()),
            0);
  r = Mnemo(SmallTrain() + " --resume " + out);
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_THAT(r.output, Not(HasSubstr("summary.json stands")));
  EXPECT_THAT(r.output, HasSubstr("has no summary.json"));
  EXPECT_TRUE(fs::exists(out + "/summary.json"));
  EXPECT_TRUE(fs::exists(out + "/metrics.csv"));
  EXPECT_TRUE(fs::exists(out + "/id_map.csv"));
  EXPECT_THAT(TempFiles(disk), testing::IsEmpty());
}

// A checkpoint cut exactly where LibTorch's archive ends (its metadata and
// checksum gone) looks like a file from before checksums; in a run whose
// other files carry mnemo's metadata it is refused, naming the file,
// unless --resume-override unverified says it is one.
TEST_F(CliTest, ACutCheckpointIsNotTakenForAnOldOne) {
  const std::string out = (dir_ / "run").string();
  Result r = Mnemo(SmallTrain() + " --epochs 2 --out " + out);
  ASSERT_EQ(r.code, 0) << r.output;
  const std::string file = out + "/checkpoints/epoch-0002.pt";
  const std::string good = ReadFile(file);
  // The footer's bytes 8..15: the archive's length.
  uint64_t payload = 0;
  for (int i = 0; i < 8; ++i) {
    payload |=
        uint64_t{static_cast<unsigned char>(good[good.size() - 32 + 8 + i])}
        << (8 * i);
  }
  ASSERT_LT(payload, good.size());
  std::ofstream(file, std::ios::binary | std::ios::trunc)
      << good.substr(0, payload);
  r = Mnemo(SmallTrain() + " --epochs 3 --lr 0.01 --resume " + out);
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr(file));
  EXPECT_THAT(r.output, HasSubstr("no checksum"));
  EXPECT_THAT(r.output, HasSubstr("--resume-override unverified"));
  EXPECT_FALSE(fs::exists(out + "/checkpoints/epoch-0003.pt"));
  r = Mnemo(SmallTrain() + " --epochs 3 --resume " + out +
            " --resume-override unverified");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("has no checksum"));
  EXPECT_TRUE(fs::exists(out + "/checkpoints/epoch-0003.pt"));
}

// --resume of a directory that does not exist is a usage error that
// creates nothing (no directory, no LOCK).
TEST_F(CliTest, ResumeOfAMissingDirectoryCreatesNothing) {
  const std::string missing = (dir_ / "no-such-run").string();
  for (const std::string& extra :
       {std::string(), std::string(" --workers 2")}) {
    Result r = Mnemo(SmallTrain() + extra + " --resume " + missing);
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_THAT(r.output, HasSubstr("--resume " + missing));
    EXPECT_THAT(r.output, HasSubstr("no such directory"));
    EXPECT_FALSE(fs::exists(missing));
  }
  const std::string file = Write("a-file", "x");
  Result r = Mnemo(SmallTrain() + " --resume " + file);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("not a directory"));
}

// The data a run trained on are recorded by content (events, nodes, time
// range, CRC-32C): the same file touched, copied or converted resumes; the
// same path with other events is refused unless --resume-override data.
TEST_F(CliTest, ChangedDataAreRefusedOnResume) {
  const std::string data = (dir_ / "events.txt").string();
  ASSERT_EQ(std::system(("zcat " + SharedData() +
                         "/CollegeMsg.txt.gz | head -3000 > " + data)
                            .c_str()),
            0);
  const std::string train =
      "train --data " + data +
      " --max-events 2000 --threads 1 --progress none --memory-dim 16 "
      "--time-dim 16 --embedding-dim 16";
  const std::string out = (dir_ / "run").string();
  Result r = Mnemo(train + " --epochs 1 --out " + out);
  ASSERT_EQ(r.code, 0) << r.output;
  // Only its timestamps on disk changed: the same data.
  ASSERT_EQ(std::system(("touch -d '2001-01-01' " + data).c_str()), 0);
  r = Mnemo(train + " --epochs 2 --resume " + out);
  ASSERT_EQ(r.code, 0) << r.output;
  // Some events' times changed (still in order): other data.
  ASSERT_EQ(std::system(("awk 'NR % 7 == 0 { $3 = $3 + 1 } { print }' " + data +
                         " > " + data + ".new && mv " + data + ".new " + data)
                            .c_str()),
            0);
  r = Mnemo(train + " --epochs 3 --resume " + out);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr(data));
  EXPECT_THAT(r.output, HasSubstr("other data"));
  EXPECT_THAT(r.output, HasSubstr("--resume-override data"));
  EXPECT_FALSE(fs::exists(out + "/checkpoints/epoch-0003.pt"));
  r = Mnemo(train + " --epochs 3 --resume " + out + " --resume-override data");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(fs::exists(out + "/checkpoints/epoch-0003.pt"));
}

// A columnar event file rewritten in place while a run maps it stops the
// run with a message naming the file (exit 1): changed, at the next
// epoch's end; cut short, at the next read past its new end (SIGBUS).
TEST_F(CliTest, EventFileChangedWhileTrainingStopsTheRun) {
  const std::string mnev = (dir_ / "cm.mnev").string();
  Result r = Mnemo("data --convert collegemsg --data-dir " + SharedData() +
                   " --out " + mnev);
  ASSERT_EQ(r.code, 0) << r.output;
  const std::string log = (dir_ / "train.log").string();
  // Waits for the first epoch's line, changes the file, waits for the run.
  auto run_and = [&](const std::string& change) {
    const std::string script =
        "(" + std::string(std::getenv("MNEMO_BIN")) + " train --data " + mnev +
        " --max-events 20000 --epochs 8 --threads 1 --progress lines "
        "--memory-dim 16 --time-dim 16 --embedding-dim 16 > " +
        log + " 2>&1; echo \"exit $?\" >> " + log +
        ") & for i in $(seq 600); do grep -q \"epoch 1/8\" " + log +
        " 2>/dev/null && break; sleep 0.1; done; " + change + "; wait";
    EXPECT_EQ(std::system(("bash -c '" + script + "'").c_str()), 0);
    return ReadFile(log);
  };
  std::string output =
      run_and("printf x | dd of=" + mnev +
              " bs=1 seek=8192 conv=notrunc status=none && touch " + mnev);
  EXPECT_THAT(output, HasSubstr(mnev));
  EXPECT_THAT(output, HasSubstr("changed on disk"));
  EXPECT_THAT(output, HasSubstr("exit 1"));
  EXPECT_THAT(output, Not(HasSubstr("epoch 8/8")));
  r = Mnemo("data --convert collegemsg --data-dir " + SharedData() + " --out " +
            mnev);
  ASSERT_EQ(r.code, 0) << r.output;
  output = run_and("truncate -s 4096 " + mnev);
  EXPECT_THAT(output, HasSubstr(mnev));
  EXPECT_THAT(output, HasSubstr("changed on disk"));
  EXPECT_THAT(output, HasSubstr("exit 1"));
}

}  // namespace
