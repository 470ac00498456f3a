// StoreImpl: the local NodeStateStore (hidden behind memstore::Open()).
//
// Hot tier: state rows in a chunked arena (no per-node allocation), an
// id -> slot hash index, per-slot metadata arrays and an intrusive doubly
// linked recency list (head = most recently updated or promoted) whose tail
// is evicted first.
//
// Cold tier (when data_dir is set): RocksDB under data_dir/db with three
// column families:
//   default  "meta/format" (on-disk format, "3"), "meta/dim",
//            "meta/materialized_seq"
//   nodes    8-byte big-endian id -> version u64 | updates u64 | time f64 |
//            writer i32 | dim x float32 (all little-endian)
//   journal  format 2's push journal (8-byte big-endian sequence -> one
//            packed push batch: header (magic "NMJ2", dim, n, writer) |
//            ids i64[n] | versions u64[n] | times f64[n] |
//            states f32[n * dim]); replayed at Open() and cut at the first
//            materialization, never written
// and the push journal in data_dir/journal (memstore/journal.h), plus an
// in-memory metadata index of the cold nodes (version, updates, writer), so
// newest-wins on pushes to cold nodes needs no RocksDB read.
//
// On-disk formats: 3 (this one) keeps the push journal in its own files; 2
// kept it in the journal column family, and is read and upgraded to 3 at
// Open(). Both order states by caller-given versions. Format 1 (no
// "meta/format" key) ordered them by event time and had no versions to
// recover; Open() refuses such a data_dir with INVALID_ARGUMENT.
//
// Durability:
//   write-through: each push is one journal record (fdatasync'ed with
//     `sync`) before it is applied in RAM. Dirty hot states are
//     materialized as node entries (then the journal files they cover are
//     deleted) when the journal exceeds journal_limit_bytes, at Checkpoint()
//     and at Close(). Open() replays the journal through the same
//     newest-wins path, which makes the replay idempotent over node entries
//     that are already newer.
//   write-back: pushes touch RAM only; spills skip the WAL. Checkpoint() and
//     Open() record a recovery copy in data_dir/recovery. A session marker
//     (data_dir/SESSION, holding the policy) exists while a store is open;
//     finding it at Open() means a crash, and a write-back store is then
//     restored from its recovery copy.
//
// Materialization runs in three phases: BeginMaterializeLocked() takes the
// dirty slots (marking them "being materialized") and the journal range they
// cover; a large set is then written as an SST file of node entries (by the
// background thread without holding mu_, taking it only to copy chunks of
// rows); CompleteMaterializeLocked() ingests the SST or writes the entries,
// cuts the journal and settles the dirty marks.
#ifndef MNEMO_MEMSTORE_STORE_IMPL_H_
#define MNEMO_MEMSTORE_STORE_IMPL_H_

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/synchronization/mutex.h"
#include "memstore/node_state_store.h"

namespace rocksdb {
class DB;
class ColumnFamilyHandle;
class Cache;
class WriteBatch;
struct Options;
}  // namespace rocksdb

namespace mnemo {
class Executor;
}  // namespace mnemo

namespace mnemo::memstore {

class Journal;

class StoreImpl final : public NodeStateStore {
 public:
  // `options` must have been validated by Open().
  static absl::StatusOr<std::unique_ptr<StoreImpl>> Open(
      const NodeStateStoreOptions& options);

  ~StoreImpl() override;
  StoreImpl(const StoreImpl&) = delete;
  StoreImpl& operator=(const StoreImpl&) = delete;

  absl::Status Pull(absl::Span<const int64_t> ids, PulledStates* out) override;
  absl::Status PullWithProgress(
      absl::Span<const int64_t> ids, PulledStates* out,
      const std::function<void(int64_t)>& ready) override;
  absl::Status Push(absl::Span<const int64_t> ids,
                    absl::Span<const float> states,
                    absl::Span<const uint64_t> versions,
                    absl::Span<const double> times, int32_t writer) override;
  absl::StatusOr<NodeStateView> Get(int64_t id) override;
  absl::StatusOr<std::vector<NodeStateView>> ListRecent(int64_t n) override;
  absl::StatusOr<StoreStats> Stats() override;
  absl::Status Checkpoint(const std::string& dir) override;
  absl::Status Close() override;
  int dim() const override { return options_.dim; }

