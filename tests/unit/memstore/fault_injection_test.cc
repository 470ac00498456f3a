// Storage faults under the local store. A RocksDB FileSystem wrapper
// (FaultFs, given to the store through NodeStateStoreOptions::env) fails WAL
// appends or syncs (a failed write), SST creation or hard links (a failed
// ingest or checkpoint), appends past a byte budget (a full disk), or every
// change to a file (a crash: what was written stays, nothing more lands).
// The tests check that every failure reaches the caller as an error, never
// an OK, and that a restart without faults recovers an acknowledged state:
// every push acknowledged under the write policy, and of the pushes that
// failed, each either absent or whole.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "memstore/node_state_store.h"
#include "rocksdb/env.h"
#include "rocksdb/file_system.h"
#include "rocksdb/io_status.h"
#include "tests/unit/memstore/store_diff.h"
#include "util/status_matchers.h"

namespace mnemo::memstore {
namespace {

namespace fs = std::filesystem;
using ::rocksdb::FileOptions;
using ::rocksdb::FSWritableFile;
using ::rocksdb::IODebugContext;
using ::rocksdb::IOOptions;
using ::rocksdb::IOStatus;
using ::rocksdb::Slice;

// ---------------------------------------------------------------------------
// The fault-injecting file system.

// Which SST files fail to be created.
enum class SstFault {
  kNone,
  kIngest,  // the store's own ingest-*.sst (written by SstFileWriter)
  kAll,     // every *.sst: flushes and compactions too
};

class FaultFs : public rocksdb::FileSystemWrapper {
 public:
  FaultFs() : FileSystemWrapper(rocksdb::FileSystem::Default()) {}
  const char* Name() const override { return "FaultFs"; }

  // The switches; a test may flip them while a store runs.
  // WAL appends that still succeed, then all fail (-1: no limit).
  std::atomic<int64_t> wal_appends_left{-1};
  // WAL syncs fail (the appended bytes are in the file already).
  std::atomic<bool> fail_wal_syncs{false};
  std::atomic<SstFault> sst{SstFault::kNone};
  // Hard links fail (ingests with move_files, checkpoints).
  std::atomic<bool> fail_links{false};
  // Bytes that appends may still write, then NoSpace (-1: no limit). An
  // append that does not fit writes what fits: a torn write.
  std::atomic<int64_t> space_left{-1};
  // A crash: every change to a file fails.
  std::atomic<bool> frozen{false};
  // Faults injected so far.
  std::atomic<int64_t> injected{0};

  void Clear() {
    wal_appends_left = -1;
    fail_wal_syncs = false;
    sst = SstFault::kNone;
    fail_links = false;
    space_left = -1;
    frozen = false;
  }

  IOStatus Injected(const std::string& what) {
    ++injected;
    return IOStatus::IOError("injected fault", what);
  }
  IOStatus Frozen(const std::string& what) {
    return frozen ? Injected(absl::StrCat("crashed: ", what)) : IOStatus::OK();
  }

  // Called before an append of `n` bytes: the bytes that may be written
  // (fewer than n: the caller writes them, then fails with *fault).
  size_t AdmitAppend(bool wal, size_t n, IOStatus* fault) {
    if (frozen) {
      *fault = Injected("crashed: append");
      return 0;
    }
    if (wal) {
      int64_t left = wal_appends_left.load();
      while (left > 0 &&
             !wal_appends_left.compare_exchange_weak(left, left - 1)) {
      }
      if (left == 0) {
        *fault = Injected("WAL append");
        return 0;
      }
    }
    int64_t space = space_left.load();
    for (;;) {
      if (space < 0) return n;
      const int64_t take = std::min<int64_t>(space, static_cast<int64_t>(n));
      if (space_left.compare_exchange_weak(space, space - take)) {
        if (take < static_cast<int64_t>(n)) {
          ++injected;
          *fault = IOStatus::NoSpace("injected fault", "disk full");
        }
        return static_cast<size_t>(take);
      }
    }
  }

