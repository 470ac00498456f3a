#include "memstore/store_impl.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <new>
#include <queue>
#include <thread>
#include <utility>

#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "memstore/journal.h"
#include "rocksdb/cache.h"
#include "rocksdb/db.h"
#include "rocksdb/filter_policy.h"
#include "rocksdb/options.h"
#include "rocksdb/slice.h"
#include "rocksdb/sst_file_writer.h"
#include "rocksdb/table.h"
#include "rocksdb/utilities/checkpoint.h"
#include "rocksdb/write_batch.h"
#include "util/executor.h"
#include "util/status_macros.h"

namespace mnemo::memstore {
namespace {

namespace fs = std::filesystem;
static_assert(std::endian::native == std::endian::little,
              "packed state formats are little-endian");

constexpr char kNodesCf[] = "nodes";
constexpr char kJournalCf[] = "journal";
constexpr char kMetaFormat[] = "meta/format";
constexpr char kMetaDim[] = "meta/dim";
constexpr char kMetaMaterializedSeq[] = "meta/materialized_seq";
constexpr char kSessionFile[] = "SESSION";
constexpr char kJournalDir[] = "journal";
// The on-disk format this build writes (store_impl.h); it reads format 2
// too, upgrading it.
constexpr int kFormat = 3;
constexpr int kOldestFormat = 2;
constexpr uint32_t kJournalMagic = 0x324a4d4e;  // "NMJ2"
// version u64, updates u64, time f64, writer i32
constexpr size_t kEntryHeader = 8 + 8 + 8 + 4;
constexpr int64_t kWriteBackBatchBytes = 64ll << 20;
// Materializations of at least this many states go through an SST file
// ingested into the nodes column family (no memtable, no WAL).
constexpr size_t kIngestMinStates = 2048;
// Rows a background materialization copies per hold of the store lock.
constexpr size_t kCopyChunk = 2048;
// A background materialization is written in parallel parts of at least
// this many states (SST files ingested together).
constexpr size_t kSstPartMin = 65536;
// ApplyLocked prefetch distances (ids ahead): hash buckets, then the slot.
constexpr int64_t kPrefetchIndex = 16;
constexpr int64_t kPrefetchSlot = 6;
// Dense index bounds (StoreImpl::IndexInsert): at most this many id slots
// per hot id, and ids below kMaxDenseIds (1 GiB of int32).
constexpr uint64_t kDenseSlack = 16;
constexpr uint64_t kMaxDenseIds = uint64_t{1} << 28;
// Rows a pull prefetches ahead of the one it copies.
constexpr int64_t kPrefetchRow = 4;
// Rows between two `ready` calls of PullWithProgress.
constexpr int64_t kReadyRows = 1024;

struct JournalHeader {
  uint32_t magic;
  uint32_t dim;
  uint64_t n;
  int32_t writer;
  uint32_t reserved;
};
static_assert(sizeof(JournalHeader) == 24);

void EncodeKey(uint64_t v, char out[8]) {
  for (int i = 7; i >= 0; --i) {
    out[i] = static_cast<char>(v & 0xff);
    v >>= 8;
  }
}
uint64_t DecodeKey(const char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

// Newest-wins: is (v, w) newer than the stored (sv, sw)?
inline bool Newer(uint64_t v, int32_t w, uint64_t sv, int32_t sw) {
  return v > sv || (v == sv && w > sw);
}

// The node entry header (store_impl.h).
void EncodeHeader(uint64_t version, uint64_t updates, double time,
                  int32_t writer, char* out) {
  std::memcpy(out, &version, 8);
  std::memcpy(out + 8, &updates, 8);
  std::memcpy(out + 16, &time, 8);
  std::memcpy(out + 24, &writer, 4);
}

// Marks an error after which RocksDB refuses every write until a restart.
constexpr char kRocksStoppedPayload[] = "mnemo.memstore/rocksdb-stopped";

absl::Status FromRocks(const rocksdb::Status& s, std::string_view what) {
  if (s.ok()) return absl::OkStatus();
  std::string msg = absl::StrCat(std::string(what), ": ", s.ToString());
  // RocksDB returns its background error, with its severity, to every write
  // it refuses after a failure it cannot go on from.
  const bool stopped = s.severity() >= rocksdb::Status::kHardError;
  if (stopped) {
    absl::StrAppend(&msg,
                    " (RocksDB stopped writing after this error: "
                    "restart the store once the cause is fixed)");
  }
  absl::Status status;
  if (s.IsNotFound()) {
    status = absl::NotFoundError(msg);
  } else if (s.IsInvalidArgument()) {
    status = absl::InvalidArgumentError(msg);
  } else if (s.IsCorruption()) {
    status = absl::DataLossError(msg);
  } else if (s.IsIOError() || s.IsBusy() || s.IsTimedOut() || s.IsTryAgain()) {
    status = absl::UnavailableError(msg);
  } else {
    status = absl::InternalError(msg);
  }
  if (stopped) status.SetPayload(kRocksStoppedPayload, absl::Cord("1"));
  return status;
}

bool RocksStopped(const absl::Status& s) {
  return s.GetPayload(kRocksStoppedPayload).has_value();
}

// Whether no value is NaN or infinite (exponent bits all ones): one
// branch-free integer pass the compiler vectorizes (std::isfinite per value
// was an eighth of a write-through push).
bool AllFinite(const float* v, size_t n) {
  uint32_t bad = 0;
  for (size_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, v + i, 4);
    bad |= static_cast<uint32_t>((bits & 0x7f800000u) == 0x7f800000u);
  }
  return bad == 0;
}

absl::Status WriteFileAtomically(const fs::path& path,
                                 const std::string& text) {
  fs::path tmp = path;
  tmp += ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0)
    return absl::UnavailableError(absl::StrCat("open ", tmp.string()));
  bool ok = ::write(fd, text.data(), text.size()) ==
                static_cast<ssize_t>(text.size()) &&
            ::fsync(fd) == 0;
  ::close(fd);
  if (!ok || ::rename(tmp.c_str(), path.c_str()) != 0)
    return absl::UnavailableError(absl::StrCat("write ", path.string()));
  int dfd = ::open(path.parent_path().c_str(), O_RDONLY | O_DIRECTORY);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return absl::OkStatus();
}

// Copies a RocksDB directory (hard links for immutable SST files).
absl::Status CopyDbDir(const fs::path& from, const fs::path& to) {
  std::error_code ec;
  fs::remove_all(to, ec);
  fs::create_directories(to, ec);
  if (ec) return absl::UnavailableError(absl::StrCat("mkdir ", to.string()));
  for (const auto& e : fs::directory_iterator(from, ec)) {
    if (!e.is_regular_file()) continue;
    fs::path dst = to / e.path().filename();
    std::error_code lec;
    if (e.path().extension() == ".sst") {
      fs::create_hard_link(e.path(), dst, lec);
      if (!lec) continue;
    }
    fs::copy_file(e.path(), dst, lec);
    if (lec)
      return absl::UnavailableError(
          absl::StrCat("copy ", e.path().string(), ": ", lec.message()));
  }
  if (ec) return absl::UnavailableError(absl::StrCat("list ", from.string()));
  return absl::OkStatus();
}

// RocksDB's diagnostics on stderr (the service's log) at WARN and above,
// not in a LOG file in the data directory: Debian's RocksDB aborts on an
// assertion when its file logger writes again after a failed write (a full
// disk, then Close() logging), which would crash the store it reports on.
class StderrLogger final : public rocksdb::Logger {
 public:
  StderrLogger() : rocksdb::Logger(rocksdb::InfoLogLevel::WARN_LEVEL) {}
  using rocksdb::Logger::Logv;
  void Logv(const char* format, va_list ap) override {
    char line[1024];
    std::vsnprintf(line, sizeof(line), format, ap);
    std::fprintf(stderr, "mnemo memstore: rocksdb: %s\n", line);
  }
};

// Free space Open() needs before it touches RocksDB: its manifest, options
// file and logs. Debian's RocksDB aborts on an assertion when a write of
// its own fails during DB::Open (a full disk) instead of returning the
// error, so a disk without room is refused here, with the stored data
// untouched.
constexpr int64_t kOpenFreeBytes = 1 << 20;

absl::Status CheckRoomToOpen(const std::filesystem::path& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path probe = dir;
  while (!probe.empty() && !fs::exists(probe, ec)) probe = probe.parent_path();
  struct statvfs st;
  if (probe.empty() || ::statvfs(probe.c_str(), &st) != 0) {
    return absl::OkStatus();  // not knowable: Open reports what fails
  }
  const int64_t free_bytes = static_cast<int64_t>(st.f_bavail) * st.f_frsize;
  // The journal's records are materialized into RocksDB on recovery.
  int64_t journal_bytes = 0;
  for (const auto& e : fs::directory_iterator(dir / kJournalDir, ec)) {
    std::error_code size_ec;
    const auto size = e.file_size(size_ec);
    if (!size_ec) journal_bytes += static_cast<int64_t>(size);
  }
  const int64_t need = kOpenFreeBytes + journal_bytes + journal_bytes / 4;
  if (free_bytes >= need) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      "--data-dir ", dir.string(), ": ", free_bytes,
      " bytes free on its file system, opening the store needs ", need,
      " (RocksDB's manifest and logs",
      journal_bytes > 0
          ? absl::StrCat(", and room to materialize the journal's ",
                         journal_bytes, " bytes")
          : std::string(),
      "): free some space and restart; the stored data is untouched"));
}

}  // namespace

StoreImpl::StoreImpl(const NodeStateStoreOptions& options)
    : options_(options),
      row_bytes_(int64_t{options.dim} * 4),
      track_recency_(!options.data_dir.empty() &&
                     options.hot_capacity_bytes > 0) {}