 private:
  // Metadata of a cold node (its time is read with its state).
  struct ColdMeta {
    uint64_t version;
    uint64_t updates;
    int32_t writer;
  };
  // The header of a node entry.
  struct EntryMeta {
    uint64_t version;
    uint64_t updates;
    double time;
    int32_t writer;
  };
  static EntryMeta DecodeMeta(const char* header);
  static constexpr int32_t kNil = -1;

  // A materialization in flight: the dirty slots it writes and the journal
  // range they cover (see the header comment).
  struct MatItem {
    int64_t id;
    int32_t slot;
  };
  struct MatJob {
    std::vector<MatItem> items;
    uint64_t covered_seq = 0;
    int64_t covered_bytes = 0;
    bool ingest = false;  // through SST files (a large set)
    // When ingest: the files' common prefix; the files tried (one per part
    // of the sorted items, all removed at completion) and those that hold
    // entries (ingested together; their key ranges do not overlap).
    std::string sst_prefix;
    std::vector<std::string> sst_paths, sst_files;
  };

  // Pull counters of one call.
  struct PullCounts {
    int64_t hot = 0, misses = 0;
  };

  explicit StoreImpl(const NodeStateStoreOptions& options);

  // Open-time steps (single-threaded, before the store is shared).
  absl::Status OpenDb();
  absl::Status CheckFormat();
  absl::Status LoadCold();
  // Replays format 2's journal column family.
  absl::Status ReplayJournal();
  // Opens the journal files and replays them.
  absl::Status OpenJournal();

