#include "memstore/cold_tier.h"

#include <algorithm>
#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
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

// Fewest ids per part of a parallel cold read.
constexpr size_t kColdReadPartMin = 512;
// A materialization's batch is written once it holds this many bytes.
constexpr int64_t kWriteBatchBytes = 64ll << 20;

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

rocksdb::Options DbOptions(const NodeStateStoreOptions& o) {
  rocksdb::Options db_options;
  if (o.env != nullptr) db_options.env = o.env;
  db_options.create_if_missing = true;
  db_options.create_missing_column_families = true;
  db_options.max_background_jobs = 2;
  db_options.max_total_wal_size = 1ll << 30;
  db_options.compaction_readahead_size = 2 << 20;
  // SST files read through mmap (NodeStateStoreOptions::mmap_reads): a
  // block cache miss is a copy from the mapped page, not a pread() system
  // call (cold pulls: about 1.7x).
  db_options.allow_mmap_reads = o.mmap_reads;
  db_options.info_log = std::make_shared<StderrLogger>();
  return db_options;
}

rocksdb::ColumnFamilyOptions NodesOptions(
    const NodeStateStoreOptions& o,
    const std::shared_ptr<rocksdb::Cache>& block_cache) {
  rocksdb::ColumnFamilyOptions nodes_options;
  nodes_options.compression = rocksdb::kNoCompression;
  nodes_options.write_buffer_size = static_cast<size_t>(o.write_buffer_bytes);
  // Materializations ingest SSTs that span the whole id range into L0.
  // Merge more of them per compaction into one big L1 (each L0 -> L1
  // compaction rewrites all of L1): fewer bytes rewritten per state.
  nodes_options.level0_file_num_compaction_trigger = 8;
  nodes_options.level0_slowdown_writes_trigger = 40;
  nodes_options.level0_stop_writes_trigger = 64;
  nodes_options.max_bytes_for_level_base = 1ll << 30;
  nodes_options.target_file_size_base = 256ll << 20;
  // Only ids known to be cold are read from RocksDB, so a read that
  // reaches the last level finds its key there: that level needs no bloom
  // filter (less to build, to hold and to check).
  nodes_options.optimize_filters_for_hits = true;
  rocksdb::BlockBasedTableOptions table;
  table.block_cache = block_cache;
  table.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10));
  // Cold reads are point reads of random ids: a block holds about two
  // entries (8 + 428 bytes at dim 100), so a read copies and checksums about
  // 1 KiB instead of 4 KiB. The index is bigger (held by the table readers,
  // roughly 15 bytes per block).
  table.block_size = 1024;
  nodes_options.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
  return nodes_options;
}

}  // namespace

bool RocksStopped(const absl::Status& s) {
  return s.GetPayload(kRocksStoppedPayload).has_value();
}

ColdTier::ColdTier(const NodeStateStoreOptions& options)
    : options_(options), row_bytes_(int64_t{options.dim} * 4) {}

ColdTier::~ColdTier() { Close().IgnoreError(); }

absl::StatusOr<std::unique_ptr<ColdTier>> ColdTier::Open(
    const NodeStateStoreOptions& options) {
  std::unique_ptr<ColdTier> tier(new ColdTier(options));
  RETURN_IF_ERROR(tier->OpenDb());
  RETURN_IF_ERROR(tier->CheckFormat());
  if (options.hot_capacity_bytes > 0) {  // cold states are possible
    const int cpus = static_cast<int>(std::thread::hardware_concurrency());
    tier->reader_threads_ = options.cold_read_threads >= 0
                                ? options.cold_read_threads
                                : std::clamp(cpus - 1, 0, 7);
    if (tier->reader_threads_ > 0)
      tier->readers_ = std::make_unique<Executor>(tier->reader_threads_);
  }
  return tier;
}

absl::Status ColdTier::OpenDb() {
  const fs::path dir(options_.data_dir);
  const rocksdb::Options db_options = DbOptions(options_);
  block_cache_ = rocksdb::NewLRUCache(
      static_cast<size_t>(std::max<int64_t>(options_.block_cache_bytes, 0)));
  const rocksdb::ColumnFamilyOptions nodes_options =
      NodesOptions(options_, block_cache_);
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
  std::error_code ec;
  fs::create_directories(dir / "db", ec);
  RETURN_IF_ERROR(FromRocks(
      rocksdb::DB::Open(db_options, (dir / "db").string(), cfs, &handles, &db_),
      "open RocksDB"));
  meta_cf_ = handles[0];
  nodes_cf_ = handles[1];
  journal_cf_ = handles[2];
  return absl::OkStatus();
}