StoreImpl::~StoreImpl() {
  absl::MutexLock journal_lock(&journal_mu_);
  absl::MutexLock lock(&mu_);
  if (!closed_) CloseLocked().IgnoreError();
}

absl::StatusOr<std::unique_ptr<StoreImpl>> StoreImpl::Open(
    const NodeStateStoreOptions& options) {
  std::unique_ptr<StoreImpl> store(new StoreImpl(options));
  if (!options.data_dir.empty()) {
    if (options.env == nullptr) {  // (a test's Env has its own disk)
      RETURN_IF_ERROR(CheckRoomToOpen(options.data_dir));
    }
    RETURN_IF_ERROR(store->OpenDb());
    if (options.hot_capacity_bytes > 0) {  // cold states are possible
      const int cpus = static_cast<int>(std::thread::hardware_concurrency());
      store->reader_threads_ = options.cold_read_threads >= 0
                                   ? options.cold_read_threads
                                   : std::clamp(cpus - 1, 0, 7);
      if (store->reader_threads_ > 0)
        store->readers_ = std::make_unique<Executor>(store->reader_threads_);
    }
    RETURN_IF_ERROR(store->LoadCold());
    RETURN_IF_ERROR(store->ReplayJournal());
    RETURN_IF_ERROR(store->OpenJournal());
    absl::MutexLock lock(&store->mu_);
    RETURN_IF_ERROR(store->SpillLocked());
    if (options.write_policy == WritePolicy::kWriteBack) {
      // The state at Open is the first recovery point of this session.
      RETURN_IF_ERROR(store->MakeRecoveryPointLocked());
    }
    // Only now mark the session open: a crash before this point leaves the
    // live DB as the last clean Close() left it (a marker written earlier
    // would make the next Open restore a recovery point that may not exist
    // yet, losing that state).
    RETURN_IF_ERROR(WriteFileAtomically(
        fs::path(options.data_dir) / kSessionFile,
        std::string(WritePolicyName(options.write_policy)) + "\n"));
  }
  absl::MutexLock lock(&store->mu_);
  store->ready_ = true;
  if (store->db_ != nullptr &&
      options.write_policy == WritePolicy::kWriteThrough) {
    // Large background materializations write their SSTs in parallel parts
    // (pushes wait for them once the journal is far enough ahead): on the
    // materializer and up to 3 more threads.
    const int cpus = static_cast<int>(std::thread::hardware_concurrency());
    store->sst_writer_threads_ = std::clamp(cpus - 1, 0, 3);
    if (store->sst_writer_threads_ > 0) {
      store->sst_writers_ =
          std::make_unique<Executor>(store->sst_writer_threads_);
    }
    store->materializer_ =
        std::thread([s = store.get()] { s->MaterializerLoop(); });
  }
  return store;
}

absl::Status StoreImpl::OpenDb() {
  const fs::path dir(options_.data_dir);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec)
    return absl::UnavailableError(absl::StrCat(
        "cannot create data_dir ", dir.string(), ": ", ec.message()));
  lock_fd_ = ::open((dir / "LOCK").c_str(), O_RDWR | O_CREAT, 0644);
  if (lock_fd_ < 0 || ::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0)
    return absl::FailedPreconditionError(
        absl::StrCat("data_dir ", dir.string(), " is in use"));

  // SST files of a materialization a crash interrupted (written, or linked
  // into RocksDB and not yet removed): the journal still covers them.
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end;
       it.increment(ec)) {
    const std::string name = it->path().filename().string();
    std::error_code removed;
    if (absl::StartsWith(name, "ingest-") && absl::EndsWith(name, ".sst"))
      fs::remove(it->path(), removed);
  }
  ec.clear();

  // A session marker left behind means the last session crashed.
  const fs::path session = dir / kSessionFile;
  if (fs::exists(session)) {
    std::ifstream in(session);
    std::string policy;
    in >> policy;
    if (policy == WritePolicyName(WritePolicy::kWriteBack)) {
      fs::path point = dir / "recovery";
      if (!fs::exists(point / "CURRENT")) point = dir / "recovery.old";
      fs::remove_all(dir / "db", ec);
      if (fs::exists(point / "CURRENT")) {
        RETURN_IF_ERROR(CopyDbDir(point, dir / "db.restore"));
        fs::rename(dir / "db.restore", dir / "db", ec);
        if (ec)
          return absl::UnavailableError(
              absl::StrCat("restore ", dir.string(), ": ", ec.message()));
      }
    }
  }

  rocksdb::Options db_options;
  if (options_.env != nullptr) db_options.env = options_.env;
  db_options.create_if_missing = true;
  db_options.create_missing_column_families = true;
  db_options.max_background_jobs = 2;
  db_options.max_total_wal_size = 1ll << 30;
  db_options.compaction_readahead_size = 2 << 20;
  // SST files read through mmap (NodeStateStoreOptions::mmap_reads): a
  // block cache miss is a copy from the mapped page, not a pread() system
  // call (cold pulls: about 1.7x).
  db_options.allow_mmap_reads = options_.mmap_reads;
  db_options.info_log = std::make_shared<StderrLogger>();

  rocksdb::ColumnFamilyOptions nodes_options;
  nodes_options.compression = rocksdb::kNoCompression;
  nodes_options.write_buffer_size =
      static_cast<size_t>(options_.write_buffer_bytes);
  // Materializations ingest SSTs that span the whole id range into L0.
  // Merge more of them per compaction into one big L1 (each L0 -> L1
  // compaction rewrites all of L1): fewer bytes rewritten per state.
  nodes_options.level0_file_num_compaction_trigger = 8;
  nodes_options.level0_slowdown_writes_trigger = 40;
  nodes_options.level0_stop_writes_trigger = 64;
  nodes_options.max_bytes_for_level_base = 1ll << 30;
  nodes_options.target_file_size_base = 256ll << 20;
  // Only ids known to be cold (cold_) are read from RocksDB, so a read that
  // reaches the last level finds its key there: that level needs no bloom
  // filter (less to build, to hold and to check).
  nodes_options.optimize_filters_for_hits = true;
  rocksdb::BlockBasedTableOptions table;
  block_cache_ = rocksdb::NewLRUCache(
      static_cast<size_t>(std::max<int64_t>(options_.block_cache_bytes, 0)));
  table.block_cache = block_cache_;
  table.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10));
  // Cold reads are point reads of random ids: a block holds about two
  // entries (8 + 428 bytes at dim 100), so a read copies and checksums about
  // 1 KiB instead of 4 KiB. The index is bigger (held by the table readers,
  // roughly 15 bytes per block).
  table.block_size = 1024;
  nodes_options.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
  sst_options_ = std::make_unique<rocksdb::Options>(db_options, nodes_options);

  // Format 2's journal column family: replayed at open and cut by the next
  // materialization, never written again.
  rocksdb::ColumnFamilyOptions journal_options;
  journal_options.compression = rocksdb::kNoCompression;

  std::vector<rocksdb::ColumnFamilyDescriptor> cfs = {
      {rocksdb::kDefaultColumnFamilyName, rocksdb::ColumnFamilyOptions()},
      {kNodesCf, nodes_options},
      {kJournalCf, journal_options}};
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  // RocksDB logs an error when it lists a database directory that does not
  // exist yet (a new store); an empty one it simply creates in.
  fs::create_directories(dir / "db", ec);
  RETURN_IF_ERROR(FromRocks(
      rocksdb::DB::Open(db_options, (dir / "db").string(), cfs, &handles, &db_),
      "open RocksDB"));
  meta_cf_ = handles[0];
  nodes_cf_ = handles[1];
  journal_cf_ = handles[2];
  return CheckFormat();
}

absl::Status StoreImpl::CheckFormat() {
  const std::string& dir = options_.data_dir;
  std::string format, dim;
  const rocksdb::Status format_status =
      db_->Get(rocksdb::ReadOptions(), meta_cf_, kMetaFormat, &format);
  if (!format_status.ok() && !format_status.IsNotFound())
    return FromRocks(format_status, "read meta/format");
  const rocksdb::Status dim_status =
      db_->Get(rocksdb::ReadOptions(), meta_cf_, kMetaDim, &dim);
  if (!dim_status.ok() && !dim_status.IsNotFound())
    return FromRocks(dim_status, "read meta/dim");
  if (format_status.IsNotFound() && dim_status.IsNotFound()) {
    // A new store: format and dim in one durable write.
    rocksdb::WriteBatch batch;
    batch.Put(meta_cf_, kMetaFormat, std::to_string(kFormat))
        .PermitUncheckedError();
    batch.Put(meta_cf_, kMetaDim, std::to_string(options_.dim))
        .PermitUncheckedError();
    rocksdb::WriteOptions wo;
    wo.sync = true;
    return FromRocks(db_->Write(wo, &batch), "write meta/format, meta/dim");
  }
  if (format_status.IsNotFound()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data_dir ", dir,
        " was written by an older mnemo (on-disk format 1, which ordered "
        "states by event time and kept no versions); this mnemo reads formats ",
        kOldestFormat, " to ", kFormat,
        " only. Start the store with an empty --data-dir (move or delete ", dir,
        ", or point --data-dir elsewhere)"));
  }
  if (format != std::to_string(kFormat) &&
      format != std::to_string(kOldestFormat)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data_dir ", dir, " holds on-disk format ", format,
        "; this mnemo reads formats ", kOldestFormat, " to ", kFormat,
        " only. Start the store with an empty --data-dir"));
  }
  if (dim_status.IsNotFound()) {
    return absl::DataLossError(
        absl::StrCat("data_dir ", dir, " has no meta/dim"));
  }
  const int stored = std::atoi(dim.c_str());
  if (stored != options_.dim)
    return absl::InvalidArgumentError(
        absl::StrCat("data_dir ", dir, " holds states of dim ", stored,
                     ", options ask for dim ", options_.dim));
  return absl::OkStatus();
}

