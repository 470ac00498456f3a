// The local store: the contract suite over its backends, plus what only a
// local store can show (options, reopen, checkpoints, crashes, tiering).
#include "memstore/node_state_store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "memstore/journal.h"
#include "rocksdb/db.h"
#include "tests/unit/memstore/crash_stream.h"
#include "tests/unit/memstore/store_contract.h"
#include "tests/unit/memstore/store_diff.h"
#include "util/crc32c.h"
#include "util/status_matchers.h"

namespace mnemo::memstore {
namespace {

namespace fs = std::filesystem;
using testing::StoreBackend;

// A fresh directory path (not created) under one per-process temp root.
std::string NewDir(const std::string& tag) {
  static const fs::path root = fs::path(::testing::TempDir()) /
                               absl::StrCat("mnemo_memstore_test_", ::getpid());
  static std::atomic<int> counter{0};
  fs::create_directories(root);
  return (root / absl::StrCat(tag, "_", counter++)).string();
}

class TempRootCleaner : public ::testing::Environment {
 public:
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(fs::path(::testing::TempDir()) /
                       absl::StrCat("mnemo_memstore_test_", ::getpid()),
                   ec);
  }
};
const auto* const kCleaner =
    ::testing::AddGlobalTestEnvironment(new TempRootCleaner);

struct Config {
  std::string name;
  bool data_dir = true;
  WritePolicy policy = WritePolicy::kWriteThrough;
  int64_t hot_states = 0;  // 0: unlimited
  PromotionPolicy promotion = PromotionPolicy::kOnRead;
  int64_t journal_limit_bytes = 256ll << 20;
  bool mmap_reads = true;
};

NodeStateStoreOptions OptionsFor(const Config& c, int dim,
                                 const std::string& dir) {
  NodeStateStoreOptions o;
  o.dim = dim;
  if (c.data_dir) o.data_dir = dir;
  o.write_policy = c.policy;
  o.hot_capacity_bytes = c.hot_states * dim * int64_t{sizeof(float)};
  o.promotion = c.promotion;
  o.journal_limit_bytes = c.journal_limit_bytes;
  o.mmap_reads = c.mmap_reads;
  return o;
}

const std::vector<Config>& Configs() {
  static const auto* configs = new std::vector<Config>{
      {"ram", false},
      {"rocksdb_write_through", true, WritePolicy::kWriteThrough},
      {"rocksdb_write_through_tiny", true, WritePolicy::kWriteThrough, 4},
      {"rocksdb_write_through_tiny_never", true, WritePolicy::kWriteThrough, 4,
       PromotionPolicy::kNever},
      {"rocksdb_write_through_small_journal", true, WritePolicy::kWriteThrough,
       4, PromotionPolicy::kOnRead, 1024},
      {"rocksdb_write_back", true, WritePolicy::kWriteBack},
      {"rocksdb_write_back_tiny", true, WritePolicy::kWriteBack, 4},
      {"rocksdb_write_back_tiny_never", true, WritePolicy::kWriteBack, 4,
       PromotionPolicy::kNever},
      // Cold reads through pread instead of mmap (--no-mmap-reads).
      {"rocksdb_write_through_tiny_never_pread", true,
       WritePolicy::kWriteThrough, 4, PromotionPolicy::kNever, 256ll << 20,
       false},
  };
  return *configs;
}

StoreBackend BackendFor(const Config& c) {
  return StoreBackend{c.name, [c](int dim) {
                        return Open(OptionsFor(c, dim, NewDir(c.name)));
                      }};
}

MNEMO_INSTANTIATE_STORE_CONTRACT(
    Local, BackendFor(Configs()[0]), BackendFor(Configs()[1]),
    BackendFor(Configs()[2]), BackendFor(Configs()[3]),
    BackendFor(Configs()[4]), BackendFor(Configs()[5]),
    BackendFor(Configs()[6]), BackendFor(Configs()[7]),
    BackendFor(Configs()[8]));

// ---------------------------------------------------------------------------
// Helpers over the crash stream (dim 6, ids < 500).

absl::Status PushStream(NodeStateStore& store, int64_t from, int64_t to) {
  for (int64_t b = from; b <= to; ++b) {
    auto batch = crash_stream::MakeBatch(b);
    absl::Status s = store.Push(batch.ids, batch.states, batch.versions,
                                batch.times, batch.writer);
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

// A pure-RAM store holding batches 1..b of the stream.
std::unique_ptr<NodeStateStore> Expected(int64_t b) {
  NodeStateStoreOptions o;
  o.dim = crash_stream::kDim;
  auto store = Open(o);
  EXPECT_THAT(store, IsOk());
  EXPECT_THAT(PushStream(**store, 1, b), IsOk());
  return *std::move(store);
}

// Empty string when equal, else the first difference.
std::string Diff(NodeStateStore& got, NodeStateStore& want) {
  std::string d = testing::StoreDiff(got, want, crash_stream::kIds + 5);
  if (!d.empty()) return d;
  auto la = got.ListRecent(10), lb = want.ListRecent(10);
  if (!la.ok() || !lb.ok() || la->size() != lb->size()) return "ListRecent";
  for (size_t i = 0; i < la->size(); ++i)
    if ((*la)[i].id != (*lb)[i].id || (*la)[i].writer != (*lb)[i].writer)
      return absl::StrCat("ListRecent[", i, "] differs");
  return "";
}

// ---------------------------------------------------------------------------

TEST(OpenTest, RejectsBadOptions) {
  NodeStateStoreOptions o;
  EXPECT_THAT(Open(o), StatusIs(absl::StatusCode::kInvalidArgument, "dim"));
  o.dim = 4;
  o.hot_capacity_bytes = -1;
  EXPECT_THAT(Open(o), StatusIs(absl::StatusCode::kInvalidArgument,
                                "hot_capacity_bytes"));
  o.hot_capacity_bytes = 1024;
  EXPECT_THAT(Open(o),
              StatusIs(absl::StatusCode::kInvalidArgument, "data_dir"));
  o.hot_capacity_bytes = 0;
  o.max_batch = 0;
  EXPECT_THAT(Open(o),
              StatusIs(absl::StatusCode::kInvalidArgument, "max_batch"));
  o.max_batch = 10;
  o.write_policy = WritePolicy::kWriteBack;
  o.sync = true;
  EXPECT_THAT(Open(o), StatusIs(absl::StatusCode::kInvalidArgument, "sync"));
  o.sync = false;
  o.cold_read_threads = -2;
  EXPECT_THAT(Open(o), StatusIs(absl::StatusCode::kInvalidArgument,
                                "cold_read_threads"));
  // More threads than any machine has cores: refused, not an abort while
  // starting them.
  o.cold_read_threads = 100000;
  EXPECT_THAT(Open(o), StatusIs(absl::StatusCode::kInvalidArgument,
                                "cold_read_threads must be in [-1, 256], got "
                                "100000"));
  o.cold_read_threads = -1;
  o.journal_limit_bytes = 0;
  EXPECT_THAT(Open(o), StatusIs(absl::StatusCode::kInvalidArgument,
                                "journal_limit_bytes"));
  o.journal_limit_bytes = 1 << 20;
  o.write_buffer_bytes = (64 << 10) - 1;
  EXPECT_THAT(Open(o), StatusIs(absl::StatusCode::kInvalidArgument,
                                "write_buffer_bytes must be >= 65536, got "
                                "65535"));
  o.write_buffer_bytes = 64 << 10;
  o.block_cache_bytes = -1;
  EXPECT_THAT(Open(o), StatusIs(absl::StatusCode::kInvalidArgument,
                                "block_cache_bytes"));
}

TEST(OpenTest, ParsesWritePolicies) {
  EXPECT_EQ(*ParseWritePolicy("write-through"), WritePolicy::kWriteThrough);
  EXPECT_EQ(*ParseWritePolicy("write-back"), WritePolicy::kWriteBack);
  EXPECT_THAT(ParseWritePolicy("lazy"),
              StatusIs(absl::StatusCode::kInvalidArgument, "lazy"));
  EXPECT_EQ(WritePolicyName(WritePolicy::kWriteBack), "write-back");
}

TEST(OpenTest, RejectsAnotherDim) {
  NodeStateStoreOptions o;
  o.dim = 8;
  o.data_dir = NewDir("dim");
  {
    auto store = Open(o);
    ASSERT_THAT(store, IsOk());
    ASSERT_THAT((*store)->Close(), IsOk());
  }
  o.dim = 4;
  EXPECT_THAT(Open(o), StatusIs(absl::StatusCode::kInvalidArgument, "dim 8"));
  EXPECT_THAT(Open(o), StatusIs(absl::StatusCode::kInvalidArgument, "dim 4"));
  o.dim = 8;
  EXPECT_THAT(Open(o), IsOk());
}

TEST(OpenTest, OneStorePerDataDir) {
  NodeStateStoreOptions o;
  o.dim = 4;
  o.data_dir = NewDir("lock");
  auto a = Open(o);
  ASSERT_THAT(a, IsOk());
  EXPECT_THAT(Open(o),
              StatusIs(absl::StatusCode::kFailedPrecondition, "in use"));
}

// Opens the RocksDB of `dir` (creating it with mnemo's column families) and
// runs fn(db, default_cf, nodes_cf).
void WithRawDb(
    const std::string& dir,
    const std::function<void(rocksdb::DB*, rocksdb::ColumnFamilyHandle*,
                             rocksdb::ColumnFamilyHandle*,
                             rocksdb::ColumnFamilyHandle*)>& fn) {
  fs::create_directories(dir);
  rocksdb::Options o;
  o.create_if_missing = true;
  o.create_missing_column_families = true;
  std::vector<rocksdb::ColumnFamilyDescriptor> cfs = {
      {rocksdb::kDefaultColumnFamilyName, rocksdb::ColumnFamilyOptions()},
      {"nodes", rocksdb::ColumnFamilyOptions()},
      {"journal", rocksdb::ColumnFamilyOptions()}};
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DB* db = nullptr;
  rocksdb::Status s =
      rocksdb::DB::Open(o, (fs::path(dir) / "db").string(), cfs, &handles, &db);
  ASSERT_TRUE(s.ok()) << s.ToString();
  fn(db, handles[0], handles[1], handles[2]);
  for (auto* h : handles) ASSERT_TRUE(db->DestroyColumnFamilyHandle(h).ok());
  ASSERT_TRUE(db->Close().ok());
  delete db;
}

// The node entry key of `id` (8 bytes, big-endian).
std::string NodeKey(int64_t id) {
  std::string key(8, '\0');
  for (int i = 0; i < 8; ++i)
    key[i] = static_cast<char>((static_cast<uint64_t>(id) >> (56 - 8 * i)));
  return key;
}

TEST(OpenTest, RefusesADataDirOfFormat1) {
  // What mnemo's format 1 left on disk: meta/dim, no meta/format, node
  // entries of count u64 | last_update f64 | writer i32 | state.
  constexpr int kD = 4;
  const std::string dir = NewDir("format1");
  std::string entry(8 + 8 + 4 + kD * 4, '\0');
  const uint64_t count = 3;
  const double last_update = 17.5;
  std::memcpy(entry.data(), &count, 8);
  std::memcpy(entry.data() + 8, &last_update, 8);
  WithRawDb(dir, [&](rocksdb::DB* db, rocksdb::ColumnFamilyHandle* meta,
                     rocksdb::ColumnFamilyHandle* nodes,
                     rocksdb::ColumnFamilyHandle*) {
    ASSERT_TRUE(
        db->Put(rocksdb::WriteOptions(), meta, "meta/dim", std::to_string(kD))
            .ok());
    ASSERT_TRUE(
        db->Put(rocksdb::WriteOptions(), nodes, NodeKey(42), entry).ok());
  });
  NodeStateStoreOptions o;
  o.dim = kD;
  o.data_dir = dir;
  for (WritePolicy policy :
       {WritePolicy::kWriteThrough, WritePolicy::kWriteBack}) {
    o.write_policy = policy;
    for (const char* part : {"written by an older mnemo (on-disk format 1",
                             "empty --data-dir", dir.c_str()}) {
      EXPECT_THAT(Open(o), StatusIs(absl::StatusCode::kInvalidArgument, part));
    }
  }
  // Refused before anything was written: the old entry is as it was, and
  // no format marker was added.
  WithRawDb(dir, [&](rocksdb::DB* db, rocksdb::ColumnFamilyHandle* meta,
                     rocksdb::ColumnFamilyHandle* nodes,
                     rocksdb::ColumnFamilyHandle*) {
    std::string value;
    EXPECT_TRUE(
        db->Get(rocksdb::ReadOptions(), nodes, NodeKey(42), &value).ok());
    EXPECT_EQ(value, entry);
    EXPECT_TRUE(db->Get(rocksdb::ReadOptions(), meta, "meta/format", &value)
                    .IsNotFound());
  });
  EXPECT_FALSE(fs::exists(fs::path(dir) / "SESSION"));
}

TEST(OpenTest, WritesItsFormatAndRefusesAnUnknownOne) {
  NodeStateStoreOptions o;
  o.dim = 4;
  o.data_dir = NewDir("format");
  {
    auto store = Open(o);
    ASSERT_THAT(store, IsOk());
    ASSERT_THAT((*store)->Close(), IsOk());
  }
  ASSERT_THAT(Open(o), IsOk());  // its own format reopens
  WithRawDb(o.data_dir, [&](rocksdb::DB* db, rocksdb::ColumnFamilyHandle* meta,
                            rocksdb::ColumnFamilyHandle*,
                            rocksdb::ColumnFamilyHandle*) {
    std::string value;
    ASSERT_TRUE(
        db->Get(rocksdb::ReadOptions(), meta, "meta/format", &value).ok());
    EXPECT_EQ(value, "3");
    ASSERT_TRUE(
        db->Put(rocksdb::WriteOptions(), meta, "meta/format", "4").ok());
  });
  EXPECT_THAT(Open(o),
              StatusIs(absl::StatusCode::kInvalidArgument, "format 4"));
}

// Format 2 kept the push journal in RocksDB's "journal" column family: its
// records are replayed, the data dir becomes format 3, and the records are
// cut by the next materialization.
TEST(OpenTest, UpgradesFormat2AndReplaysItsJournal) {
  constexpr int kD = 4;
  NodeStateStoreOptions o;
  o.dim = kD;
  o.data_dir = NewDir("format2");
  {
    auto store = Open(o);
    ASSERT_THAT(store, IsOk());
    ASSERT_THAT((*store)->Close(), IsOk());
  }
  // What format 2 left after a crash: one journal record (header: magic
  // "NMJ2", dim, n, writer, padding) holding ids 5 and 9.
  std::string record(24 + 2 * (24 + kD * 4), '\0');
  const uint32_t magic = 0x324a4d4e, dim = kD;
  const uint64_t n = 2;
  const int32_t writer = 1;
  std::memcpy(record.data(), &magic, 4);
  std::memcpy(record.data() + 4, &dim, 4);
  std::memcpy(record.data() + 8, &n, 8);
  std::memcpy(record.data() + 16, &writer, 4);
  const int64_t ids[2] = {5, 9};
  const uint64_t versions[2] = {7, 8};
  const double times[2] = {1.5, 2.5};
  float states[2 * kD];
  for (int i = 0; i < 2 * kD; ++i) states[i] = 0.5f + i;
  std::memcpy(record.data() + 24, ids, 16);
  std::memcpy(record.data() + 40, versions, 16);
  std::memcpy(record.data() + 56, times, 16);
  std::memcpy(record.data() + 72, states, sizeof states);
  WithRawDb(o.data_dir, [&](rocksdb::DB* db, rocksdb::ColumnFamilyHandle* meta,
                            rocksdb::ColumnFamilyHandle*,
                            rocksdb::ColumnFamilyHandle* journal) {
    ASSERT_TRUE(
        db->Put(rocksdb::WriteOptions(), meta, "meta/format", "2").ok());
    ASSERT_TRUE(
        db->Put(rocksdb::WriteOptions(), journal, NodeKey(1), record).ok());
  });
  for (int round = 0; round < 2; ++round) {  // replayed, then materialized
    auto store = Open(o);
    ASSERT_THAT(store, IsOk());
    for (int i = 0; i < 2; ++i) {
      auto v = (*store)->Get(ids[i]);
      ASSERT_THAT(v, IsOk());
      EXPECT_EQ(v->version, versions[i]);
      EXPECT_EQ(v->time, times[i]);
      EXPECT_EQ(v->writer, 1);
      EXPECT_EQ(v->state[kD - 1], states[i * kD + kD - 1]);
    }
    ASSERT_THAT((*store)->Close(), IsOk());
  }
  WithRawDb(o.data_dir, [&](rocksdb::DB* db, rocksdb::ColumnFamilyHandle* meta,
                            rocksdb::ColumnFamilyHandle*,
                            rocksdb::ColumnFamilyHandle* journal) {
    std::string value;
    ASSERT_TRUE(
        db->Get(rocksdb::ReadOptions(), meta, "meta/format", &value).ok());
    EXPECT_EQ(value, "3");
    EXPECT_TRUE(db->Get(rocksdb::ReadOptions(), journal, NodeKey(1), &value)
                    .IsNotFound());
  });
}

TEST(LimitsTest, OverMaxBatchIsRejectedAndChangesNothing) {
  NodeStateStoreOptions o;
  o.dim = 2;
  o.max_batch = 3;
  auto store = Open(o);
  ASSERT_THAT(store, IsOk());
  std::vector<int64_t> ids = {1, 2, 3, 4};
  std::vector<float> states(8, 1.f);
  std::vector<uint64_t> versions(4, 1);
  std::vector<double> times(4, 1.0);
  EXPECT_THAT((*store)->Push(ids, states, versions, times, 0),
              StatusIs(absl::StatusCode::kResourceExhausted, "max_batch"));
  PulledStates out;
  EXPECT_THAT((*store)->Pull(ids, &out),
              StatusIs(absl::StatusCode::kResourceExhausted, "max_batch"));
  EXPECT_THAT((*store)->Get(1), StatusIs(absl::StatusCode::kNotFound, ""));
  ids.pop_back();
  versions.pop_back();
  times.pop_back();
  states.resize(6);
  EXPECT_THAT((*store)->Push(ids, states, versions, times, 0), IsOk());
}

TEST(MaterializeTest, LargeDirtySetsAreIngestedAndSurviveReopen) {
  // Pushes of 3000 states over a 1 KiB journal limit: every push is
  // materialized through an ingested SST (>= 2048 states).
  constexpr int kD = 3;
  NodeStateStoreOptions o;
  o.dim = kD;
  o.data_dir = NewDir("ingest");
  o.journal_limit_bytes = 1024;
  NodeStateStoreOptions ram;
  ram.dim = kD;
  auto want = Open(ram);
  ASSERT_THAT(want, IsOk());
  auto push = [&](NodeStateStore& store, int round) {
    std::vector<int64_t> ids;
    std::vector<float> states;
    std::vector<uint64_t> versions;
    std::vector<double> times;
    for (int64_t i = 0; i < 3000; ++i) {
      ids.push_back((i * 7919 + round * 13) % 5000);
      versions.push_back(4 * round + i % 3 + 1);
      times.push_back(round / 2);
      for (int k = 0; k < kD; ++k) states.push_back(round * 10000 + i + k);
    }
    return store.Push(ids, states, versions, times, round % 2);
  };
  for (int pass = 0; pass < 2; ++pass) {
    auto store = Open(o);
    ASSERT_THAT(store, IsOk());
    for (int round = 1 + 4 * pass; round <= 4 + 4 * pass; ++round) {
      ASSERT_THAT(push(**store, round), IsOk());
      if (pass == 0) {
        ASSERT_THAT(push(**want, round), IsOk());
      }
    }
    if (pass == 1) {
      for (int round = 5; round <= 8; ++round)
        ASSERT_THAT(push(**want, round), IsOk());
    }
    ASSERT_THAT((*store)->Close(), IsOk());
    auto reopened = Open(o);
    ASSERT_THAT(reopened, IsOk());
    std::vector<int64_t> ids(5000);
    for (int64_t i = 0; i < 5000; ++i) ids[i] = i;
    PulledStates a, b;
    ASSERT_THAT((*reopened)->Pull(ids, &a), IsOk());
    ASSERT_THAT((*want)->Pull(ids, &b), IsOk());
    EXPECT_EQ(a.states, b.states);
    EXPECT_EQ(a.version, b.version);
    EXPECT_EQ(a.time, b.time);
  }
}

TEST(MaterializeTest, SpillsDuringBackgroundIngestSurviveReopen) {
  // A hot tier of 2500 states under pushes of 3000: every push spills, and
  // the background materializer ingests SSTs (>= 2048 dirty states) while
  // the spills go on. Reopened, the store must hold exactly what a RAM
  // store holds (states, versions and times).
  constexpr int kD = 3;
  constexpr int64_t kUniverse = 8000;
  NodeStateStoreOptions o;
  o.dim = kD;
  o.data_dir = NewDir("ingest_spill");
  o.hot_capacity_bytes = 2500 * kD * int64_t{sizeof(float)};
  o.journal_limit_bytes = 1024;
  NodeStateStoreOptions ram;
  ram.dim = kD;
  auto want = Open(ram);
  ASSERT_THAT(want, IsOk());
  auto push = [&](NodeStateStore& store, int round) {
    std::vector<int64_t> ids;
    std::vector<float> states;
    std::vector<uint64_t> versions;
    std::vector<double> times;
    for (int64_t i = 0; i < 3000; ++i) {
      ids.push_back((i * 7919 + round * 1013) % kUniverse);
      // Every third round is partly older than the round before.
      versions.push_back(8 * round + 2 * (i % 4) + 1 -
                         (round % 3 == 0 ? 12 : 0));
      times.push_back(round / 2);
      for (int k = 0; k < kD; ++k) states.push_back(round * 10000 + i + k);
    }
    return store.Push(ids, states, versions, times, round % 3);
  };
  std::vector<int64_t> all(kUniverse);
  for (int64_t i = 0; i < kUniverse; ++i) all[i] = i;
  {
    auto store = Open(o);
    ASSERT_THAT(store, IsOk());
    PulledStates unused;
    for (int round = 1; round <= 24; ++round) {
      ASSERT_THAT(push(**store, round), IsOk());
      ASSERT_THAT(push(**want, round), IsOk());
      // Promotions (and the spills they cause) while materializing too.
      if (round % 4 == 0) {
        ASSERT_THAT((*store)->Pull(all, &unused), IsOk());
      }
    }
    ASSERT_THAT((*store)->Close(), IsOk());
  }
  auto reopened = Open(o);
  ASSERT_THAT(reopened, IsOk());
  PulledStates a, b;
  ASSERT_THAT((*reopened)->Pull(all, &a), IsOk());
  ASSERT_THAT((*want)->Pull(all, &b), IsOk());
  EXPECT_EQ(a.states, b.states);
  EXPECT_EQ(a.version, b.version);
  EXPECT_EQ(a.time, b.time);
}

class LocalStoreTest : public ::testing::TestWithParam<Config> {};

TEST_P(LocalStoreTest, ReopenAfterCloseKeepsEverything) {
  const Config& c = GetParam();
  if (!c.data_dir) GTEST_SKIP() << "pure RAM store";
  const std::string dir = NewDir("reopen");
  auto o = OptionsFor(c, crash_stream::kDim, dir);
  {
    auto store = Open(o);
    ASSERT_THAT(store, IsOk());
    ASSERT_THAT(PushStream(**store, 1, 60), IsOk());
    ASSERT_THAT((*store)->Close(), IsOk());
  }
  {
    auto store = Open(o);
    ASSERT_THAT(store, IsOk());
    EXPECT_EQ(Diff(**store, *Expected(60)), "");
    ASSERT_THAT(PushStream(**store, 61, 90), IsOk());
    EXPECT_EQ(Diff(**store, *Expected(90)), "");
  }  // the destructor closes too
  auto store = Open(o);
  ASSERT_THAT(store, IsOk());
  EXPECT_EQ(Diff(**store, *Expected(90)), "");
  auto stats = (*store)->Stats();
  ASSERT_THAT(stats, IsOk());
  EXPECT_GT(stats->rocksdb_bytes, 0);
}

TEST_P(LocalStoreTest, CheckpointOpensWithTheSameContents) {
  const Config& c = GetParam();
  auto o = OptionsFor(c, crash_stream::kDim, NewDir("live"));
  auto store = Open(o);
  ASSERT_THAT(store, IsOk());
  ASSERT_THAT(PushStream(**store, 1, 30), IsOk());
  const std::string ckpt = NewDir("ckpt");
  ASSERT_THAT((*store)->Checkpoint(ckpt), IsOk());
  ASSERT_THAT(PushStream(**store, 31, 50), IsOk());
  EXPECT_THAT((*store)->Checkpoint(ckpt),
              StatusIs(absl::StatusCode::kAlreadyExists, ckpt));
  EXPECT_EQ(Diff(**store, *Expected(50)), "");
  auto stats = (*store)->Stats();
  ASSERT_THAT(stats, IsOk());
  EXPECT_EQ(stats->checkpoints, 1);

  for (WritePolicy policy :
       {WritePolicy::kWriteThrough, WritePolicy::kWriteBack}) {
    // Open a copy, so that each policy sees the pristine checkpoint.
    const std::string copy = NewDir("ckpt_copy");
    fs::copy(ckpt, copy, fs::copy_options::recursive);
    Config cc = c;
    cc.data_dir = true;
    cc.policy = policy;
    auto restored = Open(OptionsFor(cc, crash_stream::kDim, copy));
    ASSERT_THAT(restored, IsOk());
    EXPECT_EQ(Diff(**restored, *Expected(30)), "");
  }
}

TEST_P(LocalStoreTest, PullsServeSpilledStatesPerPromotionPolicy) {
  const Config& c = GetParam();
  if (c.hot_states == 0) GTEST_SKIP() << "no spilling";
  auto store = Open(OptionsFor(c, crash_stream::kDim, NewDir("tier")));
  ASSERT_THAT(store, IsOk());
  ASSERT_THAT(PushStream(**store, 1, 10), IsOk());
  auto s = (*store)->Stats();
  ASSERT_THAT(s, IsOk());
  EXPECT_EQ(s->hot_states, c.hot_states);
  EXPECT_GT(s->cold_states, 0);
  EXPECT_GT(s->spills, 0);
  // The first id of batch 1 is long evicted.
  const int64_t cold_id = crash_stream::MakeBatch(1).ids[0];
  auto v = (*store)->Get(cold_id);
  ASSERT_THAT(v, IsOk());
  EXPECT_FALSE(v->hot);
  EXPECT_EQ(Diff(**store, *Expected(10)), "");  // pulls everything
  s = (*store)->Stats();
  ASSERT_THAT(s, IsOk());
  EXPECT_GT(s->cold_hits, 0);
  EXPECT_LE(s->hot_states, c.hot_states);
  PulledStates out;
  ASSERT_THAT((*store)->Pull(std::vector<int64_t>{cold_id}, &out), IsOk());
  v = (*store)->Get(cold_id);
  ASSERT_THAT(v, IsOk());
  if (c.promotion == PromotionPolicy::kOnRead) {
    EXPECT_TRUE(v->hot);
    EXPECT_GT((*store)->Stats()->promotions, 0);
  } else {
    EXPECT_FALSE(v->hot);
    EXPECT_EQ((*store)->Stats()->promotions, 0);
  }
  EXPECT_EQ(Diff(**store, *Expected(10)), "");
}

// A scan of cold states (an evaluation pass through a trainer's working
// set) promotes each state it reads, and so drops another from RAM: a
// promoted state is clean (RocksDB holds it already), so dropping it writes
// nothing. Only pushed states cost a write when they leave RAM, and every
// state still reads back what was pushed last, before and after a reopen.
TEST_P(LocalStoreTest, DroppingAPromotedStateWritesNothing) {
  const Config& c = GetParam();
  if (c.hot_states == 0 || !c.data_dir ||
      c.promotion != PromotionPolicy::kOnRead) {
    GTEST_SKIP() << "no promotion";
  }
  const std::string dir = NewDir("clean");
  {
    auto store = Open(OptionsFor(c, crash_stream::kDim, dir));
    ASSERT_THAT(store, IsOk());
    ASSERT_THAT(PushStream(**store, 1, 10), IsOk());
    auto before = (*store)->Stats();
    ASSERT_THAT(before, IsOk());
    ASSERT_GT(before->cold_states, c.hot_states);  // a scan cycles RAM
    EXPECT_GT(before->spill_writes, 0);
    EXPECT_LE(before->spill_writes, before->spills);
    // The first scan drops the pushed states still in RAM (each written
    // once at most); the second drops promoted ones only.
    EXPECT_EQ(Diff(**store, *Expected(10)), "");
    auto first = (*store)->Stats();
    ASSERT_THAT(first, IsOk());
    EXPECT_LE(first->spill_writes - before->spill_writes, c.hot_states);
    EXPECT_EQ(Diff(**store, *Expected(10)), "");
    auto second = (*store)->Stats();
    ASSERT_THAT(second, IsOk());
    EXPECT_GT(second->promotions, first->promotions);
    EXPECT_GT(second->spills, first->spills);
    EXPECT_EQ(second->spill_writes, first->spill_writes);
    // A push after the scans makes its states dirty again.
    ASSERT_THAT(PushStream(**store, 11, 12), IsOk());
    EXPECT_EQ(Diff(**store, *Expected(12)), "");
    auto third = (*store)->Stats();
    ASSERT_THAT(third, IsOk());
    EXPECT_GT(third->spill_writes, second->spill_writes);
    ASSERT_THAT((*store)->Close(), IsOk());
  }
  auto reopened = Open(OptionsFor(c, crash_stream::kDim, dir));
  ASSERT_THAT(reopened, IsOk());
  EXPECT_EQ(Diff(**reopened, *Expected(12)), "");
}

// The hot index looks dense ids up in an array that grows with them and
// the rest in a hash map (StoreImpl::IndexInsert): ids on both sides, ids
// that move to the array when it grows, evictions and promotions must all
// read back what was pushed last.
TEST_P(LocalStoreTest, DenseSparseAndHugeIdsReadBackTheLastPush) {
  const Config& c = GetParam();
  constexpr int kDim = 6;
  auto store = Open(OptionsFor(c, kDim, NewDir("dense")));
  ASSERT_THAT(store, IsOk());
  std::vector<int64_t> universe;
  for (int64_t k = 0; k < 300; ++k) {
    universe.push_back(70000 + 37 * k);  // beyond the array at first
    universe.push_back((int64_t{1} << 40) + 9973 * k);  // never in the array
  }
  std::map<int64_t, std::pair<uint64_t, float>> want;  // id -> version, value
  std::mt19937_64 rng(7);
  uint64_t version = 0;
  for (int round = 0; round < 12; ++round) {
    // Dense ids arrive round by round, so the array grows past 70000 late.
    for (int64_t id = round * 1000; id < (round + 1) * 1000; ++id)
      universe.push_back(id);
    std::vector<int64_t> ids;
    for (int i = 0; i < 2000; ++i)
      ids.push_back(universe[rng() % universe.size()]);
    std::vector<float> states;
    std::vector<uint64_t> versions;
    std::vector<double> times;
    for (int64_t id : ids) {
      ++version;
      const float value = static_cast<float>(version % 1000) + 0.5f;
      states.insert(states.end(), kDim, value);
      versions.push_back(version);
      times.push_back(static_cast<double>(version));
      want[id] = {version, value};
    }
    ASSERT_THAT((*store)->Push(ids, states, versions, times, 0), IsOk());
  }
  std::vector<int64_t> all(universe.begin(), universe.end());
  all.push_back(5000000);  // never pushed
  PulledStates out;
  ASSERT_THAT((*store)->Pull(all, &out), IsOk());
  for (size_t i = 0; i < all.size(); ++i) {
    auto it = want.find(all[i]);
    const uint64_t v = it == want.end() ? 0 : it->second.first;
    const float x = it == want.end() ? 0.f : it->second.second;
    ASSERT_EQ(out.version[i], v) << "id " << all[i];
    ASSERT_EQ(out.states[i * kDim], x) << "id " << all[i];
    ASSERT_EQ(out.states[i * kDim + kDim - 1], x) << "id " << all[i];
  }
  for (int64_t id : {int64_t{0}, int64_t{70000}, (int64_t{1} << 40)}) {
    auto got = (*store)->Get(id);
    if (want.count(id) == 0) continue;
    ASSERT_THAT(got, IsOk());
    EXPECT_EQ(got->version, want[id].first) << "id " << id;
  }
}

// PullWithProgress: every reported prefix is final when reported (equal to
// what the pull returns), reports only grow, and with spilled states they
// stop before the first cold row.
TEST_P(LocalStoreTest, PullWithProgressReportsOnlyFinalRows) {
  const Config& c = GetParam();
  constexpr int kDim = 6;
  auto store = Open(OptionsFor(c, kDim, NewDir("progress")));
  ASSERT_THAT(store, IsOk());
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < 5000; ++i) ids.push_back((i * 613) % 5000);
  std::vector<float> states(ids.size() * kDim);
  for (size_t i = 0; i < states.size(); ++i) states[i] = 0.25f * i;
  ASSERT_THAT((*store)->Push(ids, states, std::vector<uint64_t>(ids.size(), 3),
                             std::vector<double>(ids.size(), 1.0), 0),
              IsOk());
  std::vector<int64_t> pull(ids.rbegin(), ids.rend());
  pull.push_back(9999);  // never pushed
  PulledStates out;
  std::vector<int64_t> reports;
  std::vector<std::vector<float>> prefixes;
  ASSERT_THAT((*store)->PullWithProgress(pull, &out,
                                         [&](int64_t k) {
                                           reports.push_back(k);
                                           prefixes.emplace_back(
                                               out.states.begin(),
                                               out.states.begin() + k * kDim);
                                         }),
              IsOk());
  for (size_t r = 0; r < reports.size(); ++r) {
    if (r > 0) {
      EXPECT_GE(reports[r], reports[r - 1]);
    }
    EXPECT_EQ(prefixes[r],
              std::vector<float>(out.states.begin(),
                                 out.states.begin() + reports[r] * kDim))
        << "report " << r;
  }
  // Whatever the tiers, the answer is the plain pull's.
  PulledStates plain;
  ASSERT_THAT((*store)->Pull(pull, &plain), IsOk());
  EXPECT_EQ(out.states, plain.states);
  EXPECT_EQ(out.version, plain.version);
  if (c.hot_states == 0) {
    // All hot: the rows go out as they are read.
    ASSERT_FALSE(reports.empty());
    EXPECT_GT(reports.back(), 0);
  }
}

// ---------------------------------------------------------------------------
// The push journal's files (memstore/journal.h).

std::vector<fs::path> JournalFiles(const std::string& data_dir) {
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(fs::path(data_dir) / "journal"))
    files.push_back(e.path());
  std::sort(files.begin(), files.end());
  return files;
}

// A copy of an open store's data_dir is what a crash leaves on disk.
std::string CrashCopy(const std::string& data_dir) {
  const std::string copy = NewDir("crash_copy");
  fs::copy(data_dir, copy, fs::copy_options::recursive);
  return copy;
}

// The journal's checksum is CRC-32C: the check values of RFC 3720
// (B.4) and of the CRC catalogue, in one piece and in pieces of odd
// lengths (the hardware path reads 8 bytes at a time).
TEST(JournalTest, Crc32cMatchesKnownValues) {
  const std::string digits = "123456789";
  EXPECT_EQ(Crc32cExtend(0, digits.data(), digits.size()), 0xe3069283u);
  const std::string zeros(32, '\0'), ones(32, '\xff');
  EXPECT_EQ(Crc32cExtend(0, zeros.data(), zeros.size()), 0x8a9136aau);
  EXPECT_EQ(Crc32cExtend(0, ones.data(), ones.size()), 0x62a8ab43u);
  std::string ascending(32, '\0');
  for (int i = 0; i < 32; ++i) ascending[i] = static_cast<char>(i);
  EXPECT_EQ(Crc32cExtend(0, ascending.data(), 32), 0x46dd794eu);
  uint32_t crc = 0;
  for (size_t at = 0, step = 1; at < 32; at += step, step += 2)
    crc = Crc32cExtend(crc, ascending.data() + at,
                       std::min<size_t>(step, 32 - at));
  EXPECT_EQ(crc, 0x46dd794eu);
  EXPECT_EQ(Crc32cExtendPortable(0, digits.data(), digits.size()), 0xe3069283u);
  EXPECT_EQ(Crc32cExtendPortable(0, ascending.data(), 32), 0x46dd794eu);
  std::string big(100003, '\0');
  std::mt19937 rng(5);
  for (char& c : big) c = static_cast<char>(rng());
  EXPECT_EQ(Crc32cExtend(0, big.data(), big.size()),
            Crc32cExtendPortable(0, big.data(), big.size()));
}

// The options of what a crash of a write-through store leaves right after
// batches 1..n of the stream (a copy of its data_dir), and its one journal
// file.
NodeStateStoreOptions CrashedAfter(const std::string& tag, int64_t n,
                                   fs::path* journal_file) {
  NodeStateStoreOptions o;
  o.dim = crash_stream::kDim;
  o.data_dir = NewDir(tag);
  auto store = Open(o);
  EXPECT_THAT(store, IsOk());
  if (!store.ok()) return o;
  EXPECT_THAT(PushStream(**store, 1, n), IsOk());
  o.data_dir = CrashCopy(o.data_dir);
  const std::vector<fs::path> files = JournalFiles(o.data_dir);
  EXPECT_EQ(files.size(), 1u);
  if (!files.empty()) *journal_file = files[0];
  return o;
}

TEST(JournalTest, ATornLastRecordIsCutAndEveryAcknowledgedPushSurvives) {
  fs::path file;
  NodeStateStoreOptions c = CrashedAfter("torn", 5, &file);
  ASSERT_FALSE(file.empty());
  // The crash hit during the append of batch 6: half of its record landed.
  const uintmax_t whole = fs::file_size(file);
  const uintmax_t record = whole / 5;
  {
    std::ifstream in(file, std::ios::binary);
    std::string first(record, '\0');
    in.read(first.data(), record);
    std::ofstream out(file, std::ios::binary | std::ios::app);
    out.write(first.data(), record / 2);
  }
  {
    auto reopened = Open(c);
    ASSERT_THAT(reopened, IsOk());
    EXPECT_EQ(Diff(**reopened, *Expected(5)), "");
    EXPECT_EQ(fs::file_size(file), whole);  // the torn end is cut
    ASSERT_THAT(PushStream(**reopened, 6, 6), IsOk());
    // A second crash, now with two files: both replay.
    const std::string again = CrashCopy(c.data_dir);
    c.data_dir = again;
    EXPECT_EQ(JournalFiles(again).size(), 2u);
  }
  auto reopened = Open(c);
  ASSERT_THAT(reopened, IsOk());
  EXPECT_EQ(Diff(**reopened, *Expected(6)), "");
  ASSERT_THAT((*reopened)->Close(), IsOk());
  EXPECT_TRUE(JournalFiles(c.data_dir).empty());  // all materialized
}

TEST(JournalTest, ACorruptRecordBeforeTheEndIsDataLossNamingFileAndOffset) {
  fs::path file;
  NodeStateStoreOptions c = CrashedAfter("corrupt", 3, &file);
  ASSERT_FALSE(file.empty());
  const uintmax_t record = fs::file_size(file) / 3;
  {
    std::fstream f(file, std::ios::binary | std::ios::in | std::ios::out);
    f.seekp(static_cast<std::streamoff>(record + record / 2));  // record 2
    f.put('\x5a');
  }
  for (const std::string& part :
       {std::string("checksum mismatch"), file.string(),
        absl::StrCat("offset ", record)}) {
    EXPECT_THAT(Open(c), StatusIs(absl::StatusCode::kDataLoss, part));
  }
  // A damaged length (record 1's n, at offset 32): not taken for a record
  // cut short by a crash, which would silently drop the rest of the file.
  c = CrashedAfter("corrupt_n", 3, &file);
  ASSERT_FALSE(file.empty());
  {
    std::fstream f(file, std::ios::binary | std::ios::in | std::ios::out);
    f.seekp(32 + 3);  // n's high byte: the record now runs past the end
    f.put('\x01');
  }
  EXPECT_THAT(Open(c), StatusIs(absl::StatusCode::kDataLoss,
                                "offset 0: header checksum mismatch"));
}

// What the journal's replay reported (NodeStateStoreOptions::warn).
struct Warnings {
  std::vector<std::string> lines;
  void Attach(NodeStateStoreOptions* o) {
    o->warn = [this](const std::string& line) { lines.push_back(line); };
  }
  std::string all() const {
    std::string out;
    for (const auto& l : lines) absl::StrAppend(&out, l, "\n");
    return out;
  }
};

// A journal cut in half (not by a crash during one append: by a copy or a
// disk that lost its end) is cut at its last whole record, and the store
// says what it dropped: the file, the offset, the record cut short and how
// many records it kept.
TEST(JournalTest, ACutJournalIsShortenedAndWhatWasDroppedIsLogged) {
  fs::path file;
  NodeStateStoreOptions c = CrashedAfter("cut", 9, &file);
  ASSERT_FALSE(file.empty());
  const uintmax_t whole = fs::file_size(file);
  const uintmax_t record = whole / 9;
  fs::resize_file(file, whole / 2);  // in the middle of record 5
  Warnings warnings;
  warnings.Attach(&c);
  auto reopened = Open(c);
  ASSERT_THAT(reopened, IsOk());
  EXPECT_EQ(Diff(**reopened, *Expected(4)), "");
  EXPECT_EQ(fs::file_size(file), 4 * record);
  ASSERT_EQ(warnings.lines.size(), 1u) << warnings.all();
  for (const std::string& part :
       {file.string(), absl::StrCat("offset ", 4 * record),
        std::string("record 5"), std::string("kept 4 records (1-4)"),
        absl::StrCat(whole / 2 - 4 * record, " bytes")}) {
    EXPECT_THAT(warnings.lines[0], ::testing::HasSubstr(part));
  }
  // A whole journal says nothing.
  ASSERT_THAT((*reopened)->Close(), IsOk());
  Warnings quiet;
  quiet.Attach(&c);
  ASSERT_THAT(Open(c), IsOk());
  EXPECT_EQ(quiet.all(), "");
}

// A store that acknowledged pushes refuses to start when the journal that
// holds them is gone (deleted or emptied), naming what is missing, and
// leaves the data dir as it was: restoring the file brings everything
// back.
TEST(JournalTest, DeletedOrEmptiedJournalFilesAreRefusedNamingWhatIsMissing) {
  for (const bool empty : {false, true}) {
    SCOPED_TRACE(empty ? "emptied" : "deleted");
    fs::path file;
    NodeStateStoreOptions c = CrashedAfter("gone", 5, &file);
    ASSERT_FALSE(file.empty());
    const fs::path saved = fs::path(NewDir("saved_journal"));
    fs::copy_file(file, saved);
    if (empty) {
      fs::resize_file(file, 0);
    } else {
      fs::remove(file);
    }
    for (const std::string& part :
         {(fs::path(c.data_dir) / "journal").string(),
          std::string("through record 1"), std::string("IDENTITY")}) {
      EXPECT_THAT(Open(c), StatusIs(absl::StatusCode::kDataLoss, part));
    }
    fs::remove(file);
    fs::copy_file(saved, file);
    auto reopened = Open(c);
    ASSERT_THAT(reopened, IsOk());
    EXPECT_EQ(Diff(**reopened, *Expected(5)), "");
  }
}

// Files of a journal are contiguous: one missing between two others (or
// before the first, above what RocksDB holds) is refused, naming the
// records missing.
TEST(JournalTest, AMissingFileBetweenOthersIsRefused) {
  NodeStateStoreOptions o;
  o.dim = crash_stream::kDim;
  o.data_dir = NewDir("journal_gap");
  o.journal_limit_bytes = 1 << 20;  // files of 256 KiB
  {
    auto store = Open(o);
    ASSERT_THAT(store, IsOk());
    ASSERT_THAT(PushStream(**store, 1, 600), IsOk());
    o.data_dir = CrashCopy(o.data_dir);
  }
  std::vector<fs::path> files = JournalFiles(o.data_dir);
  ASSERT_GE(files.size(), 3u);
  const fs::path saved = fs::path(NewDir("saved_middle"));
  fs::rename(files[1], saved);
  EXPECT_THAT(Open(o), StatusIs(absl::StatusCode::kDataLoss, "are missing"));
  EXPECT_THAT(Open(o), StatusIs(absl::StatusCode::kDataLoss,
                                files[2].filename().string()));
  fs::rename(saved, files[1]);
  fs::rename(files[0], saved);
  EXPECT_THAT(Open(o), StatusIs(absl::StatusCode::kDataLoss, "records 1-"));
  fs::rename(saved, files[0]);
  auto reopened = Open(o);
  ASSERT_THAT(reopened, IsOk());
  EXPECT_EQ(Diff(**reopened, *Expected(600)), "");
}

// The database of a store that acknowledged pushes must be there: a
// deleted db/ (after a clean close: every push is in it) is refused under
// both write policies, and so is a write-back store's missing recovery
// point after a crash. A store that never acknowledged a push has nothing
// to lose and starts; so does one told to (its IDENTITY removed).
TEST(OpenTest, AMissingDatabaseIsRefusedOnceThePushesWereAcknowledged) {
  for (const WritePolicy policy :
       {WritePolicy::kWriteThrough, WritePolicy::kWriteBack}) {
    SCOPED_TRACE(WritePolicyName(policy));
    NodeStateStoreOptions o;
    o.dim = crash_stream::kDim;
    o.data_dir = NewDir("db_gone");
    o.write_policy = policy;
    {
      auto store = Open(o);
      ASSERT_THAT(store, IsOk());
      ASSERT_THAT((*store)->Close(), IsOk());
    }
    fs::remove_all(fs::path(o.data_dir) / "db");
    {
      auto store = Open(o);  // nothing was acknowledged: nothing lost
      ASSERT_THAT(store, IsOk());
      ASSERT_THAT(PushStream(**store, 1, 5), IsOk());
      ASSERT_THAT((*store)->Close(), IsOk());
    }
    fs::remove_all(fs::path(o.data_dir) / "db");
    for (const std::string& part :
         {(fs::path(o.data_dir) / "db").string(), std::string("missing"),
          std::string("IDENTITY")}) {
      EXPECT_THAT(Open(o), StatusIs(absl::StatusCode::kDataLoss, part));
    }
    EXPECT_TRUE(fs::exists(fs::path(o.data_dir) / "IDENTITY"));
    fs::remove(fs::path(o.data_dir) / "IDENTITY");
    auto store = Open(o);
    ASSERT_THAT(store, IsOk());
    EXPECT_EQ(Diff(**store, *Expected(0)), "");
  }
}

TEST(OpenTest, AWriteBackCrashWithoutItsRecoveryPointIsRefused) {
  NodeStateStoreOptions o =
      crash_stream::Options(NewDir("wb_no_recovery"), WritePolicy::kWriteBack);
  {
    auto store = Open(o);
    ASSERT_THAT(store, IsOk());
    ASSERT_THAT(PushStream(**store, 1, 20), IsOk());
    ASSERT_THAT((*store)->Checkpoint(NewDir("wb_ckpt")), IsOk());
    o.data_dir = CrashCopy(o.data_dir);
  }
  fs::remove_all(fs::path(o.data_dir) / "recovery");
  fs::remove_all(fs::path(o.data_dir) / "recovery.old");
  EXPECT_THAT(Open(o), StatusIs(absl::StatusCode::kDataLoss,
                                (fs::path(o.data_dir) / "recovery").string()));
  // The live database was left as it was.
  EXPECT_TRUE(fs::exists(fs::path(o.data_dir) / "db" / "CURRENT"));
}

TEST(JournalTest, MaterializedFilesAreDeleted) {
  NodeStateStoreOptions o;
  o.dim = crash_stream::kDim;
  o.data_dir = NewDir("journal_files");
  o.journal_limit_bytes = 16 << 10;  // files of 4 KiB, 3 records
  auto store = Open(o);
  ASSERT_THAT(store, IsOk());
  size_t most = 0;
  for (int64_t b = 1; b <= 400; ++b) {
    ASSERT_THAT(PushStream(**store, b, b), IsOk());
    most = std::max(most, JournalFiles(o.data_dir).size());
  }
  // 400 records of 1,576 bytes fill some 130 files: materializations
  // delete them as they go (the background one may lag by two limits).
  EXPECT_GT(most, 1u);
  EXPECT_LE(most, 16u);
  // Stats count the journal's bytes (files are only deleted meanwhile).
  auto stats = (*store)->Stats();
  ASSERT_THAT(stats, IsOk());
  uintmax_t on_disk = 0;
  for (const fs::path& f : JournalFiles(o.data_dir))
    on_disk += fs::file_size(f);
  EXPECT_GT(on_disk, 0u);
  EXPECT_GE(stats->rocksdb_bytes, static_cast<int64_t>(on_disk));
  ASSERT_THAT((*store)->Close(), IsOk());
  EXPECT_TRUE(JournalFiles(o.data_dir).empty());
  auto reopened = Open(o);
  ASSERT_THAT(reopened, IsOk());
  EXPECT_EQ(Diff(**reopened, *Expected(400)), "");
}

// A large background materialization (write-through) is written as SST
// files of contiguous id ranges, in parallel where there are CPUs to spare,
// and ingested together: every entry lands once. SST files a crash left
// in the data dir are removed at open.
TEST(MaterializeTest, PartsWriteEveryEntry) {
  constexpr int kDim = 4;
  constexpr int64_t kIds = 200000, kBatch = 5000;
  NodeStateStoreOptions o;
  o.dim = kDim;
  o.data_dir = NewDir("mat_parts");
  // The first materialization starts past 6 MiB of journal: more than
  // 150,000 states (40 bytes each), over two parts of 65,536.
  o.journal_limit_bytes = 6 << 20;
  auto id_of = [](int64_t i) { return 5 * i + 1; };
  {
    auto store = Open(o);
    ASSERT_THAT(store, IsOk());
    for (int64_t b = 0; b < kIds; b += kBatch) {
      std::vector<int64_t> ids;
      std::vector<float> states;
      std::vector<uint64_t> versions;
      std::vector<double> times;
      for (int64_t i = b; i < b + kBatch; ++i) {
        ids.push_back(id_of(i));
        for (int k = 0; k < kDim; ++k) states.push_back(i + 0.125f * k);
        versions.push_back(i + 1);
        times.push_back(0.25 * i);
      }
      ASSERT_THAT((*store)->Push(ids, states, versions, times, 1), IsOk());
    }
    // The background run deletes the journal files it covers: wait for it,
    // so that Close's own (single-part) run does not write these states.
    const fs::path first = JournalFiles(o.data_dir).front();
    for (int i = 0; i < 3000 && fs::exists(first); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    ASSERT_FALSE(fs::exists(first));
    ASSERT_THAT((*store)->Close(), IsOk());
  }
  const fs::path stale = fs::path(o.data_dir) / "ingest-99-0.sst";
  std::ofstream(stale) << "left by a crash";
  auto store = Open(o);
  ASSERT_THAT(store, IsOk());
  EXPECT_FALSE(fs::exists(stale));
  std::vector<int64_t> want;
  for (int64_t i = 0; i < kIds; ++i) want.push_back(id_of(i));
  want.push_back(id_of(kIds));  // never pushed
  PulledStates out;
  ASSERT_THAT((*store)->Pull(want, &out), IsOk());
  for (int64_t i = 0; i <= kIds; ++i) {
    const bool pushed = i < kIds;
    ASSERT_EQ(out.version[i], pushed ? uint64_t(i + 1) : 0) << "row " << i;
    ASSERT_EQ(out.time[i], pushed ? 0.25 * i : 0.0) << "row " << i;
    for (int k = 0; k < kDim; ++k)
      ASSERT_EQ(out.states[i * kDim + k], pushed ? i + 0.125f * k : 0.f)
          << "row " << i << " column " << k;
  }
  ASSERT_THAT((*store)->Close(), IsOk());
}

// A large cold pull is read in parts, one per reader thread plus the
// pulling thread (NodeStateStoreOptions::cold_read_threads): every row lands
// at its position, duplicates and never-pushed ids included, with any
// number of readers.
TEST(ColdReadTest, PartsOnReaderThreadsFillEveryRow) {
  constexpr int kDim = 6;
  const std::string dir = NewDir("cold_parts");
  Config c{"cold", true, WritePolicy::kWriteBack, 4, PromotionPolicy::kNever};
  std::vector<int64_t> ids(10000);
  std::vector<float> states;
  std::vector<uint64_t> versions;
  std::vector<double> times;
  for (int64_t i = 0; i < 10000; ++i) {
    ids[i] = 3 * i;  // every third id; the rest never pushed
    for (int k = 0; k < kDim; ++k) states.push_back(i + 0.25f * k);
    versions.push_back(i + 1);
    times.push_back(0.5 * i);
  }
  {
    auto store = Open(OptionsFor(c, kDim, dir));
    ASSERT_THAT(store, IsOk());
    ASSERT_THAT((*store)->Push(ids, states, versions, times, 2), IsOk());
    ASSERT_THAT((*store)->Close(), IsOk());
  }
  std::vector<int64_t> want_ids;
  std::mt19937_64 rng(11);
  for (int i = 0; i < 20000; ++i) want_ids.push_back(rng() % 31000);
  for (int threads : {0, 1, 3}) {
    NodeStateStoreOptions o = OptionsFor(c, kDim, dir);
    o.cold_read_threads = threads;
    auto store = Open(o);
    ASSERT_THAT(store, IsOk());
    PulledStates out;
    ASSERT_THAT((*store)->Pull(want_ids, &out), IsOk());
    for (size_t j = 0; j < want_ids.size(); ++j) {
      const int64_t id = want_ids[j];
      const bool pushed = id % 3 == 0 && id / 3 < 10000;
      const int64_t i = id / 3;
      ASSERT_EQ(out.version[j], pushed ? uint64_t(i + 1) : 0)
          << "id " << id << ", " << threads << " reader threads";
      ASSERT_EQ(out.time[j], pushed ? 0.5 * i : 0.0) << "id " << id;
      for (int k = 0; k < kDim; ++k)
        ASSERT_EQ(out.states[j * kDim + k], pushed ? i + 0.25f * k : 0.f)
            << "id " << id << " column " << k;
    }
    auto stats = (*store)->Stats();
    ASSERT_THAT(stats, IsOk());
    EXPECT_GT(stats->cold_hits, 5000);
    ASSERT_THAT((*store)->Close(), IsOk());
  }
}

INSTANTIATE_TEST_SUITE_P(Local, LocalStoreTest, ::testing::ValuesIn(Configs()),
                         [](const ::testing::TestParamInfo<Config>& info) {
                           return info.param.name;
                         });

// ---------------------------------------------------------------------------
// Crash tests: a child process pushes, the test kills it with SIGKILL.

struct Child {
  pid_t pid = -1;
  FILE* out = nullptr;
};

Child Spawn(std::vector<std::string> args) {
  int fds[2];
  if (::pipe(fds) != 0) return {};
  pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(fds[1], STDOUT_FILENO);
    ::close(fds[0]);
    ::close(fds[1]);
    std::vector<char*> argv;
    std::string helper = MNEMO_CRASH_HELPER;
    argv.push_back(helper.data());
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(helper.c_str(), argv.data());
    ::_exit(127);
  }
  ::close(fds[1]);
  return Child{pid, ::fdopen(fds[0], "r")};
}

// Reads lines until `stop` says so (or EOF), kills the child, then reads the
// rest. Returns the highest acknowledged batch, -1 on EOF before `stop`.
int64_t RunAndKill(Child child, int64_t kill_after_ack, bool* saw_checkpoint) {
  char line[128];
  int64_t last_ack = 0;
  bool killed = false;
  while (std::fgets(line, sizeof line, child.out) != nullptr) {
    long long b;
    if (std::sscanf(line, "ack %lld", &b) == 1) last_ack = b;
    if (std::string(line) == "checkpoint\n") *saw_checkpoint = true;
    if (!killed && last_ack >= kill_after_ack) {
      ::kill(child.pid, SIGKILL);
      killed = true;
    }
  }
  std::fclose(child.out);
  int status = 0;
  ::waitpid(child.pid, &status, 0);
  if (!killed) return -1;
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  return last_ack;
}

TEST(CrashTest, WriteThroughKeepsEveryAcknowledgedPush) {
  for (int trial = 0; trial < 3; ++trial) {
    const std::string dir = NewDir("crash_wt");
    bool unused = false;
    const int64_t acked =
        RunAndKill(Spawn({"write-through", dir}), 150 + 37 * trial, &unused);
    ASSERT_GT(acked, 0) << "child ended on its own";
    auto store = Open(crash_stream::Options(dir, WritePolicy::kWriteThrough));
    ASSERT_THAT(store, IsOk());
    // The push in flight at the kill may or may not have landed.
    const std::string d0 = Diff(**store, *Expected(acked));
    if (!d0.empty()) {
      EXPECT_EQ(Diff(**store, *Expected(acked + 1)), "")
          << "acked " << acked << ": " << d0;
    }
    // And it goes on from there.
    ASSERT_THAT(PushStream(**store, acked + 1, acked + 20), IsOk());
    ASSERT_THAT((*store)->Close(), IsOk());
    auto reopened =
        Open(crash_stream::Options(dir, WritePolicy::kWriteThrough));
    ASSERT_THAT(reopened, IsOk());
    EXPECT_EQ(Diff(**reopened, *Expected(acked + 20)), "");
  }
}

TEST(CrashTest, WriteBackRestoresExactlyTheLastCheckpoint) {
  const std::string dir = NewDir("crash_wb");
  const std::string ckpt = NewDir("crash_wb_ckpt");
  bool checkpointed = false;
  const int64_t acked =
      RunAndKill(Spawn({"write-back", dir, ckpt}),
                 crash_stream::kCheckpointAfter + 30, &checkpointed);
  ASSERT_GT(acked, crash_stream::kCheckpointAfter);
  ASSERT_TRUE(checkpointed);
  auto expected = Expected(crash_stream::kCheckpointAfter);
  {
    auto store = Open(crash_stream::Options(dir, WritePolicy::kWriteBack));
    ASSERT_THAT(store, IsOk());
    EXPECT_EQ(Diff(**store, *expected), "");
    ASSERT_THAT(PushStream(**store, 41, 60), IsOk());
  }
  // The destructor closed cleanly: the pushes 41..60 are kept.
  {
    auto store = Open(crash_stream::Options(dir, WritePolicy::kWriteBack));
    ASSERT_THAT(store, IsOk());
    EXPECT_EQ(Diff(**store, *Expected(60)), "");
  }
  auto from_ckpt = Open(crash_stream::Options((fs::path(ckpt)).string(),
                                              WritePolicy::kWriteBack));
  ASSERT_THAT(from_ckpt, IsOk());
  EXPECT_EQ(Diff(**from_ckpt, *expected), "");
}

TEST(CrashTest, WriteBackWithoutCheckpointRestoresTheOpenState) {
  // Session 1 closes cleanly at batch 20; session 2 (the helper) is killed
  // soon after its Open: its recovery point is the state at Open, or its
  // own checkpoint at batch 40 if it got that far.
  const std::string dir = NewDir("crash_wb2");
  {
    auto store = Open(crash_stream::Options(dir, WritePolicy::kWriteBack));
    ASSERT_THAT(store, IsOk());
    ASSERT_THAT(PushStream(**store, 1, 20), IsOk());
    ASSERT_THAT((*store)->Close(), IsOk());
  }
  // The helper pushes batches 1.. again (no-ops up to 20, then new ones);
  // it prints nothing before its checkpoint, so kill it after a moment.
  Child child = Spawn({"write-back", dir, NewDir("unused_ckpt")});
  ASSERT_GT(child.pid, 0);
  ::usleep(20 * 1000);
  ::kill(child.pid, SIGKILL);
  int status = 0;
  ::waitpid(child.pid, &status, 0);
  std::fclose(child.out);
  auto store = Open(crash_stream::Options(dir, WritePolicy::kWriteBack));
  ASSERT_THAT(store, IsOk());
  // Either the child died before its checkpoint (state at its Open = 20) or
  // after it (40).
  const std::string d20 = Diff(**store, *Expected(20));
  if (!d20.empty()) {
    EXPECT_EQ(Diff(**store, *Expected(40)), "") << d20;
  }
}

}  // namespace
}  // namespace mnemo::memstore