  IOStatus NewWritableFile(const std::string& f, const FileOptions& o,
                           std::unique_ptr<FSWritableFile>* r,
                           IODebugContext* dbg) override {
    if (IOStatus s = AdmitCreate(f); !s.ok()) return s;
    return Wrap(f, target()->NewWritableFile(f, o, r, dbg), r);
  }
  IOStatus ReopenWritableFile(const std::string& f, const FileOptions& o,
                              std::unique_ptr<FSWritableFile>* r,
                              IODebugContext* dbg) override {
    if (IOStatus s = AdmitCreate(f); !s.ok()) return s;
    return Wrap(f, target()->ReopenWritableFile(f, o, r, dbg), r);
  }
  IOStatus ReuseWritableFile(const std::string& f, const std::string& old,
                             const FileOptions& o,
                             std::unique_ptr<FSWritableFile>* r,
                             IODebugContext* dbg) override {
    if (IOStatus s = AdmitCreate(f); !s.ok()) return s;
    return Wrap(f, target()->ReuseWritableFile(f, old, o, r, dbg), r);
  }
  IOStatus NewRandomRWFile(const std::string& f, const FileOptions& o,
                           std::unique_ptr<rocksdb::FSRandomRWFile>* r,
                           IODebugContext* dbg) override {
    if (IOStatus s = Frozen("open " + f); !s.ok()) return s;
    return target()->NewRandomRWFile(f, o, r, dbg);
  }
  IOStatus LinkFile(const std::string& from, const std::string& to,
                    const IOOptions& o, IODebugContext* dbg) override {
    if (IOStatus s = Frozen("link " + to); !s.ok()) return s;
    if (fail_links) return Injected("link " + to);
    return target()->LinkFile(from, to, o, dbg);
  }
  IOStatus RenameFile(const std::string& from, const std::string& to,
                      const IOOptions& o, IODebugContext* dbg) override {
    if (IOStatus s = Frozen("rename " + to); !s.ok()) return s;
    return target()->RenameFile(from, to, o, dbg);
  }
  IOStatus DeleteFile(const std::string& f, const IOOptions& o,
                      IODebugContext* dbg) override {
    if (IOStatus s = Frozen("delete " + f); !s.ok()) return s;
    return target()->DeleteFile(f, o, dbg);
  }
  IOStatus Truncate(const std::string& f, size_t size, const IOOptions& o,
                    IODebugContext* dbg) override {
    if (IOStatus s = Frozen("truncate " + f); !s.ok()) return s;
    return target()->Truncate(f, size, o, dbg);
  }
  IOStatus CreateDir(const std::string& d, const IOOptions& o,
                     IODebugContext* dbg) override {
    if (IOStatus s = Frozen("mkdir " + d); !s.ok()) return s;
    return target()->CreateDir(d, o, dbg);
  }
  IOStatus CreateDirIfMissing(const std::string& d, const IOOptions& o,
                              IODebugContext* dbg) override {
    if (IOStatus s = Frozen("mkdir " + d); !s.ok()) return s;
    return target()->CreateDirIfMissing(d, o, dbg);
  }
  IOStatus DeleteDir(const std::string& d, const IOOptions& o,
                     IODebugContext* dbg) override {
    if (IOStatus s = Frozen("rmdir " + d); !s.ok()) return s;
    return target()->DeleteDir(d, o, dbg);
  }
  // Unknown while the disk is "full": RocksDB then leaves a NoSpace error
  // alone (no automatic resume), so it lasts until a restart.
  IOStatus GetFreeSpace(const std::string& path, const IOOptions& o,
                        uint64_t* diskfree, IODebugContext* dbg) override {
    if (space_left >= 0) return IOStatus::NotSupported("injected full disk");
    return target()->GetFreeSpace(path, o, diskfree, dbg);
  }

 private:
  class File : public rocksdb::FSWritableFileOwnerWrapper {
   public:
    File(std::unique_ptr<FSWritableFile> file, FaultFs* fs, bool wal)
        : FSWritableFileOwnerWrapper(std::move(file)), fs_(fs), wal_(wal) {}

    IOStatus Append(const Slice& data, const IOOptions& o,
                    IODebugContext* dbg) override {
      IOStatus fault;
      const size_t n = fs_->AdmitAppend(wal_, data.size(), &fault);
      if (n > 0) {
        IOStatus s = target()->Append(Slice(data.data(), n), o, dbg);
        if (!s.ok()) return s;
      }
      return fault;
    }
    IOStatus Append(const Slice& data, const IOOptions& o,
                    const rocksdb::DataVerificationInfo& info,
                    IODebugContext* dbg) override {
      IOStatus fault;
      const size_t n = fs_->AdmitAppend(wal_, data.size(), &fault);
      if (n == data.size()) return target()->Append(data, o, info, dbg);
      if (n > 0) {
        IOStatus s = target()->Append(Slice(data.data(), n), o, dbg);
        if (!s.ok()) return s;
      }
      return fault;
    }
    IOStatus PositionedAppend(const Slice& data, uint64_t offset,
                              const IOOptions& o,
                              IODebugContext* dbg) override {
      IOStatus fault;
      if (fs_->AdmitAppend(wal_, data.size(), &fault) < data.size())
        return fault;
      return target()->PositionedAppend(data, offset, o, dbg);
    }
    IOStatus PositionedAppend(const Slice& data, uint64_t offset,
                              const IOOptions& o,
                              const rocksdb::DataVerificationInfo& info,
                              IODebugContext* dbg) override {
      IOStatus fault;
      if (fs_->AdmitAppend(wal_, data.size(), &fault) < data.size())
        return fault;
      return target()->PositionedAppend(data, offset, o, info, dbg);
    }
    IOStatus Truncate(uint64_t size, const IOOptions& o,
                      IODebugContext* dbg) override {
      if (IOStatus s = fs_->Frozen("truncate"); !s.ok()) return s;
      return target()->Truncate(size, o, dbg);
    }
    IOStatus Flush(const IOOptions& o, IODebugContext* dbg) override {
      if (IOStatus s = fs_->Frozen("flush"); !s.ok()) return s;
      return target()->Flush(o, dbg);
    }
    IOStatus Sync(const IOOptions& o, IODebugContext* dbg) override {
      if (IOStatus s = AdmitSync(); !s.ok()) return s;
      return target()->Sync(o, dbg);
    }
    IOStatus Fsync(const IOOptions& o, IODebugContext* dbg) override {
      if (IOStatus s = AdmitSync(); !s.ok()) return s;
      return target()->Fsync(o, dbg);
    }
    IOStatus RangeSync(uint64_t offset, uint64_t n, const IOOptions& o,
                       IODebugContext* dbg) override {
      if (IOStatus s = AdmitSync(); !s.ok()) return s;
      return target()->RangeSync(offset, n, o, dbg);
    }

