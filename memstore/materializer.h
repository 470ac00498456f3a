// Materializer: writes a local store's dirty hot states (memstore/hot_tier.h)
// into its cold tier as node entries, and cuts the push journal they cover.
//
// A materialization runs in three phases: Begin() takes the dirty slots
// (marking them "being materialized") and the journal range they cover; a
// large set is then written as SST files of node entries (by the
// background thread without holding the store's mutex, taking it only to
// copy chunks of rows); Complete() ingests the SSTs or writes the entries,
// cuts the journal and settles the dirty marks.
//
// Write-through stores run it on a background thread: Push() asks it to
// run once the journal passes journal_limit_bytes, and waits only when the
// journal not yet covered reaches twice that, until a run starts (it covers
// all of it) or the materializer is idle with none asked for. The files on
// disk then hold at most about four limits: two covered by the run in
// flight, two newer. Checkpoint() and Close() (and write-back stores there
// only) materialize on the calling thread.
//
// Thread safety: the store's mutex guards its state, the hot tier and the
// store's sticky failure. Methods named *Locked require it held exclusively
// (checked at run time) unless they say otherwise.
#ifndef MNEMO_MEMSTORE_MATERIALIZER_H_
#define MNEMO_MEMSTORE_MATERIALIZER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "memstore/hot_tier.h"
#include "memstore/node_state_store.h"

namespace mnemo {
class Executor;
}  // namespace mnemo

namespace mnemo::memstore {

class ColdTier;
class Journal;

class Materializer {
 public:
  // The journal as the store found it at open: the last record applied
  // (or materialized), the bytes of those not yet materialized, and
  // whether format 2's journal column family holds some of them.
  struct JournalState {
    uint64_t applied_seq = 0;
    int64_t bytes = 0;
    bool legacy = false;
  };

  // `mu`: the store's mutex. `hot`, `broken` (the store's sticky failure,
  // set when entries spilled during an ingest cannot be written again) and
  // this object's state are guarded by it. `journal`: the write-through
  // journal (null: none); DropThrough() cuts it. None is owned; all must
  // outlive the materializer.
  Materializer(const NodeStateStoreOptions& options, absl::Mutex& mu,
               HotTier& hot, ColdTier& cold, Journal* journal,
               absl::Status& broken, const JournalState& journal_state);
  // Stops the background thread if StopLocked() was not called.
  ~Materializer();
  Materializer(const Materializer&) = delete;
  Materializer& operator=(const Materializer&) = delete;

  // Starts the background thread and its SST writers (write-through).
  void StartLocked();
  // Stops and joins the background thread (if any).
  void StopLocked();

  // Materializes every dirty hot state on the calling thread (after a run
  // in flight, which the caller awaits first): writes the node entries;
  // write-through (or `flush`) also cuts the journal records they cover.
  // `flush`: also flushes RocksDB's memtables (write-back durability).
  // On failure the states stay dirty and the journal keeps its records.
  absl::Status MaterializeLocked(bool flush);
  // Waits for a background run in flight to end.
  void AwaitIdleLocked();
  // After a failed background run (error()): materializes here;
  // error() keeps how it went (also returned).
  absl::Status RetryLocked();
  // OK, or how the last background run (or retry) failed. Needs the mutex
  // held, shared or exclusive.
  const absl::Status& error() const;

  // Journal accounting of a write-through push: JournaledLocked before
  // applying its record of `bytes`, AppliedLocked after (a materialization
  // may then cut it).
  void JournaledLocked(int64_t bytes);
  void AppliedLocked(uint64_t seq);
  // The last journal record applied.
  uint64_t applied_seq() const;
  // The journal not yet covered reached journal_limit_bytes: a run is due.
  bool DueLocked() const;
  // When the journal not yet covered reached twice the limit: waits until
  // a run starts (it covers all of it) or none is running or asked for (or
  // the materializer stops); returns whether it waited.
  bool AwaitRoomLocked();
  // Asks the background thread to run, unless a run is in flight.
  void RequestLocked();

  // Node entries (EntryBytes each, `bytes` in all) just spilled: a run in
  // flight may ingest older copies of them, so it writes them again after.
  void SpilledLocked(const char* entries, size_t bytes);