StoreImpl::EntryMeta StoreImpl::DecodeMeta(const char* header) {
  EntryMeta m;
  std::memcpy(&m.version, header, 8);
  std::memcpy(&m.updates, header + 8, 8);
  std::memcpy(&m.time, header + 16, 8);
  std::memcpy(&m.writer, header + 24, 4);
  return m;
}

absl::Status StoreImpl::LoadCold() {
  absl::MutexLock lock(&mu_);
  const bool load_hot = options_.hot_capacity_bytes == 0;
  rocksdb::ReadOptions ro;
  ro.fill_cache = false;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro, nodes_cf_));
  std::vector<int32_t> loaded;
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    rocksdb::Slice k = it->key(), v = it->value();
    if (k.size() != 8 || v.size() != kEntryHeader + row_bytes_)
      return absl::DataLossError(
          absl::StrCat("malformed node entry of ", v.size(), " bytes"));
    const int64_t id = static_cast<int64_t>(DecodeKey(k.data()));
    const EntryMeta m = DecodeMeta(v.data());
    if (load_hot) {
      int32_t slot = AllocSlot(id);
      slot_version_[slot] = m.version;
      slot_updates_[slot] = m.updates;
      slot_time_[slot] = m.time;
      slot_writer_[slot] = m.writer;
      std::memcpy(Row(slot), v.data() + kEntryHeader, row_bytes_);
      loaded.push_back(slot);
    } else {
      cold_[id] = ColdMeta{m.version, m.updates, m.writer};
    }
  }
  RETURN_IF_ERROR(FromRocks(it->status(), "scan node entries"));
  if (!track_recency_) return absl::OkStatus();
  // Recency list: oldest version at the tail.
  std::vector<std::pair<uint64_t, int32_t>> order;
  order.reserve(loaded.size());
  for (int32_t slot : loaded) order.emplace_back(slot_version_[slot], slot);
  std::sort(order.begin(), order.end());
  for (const auto& [version, slot] : order) LinkHead(slot);
  return absl::OkStatus();
}

absl::Status StoreImpl::ReplayJournal() {
  absl::MutexLock journal_lock(&journal_mu_);
  absl::MutexLock lock(&mu_);
  std::unique_ptr<rocksdb::Iterator> it(
      db_->NewIterator(rocksdb::ReadOptions(), journal_cf_));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    rocksdb::Slice k = it->key(), v = it->value();
    JournalHeader h;
    if (k.size() != 8 || v.size() < sizeof h)
      return absl::DataLossError("malformed journal record");
    std::memcpy(&h, v.data(), sizeof h);
    const uint64_t n = h.n;
    if (h.magic != kJournalMagic ||
        h.dim != static_cast<uint32_t>(options_.dim) ||
        v.size() != sizeof h + n * (24 + row_bytes_))
      return absl::DataLossError(absl::StrCat("malformed journal record ",
                                              DecodeKey(k.data()), " of ",
                                              v.size(), " bytes"));
    // Copy out: the iterator's buffer is not aligned for int64/double/float.
    std::vector<int64_t> ids(n);
    std::vector<uint64_t> versions(n);
    std::vector<double> times(n);
    std::vector<float> states(n * options_.dim);
    const char* p = v.data() + sizeof h;
    std::memcpy(ids.data(), p, n * 8);
    std::memcpy(versions.data(), p + n * 8, n * 8);
    std::memcpy(times.data(), p + n * 16, n * 8);
    std::memcpy(states.data(), p + n * 24, n * row_bytes_);
    RETURN_IF_ERROR(ApplyLocked(ids.data(), states.data(), versions.data(),
                                times.data(), n, h.writer));
    applied_seq_ = std::max(applied_seq_, DecodeKey(k.data()));
    next_seq_ = applied_seq_ + 1;
    journal_bytes_ += v.size();
    legacy_journal_ = true;
  }
  return FromRocks(it->status(), "scan journal");
}