   private:
    IOStatus AdmitSync() {
      if (IOStatus s = fs_->Frozen("sync"); !s.ok()) return s;
      if (wal_ && fs_->fail_wal_syncs) return fs_->Injected("WAL sync");
      return IOStatus::OK();
    }

    FaultFs* const fs_;
    const bool wal_;
  };

  IOStatus AdmitCreate(const std::string& f) {
    if (IOStatus s = Frozen("create " + f); !s.ok()) return s;
    const std::string name = fs::path(f).filename().string();
    const SstFault sst_fault = sst;
    if (absl::EndsWith(name, ".sst") &&
        (sst_fault == SstFault::kAll ||
         (sst_fault == SstFault::kIngest && absl::StartsWith(name, "ingest-"))))
      return Injected("create " + f);
    return IOStatus::OK();
  }

  IOStatus Wrap(const std::string& f, IOStatus s,
                std::unique_ptr<FSWritableFile>* r) {
    if (s.ok()) {
      *r = std::make_unique<File>(std::move(*r), this,
                                  absl::EndsWith(f, ".log"));
    }
    return s;
  }
};

// ---------------------------------------------------------------------------
// A deterministic push stream, and what a store holding a prefix of it
// holds.

constexpr int kDim = 4;

struct Stream {
  int64_t batch;     // ids per push
  int64_t universe;  // ids are < universe
};
// Small pushes (journal records and spills are "WAL" appends: FaultFs
// counts every *.log file, RocksDB's WAL and the store's journal files).
constexpr Stream kSmall{32, 500};
// Pushes of 3000 states: each materialization of them ingests an SST.
constexpr Stream kLarge{3000, 8000};

// Push b (>= 1): distinct ids, version 10 * b + 40, or 10 * b + 5 for every
// fifth (an update older than one of the last three pushes' loses), writer
// b % 3, states unique to (b, position).
absl::Status PushBatch(NodeStateStore& store, const Stream& s, int64_t b) {
  std::vector<int64_t> ids;
  std::vector<float> states;
  std::vector<uint64_t> versions;
  std::vector<double> times;
  for (int64_t j = 0; j < s.batch; ++j) {
    ids.push_back((b * 7919 + j * 13) % s.universe);
    versions.push_back(static_cast<uint64_t>(10 * b + (j % 5 == 4 ? 5 : 40)));
    times.push_back(static_cast<double>(b / 4));
    for (int k = 0; k < kDim; ++k)
      states.push_back(static_cast<float>(b * 10000 + j) + 0.25f * k);
  }
  return store.Push(ids, states, versions, times, static_cast<int32_t>(b % 3));
}

absl::Status PushBatches(NodeStateStore& store, const Stream& s, int64_t from,
                         int64_t to) {
  for (int64_t b = from; b <= to; ++b) {
    absl::Status st = PushBatch(store, s, b);
    if (!st.ok()) return st;
  }
  return absl::OkStatus();
}

// Empty when `got` holds what `want` holds, else the first difference.
std::string Diff(NodeStateStore& got, NodeStateStore& want, const Stream& s) {
  return testing::StoreDiff(got, want, s.universe);
}

// The k in [lo, hi] such that `got` holds exactly pushes 1..k of `s`;
// otherwise -1, with how it differs from 1..lo in *why.
int64_t HeldPrefix(NodeStateStore& got, const Stream& s, int64_t lo, int64_t hi,
                   std::string* why) {
  NodeStateStoreOptions o;
  o.dim = kDim;
  auto want = Open(o);
  if (!want.ok() || !PushBatches(**want, s, 1, lo).ok()) {
    *why = "cannot build the expected store";
    return -1;
  }
  for (int64_t k = lo; k <= hi; ++k) {
    if (k > lo && !PushBatch(**want, s, k).ok()) break;
    std::string diff = Diff(got, **want, s);
    if (diff.empty()) return k;
    if (k == lo) *why = absl::StrCat("vs pushes 1..", lo, ": ", diff);
  }
  return -1;
}

// ---------------------------------------------------------------------------
// Fixture: a FaultFs under an Env, fresh directories.

class FaultInjectionTest : public ::testing::Test {
 protected:
  FaultInjectionTest()
      : fs_(std::make_shared<FaultFs>()), env_(rocksdb::NewCompositeEnv(fs_)) {}

  static void TearDownTestSuite() {
    std::error_code ec;
    fs::remove_all(Root(), ec);
  }

  static fs::path Root() {
    return fs::path(::testing::TempDir()) /
           absl::StrCat("mnemo_fault_test_", ::getpid());
  }

  // A fresh directory path (not created).
  static std::string NewDir(const std::string& tag) {
    static std::atomic<int> counter{0};
    fs::create_directories(Root());
    return (Root() / absl::StrCat(tag, "_", counter++)).string();
  }