 private:
  // A materialization in flight: the dirty slots it writes and the journal
  // range they cover.
  struct Job {
    std::vector<HotTier::SlotRef> items;
    uint64_t covered_seq = 0;
    int64_t covered_bytes = 0;
    bool ingest = false;  // through SST files (a large set)
    // When ingest: the files' common prefix; the files tried (one per part
    // of the sorted items, all removed at completion) and those that hold
    // entries (ingested together; their key ranges do not overlap).
    std::string sst_prefix;
    std::vector<std::string> sst_paths, sst_files;
  };

  Job Begin() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sorts the job's items and writes them to SST files, one per contiguous
  // part (up to `parts`, each of kSstPartMin items or more; parts 1.. on
  // sst_writers_), `encode` filling each chunk of entries (the two callers
  // below differ in how it locks, hence in whether parts may run at once).
  absl::Status WriteSst(
      Job* job, size_t parts,
      absl::FunctionRef<size_t(size_t begin, size_t end, char* out)> encode);
  // Writes the SST of an ingest job, holding the lock throughout.
  absl::Status WriteSstLocked(Job* job) ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Writes the SSTs of an ingest job in parallel parts, taking the lock
  // only to copy rows.
  absl::Status WriteSstUnlocked(Job* job) ABSL_LOCKS_EXCLUDED(mu_);
  // Ingests the SSTs (or writes the entries) of `job`, cuts the journal,
  // flushes if asked, and settles the dirty marks: on failure the items are
  // dirty again and the journal bytes still count. `status`: how writing
  // the SST went (not OK: nothing is written).
  absl::Status Complete(Job* job, absl::Status status, bool flush)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status Ingest(const Job& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Body of the background thread.
  void Loop() ABSL_LOCKS_EXCLUDED(mu_);

  bool WakeLocked() const ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return requested_ || stop_;
  }
  bool IdleLocked() const ABSL_SHARED_LOCKS_REQUIRED(mu_) { return !running_; }
  // A push may go on: the journal not yet covered by a materialization is
  // under twice the limit (a run that starts covers it all), or the
  // materializer is idle with no run asked for (or stopping).
  bool JournalMayGrowLocked() const ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return journal_bytes_ < 2 * limit_bytes_ || (!running_ && !requested_) ||
           stop_;
  }
  bool ExitedLocked() const ABSL_SHARED_LOCKS_REQUIRED(mu_) { return exited_; }

  // Constant after construction.
  const bool write_through_;
  const int64_t limit_bytes_;  // journal_limit_bytes
  const int64_t row_bytes_;
  const std::string data_dir_;
  ColdTier& cold_;          // thread-safe
  Journal* const journal_;  // DropThrough() is thread-safe
  absl::Mutex& mu_;         // the store's
  // Threads that write parts of a large background materialization beside
  // the materializer (null: it writes alone); set by StartLocked().
  std::unique_ptr<Executor> sst_writers_;
  int sst_writer_threads_ = 0;
  std::thread thread_;

  // State below is protected by mu_.
  HotTier& hot_ ABSL_GUARDED_BY(mu_);
  absl::Status& broken_ ABSL_GUARDED_BY(mu_);
  // The last journal record applied in RAM (all earlier ones are too): what
  // a materialization starting now covers.
  uint64_t applied_seq_ ABSL_GUARDED_BY(mu_) = 0;
  // Journal bytes not yet covered by a materialization (started or done).
  int64_t journal_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  // The journal column family of format 2 holds records: the next
  // materialization cuts them.
  bool legacy_journal_ ABSL_GUARDED_BY(mu_) = false;
  bool requested_ ABSL_GUARDED_BY(mu_) = false;
  bool running_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool exited_ ABSL_GUARDED_BY(mu_) = false;
  // A failed background materialization; the next one runs in Push().
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  // Node entries (8-byte key, value) spilled while a materialization is in
  // flight: its SST may hold older copies of them, so they are written again
  // after it is ingested.
  std::string respill_ ABSL_GUARDED_BY(mu_);
};

}  // namespace mnemo::memstore

#endif  // MNEMO_MEMSTORE_MATERIALIZER_H_
