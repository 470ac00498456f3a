// ColdTier: a local store's RocksDB (memstore/format.h lays out what it
// holds): opening it and checking its format, reading cold states (a large
// read in parallel parts), and writing node entries as spills, in batches
// or as SST files that it ingests.
//
// Thread-safe after Open() (RocksDB is internally synchronized), except
// Close(). It does not know which states are cold: the caller reads only
// ids it knows to be cold, and keeps them so (the store's mutex) until the
// read returns.
#ifndef MNEMO_MEMSTORE_COLD_TIER_H_
#define MNEMO_MEMSTORE_COLD_TIER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "memstore/format.h"
#include "memstore/node_state_store.h"

namespace rocksdb {
class DB;
class ColumnFamilyHandle;
class Cache;
class SstFileWriter;
class WriteBatch;
struct Options;
}  // namespace rocksdb

namespace mnemo {
class Executor;
}  // namespace mnemo

namespace mnemo::memstore {

// Whether `s` is an error after which RocksDB refuses every write until a
// restart.
bool RocksStopped(const absl::Status& s);

class ColdTier {
 public:
  // How a write reaches the disk.
  enum class WriteKind {
    // States leaving RAM: through the WAL under write-through (the journal
    // covers them; never synced), without it under write-back.
    kSpill,
    // A materialization's: through the WAL, synced with `sync`, under
    // write-through; without the WAL under write-back (a flush makes them
    // durable).
    kMaterialize,
  };

  // Opens (creating) RocksDB under options.data_dir/db and checks the
  // format and dim it holds; a new one records format 3 and options.dim.
  // Errors: INVALID_ARGUMENT (another dim, format 1 or an unknown format),
  // DATA_LOSS (no meta/dim), storage errors.
  static absl::StatusOr<std::unique_ptr<ColdTier>> Open(
      const NodeStateStoreOptions& options);
  // Closes RocksDB if Close() was not called.
  ~ColdTier();
  ColdTier(const ColdTier&) = delete;
  ColdTier& operator=(const ColdTier&) = delete;

  // Closes RocksDB; nothing else may be called after it.
  absl::Status Close();

  // Open-time scans (single-threaded). ScanNodes calls fn for every node
  // entry in id order (`row`: dim float32 values, unaligned); DATA_LOSS for
  // a malformed entry. ScanLegacyJournal calls fn for every record of
  // format 2's journal column family in sequence order.
  absl::Status ScanNodes(
      absl::FunctionRef<void(int64_t id, const EntryMeta& meta,
                             const char* row)>
          fn);
  absl::Status ScanLegacyJournal(
      absl::FunctionRef<absl::Status(uint64_t seq, std::string_view record)>
          fn);
  // The last journal record materialized (meta/materialized_seq; 0: none).
  uint64_t MaterializedSeq() const;
  // Records format 3 (after format 2's journal column family is replayed).
  absl::Status UpgradeFormat();

  // Reads the entries of cold `ids`: rows[i] receives the state of ids[i],
  // (*metas)[i] its metadata. A large read is split among the calling
  // thread and the cold readers.
  absl::Status Read(const std::vector<int64_t>& ids,
                    const std::vector<float*>& rows,
                    std::vector<EntryMeta>* metas) const;

  // Writes `n` node entries (EntryBytes each) in one batch; `what` names
  // the write in errors.
  absl::Status PutEntries(const char* entries, size_t n, WriteKind kind,
                          std::string_view what);

  // A materialization's write (kMaterialize): node entries and the journal
  // cut they make durable, in batches of at most about 64 MiB (the last
  // holds the cut). `what` names its writes in errors.
  class Batch {
   public:
    Batch(ColdTier* tier, std::string_view what);
    ~Batch();
    // Adds a node entry (EntryBytes); writes the batch once it is large.
    absl::Status Put(const char* entry);
    // Records that the journal records through `seq` are materialized;
    // `legacy`: also deletes them from format 2's journal column family.
    void CutJournal(uint64_t seq, bool legacy);
    // Writes what the batch holds (nothing when empty).
    absl::Status Write();

   private:
    ColdTier* const tier_;
    const std::string_view what_;
    std::unique_ptr<rocksdb::WriteBatch> batch_;
  };

  // Writes node entries, given in key order, to an SST file for the nodes
  // column family (IngestFiles()).
  class SstWriter {
   public:
    explicit SstWriter(const ColdTier& tier);
    ~SstWriter();
    absl::Status Open(const std::string& path);
    absl::Status Add(const char* entries, size_t n);
    // Finishes the file if it holds any entry; returns how many it holds.
    absl::StatusOr<size_t> Finish();

   private:
    std::unique_ptr<rocksdb::SstFileWriter> writer_;
    const size_t entry_bytes_;
    size_t written_ = 0;
  };
  // Moves SST files (non-overlapping key ranges) into the nodes column
  // family.
  absl::Status IngestFiles(const std::vector<std::string>& files);

  // Flushes every memtable (write-back durability) and waits.
  absl::Status Flush();
  absl::Status SyncWal();
  // A RocksDB checkpoint of the database in `path` (must not exist);
  // `what` names it in errors.
  absl::Status CreateCheckpoint(const std::string& path, std::string_view what);
  // Live bytes on disk: SST and WAL files.
  int64_t DiskBytes() const;

 private:
  // An (id, position) of a cold read, in id order.
  using ColdKey = std::pair<int64_t, uint32_t>;

  explicit ColdTier(const NodeStateStoreOptions& options);
  absl::Status OpenDb();
  absl::Status CheckFormat();
  // Reads the entries of keys[0, n) into rows[position] and
  // (*metas)[position]. A reader thread runs it beside the caller.
  absl::Status ReadPart(const ColdKey* keys, size_t n,
                        const std::vector<float*>& rows,
                        std::vector<EntryMeta>* metas) const;
  absl::Status Write(rocksdb::WriteBatch* batch, WriteKind kind,
                     std::string_view what);

  // Constant after Open().
  const NodeStateStoreOptions options_;
  const int64_t row_bytes_;
  rocksdb::DB* db_ = nullptr;
  rocksdb::ColumnFamilyHandle* meta_cf_ = nullptr;
  rocksdb::ColumnFamilyHandle* nodes_cf_ = nullptr;
  rocksdb::ColumnFamilyHandle* journal_cf_ = nullptr;
  std::shared_ptr<rocksdb::Cache> block_cache_;
  std::unique_ptr<rocksdb::Options> sst_options_;  // for ingested SSTs
  // Cold-read helpers (null: the pulling thread reads alone), and their
  // number.
  std::unique_ptr<Executor> readers_;
  int reader_threads_ = 0;
};

}  // namespace mnemo::memstore

#endif  // MNEMO_MEMSTORE_COLD_TIER_H_