  // `faulty`: through the FaultFs; otherwise RocksDB's default Env.
  NodeStateStoreOptions Options(const std::string& dir, WritePolicy policy,
                                int64_t hot_states, bool faulty = true) {
    NodeStateStoreOptions o;
    o.dim = kDim;
    o.data_dir = dir;
    o.write_policy = policy;
    o.hot_capacity_bytes = hot_states * kDim * int64_t{sizeof(float)};
    o.journal_limit_bytes = 256ll << 20;  // no materialization unless asked
    if (faulty) o.env = env_.get();
    return o;
  }

  std::unique_ptr<NodeStateStore> MustOpen(const NodeStateStoreOptions& o) {
    auto store = Open(o);
    EXPECT_THAT(store, IsOk());
    return store.ok() ? *std::move(store) : nullptr;
  }

  // A crash: nothing the store does from here on reaches its files (what it
  // wrote stays, as after a kill), then it is dropped. Clears the faults.
  void Crash(std::unique_ptr<NodeStateStore> store) {
    fs_->frozen = true;
    store.reset();
    fs_->Clear();
  }

  std::shared_ptr<FaultFs> fs_;
  std::unique_ptr<rocksdb::Env> env_;  // over fs_; outlives every store
};

// A status that must be an error of a storage failure.
MATCHER(IsStorageError, "is a storage error") {
  const absl::Status& s = ::mnemo::GetStatus(arg);
  *result_listener << "status: " << s.ToString();
  return absl::IsUnavailable(s) || absl::IsInternal(s) || absl::IsDataLoss(s);
}

// ---------------------------------------------------------------------------
// (a) A failed write of the journal (write-through: every push appends one
// record to data_dir/journal/*.log).

struct WalCase {
  std::string name;
  bool sync_fault;  // else the append fails
  int64_t hot_states;
};

class WalFailureTest : public FaultInjectionTest,
                       public ::testing::WithParamInterface<WalCase> {};

TEST_P(WalFailureTest, PushFailsUntilRestartAndNoAcknowledgedPushIsLost) {
  const WalCase& c = GetParam();
  const std::string dir = NewDir("wal");
  NodeStateStoreOptions o =
      Options(dir, WritePolicy::kWriteThrough, c.hot_states);
  o.sync = c.sync_fault;
  auto store = MustOpen(o);
  ASSERT_NE(store, nullptr);
  ASSERT_THAT(PushBatches(*store, kSmall, 1, 20), IsOk());

  if (c.sync_fault) {
    fs_->fail_wal_syncs = true;
  } else {
    fs_->wal_appends_left = 0;
  }
  EXPECT_THAT(PushBatch(*store, kSmall, 21), IsStorageError());
  EXPECT_GT(fs_->injected.load(), 0);
  // Nothing of the failed push is served: the store still holds 1..20.
  // (A spilling store cannot pull cold states now: promoting them spills.)
  std::string why;
  if (c.hot_states == 0) {
    EXPECT_EQ(HeldPrefix(*store, kSmall, 20, 20, &why), 20) << why;
  }
  // The journal stopped writing: pushes fail, with the cause and what to
  // do, even once the disk works again, until a restart.
  fs_->Clear();
  for (int retry = 0; retry < 2; ++retry) {
    absl::Status s = PushBatch(*store, kSmall, 21);
    EXPECT_THAT(s, StatusIs(absl::StatusCode::kUnavailable, "injected fault"));
    EXPECT_THAT(s, StatusIs(absl::StatusCode::kUnavailable,
                            "journal stopped writing after this error: "
                            "restart the store"));
  }
  EXPECT_THAT(store->Checkpoint(NewDir("wal_ckpt")), IsStorageError());
  EXPECT_THAT(store->Close(), IsStorageError());
  store.reset();

  // A restart: every acknowledged push, and the failed one absent (its
  // append wrote nothing) or whole (its bytes were in the WAL, unsynced).
  {
    auto reopened =
        MustOpen(Options(dir, WritePolicy::kWriteThrough, c.hot_states, false));
    ASSERT_NE(reopened, nullptr);
    EXPECT_EQ(HeldPrefix(*reopened, kSmall, 20, 21, &why),
              c.sync_fault ? 21 : 20)
        << why;
    ASSERT_THAT(PushBatches(*reopened, kSmall, 21, 30), IsOk());
    ASSERT_THAT(reopened->Close(), IsOk());
  }
  auto reopened =
      MustOpen(Options(dir, WritePolicy::kWriteThrough, c.hot_states, false));
  ASSERT_NE(reopened, nullptr);
  EXPECT_EQ(HeldPrefix(*reopened, kSmall, 30, 30, &why), 30) << why;
}

INSTANTIATE_TEST_SUITE_P(WriteThrough, WalFailureTest,
                         ::testing::Values(WalCase{"append", false, 0},
                                           WalCase{"append_spilling", false,
                                                   16},
                                           WalCase{"sync", true, 0}),
                         [](const ::testing::TestParamInfo<WalCase>& info) {
                           return info.param.name;
                         });

// A spill that fails after its push was journaled: the push is an error,
// the store stops (RAM may hold part of it), and a restart replays it whole.
TEST_F(FaultInjectionTest, WriteThroughFailedSpillStopsTheStore) {
  const std::string dir = NewDir("spill");
  auto store = MustOpen(Options(dir, WritePolicy::kWriteThrough, 16));
  ASSERT_NE(store, nullptr);
  ASSERT_THAT(PushBatches(*store, kSmall, 1, 20), IsOk());
  fs_->wal_appends_left = 1;  // the journal record, not the spill
  EXPECT_THAT(PushBatch(*store, kSmall, 21), IsStorageError());
  EXPECT_GT(fs_->injected.load(), 0);
  fs_->Clear();
  const std::string stopped = "restart it to recover from its journal";
  EXPECT_THAT(PushBatch(*store, kSmall, 22),
              StatusIs(absl::StatusCode::kUnavailable, stopped));
  PulledStates out;
  EXPECT_THAT(store->Pull(std::vector<int64_t>{1, 2}, &out),
              StatusIs(absl::StatusCode::kUnavailable, stopped));
  EXPECT_THAT(store->Get(1), StatusIs(absl::StatusCode::kUnavailable, stopped));
  EXPECT_THAT(store->Close(), IsStorageError());
  store.reset();

  auto reopened = MustOpen(Options(dir, WritePolicy::kWriteThrough, 16, false));
  ASSERT_NE(reopened, nullptr);
  std::string why;
  EXPECT_EQ(HeldPrefix(*reopened, kSmall, 21, 21, &why), 21) << why;
  EXPECT_THAT(PushBatches(*reopened, kSmall, 22, 30), IsOk());
  EXPECT_EQ(HeldPrefix(*reopened, kSmall, 30, 30, &why), 30) << why;
}

// ---------------------------------------------------------------------------
// (b) A failed checkpoint: SST creation (its flush) or hard links fail.

enum class CkptFault { kSst, kLink, kDiskFull };

struct CheckpointCase {
  std::string name;
  WritePolicy policy;
  CkptFault fault;
  int64_t hot_states;
};

class CheckpointFailureTest
    : public FaultInjectionTest,
      public ::testing::WithParamInterface<CheckpointCase> {};

TEST_P(CheckpointFailureTest, FailsWholeAndRestartRecoversTheAcknowledged) {
  const CheckpointCase& c = GetParam();
  const bool write_back = c.policy == WritePolicy::kWriteBack;
  const std::string dir = NewDir("ckpt_live");
  auto store = MustOpen(Options(dir, c.policy, c.hot_states));
  ASSERT_NE(store, nullptr);
  ASSERT_THAT(PushBatches(*store, kSmall, 1, 20), IsOk());
  const std::string good = NewDir("ckpt_good");
  ASSERT_THAT(store->Checkpoint(good), IsOk());
  ASSERT_THAT(PushBatches(*store, kSmall, 21, 30), IsOk());

  switch (c.fault) {
    case CkptFault::kSst:
      fs_->sst = SstFault::kAll;
      break;
    case CkptFault::kLink:
      fs_->fail_links = true;
      break;
    case CkptFault::kDiskFull:
      fs_->space_left = 0;
      break;
  }
  const std::string failed = NewDir("ckpt_failed");
  EXPECT_THAT(store->Checkpoint(failed), IsStorageError());
  EXPECT_GT(fs_->injected.load(), 0);
  // All or nothing: no half checkpoint is left to be opened as a store.
  EXPECT_FALSE(fs::exists(failed));

  int64_t acked = write_back ? 20 : 30;
  int64_t attempted = 30;
  fs_->Clear();
  if (c.fault == CkptFault::kLink) {
    // Only the copy failed, RocksDB goes on: a retry succeeds.
    ASSERT_THAT(store->Checkpoint(failed), IsOk());
    acked = 30;
  } else {
    // A failed flush or WAL write: RocksDB refuses to flush (and, but for a
    // write-back flush out of space, to write) until a restart.
    EXPECT_THAT(store->Checkpoint(failed), IsStorageError());
    EXPECT_FALSE(fs::exists(failed));
    absl::Status pushed = PushBatch(*store, kSmall, 31);
    attempted = 31;
    if (!write_back && c.hot_states == 0) {
      // The journal is not RocksDB's: the push may still be journaled (and
      // is then recovered), or fail for RocksDB's refusal to materialize.
      if (pushed.ok()) {
        acked = 31;
      } else {
        EXPECT_THAT(pushed,
                    StatusIs(absl::StatusCode::kUnavailable, "restart"));
      }
    } else if (!write_back ||
               (c.hot_states > 0 && c.fault == CkptFault::kSst)) {
      // A spill reaches RocksDB: it fails.
      EXPECT_THAT(pushed, StatusIs(absl::StatusCode::kUnavailable, "restart"));
      if (write_back) {
        // A failed spill leaves part of the push in RAM: the store stops.
        EXPECT_THAT(store->Get(1),
                    StatusIs(absl::StatusCode::kUnavailable,
                             "restart it to recover from its last checkpoint"));
      }
    } else if (c.hot_states == 0) {
      EXPECT_THAT(pushed, IsOk());  // write-back: RAM only until a checkpoint
    } else if (!pushed.ok()) {
      EXPECT_THAT(pushed, IsStorageError());
    }
  }
  Crash(std::move(store));

  auto reopened = MustOpen(Options(dir, c.policy, c.hot_states, false));
  ASSERT_NE(reopened, nullptr);
  std::string why;
  const int64_t held = HeldPrefix(*reopened, kSmall, acked, attempted, &why);
  if (write_back) {
    // Write-back restarts exactly at its last checkpoint.
    EXPECT_EQ(held, acked) << why;
  } else {
    EXPECT_NE(held, -1) << why;
  }
  // The checkpoints made hold what they held.
  auto from_good = MustOpen(Options(good, c.policy, c.hot_states, false));
  ASSERT_NE(from_good, nullptr);
  EXPECT_EQ(HeldPrefix(*from_good, kSmall, 20, 20, &why), 20) << why;
  if (c.fault == CkptFault::kLink) {
    auto from_retry = MustOpen(Options(failed, c.policy, c.hot_states, false));
    ASSERT_NE(from_retry, nullptr);
    EXPECT_EQ(HeldPrefix(*from_retry, kSmall, 30, 30, &why), 30) << why;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Policies, CheckpointFailureTest,
    ::testing::Values(
        CheckpointCase{"wb_sst_spilling", WritePolicy::kWriteBack,
                       CkptFault::kSst, 16},
        CheckpointCase{"wb_link", WritePolicy::kWriteBack, CkptFault::kLink, 0},
        CheckpointCase{"wb_full_disk_spilling", WritePolicy::kWriteBack,
                       CkptFault::kDiskFull, 16},
        CheckpointCase{"wt_sst", WritePolicy::kWriteThrough, CkptFault::kSst,
                       0},
        CheckpointCase{"wt_link_spilling", WritePolicy::kWriteThrough,
                       CkptFault::kLink, 16},
        CheckpointCase{"wt_full_disk", WritePolicy::kWriteThrough,
                       CkptFault::kDiskFull, 0}),
    [](const ::testing::TestParamInfo<CheckpointCase>& info) {
      return info.param.name;
    });

// ---------------------------------------------------------------------------
// (b) A failed ingest: write-through materializations of >= 2048 states go
// through an SST file that is ingested (moved in by a hard link).

struct IngestCase {
  std::string name;
  SstFault sst;     // kIngest: the SST file cannot be created
  bool fail_links;  // the ingest cannot link it in
  bool crash;       // crash with the fault on; else clear it and go on
};

class IngestFailureTest : public FaultInjectionTest,
                          public ::testing::WithParamInterface<IngestCase> {};

TEST_P(IngestFailureTest, IsReportedAndLosesNothing) {
  const IngestCase& c = GetParam();
  const std::string dir = NewDir("ingest");
  auto options = [&](bool faulty) {
    NodeStateStoreOptions o =
        Options(dir, WritePolicy::kWriteThrough, 2500, faulty);
    o.journal_limit_bytes = 1024;  // every push asks for a materialization
    return o;
  };
  auto store = MustOpen(options(true));
  ASSERT_NE(store, nullptr);
  ASSERT_THAT(PushBatches(*store, kLarge, 1, 3), IsOk());

  fs_->sst = c.sst;
  fs_->fail_links = c.fail_links;
  // The background materializer fails; the next push over the journal limit
  // runs it in the foreground and reports its error. Every push is in the
  // journal, so none is lost: the errors say the states are not written as
  // node entries (yet).
  int failures = 0;
  for (int64_t b = 4; b <= 9; ++b) {
    absl::Status s = PushBatch(*store, kLarge, b);
    if (!s.ok()) {
      ++failures;
      EXPECT_THAT(s, StatusIs(absl::StatusCode::kUnavailable, "materialize"));
    }
  }
  EXPECT_GT(failures, 0);
  EXPECT_GT(fs_->injected.load(), 0);
  std::string why;
  EXPECT_EQ(HeldPrefix(*store, kLarge, 9, 9, &why), 9) << why;
  if (c.crash) {
    Crash(std::move(store));
  } else {
    // The fault clears: materializations succeed again, no restart needed.
    fs_->Clear();
    EXPECT_THAT(PushBatches(*store, kLarge, 10, 12), IsOk());
    EXPECT_THAT(store->Close(), IsOk());
    store.reset();
  }
  const int64_t last = c.crash ? 9 : 12;
  auto reopened = MustOpen(options(false));
  ASSERT_NE(reopened, nullptr);
  EXPECT_EQ(HeldPrefix(*reopened, kLarge, last, last, &why), last) << why;
}

INSTANTIATE_TEST_SUITE_P(
    WriteThrough, IngestFailureTest,
    ::testing::Values(IngestCase{"sst", SstFault::kIngest, false, false},
                      IngestCase{"link_crash", SstFault::kNone, true, true}),
    [](const ::testing::TestParamInfo<IngestCase>& info) {
      return info.param.name;
    });

// ---------------------------------------------------------------------------
// (c) A full disk: appends fail with NoSpace once a byte budget is spent,
// wherever that happens (a journal record, a spill, a materialization, a
// flush, a checkpoint copy).

struct FullDiskCase {
  std::string name;
  WritePolicy policy = WritePolicy::kWriteThrough;
  int64_t hot_states = 0;
  bool crash = false;  // else Close()
  // Bytes written before the disk is full, one store each. Each failed
  // flush costs a second: RocksDB waits that long before it goes on.
  std::vector<int64_t> budgets;
};

class FullDiskTest : public FaultInjectionTest,
                     public ::testing::WithParamInterface<FullDiskCase> {};

TEST_P(FullDiskTest, EveryFailureIsAnErrorAndRestartRecovers) {
  const FullDiskCase& c = GetParam();
  const bool write_back = c.policy == WritePolicy::kWriteBack;
  for (int64_t budget : c.budgets) {
    SCOPED_TRACE(absl::StrCat("disk full after ", budget, " bytes"));
    const std::string dir = NewDir("full");
    auto options = [&](bool faulty) {
      NodeStateStoreOptions o = Options(dir, c.policy, c.hot_states, faulty);
      o.journal_limit_bytes = 16 << 10;  // materializations too
      return o;
    };
    auto store = MustOpen(options(true));
    ASSERT_NE(store, nullptr);
    ASSERT_THAT(PushBatches(*store, kSmall, 1, 5), IsOk());
    if (write_back) {
      ASSERT_THAT(store->Checkpoint(NewDir("full_ckpt")), IsOk());
    }
    fs_->space_left = budget;

    // Push until the disk is full. Write-through acknowledges each push;
    // write-back the pushes before each checkpoint.
    int64_t acked = 5, attempted = 5;
    absl::Status failure;
    for (int64_t b = 6; b <= 600 && failure.ok(); ++b) {
      failure = PushBatch(*store, kSmall, b);
      attempted = b;
      if (failure.ok() && write_back && b % 5 == 0)
        failure = store->Checkpoint(NewDir("full_ckpt"));
      if (failure.ok()) acked = b;
    }
    ASSERT_THAT(failure, IsStorageError());
    EXPECT_GT(fs_->injected.load(), 0);
    if (write_back) acked -= acked % 5;
    // Space freed: write-through still fails (the journal stopped writing
    // after a failed write, RocksDB after a failed WAL write, or the store
    // after a failed spill) until a restart. Write-back may go on: RocksDB
    // refuses only its flushes.
    fs_->space_left = -1;
    absl::Status again = PushBatch(*store, kSmall, attempted);
    if (!write_back) {
      EXPECT_THAT(again, StatusIs(absl::StatusCode::kUnavailable, "restart"));
    } else if (!again.ok()) {
      EXPECT_THAT(again, IsStorageError());
    }
    bool closed = false;
    if (c.crash) {
      Crash(std::move(store));
    } else {
      closed = store->Close().ok();
      store.reset();
      fs_->Clear();
    }

    auto reopened = MustOpen(options(false));
    ASSERT_NE(reopened, nullptr);
    std::string why;
    const int64_t held = HeldPrefix(*reopened, kSmall, acked, attempted, &why);
    if (write_back) {
      // Back at the last checkpoint, or all of it after a clean Close().
      EXPECT_EQ(held, closed ? attempted : acked) << why;
    } else {
      EXPECT_NE(held, -1) << why;
    }
    // And it goes on from there.
    ASSERT_THAT(PushBatches(*reopened, kSmall, 1, attempted + 5), IsOk());
    ASSERT_THAT(reopened->Close(), IsOk());
    reopened = MustOpen(options(false));
    ASSERT_NE(reopened, nullptr);
    EXPECT_EQ(HeldPrefix(*reopened, kSmall, attempted + 5, attempted + 5, &why),
              attempted + 5)
        << why;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Policies, FullDiskTest,
    ::testing::Values(FullDiskCase{.name = "wt",
                                   .policy = WritePolicy::kWriteThrough,
                                   .budgets = {0, 700, 23000}},
                      FullDiskCase{.name = "wt_spilling",
                                   .policy = WritePolicy::kWriteThrough,
                                   .hot_states = 16,
                                   .budgets = {5000, 60000}},
                      FullDiskCase{.name = "wt_spilling_crash",
                                   .policy = WritePolicy::kWriteThrough,
                                   .hot_states = 16,
                                   .crash = true,
                                   .budgets = {700, 23000}},
                      FullDiskCase{.name = "wb",
                                   .policy = WritePolicy::kWriteBack,
                                   .budgets = {0, 20000}},
                      FullDiskCase{.name = "wb_spilling_crash",
                                   .policy = WritePolicy::kWriteBack,
                                   .hot_states = 16,
                                   .crash = true,
                                   .budgets = {3000}}),
    [](const ::testing::TestParamInfo<FullDiskCase>& info) {
      return info.param.name;
    });

// ---------------------------------------------------------------------------
// Open() on a failing disk is an error and harms nothing.

TEST_F(FaultInjectionTest, FailedOpenLeavesTheStoreAsItWas) {
  for (WritePolicy policy :
       {WritePolicy::kWriteThrough, WritePolicy::kWriteBack}) {
    SCOPED_TRACE(WritePolicyName(policy));
    const std::string dir = NewDir("open");
    {
      auto store = MustOpen(Options(dir, policy, 16, false));
      ASSERT_NE(store, nullptr);
      ASSERT_THAT(PushBatches(*store, kSmall, 1, 20), IsOk());
      ASSERT_THAT(store->Close(), IsOk());
    }
    for (int64_t budget : {int64_t{0}, int64_t{100}, int64_t{4000}}) {
      SCOPED_TRACE(absl::StrCat("disk full after ", budget, " bytes"));
      fs_->space_left = budget;
      auto store = Open(Options(dir, policy, 16));
      // Opens (the budget was enough) or fails: never half.
      fs_->Clear();
      if (store.ok()) {
        std::string why;
        EXPECT_EQ(HeldPrefix(**store, kSmall, 20, 20, &why), 20) << why;
      } else {
        EXPECT_THAT(store.status(), IsStorageError());
      }
    }
    fs_->frozen = true;
    EXPECT_THAT(Open(Options(dir, policy, 16)), IsStorageError());
    fs_->Clear();
    auto store = MustOpen(Options(dir, policy, 16, false));
    ASSERT_NE(store, nullptr);
    std::string why;
    EXPECT_EQ(HeldPrefix(*store, kSmall, 20, 20, &why), 20) << why;
  }
}

// ---------------------------------------------------------------------------
// A real full disk (a small tmpfs; needs root to mount): a push that does
// not fit is an error, a restart on the still-full disk is a clear error
// (Debian's RocksDB aborts on an assertion when its own writes fail inside
// DB::Open), and once space is freed every acknowledged push is there.

TEST_F(FaultInjectionTest, RealFullDiskRestartIsAClearError) {
  const fs::path disk = NewDir("tmpfs");
  fs::create_directories(disk);
  if (std::system(("mount -t tmpfs -o size=4m mnemo-test " + disk.string() +
                   " 2>/dev/null")
                      .c_str()) != 0) {
    GTEST_SKIP() << "cannot mount a tmpfs here (needs root)";
  }
  struct Unmount {
    std::string path;
    ~Unmount() { std::system(("umount " + path + " 2>/dev/null").c_str()); }
  } unmount{disk.string()};
  for (WritePolicy policy :
       {WritePolicy::kWriteThrough, WritePolicy::kWriteBack}) {
    SCOPED_TRACE(WritePolicyName(policy));
    const fs::path dir = disk / WritePolicyName(policy);
    NodeStateStoreOptions o = Options(dir.string(), policy, /*hot_states=*/0,
                                      /*faulty=*/false);
    o.journal_limit_bytes = 64 << 10;
    auto store = MustOpen(o);
    ASSERT_NE(store, nullptr);
    ASSERT_THAT(PushBatches(*store, kLarge, 1, 3), IsOk());
    // Leave about 200 KB: a few pushes of 3000 states fill it. The filler
    // grows in 64 KiB steps while the space is measured again each time
    // (RocksDB's background work takes space meanwhile: one allocation of
    // the space measured once could fail with ENOSPC). A step that finds
    // the disk full ends the filling: a full disk is what this wants.
    const fs::path filler = disk / "filler";
    {
      const int fd = open(filler.c_str(), O_WRONLY | O_CREAT, 0644);
      ASSERT_GE(fd, 0);
      off_t size = 0;
      while (true) {
        struct statvfs st;
        ASSERT_EQ(statvfs(disk.c_str(), &st), 0);
        const int64_t room = static_cast<int64_t>(st.f_bavail) * st.f_frsize;
        if (room <= (200 << 10)) break;
        const int rc = posix_fallocate(fd, size, 64 << 10);
        if (rc == ENOSPC) break;
        ASSERT_EQ(rc, 0);
        size += 64 << 10;
      }
      close(fd);
    }
    int64_t acked = 3, attempted = 3;
    absl::Status failure;
    for (int64_t b = 4; b <= 200 && failure.ok(); ++b) {
      failure = PushBatch(*store, kLarge, b);
      if (failure.ok() && policy == WritePolicy::kWriteBack) {
        failure = store->Checkpoint((dir.parent_path() / "ckpt").string());
        fs::remove_all(dir.parent_path() / "ckpt");
      }
      attempted = b;
      if (failure.ok()) acked = b;
    }
    ASSERT_THAT(failure, IsStorageError());
    store->Close().IgnoreError();
    store.reset();
    // The disk is still full: a clear error, nothing touched.
    auto again = Open(o);
    EXPECT_THAT(again, StatusIs(absl::StatusCode::kResourceExhausted,
                                "bytes free on its file system"));
    fs::remove(filler);
    auto reopened = MustOpen(o);
    ASSERT_NE(reopened, nullptr);
    std::string why;
    if (policy == WritePolicy::kWriteThrough) {
      EXPECT_NE(HeldPrefix(*reopened, kLarge, acked, attempted, &why), -1)
          << why;
    }
    ASSERT_THAT(PushBatches(*reopened, kLarge, 1, 5), IsOk());
    ASSERT_THAT(reopened->Close(), IsOk());
    fs::remove_all(dir);
  }
}

}  // namespace
}  // namespace mnemo::memstore
