// A run's files: the checkpoint envelope (checksums, durable writes), the
// --out lock and ownership, and the comparison of run configurations.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "trainer/runtime/checkpoint/checkpoint_file.h"
#include "trainer/runtime/checkpoint/resume_point.h"
#include "util/file.h"
#include "util/status_matchers.h"

namespace mnemo::runtime {
namespace {

namespace fs = std::filesystem;
using testing::HasSubstr;

class RunFilesTest : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("mnemo_run_files_" + std::to_string(getpid()) + "_" +
            testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  static std::string Read(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  static void Write(const fs::path& p, const std::string& bytes) {
    std::ofstream(p, std::ios::binary | std::ios::trunc) << bytes;
  }
  fs::path dir_;
};

// A zip's first bytes and its end record, as LibTorch's archive has them.
const std::string kPayload = std::string("PK\3\4") + std::string(5000, 'x') +
                             std::string("PK\5\6") + std::string(18, '\0');

TEST_F(RunFilesTest, EnvelopeRoundTrip) {
  const std::string path = (dir_ / "epoch-0003.pt").string();
  CheckpointMeta meta;
  meta.epoch = 3;
  meta.run_id = "0123456789abcdef";
  meta.run_config = "data=wikipedia lr=0.0001 heads=2";
  ASSERT_THAT(WriteCheckpointEnvelope(path, kPayload, meta), IsOk());
  auto env_or = ReadCheckpointEnvelope(path);
  ASSERT_THAT(env_or, IsOk());
  CheckpointEnvelope env = *std::move(env_or);
  EXPECT_TRUE(env.verified);
  EXPECT_EQ(env.bytes.substr(0, env.payload_size), kPayload);
  EXPECT_EQ(env.meta.epoch, 3);
  EXPECT_EQ(env.meta.run_id, meta.run_id);
  EXPECT_EQ(env.meta.run_config, meta.run_config);
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  EXPECT_TRUE(absl::IsNotFound(
      ReadCheckpointEnvelope((dir_ / "none.pt").string()).status()));
}

// A checkpoint streamed in parts is the file written from one payload; a
// writer dropped before it finishes leaves neither the file nor its
// temporary behind, and the file that was there before stays.
TEST_F(RunFilesTest, StreamedCheckpointIsTheSameFile) {
  const std::string whole = (dir_ / "whole.pt").string();
  const std::string parts = (dir_ / "parts.pt").string();
  CheckpointMeta meta;
  meta.epoch = 2;
  meta.run_id = "00000000000000ab";
  ASSERT_THAT(WriteCheckpointEnvelope(whole, kPayload, meta), IsOk());
  {
    auto w = CheckpointFileWriter::Create(parts);
    ASSERT_THAT(w, IsOk());
    for (size_t at = 0; at < kPayload.size(); at += 777) {
      ASSERT_THAT(w->Append(std::string_view(kPayload).substr(at, 777)),
                  IsOk());
    }
    ASSERT_THAT(w->Finish(meta), IsOk());
    EXPECT_FALSE(w->Append("late").ok());  // the file is written
  }
  EXPECT_EQ(Read(parts), Read(whole));
  ASSERT_THAT(ReadCheckpointEnvelope(parts), IsOk());
  {
    auto w = CheckpointFileWriter::Create(parts);
    ASSERT_THAT(w, IsOk());
    ASSERT_THAT(w->Append("PK\3\4 half an archive"), IsOk());
    EXPECT_TRUE(fs::exists(parts + ".tmp"));
  }
  EXPECT_FALSE(fs::exists(parts + ".tmp"));
  EXPECT_EQ(Read(parts), Read(whole));
}

TEST_F(RunFilesTest, EveryDamageIsFound) {
  const std::string path = (dir_ / "epoch-0001.pt").string();
  CheckpointMeta meta;
  meta.run_id = "00000000000000aa";
  meta.run_config = "lr=0.1";
  ASSERT_THAT(WriteCheckpointEnvelope(path, kPayload, meta), IsOk());
  const std::string good = Read(path);
  // Every byte flipped in turn (payload, metadata, footer) is refused.
  for (size_t at = 0; at < good.size(); at += at < 4 ? 1 : 37) {
    std::string bad = good;
    bad[at] ^= 0x01;
    Write(path, bad);
    auto env = ReadCheckpointEnvelope(path);
    ASSERT_FALSE(env.ok()) << "byte " << at;
    EXPECT_TRUE(absl::IsDataLoss(env.status())) << env.status();
    EXPECT_THAT(env.status().message(), HasSubstr(path + " is damaged"));
  }
  for (size_t keep : {size_t{0}, size_t{3}, good.size() / 2, good.size() - 1}) {
    Write(path, good.substr(0, keep));
    EXPECT_TRUE(absl::IsDataLoss(ReadCheckpointEnvelope(path).status()))
        << keep;
  }
  Write(path, good + "trailing");
  EXPECT_TRUE(absl::IsDataLoss(ReadCheckpointEnvelope(path).status()));
}

TEST_F(RunFilesTest, BareArchivesFromBeforeChecksumsAreReadUnverified) {
  const std::string path = (dir_ / "epoch-0001.pt").string();
  Write(path, kPayload);
  auto env_or = ReadCheckpointEnvelope(path);
  ASSERT_THAT(env_or, IsOk());
  CheckpointEnvelope env = *std::move(env_or);
  EXPECT_FALSE(env.verified);
  EXPECT_EQ(env.payload_size, kPayload.size());
  EXPECT_TRUE(env.meta.run_id.empty());
}

// A full disk: an error naming the file and the cause, no temporary file
// left, and the file that was there before intact.
TEST_F(RunFilesTest, FullDiskLeavesNothingBehind) {
  const fs::path disk = dir_ / "disk";
  fs::create_directories(disk);
  if (std::system(("mount -t tmpfs -o size=64k mnemo-test " + disk.string() +
                   " 2>/dev/null")
                      .c_str()) != 0) {
    GTEST_SKIP() << "cannot mount a tmpfs here (needs root)";
  }
  const std::string path = (disk / "f").string();
  ASSERT_THAT(WriteFileDurably(path, {"before"}), IsOk());
  const std::string big(256 << 10, 'z');
  absl::Status s = WriteFileDurably(path, {big});
  EXPECT_THAT(s.message(), HasSubstr("cannot write " + path));
  EXPECT_THAT(s.message(), HasSubstr("No space left on device"));
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  EXPECT_EQ(Read(path), "before");
  s = WriteCheckpointEnvelope(path, big, CheckpointMeta{});
  EXPECT_THAT(s.message(), HasSubstr("No space left on device"));
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  // Streamed: the part that does not fit fails, and so does every later
  // call, with the same error; nothing is left behind.
  auto w = CheckpointFileWriter::Create(path);
  ASSERT_THAT(w, IsOk());
  s = absl::OkStatus();
  for (int i = 0; i < 8 && s.ok(); ++i) s = w->Append(big.substr(0, 32 << 10));
  EXPECT_THAT(s.message(), HasSubstr("No space left on device"));
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  EXPECT_THAT(w->Finish(CheckpointMeta{}).message(),
              HasSubstr("No space left on device"));
  EXPECT_EQ(Read(path), "before");
  std::system(("umount " + disk.string()).c_str());
}

// SIGTERM while a checkpoint is written (a single-process `mnemo train`,
// `mnemo trainer`) removes its temporary file; the process still ends by
// the signal (128 + 15), and a committed file is left alone.
TEST_F(RunFilesTest, TerminationRemovesTemporaryFiles) {
  const std::string done = (dir_ / "epoch-0001.pt").string();
  const std::string half = (dir_ / "epoch-0002.pt").string();
  EXPECT_EXIT(
      {
        RemoveTempFilesOnTermination();
        if (!WriteFileDurably(done, {"a whole checkpoint"}).ok()) std::_Exit(3);
        auto w = DurableFileWriter::Create(half);
        if (!w.ok() || !w->Append("half a checkpoint").ok()) std::_Exit(3);
        if (!fs::exists(half + ".tmp")) std::_Exit(4);
        ::raise(SIGTERM);
        std::_Exit(5);
      },
      ::testing::KilledBySignal(SIGTERM), "");
  EXPECT_FALSE(fs::exists(half + ".tmp"));
  EXPECT_FALSE(fs::exists(half));
  EXPECT_EQ(Read(done), "a whole checkpoint");
}

TEST_F(RunFilesTest, RunConfigDifferencesNameTheFlags) {
  const std::string saved =
      "data=wikipedia epochs=10 lr=0.0001 heads=2 device_kind=cpu "
      "batch_size=600 policy=deptgl tau_grad=1.6 resume=0";
  EXPECT_THAT(CheckRunConfig(saved, saved, {}, "ck"), IsOk());
  // More epochs, another device, the resume flag itself, who evaluates:
  // allowed.
  EXPECT_THAT(CheckRunConfig(
                  saved,
                  "data=wikipedia epochs=20 lr=0.0001 heads=2 device_kind=cuda "
                  "batch_size=600 policy=deptgl tau_grad=1.6 resume=1 "
                  "eval_on=leader",
                  {}, "ck"),
              IsOk());
  const std::string changed =
      "data=wikipedia epochs=10 lr=0.001 heads=1 device_kind=cpu "
      "batch_size=600 policy=deptgl tau_grad=2 resume=1";
  absl::Status s = CheckRunConfig(saved, changed, {}, "ck");
  EXPECT_TRUE(absl::IsInvalidArgument(s));
  EXPECT_THAT(s.message(), HasSubstr("--lr 0.0001 -> 0.001"));
  EXPECT_THAT(s.message(), HasSubstr("--heads 2 -> 1"));
  EXPECT_THAT(s.message(), HasSubstr("--tau-grad 1.6 -> 2"));
  EXPECT_THAT(s.message(), HasSubstr("--resume-override heads,lr,tau-grad"));
  EXPECT_THAT(
      CheckRunConfig(saved, changed, {"lr", "--heads", "tau-grad"}, "ck"),
      IsOk());
  // Another policy: its own flags may change with it.
  EXPECT_THAT(CheckRunConfig(
                  saved,
                  "data=wikipedia epochs=10 lr=0.0001 heads=2 device_kind=cpu "
                  "batch_size=600 policy=vanilla tau_grad=1 resume=1",
                  {}, "ck"),
              IsOk());
  // A checkpoint from before run configurations: nothing to compare.
  EXPECT_THAT(CheckRunConfig("", changed, {}, "ck"), IsOk());
  // A key added later: a run without it ran with its default.
  EXPECT_THAT(CheckRunConfig(saved, saved + " apan_mailbox=mnemo", {}, "ck"),
              IsOk());
  s = CheckRunConfig(saved, saved + " apan_mailbox=tgl", {}, "ck");
  EXPECT_TRUE(absl::IsInvalidArgument(s));
  EXPECT_THAT(s.message(), HasSubstr("--apan-mailbox mnemo -> tgl"));
}

// A scratch directory goes when its process ends, also by SIGKILL (no
// destructor, no signal handler runs).
TEST_F(RunFilesTest, ScratchDirectoryGoesWhenTheProcessIsKilled) {
  const fs::path scratch = dir_ / "scratch";
  fs::create_directories(scratch / "sub");
  std::ofstream(scratch / "sub" / "file") << "spilled";
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (!RemoveWhenProcessEnds(scratch.string()).ok()) _exit(1);
    ::raise(SIGKILL);
    _exit(2);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status)) << status;
  // While the process lives the directory stays (the watcher waits): the
  // process itself is gone now, so it goes within moments.
  for (int i = 0; i < 200 && fs::exists(scratch); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_FALSE(fs::exists(scratch));
  // A live process keeps it.
  const fs::path kept = dir_ / "kept";
  fs::create_directories(kept);
  ASSERT_THAT(RemoveWhenProcessEnds(kept.string()), IsOk());
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_TRUE(fs::exists(kept));
}

TEST_F(RunFilesTest, OutputOwnerAndLock) {
  const std::string out = (dir_ / "out").string();
  EXPECT_THAT(CheckOutputOwner(out, ""), IsOk());  // not there yet
  ASSERT_THAT(LockOutputDir(out), IsOk());
  // flock conflicts between two open files, even in one process.
  absl::Status s = LockOutputDir(out);
  EXPECT_TRUE(absl::IsFailedPrecondition(s));
  EXPECT_THAT(s.message(), HasSubstr("in use by another run (pid " +
                                     std::to_string(getpid())));
  fs::create_directories(fs::path(out) / "checkpoints" / "epoch-0003");
  // No checkpoint in it, only a set a killed job never completed.
  EXPECT_THAT(CheckOutputOwner(out, ""), IsOk());
  Write(fs::path(out) / "checkpoints" / "epoch-0002.pt", "x");
  s = CheckOutputOwner(out, "");
  EXPECT_TRUE(absl::IsFailedPrecondition(s));
  EXPECT_THAT(s.message(), HasSubstr("epoch-0002.pt"));
  EXPECT_THAT(CheckOutputOwner(out, (dir_ / "other").string()).message(),
              HasSubstr("already holds another run's checkpoints"));
  EXPECT_THAT(CheckOutputOwner(out, out), IsOk());  // the run continues
  EXPECT_THAT(CheckOutputOwner(out, (dir_ / "out" / ".").string()), IsOk());
}

// A resume decides from footers and metadata alone; the payload's checksum
// is checked once, where the file loads. A flipped payload byte passes the
// footer read and is refused at load; a flipped footer byte is refused
// before anything loads.
TEST_F(RunFilesTest, ResumeReadsFootersFirstAndChecksumsAtLoad) {
  const std::string out = (dir_ / "run").string();
  fs::create_directories(fs::path(out) / "checkpoints");
  const std::string path = SingleCheckpointPath(out, 2);
  CheckpointMeta meta;
  meta.epoch = 2;
  meta.run_id = "00000000000000cc";
  meta.run_config = "data=x lr=0.1";
  meta.stop.known = true;
  meta.stop.best_epoch = 1;
  meta.stop.rounds_without_improvement = 1;
  ASSERT_THAT(WriteCheckpointEnvelope(path, kPayload, meta), IsOk());
  auto head = ReadCheckpointMeta(path);
  ASSERT_THAT(head, IsOk());
  EXPECT_TRUE(head->bytes.empty());
  EXPECT_TRUE(head->verified);
  EXPECT_EQ(head->payload_size, kPayload.size());
  EXPECT_EQ(head->meta.epoch, 2);
  EXPECT_EQ(head->meta.run_id, meta.run_id);
  EXPECT_EQ(head->meta.run_config, meta.run_config);
  EXPECT_EQ(head->meta.stop.best_epoch, 1);
  EXPECT_EQ(head->meta.stop.rounds_without_improvement, 1);

  std::string bytes = Read(path);
  bytes[100] ^= 1;  // in the payload
  Write(path, bytes);
  auto point = FindResumePoint(out);
  ASSERT_THAT(point, IsOk());
  EXPECT_EQ(point->run_id, meta.run_id);
  EXPECT_EQ(point->run_config, meta.run_config);
  EXPECT_THAT(ReadCheckpointEnvelope(path).status(),
              StatusIs(absl::StatusCode::kDataLoss, "checksum mismatch"));

  bytes[100] ^= 1;
  bytes[bytes.size() - 20] ^= 1;  // in the footer's payload size
  Write(path, bytes);
  EXPECT_THAT(
      FindResumePoint(out).status(),
      StatusIs(absl::StatusCode::kDataLoss, "footer checksum mismatch"));
  EXPECT_THAT(ReadCheckpointMeta(path).status(),
              StatusIs(absl::StatusCode::kDataLoss, "epoch-0002.pt"));
  bytes[bytes.size() - 20] ^= 1;

  // A metadata byte changed: refused before anything loads.
  bytes[kPayload.size() + 3] ^= 1;
  Write(path, bytes);
  EXPECT_THAT(
      FindResumePoint(out).status(),
      StatusIs(absl::StatusCode::kDataLoss, "metadata checksum mismatch"));
  bytes[kPayload.size() + 3] ^= 1;
  // A file from before the metadata's checksum (footer bytes 28-31 zero)
  // is verified whole: its damaged payload is found before anything loads.
  for (int i = 1; i <= 4; ++i) bytes[bytes.size() - i] = 0;
  Write(path, bytes);
  head = ReadCheckpointMeta(path);
  ASSERT_THAT(head, IsOk());
  EXPECT_EQ(head->meta.run_id, meta.run_id);
  EXPECT_TRUE(head->bytes.empty());
  bytes[100] ^= 1;
  Write(path, bytes);
  EXPECT_THAT(ReadCheckpointMeta(path).status(),
              StatusIs(absl::StatusCode::kDataLoss, "checksum mismatch"));

  // A bare archive from before checksums: unverified, not refused.
  Write(path, kPayload);
  head = ReadCheckpointMeta(path);
  ASSERT_THAT(head, IsOk());
  EXPECT_FALSE(head->verified);
  EXPECT_TRUE(absl::IsNotFound(
      ReadCheckpointMeta((dir_ / "none.pt").string()).status()));
}

// A cluster set's files must verify and belong to the manifest's run.
TEST_F(RunFilesTest, ClusterSetsAreVerified) {
  const std::string out = dir_.string();
  CheckpointMeta meta;
  meta.epoch = 1;
  meta.run_id = "00000000000000aa";
  fs::create_directories(ClusterCheckpointDir(out, 1));
  for (int r = 0; r < 2; ++r) {
    ASSERT_THAT(
        WriteCheckpointEnvelope(RankCheckpointPath(out, 1, r), kPayload, meta),
        IsOk());
  }
  ClusterManifest m;
  m.epoch = 1;
  m.workers = 2;
  m.policy = "vanilla";
  m.run_id = meta.run_id;
  m.run_config = "data=x lr=0.1";
  ASSERT_THAT(WriteClusterManifest(out, m), IsOk());
  auto p_or = FindResumePoint(out);
  ASSERT_THAT(p_or, IsOk());
  ResumePoint p = *std::move(p_or);
  EXPECT_EQ(p.run_id, m.run_id);
  EXPECT_EQ(p.run_config, m.run_config);
  EXPECT_TRUE(p.verified);
  meta.run_id = "00000000000000bb";
  ASSERT_THAT(
      WriteCheckpointEnvelope(RankCheckpointPath(out, 1, 1), kPayload, meta),
      IsOk());
  absl::Status s = FindResumePoint(out).status();
  EXPECT_TRUE(absl::IsDataLoss(s));
  EXPECT_THAT(s.message(), HasSubstr("mixes two runs' files"));
  Write(RankCheckpointPath(out, 1, 1), kPayload.substr(0, 100));
  std::string bytes = Read(RankCheckpointPath(out, 0, 0));
  bytes[10] ^= 1;
  Write(RankCheckpointPath(out, 1, 0), bytes);
  s = FindResumePoint(out).status();
  EXPECT_TRUE(absl::IsDataLoss(s));
  EXPECT_THAT(s.message(), HasSubstr("rank-0.pt is damaged"));
  EXPECT_THAT(FindResumePoint(out, /*verify=*/false).status(), IsOk());
  // A rank file the manifest names is missing: found before anything starts.
  fs::remove(RankCheckpointPath(out, 1, 0));
  EXPECT_THAT(FindResumePoint(out).status(),
              StatusIs(absl::StatusCode::kDataLoss, "rank-0.pt"));
}

}  // namespace
}  // namespace mnemo::runtime