absl::Status StoreImpl::OpenJournal() {
  std::string value;
  uint64_t materialized = 0;
  if (db_->Get(rocksdb::ReadOptions(), meta_cf_, kMetaMaterializedSeq, &value)
          .ok() &&
      value.size() == 8)
    materialized = DecodeKey(value.data());
  rocksdb::Env* env =
      options_.env != nullptr ? options_.env : rocksdb::Env::Default();
  Journal::Options jo;
  jo.fs = env->GetFileSystem().get();
  jo.dir = (fs::path(options_.data_dir) / kJournalDir).string();
  jo.dim = options_.dim;
  jo.sync = options_.sync;
  // About four files per journal_limit_bytes: materializations delete
  // whole files.
  jo.file_bytes = std::clamp<int64_t>(options_.journal_limit_bytes / 4,
                                      int64_t{4} << 10, int64_t{64} << 20);
  {
    absl::MutexLock journal_lock(&journal_mu_);
    absl::MutexLock lock(&mu_);
    uint64_t last = 0;
    ASSIGN_OR_RETURN(
        journal_, Journal::Open(
                      jo, materialized,
                      [this](const JournalRecord& r) {
                        mu_.AssertHeld();
                        RETURN_IF_ERROR(ApplyLocked(r.ids, r.states, r.versions,
                                                    r.times, r.n, r.writer));
                        journal_bytes_ += r.bytes;
                        return absl::OkStatus();
                      },
                      &last));
    // Materialized records may be gone from both journals.
    applied_seq_ = std::max({applied_seq_, materialized, last});
    next_seq_ = applied_seq_ + 1;
  }
  // Format 2's journal column family is read above; from now on the store
  // is format 3.
  if (db_->Get(rocksdb::ReadOptions(), meta_cf_, kMetaFormat, &value).ok() &&
      value != std::to_string(kFormat)) {
    rocksdb::WriteOptions wo;
    wo.sync = true;
    RETURN_IF_ERROR(
        FromRocks(db_->Put(wo, meta_cf_, kMetaFormat, std::to_string(kFormat)),
                  "write meta/format"));
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------
// Hot tier

int64_t StoreImpl::HotLimitRows() const {
  if (options_.hot_capacity_bytes == 0) return INT64_MAX;
  return std::max<int64_t>(1, options_.hot_capacity_bytes / row_bytes_);
}

float* StoreImpl::NewChunkLocked() {
  constexpr int64_t kHugePage = 2 << 20;
  constexpr int64_t kMaxSegment = 1ll << 30;
  const int64_t chunk = int64_t{kChunkRows} * row_bytes_;
  if (segment_left_ < chunk) {
    // Double the previous segment (at least one chunk, 2 MiB multiples).
    int64_t bytes =
        segments_.empty() ? chunk : std::min(2 * segment_bytes_, kMaxSegment);
    bytes = std::max(bytes, chunk);
    bytes = (bytes + kHugePage - 1) / kHugePage * kHugePage;
    char* p = static_cast<char*>(std::aligned_alloc(kHugePage, bytes));
    if (p == nullptr) throw std::bad_alloc();
    // A hint: without transparent huge pages the memory is ordinary pages.
    (void)madvise(p, bytes, MADV_HUGEPAGE);
    segments_.emplace_back(p);
    segment_bytes_ = bytes;
    segment_left_ = bytes;
  }
  char* base = segments_.back().get() + (segment_bytes_ - segment_left_);
  segment_left_ -= chunk;
  return reinterpret_cast<float*>(base);
}

int32_t StoreImpl::AllocSlot(int64_t id) {
  int32_t slot;
  if (!free_slots_.empty()) {
    slot = free_slots_.back();
    free_slots_.pop_back();
  } else {
    slot = static_cast<int32_t>(slot_id_.size());
    if ((slot & (kChunkRows - 1)) == 0) {
      chunks_.push_back(NewChunkLocked());
      // Geometric growth: reserving exactly one more chunk would copy every
      // array on each chunk (quadratic in the number of states).
      const size_t need = slot_id_.size() + kChunkRows;
      const size_t n = slot_id_.capacity() >= need
                           ? slot_id_.capacity()
                           : std::max(need, 2 * slot_id_.capacity());
      slot_id_.reserve(n);
      slot_version_.reserve(n);
      slot_updates_.reserve(n);
      slot_time_.reserve(n);
      slot_writer_.reserve(n);
      prev_.reserve(n);
      next_.reserve(n);
      dirty_.reserve(n);
    }
    slot_id_.push_back(0);
    slot_version_.push_back(0);
    slot_updates_.push_back(0);
    slot_time_.push_back(0);
    slot_writer_.push_back(0);
    prev_.push_back(kNil);
    next_.push_back(kNil);
    dirty_.push_back(0);
  }
  slot_id_[slot] = id;
  prev_[slot] = next_[slot] = kNil;
  dirty_[slot] = 0;
  IndexInsert(id, slot);
  return slot;
}

void StoreImpl::IndexInsert(int64_t id, int32_t slot) {
  index_.emplace(id, slot);
  const uint64_t uid = static_cast<uint64_t>(id);
  // Grow dense_ to cover `id` while it stays at most kDenseSlack entries per
  // hot id (4 bytes each: at worst the cost of the hash map's own entry),
  // doubling so that refills are amortized.
  if (uid >= dense_.size() && uid < kMaxDenseIds &&
      uid < kDenseSlack * (index_.size() + 1024)) {
    const size_t old = dense_.size();
    const size_t n =
        std::min<size_t>(std::max<size_t>(uid + 1, 2 * old), kMaxDenseIds);
    dense_.resize(n, kNil);
    for (const auto& [k, s] : index_)
      if (static_cast<uint64_t>(k) >= old && static_cast<uint64_t>(k) < n)
        dense_[k] = s;
  }
  if (uid < dense_.size()) dense_[uid] = slot;
}

void StoreImpl::IndexErase(int64_t id) {
  index_.erase(id);
  if (static_cast<uint64_t>(id) < dense_.size()) dense_[id] = kNil;
}

void StoreImpl::FreeSlot(int32_t slot) {
  Unlink(slot);
  IndexErase(slot_id_[slot]);
  slot_id_[slot] = -1;  // a free slot holds no id (see EncodeItemsLocked)
  dirty_[slot] = 0;
  free_slots_.push_back(slot);
}

void StoreImpl::LinkHead(int32_t slot) {
  if (!track_recency_) return;
  prev_[slot] = kNil;
  next_[slot] = head_;
  if (head_ != kNil) prev_[head_] = slot;
  head_ = slot;
  if (tail_ == kNil) tail_ = slot;
}

void StoreImpl::Unlink(int32_t slot) {
  if (!track_recency_) return;
  const int32_t p = prev_[slot], n = next_[slot];
  if (p != kNil) next_[p] = n;
  if (n != kNil) prev_[n] = p;
  if (head_ == slot) head_ = n;
  if (tail_ == slot) tail_ = p;
  prev_[slot] = next_[slot] = kNil;
}

void StoreImpl::MarkDirty(int32_t slot) {
  // 2 (taken by a materialization in flight) is no longer in dirty_slots_.
  if (db_ == nullptr || dirty_[slot] == 1) return;
  dirty_slots_.push_back(slot);
  dirty_[slot] = 1;
}

void StoreImpl::EncodeEntryLocked(int32_t slot, char* out) const {
  EncodeKey(static_cast<uint64_t>(slot_id_[slot]), out);
  EncodeHeader(slot_version_[slot], slot_updates_[slot], slot_time_[slot],
               slot_writer_[slot], out + 8);
  std::memcpy(out + 8 + kEntryHeader, Row(slot), row_bytes_);
}

absl::Status StoreImpl::ApplyLocked(const int64_t* ids, const float* states,
                                    const uint64_t* versions,
                                    const double* times, int64_t n,
                                    int32_t writer) {
  const int dim = options_.dim;
  int64_t accepted = 0;
  for (int64_t begin = 0; begin < n; begin += kApplyChunk) {
    const int64_t end = std::min(n, begin + kApplyChunk);
    for (int64_t i = begin; i < end; ++i) {
      // Random ids miss every cache level: prefetch the hash buckets of a
      // later id, and the metadata and row of a nearer one (hints only: the
      // lookup below is the one that counts).
      if (i + kPrefetchIndex < end) PrefetchSlotOf(ids[i + kPrefetchIndex]);
      if (i + kPrefetchSlot < end) {
        if (const int32_t s = FindSlot(ids[i + kPrefetchSlot]); s != kNil) {
          __builtin_prefetch(&slot_version_[s], 1);
          __builtin_prefetch(&slot_writer_[s], 1);
          __builtin_prefetch(&slot_updates_[s], 1);
          __builtin_prefetch(&slot_time_[s], 1);
          __builtin_prefetch(&dirty_[s], 1);
          PrefetchRow</*write=*/1>(s);
        }
      }
      const int64_t id = ids[i];
      const uint64_t v = versions[i];
      int32_t slot;
      uint64_t updates;
      if (slot = FindSlot(id); slot != kNil) {
        if (!Newer(v, writer, slot_version_[slot], slot_writer_[slot]))
          continue;
        updates = slot_updates_[slot] + 1;
        Unlink(slot);
      } else if (auto ct = cold_.find(id); ct != cold_.end()) {
        if (!Newer(v, writer, ct->second.version, ct->second.writer)) continue;
        updates = ct->second.updates + 1;
        cold_.erase(ct);
        slot = AllocSlot(id);
      } else {
        updates = 1;
        slot = AllocSlot(id);
      }
      std::memcpy(Row(slot), states + i * dim, row_bytes_);
      slot_version_[slot] = v;
      slot_updates_[slot] = updates;
      slot_time_[slot] = times[i];
      slot_writer_[slot] = writer;
      LinkHead(slot);
      MarkDirty(slot);
      ++accepted;
    }
    RETURN_IF_ERROR(SpillLocked());
  }
  states_accepted_.fetch_add(accepted, std::memory_order_relaxed);
  return absl::OkStatus();
}

absl::Status StoreImpl::SpillLocked() {
  if (db_ == nullptr) return absl::OkStatus();
  const int64_t limit = HotLimitRows();
  const int64_t excess = static_cast<int64_t>(index_.size()) - limit;
  if (excess <= 0) return absl::OkStatus();
  const size_t entry_bytes = 8 + kEntryHeader + row_bytes_;
  rocksdb::WriteBatch batch(static_cast<size_t>(excess) * (entry_bytes + 32));
  std::vector<int32_t> victims;
  victims.reserve(excess);
  std::string entries(static_cast<size_t>(excess) * entry_bytes, '\0');
  int64_t written = 0;
  for (int32_t s = tail_;
       s != kNil && static_cast<int64_t>(victims.size()) < excess;
       s = prev_[s]) {
    victims.push_back(s);
    // A clean state (promoted from the cold tier and not pushed since, or
    // materialized since its last push) has its node entry already, equal
    // to it: dropping it from RAM writes nothing. So a scan of cold states
    // (an evaluation pass) costs the reads alone, not a write per read.
    if (dirty_[s] == 0) continue;
    char* e = entries.data() + written * entry_bytes;
    ++written;
    EncodeEntryLocked(s, e);
    RETURN_IF_ERROR(FromRocks(batch.Put(nodes_cf_, rocksdb::Slice(e, 8),
                                        rocksdb::Slice(e + 8, entry_bytes - 8)),
                              "spill"));
  }
  if (written > 0) {
    rocksdb::WriteOptions wo;
    wo.disableWAL = options_.write_policy == WritePolicy::kWriteBack;
    RETURN_IF_ERROR(FromRocks(db_->Write(wo, &batch), "spill"));
  }
  // A materialization in flight may ingest older copies of these states
  // after this write: it writes them again (see IngestLocked). (It takes
  // only dirty states, so a clean one has no older copy in it.)
  if (mat_running_) respill_.append(entries.data(), written * entry_bytes);
  for (int32_t s : victims) {
    cold_[slot_id_[s]] =
        ColdMeta{slot_version_[s], slot_updates_[s], slot_writer_[s]};
    FreeSlot(s);
  }
  spills_.fetch_add(static_cast<int64_t>(victims.size()),
                    std::memory_order_relaxed);
  spill_writes_.fetch_add(written, std::memory_order_relaxed);
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------
// Materialization

absl::Status StoreImpl::MaterializeLocked(bool flush) {
  if (db_ == nullptr) return absl::OkStatus();
  MatJob job = BeginMaterializeLocked();
  absl::Status written = job.ingest ? WriteSstLocked(&job) : absl::OkStatus();
  return CompleteMaterializeLocked(&job, std::move(written), flush);
}

StoreImpl::MatJob StoreImpl::BeginMaterializeLocked() {
  // Pushes that land later re-mark their slots dirty (2 -> 1) and keep
  // their journal records.
  MatJob job;
  job.items.reserve(dirty_slots_.size());
  for (int32_t s : dirty_slots_) {
    if (dirty_[s] != 1) continue;
    dirty_[s] = 2;
    job.items.push_back({slot_id_[s], s});
  }
  dirty_slots_.clear();
  job.covered_seq = applied_seq_;
  job.covered_bytes = journal_bytes_;
  journal_bytes_ = 0;
  job.ingest = job.items.size() >= kIngestMinStates;
  if (job.ingest) {
    job.sst_prefix =
        (fs::path(options_.data_dir) / absl::StrCat("ingest-", job.covered_seq))
            .string();
  }
  mat_running_ = true;
  respill_.clear();
  return job;
}

size_t StoreImpl::EncodeItemsLocked(const MatJob& job, size_t begin, size_t end,
                                    char* out) const {
  // A slot freed since the snapshot was spilled: its entry is written
  // already. A slot's state may be newer than covered_seq: journal replay
  // over a newer entry is a no-op under newest-wins.
  const size_t entry_bytes = 8 + kEntryHeader + row_bytes_;
  size_t copied = 0;
  for (size_t j = begin; j < end; ++j) {
    if (j + 4 < end) {
      const int32_t ahead = job.items[j + 4].slot;
      __builtin_prefetch(&slot_id_[ahead]);
      __builtin_prefetch(&slot_version_[ahead]);
      __builtin_prefetch(&slot_updates_[ahead]);
      __builtin_prefetch(&slot_time_[ahead]);
      __builtin_prefetch(&slot_writer_[ahead]);
      const char* row = reinterpret_cast<const char*>(Row(ahead));
      for (int64_t b = 0; b < row_bytes_; b += 64) __builtin_prefetch(row + b);
    }
    const MatItem& it = job.items[j];
    if (slot_id_[it.slot] != it.id) continue;
    EncodeEntryLocked(it.slot, out + copied * entry_bytes);
    ++copied;
  }
  return copied;
}

namespace {

// Writes node entries (8-byte key, value), given in key order, to an SST
// file for the nodes column family.
class EntrySstWriter {
 public:
  EntrySstWriter(const rocksdb::Options& options,
                 rocksdb::ColumnFamilyHandle* cf, size_t entry_bytes)
      : writer_(rocksdb::EnvOptions(), options, cf,
                /*invalidate_page_cache=*/false),
        entry_bytes_(entry_bytes) {}

  absl::Status Open(const std::string& path) {
    return FromRocks(writer_.Open(path), "materialize: open SST");
  }
  absl::Status Add(const char* entries, size_t n) {
    for (size_t j = 0; j < n; ++j) {
      const char* e = entries + j * entry_bytes_;
      RETURN_IF_ERROR(
          FromRocks(writer_.Put(rocksdb::Slice(e, 8),
                                rocksdb::Slice(e + 8, entry_bytes_ - 8)),
                    "materialize: write SST"));
    }
    written_ += n;
    return absl::OkStatus();
  }
  // Finishes the file if it holds any entry; returns how many it holds.
  absl::StatusOr<size_t> Finish() {
    if (written_ > 0)
      RETURN_IF_ERROR(FromRocks(writer_.Finish(), "materialize: finish SST"));
    return written_;
  }

 private:
  rocksdb::SstFileWriter writer_;
  const size_t entry_bytes_;
  size_t written_ = 0;
};

}  // namespace

absl::Status StoreImpl::WriteSst(
    MatJob* job, size_t parts,
    absl::FunctionRef<size_t(size_t begin, size_t end, char* out)> encode) {
  std::sort(job->items.begin(), job->items.end(),
            [](const MatItem& a, const MatItem& b) { return a.id < b.id; });
  const size_t n = job->items.size();
  parts = std::clamp<size_t>(n / kSstPartMin, 1, std::max<size_t>(parts, 1));
  const size_t entry_bytes = 8 + kEntryHeader + row_bytes_;
  job->sst_paths.clear();
  for (size_t p = 0; p < parts; ++p)
    job->sst_paths.push_back(absl::StrCat(job->sst_prefix, "-", p, ".sst"));
  // Part p: items [n * p / parts, n * (p + 1) / parts), a key range of its
  // own (the ids are distinct).
  std::vector<absl::StatusOr<size_t>> written(parts, size_t{0});
  auto part = [&](size_t p) -> absl::StatusOr<size_t> {
    const size_t first = n * p / parts, last = n * (p + 1) / parts;
    EntrySstWriter writer(*sst_options_, nodes_cf_, entry_bytes);
    RETURN_IF_ERROR(writer.Open(job->sst_paths[p]));
    std::vector<char> buf(std::min(last - first, kCopyChunk) * entry_bytes);
    for (size_t begin = first; begin < last; begin += kCopyChunk) {
      const size_t end = std::min(last, begin + kCopyChunk);
      const size_t copied = encode(begin, end, buf.data());
      RETURN_IF_ERROR(writer.Add(buf.data(), copied));
    }
    return writer.Finish();
  };
  if (parts > 1) {
    // Parts 1.. on the writers, part 0 here; then this thread runs queued
    // parts itself until all are done.
    std::atomic<int64_t> pending(static_cast<int64_t>(parts) - 1);
    for (size_t p = 1; p < parts; ++p) {
      sst_writers_->Submit([&part, &written, &pending, p] {
        written[p] = part(p);
        pending.fetch_sub(1);
      });
    }
    written[0] = part(0);
    sst_writers_->RunUntilZero(&pending);
  } else {
    written[0] = part(0);
  }
  job->sst_files.clear();
  for (size_t p = 0; p < parts; ++p) {
    RETURN_IF_ERROR(written[p].status());
    if (*written[p] > 0) job->sst_files.push_back(job->sst_paths[p]);
  }
  return absl::OkStatus();
}

absl::Status StoreImpl::WriteSstLocked(MatJob* job) {
  // One part: a writer thread could not take the lock held here.
  return WriteSst(job, 1, [this, job](size_t begin, size_t end, char* out) {
    mu_.AssertReaderHeld();  // held by the caller throughout
    return EncodeItemsLocked(*job, begin, end, out);
  });
}

absl::Status StoreImpl::WriteSstUnlocked(MatJob* job) {
  // The job is this thread's: sorting it needs no lock.
  return WriteSst(job, 1 + static_cast<size_t>(sst_writer_threads_),
                  [this, job](size_t begin, size_t end, char* out) {
                    // Shared: the parts copy their rows at once.
                    absl::ReaderMutexLock lock(&mu_);
                    return EncodeItemsLocked(*job, begin, end, out);
                  });
}

absl::Status StoreImpl::IngestLocked(const MatJob& job) {
  absl::Status st;
  if (!job.sst_files.empty()) {
    rocksdb::IngestExternalFileOptions ifo;
    ifo.move_files = true;
    st = FromRocks(db_->IngestExternalFile(nodes_cf_, job.sst_files, ifo),
                   "materialize: ingest SST");
  }
  if (!st.ok() || respill_.empty()) return st;
  // States spilled while the SST was written are newer than what it now
  // holds for them: write them again at once, before anything else reads
  // `nodes`. If that fails, RocksDB holds older states than the cold
  // metadata says: stop the store (a restart replays the journal, which
  // still covers them).
  const size_t entry_bytes = 8 + kEntryHeader + row_bytes_;
  rocksdb::WriteBatch again;
  for (size_t off = 0; off < respill_.size(); off += entry_bytes) {
    again
        .Put(nodes_cf_, rocksdb::Slice(respill_.data() + off, 8),
             rocksdb::Slice(respill_.data() + off + 8, entry_bytes - 8))
        .PermitUncheckedError();
  }
  rocksdb::WriteOptions wo;
  wo.disableWAL = options_.write_policy != WritePolicy::kWriteThrough;
  wo.sync = !wo.disableWAL && options_.sync;
  st = FromRocks(db_->Write(wo, &again), "materialize: rewrite spills");
  if (!st.ok()) broken_ = st;
  return st;
}

absl::Status StoreImpl::WriteEntriesLocked(const MatJob& job,
                                           rocksdb::WriteBatch* batch) {
  // Node entries may land before the journal is cut: replay over a newer
  // entry is a no-op under newest-wins.
  const size_t entry_bytes = 8 + kEntryHeader + row_bytes_;
  std::vector<char> entry(entry_bytes);
  rocksdb::WriteOptions wo;
  wo.disableWAL = options_.write_policy != WritePolicy::kWriteThrough;
  wo.sync = !wo.disableWAL && options_.sync;
  for (size_t j = 0; j < job.items.size(); ++j) {
    if (EncodeItemsLocked(job, j, j + 1, entry.data()) == 0) continue;
    batch
        ->Put(nodes_cf_, rocksdb::Slice(entry.data(), 8),
              rocksdb::Slice(entry.data() + 8, entry_bytes - 8))
        .PermitUncheckedError();
    if (static_cast<int64_t>(batch->GetDataSize()) >= kWriteBackBatchBytes) {
      RETURN_IF_ERROR(FromRocks(db_->Write(wo, batch), "materialize"));
      batch->Clear();
    }
  }
  return absl::OkStatus();
}

absl::Status StoreImpl::CompleteMaterializeLocked(MatJob* job,
                                                  absl::Status status,
                                                  bool flush) {
  const bool write_through =
      options_.write_policy == WritePolicy::kWriteThrough;
  rocksdb::WriteOptions wo;
  wo.disableWAL = !write_through;
  wo.sync = write_through && options_.sync;
  rocksdb::WriteBatch batch;
  if (status.ok()) {
    status =
        job->ingest ? IngestLocked(*job) : WriteEntriesLocked(*job, &batch);
  }
  for (const std::string& path : job->sst_paths) {
    std::error_code ec;
    fs::remove(path, ec);
  }
  // The journal records this covers: durable as node entries once the
  // batch is written (write-through: through the WAL) or flushed.
  const bool cut = (write_through || flush) && job->covered_seq > 0;
  if (status.ok() && cut) {
    char seq[8];
    EncodeKey(job->covered_seq, seq);
    if (legacy_journal_) {
      char from[8], to[8];
      EncodeKey(0, from);
      EncodeKey(job->covered_seq + 1, to);
      batch
          .DeleteRange(journal_cf_, rocksdb::Slice(from, 8),
                       rocksdb::Slice(to, 8))
          .PermitUncheckedError();
    }
    batch.Put(meta_cf_, kMetaMaterializedSeq, rocksdb::Slice(seq, 8))
        .PermitUncheckedError();
  }
  if (status.ok() && batch.Count() > 0)
    status = FromRocks(db_->Write(wo, &batch), "materialize");
  if (status.ok() && flush) {
    rocksdb::FlushOptions fo;
    fo.wait = true;
    status =
        FromRocks(db_->Flush(fo, {meta_cf_, nodes_cf_, journal_cf_}), "flush");
  }
  if (status.ok() && cut) {
    legacy_journal_ = false;
    if (journal_ != nullptr) status = journal_->DropThrough(job->covered_seq);
  }
  if (status.ok()) {
    for (const MatItem& it : job->items)
      if (dirty_[it.slot] == 2) dirty_[it.slot] = 0;
  } else {
    // Still 2: neither updated nor freed since the snapshot.
    for (const MatItem& it : job->items) {
      if (dirty_[it.slot] != 2) continue;
      dirty_[it.slot] = 1;
      dirty_slots_.push_back(it.slot);
    }
    journal_bytes_ += job->covered_bytes;
  }
  respill_.clear();
  mat_running_ = false;
  return status;
}

void StoreImpl::MaterializerLoop() {
  for (;;) {
    MatJob job;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(this, &StoreImpl::MaterializerWakeLocked));
      if (mat_stop_) {
        mat_exited_ = true;  // then holds no lock
        return;
      }
      mat_requested_ = false;
      job = BeginMaterializeLocked();
      if (!job.ingest) {
        absl::Status st = CompleteMaterializeLocked(&job, absl::OkStatus(),
                                                    /*flush=*/false);
        if (!st.ok()) mat_error_ = st;
        continue;
      }
    }
    // A large set: the SST is written without the lock (taken only to copy
    // rows), so pushes and pulls go on meanwhile.
    absl::Status written = WriteSstUnlocked(&job);
    absl::MutexLock lock(&mu_);
    absl::Status st =
        CompleteMaterializeLocked(&job, std::move(written), /*flush=*/false);
    if (!st.ok()) mat_error_ = st;
  }
}

void StoreImpl::AwaitMaterializerLocked() {
  mu_.Await(absl::Condition(this, &StoreImpl::MaterializerIdleLocked));
}

void StoreImpl::StopMaterializerLocked() {
  if (!materializer_.joinable()) return;
  mat_stop_ = true;
  mu_.Await(absl::Condition(this, &StoreImpl::MaterializerExitedLocked));
  // It holds no lock after setting mat_exited_.
  materializer_.join();
}

absl::StatusOr<int64_t> StoreImpl::WriteJournalLocked(
    absl::Span<const int64_t> ids, absl::Span<const float> states,
    absl::Span<const uint64_t> versions, absl::Span<const double> times,
    int32_t writer) {
  ASSIGN_OR_RETURN(
      const int64_t bytes,
      journal_->Append(next_seq_, ids, states, versions, times, writer));
  ++next_seq_;
  return bytes;
}

// ---------------------------------------------------------------------------
// Public API

absl::Status StoreImpl::CheckOpen() const {
  if (closed_) return absl::FailedPreconditionError("store is closed");
  if (!broken_.ok()) {
    return absl::Status(
        broken_.code(),
        absl::StrCat("store stopped after a storage failure (restart it to "
                     "recover from its ",
                     options_.write_policy == WritePolicy::kWriteThrough
                         ? "journal"
                         : "last checkpoint",
                     "): ", broken_.message()));
  }
  return absl::OkStatus();
}

absl::Status StoreImpl::Push(absl::Span<const int64_t> ids,
                             absl::Span<const float> states,
                             absl::Span<const uint64_t> versions,
                             absl::Span<const double> times, int32_t writer) {
  const int64_t n = static_cast<int64_t>(ids.size());
  if (n > options_.max_batch)
    return absl::ResourceExhaustedError(absl::StrCat(
        "push of ", n, " ids is over max_batch ", options_.max_batch));
  if (writer < 0)
    return absl::InvalidArgumentError(absl::StrCat("negative writer ", writer));
  if (static_cast<int64_t>(states.size()) != n * options_.dim)
    return absl::InvalidArgumentError(absl::StrCat(
        "push of ", n, " ids carries ", states.size(), " floats, expected ",
        n * options_.dim, " (dim ", options_.dim, ")"));
  if (static_cast<int64_t>(versions.size()) != n)
    return absl::InvalidArgumentError(absl::StrCat(
        "push of ", n, " ids carries ", versions.size(), " versions"));
  if (static_cast<int64_t>(times.size()) != n)
    return absl::InvalidArgumentError(
        absl::StrCat("push of ", n, " ids carries ", times.size(), " times"));
  for (int64_t i = 0; i < n; ++i) {
    if (ids[i] < 0)
      return absl::InvalidArgumentError(absl::StrCat("negative id ", ids[i]));
    if (versions[i] == 0)
      return absl::InvalidArgumentError(
          absl::StrCat("version 0 for id ", ids[i], " (versions start at 1)"));
    if (!std::isfinite(times[i]))
      return absl::InvalidArgumentError(
          absl::StrCat("non-finite time for id ", ids[i]));
  }
  if (!AllFinite(states.data(), states.size())) {  // then find the offender
    for (size_t j = 0; j < states.size(); ++j)
      if (!std::isfinite(states[j]))
        return absl::InvalidArgumentError(absl::StrCat(
            "non-finite state value for id ", ids[j / options_.dim]));
  }

  // The journal record is written holding journal_mu_ only (see
  // store_impl.h); mu_ is taken before journal_mu_ is let go, so records
  // are applied in journal order.
  absl::ReleasableMutexLock journal_lock(&journal_mu_);
  const bool journaled =
      db_ != nullptr && options_.write_policy == WritePolicy::kWriteThrough;
  bool stopped = false;
  {
    // Close() takes journal_mu_ too: the store stays open until the record
    // is applied.
    absl::ReaderMutexLock lock(&mu_);
    RETURN_IF_ERROR(CheckOpen());
    stopped = journaled && RocksStopped(mat_error_);
  }
  if (stopped) {
    // The last materialization failed and RocksDB stopped writing: no
    // materialization can succeed before a restart, so take no more pushes
    // (the journal would only grow). Unless a retry succeeds.
    absl::MutexLock lock(&mu_);
    if (absl::Status retry = RetryMaterializeLocked(); RocksStopped(retry))
      return retry;
    RETURN_IF_ERROR(CheckOpen());
  }
  pushes_.fetch_add(1, std::memory_order_relaxed);
  states_pushed_.fetch_add(n, std::memory_order_relaxed);
  if (n == 0) return absl::OkStatus();
  int64_t journal_bytes = 0;
  uint64_t seq = 0;
  if (journaled) {
    seq = next_seq_;
    ASSIGN_OR_RETURN(journal_bytes,
                     WriteJournalLocked(ids, states, versions, times, writer));
  }
  absl::MutexLock lock(&mu_);
  journal_lock.Release();
  // Another push may have stopped the store meanwhile (its apply failed):
  // this record then waits in the journal for the restart to replay.
  RETURN_IF_ERROR(CheckOpen());
  if (journaled) journal_bytes_ += journal_bytes;
  if (absl::Status applied = ApplyLocked(
          ids.data(), states.data(), versions.data(), times.data(), n, writer);
      !applied.ok()) {
    // The push may be partly in RAM while its journal record is whole: stop
    // rather than serve (or materialize) a state no restart would rebuild.
    broken_ = applied;
    return applied;
  }
  if (journaled) applied_seq_ = seq;  // a materialization may now cut it
  if (db_ != nullptr && options_.write_policy == WritePolicy::kWriteThrough &&
      journal_bytes_ >= options_.journal_limit_bytes) {
    if (!mat_error_.ok()) {
      // The last background run failed: retry here, and report.
      RETURN_IF_ERROR(RetryMaterializeLocked());
    } else {
      if (journal_bytes_ >= 2 * options_.journal_limit_bytes) {
        // The materializer is behind (running, or asked and not yet
        // started): bound the journal (and recovery time).
        mu_.Await(absl::Condition(this, &StoreImpl::JournalMayGrowLocked));
        RETURN_IF_ERROR(CheckOpen());
      }
      if (!mat_running_) mat_requested_ = true;
    }
  }
  return absl::OkStatus();
}

absl::Status StoreImpl::RetryMaterializeLocked() {
  AwaitMaterializerLocked();
  RETURN_IF_ERROR(CheckOpen());
  mat_error_ = MaterializeLocked(/*flush=*/false);
  return mat_error_;
}

absl::Status StoreImpl::Pull(absl::Span<const int64_t> ids, PulledStates* out) {
  return PullWithProgress(ids, out, nullptr);
}

absl::Status StoreImpl::PullWithProgress(
    absl::Span<const int64_t> ids, PulledStates* out,
    const std::function<void(int64_t)>& ready) {
  const int64_t n = static_cast<int64_t>(ids.size());
  if (n > options_.max_batch)
    return absl::ResourceExhaustedError(absl::StrCat(
        "pull of ", n, " ids is over max_batch ", options_.max_batch));
  for (int64_t id : ids)
    if (id < 0)
      return absl::InvalidArgumentError(absl::StrCat("negative id ", id));
  std::vector<int64_t> cold_ids, cold_pos;
  std::vector<EntryMeta> metas;
  PullCounts counts;
  {
    absl::ReaderMutexLock lock(&mu_);
    RETURN_IF_ERROR(CheckOpen());
    // Rows are final in this pass unless cold hits may be promoted, which
    // redoes the pull under the exclusive lock.
    const bool last_pass =
        cold_.empty() || options_.promotion == PromotionPolicy::kNever;
    PullHotLocked(ids, out, &cold_ids, &cold_pos, &counts,
                  ready && last_pass ? &ready : nullptr);
    if (cold_ids.empty() || options_.promotion == PromotionPolicy::kNever) {
      RETURN_IF_ERROR(PullColdLocked(cold_ids, cold_pos, out, &metas));
      CountPull(n, counts, static_cast<int64_t>(cold_ids.size()));
      return absl::OkStatus();
    }
  }
  // Cold hits to promote: the whole pull again under the exclusive lock
  // (the store may have changed in between).
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(CheckOpen());
  cold_ids.clear();
  cold_pos.clear();
  counts = PullCounts();
  PullHotLocked(ids, out, &cold_ids, &cold_pos, &counts,
                ready ? &ready : nullptr);
  RETURN_IF_ERROR(PullColdLocked(cold_ids, cold_pos, out, &metas));
  RETURN_IF_ERROR(PromoteLocked(cold_ids, cold_pos, *out, metas));
  CountPull(n, counts, static_cast<int64_t>(cold_ids.size()));
  return absl::OkStatus();
}

void StoreImpl::PullHotLocked(absl::Span<const int64_t> ids, PulledStates* out,
                              std::vector<int64_t>* cold_ids,
                              std::vector<int64_t>* cold_pos,
                              PullCounts* counts,
                              const std::function<void(int64_t)>* ready) const {
  const int64_t n = static_cast<int64_t>(ids.size());
  const int dim = options_.dim;
  out->states.resize(n * dim);
  out->version.resize(n);
  out->time.resize(n);
  // Two passes. Random ids miss every cache level: the first pass only
  // looks ids up (the hash buckets of a later id prefetched), so the
  // lookups' misses overlap; the second copies the rows, prefetching those
  // a few ids ahead, which the first pass has located.
  constexpr int32_t kCold = -2, kMiss = -3;  // besides slots (>= 0)
  std::vector<int32_t> slots(n);
  const bool any_cold = !cold_.empty();
  int64_t first_cold = n;
  for (int64_t i = 0; i < n; ++i) {
    if (i + kPrefetchIndex < n) {
      PrefetchSlotOf(ids[i + kPrefetchIndex]);
      if (any_cold) cold_.prefetch(ids[i + kPrefetchIndex]);
    }
    if (const int32_t s = FindSlot(ids[i]); s != kNil) {
      slots[i] = s;
    } else if (any_cold && cold_.contains(ids[i])) {
      slots[i] = kCold;
      cold_ids->push_back(ids[i]);
      cold_pos->push_back(i);
      first_cold = std::min(first_cold, i);
    } else {
      slots[i] = kMiss;
    }
  }
  for (int64_t i = 0; i < n; ++i) {
    if (i + kPrefetchRow < n && slots[i + kPrefetchRow] >= 0) {
      const int32_t s = slots[i + kPrefetchRow];
      __builtin_prefetch(&slot_version_[s]);
      __builtin_prefetch(&slot_time_[s]);
      PrefetchRow</*write=*/0>(s);
    }
    if (ready != nullptr && i % kReadyRows == 0 && i > 0)
      (*ready)(std::min(i, first_cold));
    float* dst = out->states.data() + i * dim;
    const int32_t s = slots[i];
    if (s >= 0) {
      std::memcpy(dst, Row(s), row_bytes_);
      out->version[i] = slot_version_[s];
      out->time[i] = slot_time_[s];
      ++counts->hot;
    } else if (s == kMiss) {
      std::memset(dst, 0, row_bytes_);
      out->version[i] = 0;
      out->time[i] = 0;
      ++counts->misses;
    }
  }
}

absl::Status StoreImpl::PullColdLocked(const std::vector<int64_t>& cold_ids,
                                       const std::vector<int64_t>& cold_pos,
                                       PulledStates* out,
                                       std::vector<EntryMeta>* metas) const {
  if (cold_ids.empty()) return absl::OkStatus();
  const int dim = options_.dim;
  std::vector<float*> rows(cold_ids.size());
  for (size_t j = 0; j < cold_ids.size(); ++j)
    rows[j] = out->states.data() + cold_pos[j] * dim;
  RETURN_IF_ERROR(ReadColdLocked(cold_ids, rows, metas));
  for (size_t j = 0; j < cold_ids.size(); ++j) {
    out->version[cold_pos[j]] = (*metas)[j].version;
    out->time[cold_pos[j]] = (*metas)[j].time;
  }
  return absl::OkStatus();
}

absl::Status StoreImpl::PromoteLocked(const std::vector<int64_t>& cold_ids,
                                      const std::vector<int64_t>& cold_pos,
                                      const PulledStates& pulled,
                                      const std::vector<EntryMeta>& metas) {
  if (cold_ids.empty()) return absl::OkStatus();
  int64_t promoted = 0;
  for (size_t j = 0; j < cold_ids.size(); ++j) {
    auto ct = cold_.find(cold_ids[j]);
    if (ct == cold_.end()) continue;  // duplicate, already promoted
    cold_.erase(ct);
    const int32_t s = AllocSlot(cold_ids[j]);
    std::memcpy(Row(s), pulled.states.data() + cold_pos[j] * options_.dim,
                row_bytes_);
    slot_version_[s] = metas[j].version;
    slot_updates_[s] = metas[j].updates;
    slot_time_[s] = metas[j].time;
    slot_writer_[s] = metas[j].writer;
    LinkHead(s);
    ++promoted;
  }
  promotions_.fetch_add(promoted, std::memory_order_relaxed);
  return SpillLocked();
}

void StoreImpl::CountPull(int64_t n, const PullCounts& counts, int64_t cold) {
  pulls_.fetch_add(1, std::memory_order_relaxed);
  states_pulled_.fetch_add(n, std::memory_order_relaxed);
  hot_hits_.fetch_add(counts.hot, std::memory_order_relaxed);
  cold_hits_.fetch_add(cold, std::memory_order_relaxed);
  misses_.fetch_add(counts.misses, std::memory_order_relaxed);
}

absl::Status StoreImpl::ReadColdLocked(const std::vector<int64_t>& ids,
                                       const std::vector<float*>& rows,
                                       std::vector<EntryMeta>* metas) const {
  const size_t n = ids.size();
  // Keys in key order (ids are non-negative: big-endian keys sort as the
  // ids do), so RocksDB need not sort them and reads each block's keys
  // together; each part of a parallel read is a contiguous key range.
  std::vector<ColdKey> order(n);
  for (size_t j = 0; j < n; ++j) order[j] = {ids[j], static_cast<uint32_t>(j)};
  std::sort(order.begin(), order.end());
  metas->resize(n);
  const size_t parts =
      std::clamp<size_t>(n / kColdReadPartMin, 1, reader_threads_ + 1);
  if (parts == 1) return ReadColdPart(order.data(), n, rows, metas);
  // Parts 1.. on the readers, part 0 here; then this thread runs queued
  // parts itself until its own are done (the readers may be busy with
  // other pulls' parts).
  std::vector<absl::Status> status(parts);
  std::atomic<int64_t> pending(static_cast<int64_t>(parts) - 1);
  auto part = [&](size_t p) {
    const size_t begin = n * p / parts, end = n * (p + 1) / parts;
    status[p] = ReadColdPart(order.data() + begin, end - begin, rows, metas);
  };
  for (size_t p = 1; p < parts; ++p) {
    readers_->Submit([&part, &pending, p] {
      part(p);
      pending.fetch_sub(1);
    });
  }
  part(0);
  readers_->RunUntilZero(&pending);
  for (const absl::Status& s : status) RETURN_IF_ERROR(s);
  return absl::OkStatus();
}

absl::Status StoreImpl::ReadColdPart(const ColdKey* keys, size_t n,
                                     const std::vector<float*>& rows,
                                     std::vector<EntryMeta>* metas) const {
  std::vector<char> key_bytes(n * 8);
  std::vector<rocksdb::Slice> key_slices(n);
  for (size_t k = 0; k < n; ++k) {
    EncodeKey(static_cast<uint64_t>(keys[k].first), &key_bytes[k * 8]);
    key_slices[k] = rocksdb::Slice(&key_bytes[k * 8], 8);
  }
  std::vector<rocksdb::PinnableSlice> values(n);
  std::vector<rocksdb::Status> statuses(n);
  db_->MultiGet(rocksdb::ReadOptions(), nodes_cf_, n, key_slices.data(),
                values.data(), statuses.data(), /*sorted_input=*/true);
  for (size_t k = 0; k < n; ++k) {
    const int64_t id = keys[k].first;
    const size_t j = keys[k].second;
    if (!statuses[k].ok()) {  // the message only when needed: not per id
      return FromRocks(statuses[k], absl::StrCat("read cold state of id ", id));
    }
    const rocksdb::PinnableSlice& v = values[k];
    if (v.size() != kEntryHeader + row_bytes_)
      return absl::DataLossError(
          absl::StrCat("malformed node entry for id ", id));
    (*metas)[j] = DecodeMeta(v.data());
    std::memcpy(rows[j], v.data() + kEntryHeader, row_bytes_);
  }
  return absl::OkStatus();
}

absl::StatusOr<NodeStateView> StoreImpl::Get(int64_t id) {
  absl::ReaderMutexLock lock(&mu_);
  RETURN_IF_ERROR(CheckOpen());
  NodeStateView view;
  view.id = id;
  view.state.resize(options_.dim);
  if (const int32_t s = FindSlot(id); s != kNil) {
    std::memcpy(view.state.data(), Row(s), row_bytes_);
    view.version = slot_version_[s];
    view.time = slot_time_[s];
    view.updates = slot_updates_[s];
    view.writer = slot_writer_[s];
    view.hot = true;
    return view;
  }
  if (!cold_.contains(id))
    return absl::NotFoundError(absl::StrCat("node ", id, " was never updated"));
  std::vector<EntryMeta> metas;
  RETURN_IF_ERROR(ReadColdLocked({id}, {view.state.data()}, &metas));
  view.version = metas[0].version;
  view.time = metas[0].time;
  view.updates = metas[0].updates;
  view.writer = metas[0].writer;
  view.hot = false;
  return view;
}

absl::StatusOr<std::vector<NodeStateView>> StoreImpl::ListRecent(int64_t n) {
  if (n < 0) return absl::InvalidArgumentError(absl::StrCat("n = ", n));
  struct Cand {
    uint64_t version;
    int64_t id;
  };
  // "a before b" in the answer: higher version first, then smaller id.
  auto before = [](const Cand& a, const Cand& b) {
    return a.version > b.version || (a.version == b.version && a.id < b.id);
  };
  std::vector<Cand> top;
  {
    absl::ReaderMutexLock lock(&mu_);
    RETURN_IF_ERROR(CheckOpen());
    const int64_t total = static_cast<int64_t>(index_.size() + cold_.size());
    const size_t k = static_cast<size_t>(std::min(n, total));
    if (k == 0) return std::vector<NodeStateView>();
    // Heap of the best k so far; its front is the worst of them.
    std::priority_queue<Cand, std::vector<Cand>, decltype(before)> heap(before);
    auto offer = [&](uint64_t version, int64_t id) {
      Cand c{version, id};
      if (heap.size() < k) {
        heap.push(c);
      } else if (before(c, heap.top())) {
        heap.pop();
        heap.push(c);
      }
    };
    for (const auto& [id, slot] : index_) offer(slot_version_[slot], id);
    for (const auto& [id, m] : cold_) offer(m.version, id);
    top.reserve(k);
    while (!heap.empty()) {
      top.push_back(heap.top());
      heap.pop();
    }
  }
  std::reverse(top.begin(), top.end());
  std::vector<NodeStateView> views;
  views.reserve(top.size());
  for (const Cand& c : top) {
    absl::StatusOr<NodeStateView> v = Get(c.id);
    if (absl::IsNotFound(v.status())) continue;  // raced with nothing: ids stay
    if (!v.ok()) return v.status();
    views.push_back(*std::move(v));
  }
  return views;
}

absl::StatusOr<StoreStats> StoreImpl::Stats() {
  StoreStats st;
  {
    // Under the lock: Close() may delete db_ otherwise.
    absl::ReaderMutexLock lock(&mu_);
    RETURN_IF_ERROR(CheckOpen());
    st.hot_states = static_cast<int64_t>(index_.size());
    st.cold_states = static_cast<int64_t>(cold_.size());
    if (db_ != nullptr) {
      for (auto* cf : {meta_cf_, nodes_cf_, journal_cf_}) {
        uint64_t v = 0;
        if (db_->GetIntProperty(cf, "rocksdb.live-sst-files-size", &v))
          st.rocksdb_bytes += static_cast<int64_t>(v);
      }
      rocksdb::VectorLogPtr wals;
      if (db_->GetSortedWalFiles(wals).ok())
        for (const auto& w : wals)
          st.rocksdb_bytes += static_cast<int64_t>(w->SizeFileBytes());
      if (journal_ != nullptr) st.rocksdb_bytes += journal_->bytes();
    }
  }
  st.dim = options_.dim;
  st.hot_bytes = st.hot_states * row_bytes_;
  st.hot_capacity_bytes = options_.hot_capacity_bytes;
  st.pulls = pulls_.load(std::memory_order_relaxed);
  st.pushes = pushes_.load(std::memory_order_relaxed);
  st.states_pulled = states_pulled_.load(std::memory_order_relaxed);
  st.states_pushed = states_pushed_.load(std::memory_order_relaxed);
  st.states_accepted = states_accepted_.load(std::memory_order_relaxed);
  st.hot_hits = hot_hits_.load(std::memory_order_relaxed);
  st.cold_hits = cold_hits_.load(std::memory_order_relaxed);
  st.misses = misses_.load(std::memory_order_relaxed);
  st.spills = spills_.load(std::memory_order_relaxed);
  st.promotions = promotions_.load(std::memory_order_relaxed);
  st.spill_writes = spill_writes_.load(std::memory_order_relaxed);
  st.checkpoints = checkpoints_.load(std::memory_order_relaxed);
  st.write_policy = std::string(WritePolicyName(options_.write_policy));
  return st;
}

absl::Status StoreImpl::MakeRecoveryPointLocked() {
  const fs::path dir(options_.data_dir);
  std::error_code ec;
  fs::remove_all(dir / "recovery.tmp", ec);
  rocksdb::Checkpoint* raw = nullptr;
  RETURN_IF_ERROR(FromRocks(rocksdb::Checkpoint::Create(db_, &raw),
                            "create recovery point"));
  std::unique_ptr<rocksdb::Checkpoint> cp(raw);
  RETURN_IF_ERROR(
      FromRocks(cp->CreateCheckpoint((dir / "recovery.tmp").string()),
                "create recovery point"));
  // recovery -> recovery.old -> (new) recovery; Open() falls back to .old.
  if (fs::exists(dir / "recovery")) {
    fs::remove_all(dir / "recovery.old", ec);
    fs::rename(dir / "recovery", dir / "recovery.old", ec);
  }
  fs::rename(dir / "recovery.tmp", dir / "recovery", ec);
  if (ec)
    return absl::UnavailableError(
        absl::StrCat("install recovery point: ", ec.message()));
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  fs::remove_all(dir / "recovery.old", ec);
  return absl::OkStatus();
}

absl::Status StoreImpl::CheckpointPureRamLocked(const std::string& dir) {
  NodeStateStoreOptions o;
  o.dim = options_.dim;
  o.data_dir = dir;
  o.hot_capacity_bytes = 1;  // keep the copy cold: no RAM needed here
  o.write_policy = WritePolicy::kWriteBack;
  ASSIGN_OR_RETURN(auto copy, StoreImpl::Open(o));
  rocksdb::WriteBatch batch;
  const size_t entry_bytes = 8 + kEntryHeader + row_bytes_;
  std::vector<char> entry(entry_bytes);
  rocksdb::WriteOptions wo;
  wo.disableWAL = true;
  for (const auto& [id, s] : index_) {
    EncodeEntryLocked(s, entry.data());
    batch
        .Put(copy->nodes_cf_, rocksdb::Slice(entry.data(), 8),
             rocksdb::Slice(entry.data() + 8, entry_bytes - 8))
        .PermitUncheckedError();
    if (static_cast<int64_t>(batch.GetDataSize()) >= kWriteBackBatchBytes) {
      RETURN_IF_ERROR(FromRocks(copy->db_->Write(wo, &batch), "checkpoint"));
      batch.Clear();
    }
  }
  RETURN_IF_ERROR(FromRocks(copy->db_->Write(wo, &batch), "checkpoint"));
  {
    absl::MutexLock copy_lock(&copy->mu_);
    // Nothing is dirty in the copy; Close() flushes its memtables.
    RETURN_IF_ERROR(copy->CloseLocked());
  }
  std::error_code ec;
  fs::remove_all(fs::path(dir) / "recovery", ec);
  fs::remove(fs::path(dir) / "LOCK", ec);
  return absl::OkStatus();
}

absl::Status StoreImpl::Checkpoint(const std::string& dir) {
  absl::MutexLock journal_lock(&journal_mu_);  // no push in flight
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(CheckOpen());
  std::error_code ec;
  if (dir.empty()) return absl::InvalidArgumentError("empty checkpoint dir");
  if (fs::exists(dir))
    return absl::AlreadyExistsError(
        absl::StrCat("checkpoint dir ", dir, " already exists"));
  if (db_ == nullptr) {
    RETURN_IF_ERROR(CheckpointPureRamLocked(dir));
    checkpoints_.fetch_add(1, std::memory_order_relaxed);
    return absl::OkStatus();
  }
  const bool write_back = options_.write_policy == WritePolicy::kWriteBack;
  // After a failed journal write the journal may hold a record RAM does
  // not: only a restart recovers the acknowledged state.
  if (journal_ != nullptr) RETURN_IF_ERROR(journal_->status());
  AwaitMaterializerLocked();
  RETURN_IF_ERROR(CheckOpen());
  RETURN_IF_ERROR(MaterializeLocked(/*flush=*/write_back));
  if (!fs::create_directories(dir, ec) || ec)
    return absl::UnavailableError(
        absl::StrCat("cannot create checkpoint dir ", dir, ": ", ec.message()));
  rocksdb::Checkpoint* raw = nullptr;
  absl::Status status =
      FromRocks(rocksdb::Checkpoint::Create(db_, &raw), "checkpoint");
  std::unique_ptr<rocksdb::Checkpoint> cp(raw);
  if (status.ok()) {
    status = FromRocks(cp->CreateCheckpoint((fs::path(dir) / "db").string()),
                       "checkpoint");
  }
  if (status.ok() && write_back) status = MakeRecoveryPointLocked();
  if (!status.ok()) {
    // All or nothing: a failed checkpoint leaves no directory behind (it
    // would open as an empty store, and a retry would find its name taken).
    fs::remove_all(dir, ec);
    return status;
  }
  checkpoints_.fetch_add(1, std::memory_order_relaxed);
  return absl::OkStatus();
}

absl::Status StoreImpl::Close() {
  absl::MutexLock journal_lock(&journal_mu_);  // no push in flight
  absl::MutexLock lock(&mu_);
  if (closed_) return absl::FailedPreconditionError("store is closed");
  return CloseLocked();
}

absl::Status StoreImpl::CloseLocked() {
  closed_ = true;
  StopMaterializerLocked();
  absl::Status status;
  if (db_ != nullptr) {
    // A store that failed to open, or stopped after a storage failure,
    // keeps its files untouched (its journal and session marker included):
    // the next Open recovers from them, not from RAM.
    if (ready_ && broken_.ok() && journal_ != nullptr &&
        !journal_->status().ok()) {
      // Writes stopped after a failed journal write: the journal, not RAM,
      // is what the next Open recovers from; keep it as it is.
      status = journal_->status();
    } else if (ready_ && broken_.ok()) {
      status = MaterializeLocked(/*flush=*/true);
      if (status.ok()) status = FromRocks(db_->SyncWAL(), "sync WAL");
      // Every journal record is a node entry now.
      if (status.ok() && journal_ != nullptr)
        status = journal_->CloseAndDropThrough(applied_seq_);
    } else if (!broken_.ok()) {
      status = broken_;
    }
    for (auto* cf : {meta_cf_, nodes_cf_, journal_cf_})
      db_->DestroyColumnFamilyHandle(cf).PermitUncheckedError();
    absl::Status close = FromRocks(db_->Close(), "close RocksDB");
    if (status.ok()) status = close;
    delete db_;
    db_ = nullptr;
    // A clean shutdown: no session marker.
    if (status.ok() && ready_) {
      std::error_code ec;
      fs::remove(fs::path(options_.data_dir) / kSessionFile, ec);
    }
  }
  if (lock_fd_ >= 0) {
    ::close(lock_fd_);
    lock_fd_ = -1;
  }
  chunks_.clear();
  segments_.clear();
  segment_left_ = 0;
  index_.clear();
  dense_.clear();
  cold_.clear();
  return status;
}

}  // namespace mnemo::memstore