  // Hot tier.
  float* Row(int32_t slot) const ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return chunks_[slot >> kChunkShift] +
           static_cast<int64_t>(slot & (kChunkRows - 1)) * options_.dim;
  }
  // Prefetches every cache line of the row of `slot` (for writing when
  // kWrite is 1).
  template <int kWrite>
  void PrefetchRow(int32_t slot) const ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    const char* row = reinterpret_cast<const char*>(Row(slot));
    for (int64_t b = 0; b < row_bytes_; b += 64)
      __builtin_prefetch(row + b, kWrite);
    __builtin_prefetch(row + row_bytes_ - 1, kWrite);
  }
  // Memory for one more chunk of rows, carved from the last arena segment
  // or a new one.
  float* NewChunkLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The hot slot of `id`, or kNil. Ids below dense_.size() are looked up
  // in dense_ (one load); the rest in index_.
  int32_t FindSlot(int64_t id) const ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    if (static_cast<uint64_t>(id) < dense_.size()) return dense_[id];
    auto it = index_.find(id);
    return it == index_.end() ? kNil : it->second;
  }
  // Prefetches what FindSlot(id) will read.
  void PrefetchSlotOf(int64_t id) const ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    if (static_cast<uint64_t>(id) < dense_.size()) {
      __builtin_prefetch(&dense_[id]);
    } else {
      index_.prefetch(id);
    }
  }
  void IndexInsert(int64_t id, int32_t slot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void IndexErase(int64_t id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int32_t AllocSlot(int64_t id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FreeSlot(int32_t slot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void LinkHead(int32_t slot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Unlink(int32_t slot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void MarkDirty(int32_t slot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int64_t HotLimitRows() const;
  // Writes the node entry of `slot` (key and value, 8 + kEntryHeader +
  // row bytes) to `out`.
  void EncodeEntryLocked(int32_t slot, char* out) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);

  // Applies a validated batch newest-wins; spills every kApplyChunk ids.
  absl::Status ApplyLocked(const int64_t* ids, const float* states,
                           const uint64_t* versions, const double* times,
                           int64_t n, int32_t writer)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Evicts least recently updated states to RocksDB until under capacity.
  absl::Status SpillLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Materialization (see the header comment). MaterializeLocked runs all
  // phases under the lock: writes the dirty hot states as node entries;
  // write-through also truncates the journal records they cover. `flush`:
  // also flush memtables (write-back durability).
  absl::Status MaterializeLocked(bool flush) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  MatJob BeginMaterializeLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sorts the job's items and writes them to SST files, one per contiguous
  // part (up to `parts`, each of kSstPartMin items or more; parts 1.. on
  // sst_writers_), `encode` filling each chunk of entries (the two callers
  // below differ in how it locks, hence in whether parts may run at once).
  absl::Status WriteSst(
      MatJob* job, size_t parts,
      absl::FunctionRef<size_t(size_t begin, size_t end, char* out)> encode);
  // Writes the SST of an ingest job, holding the lock throughout.
  absl::Status WriteSstLocked(MatJob* job) ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Writes the SSTs of an ingest job in parallel parts, taking the lock
  // only to copy rows.
  absl::Status WriteSstUnlocked(MatJob* job) ABSL_LOCKS_EXCLUDED(mu_);
  // Encodes the entries of job.items[begin, end) whose slots still hold
  // their ids into `out`; returns how many.
  size_t EncodeItemsLocked(const MatJob& job, size_t begin, size_t end,
                           char* out) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Ingests the SST (or writes the entries) of `job`, cuts the journal,
  // flushes if asked, and settles the dirty marks: on failure the items are
  // dirty again and the journal bytes still count. `status`: how writing
  // the SST went (not OK: nothing is written).
  absl::Status CompleteMaterializeLocked(MatJob* job, absl::Status status,
                                         bool flush)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status IngestLocked(const MatJob& job)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status WriteEntriesLocked(const MatJob& job, rocksdb::WriteBatch* batch)
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Waits for a background materialization in flight to end.
  void AwaitMaterializerLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // After a failed one: waits for the materializer, then materializes here;
  // mat_error_ keeps how it went (also returned, as is a closed store).
  absl::Status RetryMaterializeLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Stops and joins the materializer thread (if any).
  void StopMaterializerLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Body of the materializer thread (write-through with a data_dir).
  void MaterializerLoop() ABSL_LOCKS_EXCLUDED(mu_);
  bool MaterializerWakeLocked() const ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return mat_requested_ || mat_stop_;
  }
  bool MaterializerIdleLocked() const ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return !mat_running_;
  }
  // A push may go on: the journal not yet covered by a materialization is
  // under twice the limit (a run that starts covers it all), or the
  // materializer is idle with no run asked for (or stopping).
  bool JournalMayGrowLocked() const ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return journal_bytes_ < 2 * options_.journal_limit_bytes ||
           (!mat_running_ && !mat_requested_) || mat_stop_;
  }
  bool MaterializerExitedLocked() const ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return mat_exited_;
  }
  // Writes one journal record (sequence next_seq_, then advanced); returns
  // its size in bytes.
  absl::StatusOr<int64_t> WriteJournalLocked(
      absl::Span<const int64_t> ids, absl::Span<const float> states,
      absl::Span<const uint64_t> versions, absl::Span<const double> times,
      int32_t writer) ABSL_EXCLUSIVE_LOCKS_REQUIRED(journal_mu_);
  absl::Status MakeRecoveryPointLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CheckpointPureRamLocked(const std::string& dir)
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  absl::Status CloseLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Pull, in parts. PullHotLocked fills the rows of hot and never-updated
  // ids and lists the cold ones with their rows; PullColdLocked reads those
  // from RocksDB; PromoteLocked moves them into the hot tier (kOnRead).
  // `ready` (may be null): told every kReadyRows rows how many leading
  // rows are final (those before the first cold id).
  void PullHotLocked(absl::Span<const int64_t> ids, PulledStates* out,
                     std::vector<int64_t>* cold_ids,
                     std::vector<int64_t>* cold_pos, PullCounts* counts,
                     const std::function<void(int64_t)>* ready = nullptr) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  absl::Status PullColdLocked(const std::vector<int64_t>& cold_ids,
                              const std::vector<int64_t>& cold_pos,
                              PulledStates* out,
                              std::vector<EntryMeta>* metas) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  absl::Status PromoteLocked(const std::vector<int64_t>& cold_ids,
                             const std::vector<int64_t>& cold_pos,
                             const PulledStates& pulled,
                             const std::vector<EntryMeta>& metas)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CountPull(int64_t n, const PullCounts& counts, int64_t cold);
  // Reads cold entries; `rows[i]` receives the state of ids[i]. A large
  // read is split among the calling thread and readers_.
  absl::Status ReadColdLocked(const std::vector<int64_t>& ids,
                              const std::vector<float*>& rows,
                              std::vector<EntryMeta>* metas) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // An (id, position) of a cold read, in id order.
  using ColdKey = std::pair<int64_t, uint32_t>;
  // Reads the entries of keys[0, n) into rows[position] and
  // (*metas)[position]. Touches nothing that mu_ guards: a reader thread
  // runs it while the pulling thread holds mu_.
  absl::Status ReadColdPart(const ColdKey* keys, size_t n,
                            const std::vector<float*>& rows,
                            std::vector<EntryMeta>* metas) const;
  absl::Status CheckOpen() const ABSL_SHARED_LOCKS_REQUIRED(mu_);

  // Constant after construction.
  const NodeStateStoreOptions options_;
  const int64_t row_bytes_;
  static constexpr int kChunkShift = 12;
  static constexpr int32_t kChunkRows = 1 << kChunkShift;
  static constexpr int64_t kApplyChunk = 4096;
  // Fewest ids per part of a parallel cold read.
  static constexpr size_t kColdReadPartMin = 512;

  // Recency list upkeep: only a bounded hot tier over a data_dir spills.
  const bool track_recency_;

  // Constant after Open() (RocksDB is internally synchronized).
  rocksdb::DB* db_ = nullptr;
  rocksdb::ColumnFamilyHandle* meta_cf_ = nullptr;
  rocksdb::ColumnFamilyHandle* nodes_cf_ = nullptr;
  rocksdb::ColumnFamilyHandle* journal_cf_ = nullptr;
  std::shared_ptr<rocksdb::Cache> block_cache_;
  std::unique_ptr<rocksdb::Options> sst_options_;  // for ingested SSTs
  int lock_fd_ = -1;
  // Cold-read helpers (null: the pulling thread reads alone), and their
  // number.
  std::unique_ptr<Executor> readers_;
  int reader_threads_ = 0;
  // Write-through: threads that write parts of a large background
  // materialization beside the materializer (null: it writes alone).
  std::unique_ptr<Executor> sst_writers_;
  int sst_writer_threads_ = 0;

  // The push journal (write-through, or files left by a write-through
  // session); set by Open(). Appends need journal_mu_; it is internally
  // synchronized otherwise.
  std::unique_ptr<Journal> journal_;

  // Serializes journal writes (write-through), taken before mu_ (lock
  // order: journal_mu_, then mu_). Push writes its journal record holding
  // only journal_mu_, takes mu_ before letting the next push journal, and
  // applies the record under mu_: records are applied in journal order,
  // while pulls and the materializer (which needs mu_ to copy rows) go on
  // during the write. Close() and Checkpoint() take both.
  absl::Mutex journal_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  // Sequence number of the next journal record.
  uint64_t next_seq_ ABSL_GUARDED_BY(journal_mu_) = 1;

  mutable absl::Mutex mu_;
  // State below is protected by mu_.
  bool ready_ ABSL_GUARDED_BY(mu_) = false;  // Open() completed
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  // A storage failure after which RAM and RocksDB may disagree (a push
  // journaled but not fully applied; respilled entries not rewritten after
  // an ingest). Sticky: every later call fails with it, and the journal
  // (write-back: the last checkpoint), not RAM, is what a restart recovers
  // from.
  absl::Status broken_ ABSL_GUARDED_BY(mu_);
  // Row memory: chunks of kChunkRows rows, carved in order from segments
  // that double in size (up to 1 GiB), 2 MiB aligned and advised as
  // transparent huge pages: a growing hot tier takes one page fault per
  // 2 MiB instead of one per 4 KiB (about a fifth of a write-through push
  // was first-touch faults).
  struct FreeSegment {
    void operator()(char* p) const { std::free(p); }
  };
  std::vector<std::unique_ptr<char, FreeSegment>> segments_
      ABSL_GUARDED_BY(mu_);
  int64_t segment_bytes_ ABSL_GUARDED_BY(mu_) = 0;  // the last segment's
  int64_t segment_left_ ABSL_GUARDED_BY(mu_) = 0;   // bytes not yet carved
  std::vector<float*> chunks_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<int64_t, int32_t> index_ ABSL_GUARDED_BY(mu_);
  // Slot (or kNil) of every id below its size, which grows while the hot
  // ids are dense enough (see IndexInsert; at most about 2 x kDenseSlack
  // entries per hot id after a doubling): node ids are dense, and a hash
  // lookup of a random id is a cache miss or two that one array load is
  // not (pulls about 1.5x).
  std::vector<int32_t> dense_ ABSL_GUARDED_BY(mu_);
  std::vector<int64_t> slot_id_ ABSL_GUARDED_BY(mu_);
  std::vector<uint64_t> slot_version_ ABSL_GUARDED_BY(mu_);
  std::vector<uint64_t> slot_updates_ ABSL_GUARDED_BY(mu_);
  std::vector<double> slot_time_ ABSL_GUARDED_BY(mu_);
  std::vector<int32_t> slot_writer_ ABSL_GUARDED_BY(mu_);
  std::vector<int32_t> prev_ ABSL_GUARDED_BY(mu_);  // towards head
  std::vector<int32_t> next_ ABSL_GUARDED_BY(mu_);  // towards tail
  // 0 clean, 1 dirty (in dirty_slots_), 2 being materialized.
  std::vector<uint8_t> dirty_ ABSL_GUARDED_BY(mu_);
  std::vector<int32_t> dirty_slots_ ABSL_GUARDED_BY(mu_);
  std::vector<int32_t> free_slots_ ABSL_GUARDED_BY(mu_);
  int32_t head_ ABSL_GUARDED_BY(mu_) = kNil;
  int32_t tail_ ABSL_GUARDED_BY(mu_) = kNil;
  absl::flat_hash_map<int64_t, ColdMeta> cold_ ABSL_GUARDED_BY(mu_);
  // The last journal record applied in RAM (all earlier ones are too): what
  // a materialization starting now covers.
  uint64_t applied_seq_ ABSL_GUARDED_BY(mu_) = 0;
  // Journal bytes not yet covered by a materialization (started or done).
  int64_t journal_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  // The journal column family of format 2 holds records: the next
  // materialization cuts them.
  bool legacy_journal_ ABSL_GUARDED_BY(mu_) = false;

  // Write-through materializer thread: Push() asks it to run once the
  // journal passes journal_limit_bytes, and waits only when the journal not
  // yet covered reaches twice that, until a run starts (it covers all of
  // it) or the materializer is idle with none asked for. The files on disk
  // then hold at most about four limits: two covered by the run in flight,
  // two newer.
  std::thread materializer_;
  bool mat_requested_ ABSL_GUARDED_BY(mu_) = false;
  bool mat_running_ ABSL_GUARDED_BY(mu_) = false;
  bool mat_stop_ ABSL_GUARDED_BY(mu_) = false;
  bool mat_exited_ ABSL_GUARDED_BY(mu_) = false;
  // A failed background materialization; the next one runs in Push().
  absl::Status mat_error_ ABSL_GUARDED_BY(mu_);
  // Node entries (8-byte key, value) spilled while a materialization is in
  // flight: its SST may hold older copies of them, so they are written again
  // after it is ingested.
  std::string respill_ ABSL_GUARDED_BY(mu_);

  // Counters (relaxed atomics: bumped under a shared lock too).
  std::atomic<int64_t> pulls_{0}, pushes_{0}, states_pulled_{0},
      states_pushed_{0}, states_accepted_{0}, hot_hits_{0}, cold_hits_{0},
      misses_{0}, spills_{0}, promotions_{0}, checkpoints_{0}, spill_writes_{0};
};

}  // namespace mnemo::memstore

#endif  // MNEMO_MEMSTORE_STORE_IMPL_H_