absl::Status ColdTier::CheckFormat() {
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

absl::Status ColdTier::Close() {
  if (db_ == nullptr) return absl::OkStatus();
  for (auto* cf : {meta_cf_, nodes_cf_, journal_cf_})
    db_->DestroyColumnFamilyHandle(cf).PermitUncheckedError();
  absl::Status status = FromRocks(db_->Close(), "close RocksDB");
  delete db_;
  db_ = nullptr;
  return status;
}

// ---------------------------------------------------------------------------
// Open-time scans

absl::Status ColdTier::ScanNodes(
    absl::FunctionRef<void(int64_t id, const EntryMeta& meta, const char* row)>
        fn) {
  rocksdb::ReadOptions ro;
  ro.fill_cache = false;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro, nodes_cf_));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    rocksdb::Slice k = it->key(), v = it->value();
    if (k.size() != 8 || v.size() != kEntryHeader + row_bytes_)
      return absl::DataLossError(
          absl::StrCat("malformed node entry of ", v.size(), " bytes"));
    fn(static_cast<int64_t>(DecodeKey(k.data())), DecodeHeader(v.data()),
       v.data() + kEntryHeader);
  }
  return FromRocks(it->status(), "scan node entries");
}

absl::Status ColdTier::ScanLegacyJournal(
    absl::FunctionRef<absl::Status(uint64_t seq, std::string_view record)> fn) {
  std::unique_ptr<rocksdb::Iterator> it(
      db_->NewIterator(rocksdb::ReadOptions(), journal_cf_));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    rocksdb::Slice k = it->key(), v = it->value();
    if (k.size() != 8) return absl::DataLossError("malformed journal record");
    RETURN_IF_ERROR(
        fn(DecodeKey(k.data()), std::string_view(v.data(), v.size())));
  }
  return FromRocks(it->status(), "scan journal");
}

uint64_t ColdTier::MaterializedSeq() const {
  std::string value;
  if (db_->Get(rocksdb::ReadOptions(), meta_cf_, kMetaMaterializedSeq, &value)
          .ok() &&
      value.size() == 8)
    return DecodeKey(value.data());
  return 0;
}

absl::Status ColdTier::UpgradeFormat() {
  std::string value;
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
// Reads

absl::Status ColdTier::Read(const std::vector<int64_t>& ids,
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
  if (parts == 1) return ReadPart(order.data(), n, rows, metas);
  // Parts 1.. on the readers, part 0 here; then this thread runs queued
  // parts itself until its own are done (the readers may be busy with
  // other pulls' parts).
  std::vector<absl::Status> status(parts);
  std::atomic<int64_t> pending(static_cast<int64_t>(parts) - 1);
  auto part = [&](size_t p) {
    const size_t begin = n * p / parts, end = n * (p + 1) / parts;
    status[p] = ReadPart(order.data() + begin, end - begin, rows, metas);
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

absl::Status ColdTier::ReadPart(const ColdKey* keys, size_t n,
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
    (*metas)[j] = DecodeHeader(v.data());
    std::memcpy(rows[j], v.data() + kEntryHeader, row_bytes_);
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------
// Writes

absl::Status ColdTier::Write(rocksdb::WriteBatch* batch, WriteKind kind,
                             std::string_view what) {
  const bool write_through =
      options_.write_policy == WritePolicy::kWriteThrough;
  rocksdb::WriteOptions wo;
  wo.disableWAL = !write_through;
  wo.sync = kind == WriteKind::kMaterialize && write_through && options_.sync;
  return FromRocks(db_->Write(wo, batch), what);
}

absl::Status ColdTier::PutEntries(const char* entries, size_t n, WriteKind kind,
                                  std::string_view what) {
  const size_t entry_bytes = EntryBytes(row_bytes_);
  rocksdb::WriteBatch batch(n * (entry_bytes + 32));
  for (size_t j = 0; j < n; ++j) {
    const char* e = entries + j * entry_bytes;
    RETURN_IF_ERROR(FromRocks(batch.Put(nodes_cf_, rocksdb::Slice(e, 8),
                                        rocksdb::Slice(e + 8, entry_bytes - 8)),
                              what));
  }
  if (n == 0) return absl::OkStatus();
  return Write(&batch, kind, what);
}

ColdTier::Batch::Batch(ColdTier* tier, std::string_view what)
    : tier_(tier),
      what_(what),
      batch_(std::make_unique<rocksdb::WriteBatch>()) {}

ColdTier::Batch::~Batch() = default;

absl::Status ColdTier::Batch::Put(const char* entry) {
  const size_t entry_bytes = EntryBytes(tier_->row_bytes_);
  batch_
      ->Put(tier_->nodes_cf_, rocksdb::Slice(entry, 8),
            rocksdb::Slice(entry + 8, entry_bytes - 8))
      .PermitUncheckedError();
  if (static_cast<int64_t>(batch_->GetDataSize()) < kWriteBatchBytes)
    return absl::OkStatus();
  RETURN_IF_ERROR(tier_->Write(batch_.get(), WriteKind::kMaterialize, what_));
  batch_->Clear();
  return absl::OkStatus();
}

void ColdTier::Batch::CutJournal(uint64_t seq, bool legacy) {
  char key[8];
  EncodeKey(seq, key);
  if (legacy) {
    char from[8], to[8];
    EncodeKey(0, from);
    EncodeKey(seq + 1, to);
    batch_
        ->DeleteRange(tier_->journal_cf_, rocksdb::Slice(from, 8),
                      rocksdb::Slice(to, 8))
        .PermitUncheckedError();
  }
  batch_->Put(tier_->meta_cf_, kMetaMaterializedSeq, rocksdb::Slice(key, 8))
      .PermitUncheckedError();
}

absl::Status ColdTier::Batch::Write() {
  if (batch_->Count() == 0) return absl::OkStatus();
  return tier_->Write(batch_.get(), WriteKind::kMaterialize, what_);
}

ColdTier::SstWriter::SstWriter(const ColdTier& tier)
    : writer_(std::make_unique<rocksdb::SstFileWriter>(
          rocksdb::EnvOptions(), *tier.sst_options_, tier.nodes_cf_,
          /*invalidate_page_cache=*/false)),
      entry_bytes_(EntryBytes(tier.row_bytes_)) {}

ColdTier::SstWriter::~SstWriter() = default;

absl::Status ColdTier::SstWriter::Open(const std::string& path) {
  return FromRocks(writer_->Open(path), "materialize: open SST");
}

absl::Status ColdTier::SstWriter::Add(const char* entries, size_t n) {
  for (size_t j = 0; j < n; ++j) {
    const char* e = entries + j * entry_bytes_;
    RETURN_IF_ERROR(
        FromRocks(writer_->Put(rocksdb::Slice(e, 8),
                               rocksdb::Slice(e + 8, entry_bytes_ - 8)),
                  "materialize: write SST"));
  }
  written_ += n;
  return absl::OkStatus();
}

absl::StatusOr<size_t> ColdTier::SstWriter::Finish() {
  if (written_ > 0)
    RETURN_IF_ERROR(FromRocks(writer_->Finish(), "materialize: finish SST"));
  return written_;
}

absl::Status ColdTier::IngestFiles(const std::vector<std::string>& files) {
  rocksdb::IngestExternalFileOptions ifo;
  ifo.move_files = true;
  return FromRocks(db_->IngestExternalFile(nodes_cf_, files, ifo),
                   "materialize: ingest SST");
}

absl::Status ColdTier::Flush() {
  rocksdb::FlushOptions fo;
  fo.wait = true;
  return FromRocks(db_->Flush(fo, {meta_cf_, nodes_cf_, journal_cf_}), "flush");
}

absl::Status ColdTier::SyncWal() {
  return FromRocks(db_->SyncWAL(), "sync WAL");
}

absl::Status ColdTier::CreateCheckpoint(const std::string& path,
                                        std::string_view what) {
  rocksdb::Checkpoint* raw = nullptr;
  RETURN_IF_ERROR(FromRocks(rocksdb::Checkpoint::Create(db_, &raw), what));
  std::unique_ptr<rocksdb::Checkpoint> cp(raw);
  return FromRocks(cp->CreateCheckpoint(path), what);
}

int64_t ColdTier::DiskBytes() const {
  int64_t bytes = 0;
  for (auto* cf : {meta_cf_, nodes_cf_, journal_cf_}) {
    uint64_t v = 0;
    if (db_->GetIntProperty(cf, "rocksdb.live-sst-files-size", &v))
      bytes += static_cast<int64_t>(v);
  }
  rocksdb::VectorLogPtr wals;
  if (db_->GetSortedWalFiles(wals).ok())
    for (const auto& w : wals)
      bytes += static_cast<int64_t>(w->SizeFileBytes());
  return bytes;
}

}  // namespace mnemo::memstore
