// Recovery: what a local store (StoreImpl) keeps in its data_dir beside
// RocksDB to survive a crash, and its checkpoints.
//
// Durability:
//   write-through: each push is one journal record (fdatasync'ed with
//     `sync`) before it is applied in RAM. Dirty hot states are
//     materialized as node entries (then the journal files they cover are
//     deleted; memstore/materializer.h) when the journal exceeds
//     journal_limit_bytes, at Checkpoint() and at Close(). Open() replays
//     the journal through the same newest-wins path, which makes the replay
//     idempotent over node entries that are already newer.
//   write-back: pushes touch RAM only; spills skip the WAL. Checkpoint() and
//     Open() record a recovery copy in data_dir/recovery. A session marker
//     (data_dir/SESSION, holding the policy) exists while a store is open;
//     finding it at Open() means a crash, and a write-back store is then
//     restored from its recovery copy.
//
// What the store has promised (data_dir/IDENTITY): once it acknowledges a
// push it records so, and a write-through store also records the first
// record of each journal file it starts (all earlier records were
// acknowledged). Open() refuses, with DATA_LOSS naming what is missing, a
// data_dir that has lost what it promised: its database (db/, or a crashed
// write-back session's recovery point) or journal records (files deleted
// or emptied: records missing before or between the files, or fewer than
// IDENTITY names). Removing IDENTITY accepts the loss.
//
// Single-threaded: the store calls it at Open() and under its locks.
#ifndef MNEMO_MEMSTORE_RECOVERY_H_
#define MNEMO_MEMSTORE_RECOVERY_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "memstore/journal.h"
#include "memstore/node_state_store.h"

namespace mnemo::memstore {

class ColdTier;

class Recovery {
 public:
  // Prepares options.data_dir for opening its RocksDB: checks there is room
  // to open it, creates it, locks it (FAILED_PRECONDITION while another
  // store has it open), removes the SST files of a materialization a crash
  // interrupted (the journal still covers them) and, when the last session
  // was a write-back one that crashed, restores its recovery copy as the
  // live database. Errors: RESOURCE_EXHAUSTED (a full disk), storage
  // errors.
  static absl::StatusOr<std::unique_ptr<Recovery>> Open(
      const NodeStateStoreOptions& options);
  // Unlocks the data_dir.
  ~Recovery();
  Recovery(const Recovery&) = delete;
  Recovery& operator=(const Recovery&) = delete;

  // The journals as ReplayJournal() leaves them.
  struct Replayed {
    std::unique_ptr<Journal> journal;  // open for appends
    // The last journal record applied or materialized: the next one is
    // last_seq + 1.
    uint64_t last_seq = 0;
    int64_t bytes = 0;    // of the records applied
    bool legacy = false;  // format 2's journal column family holds records
  };
  // Applies the journals' records through `apply`, in sequence order:
  // those of format 2's journal column family, then those of the journal
  // files above the last materialized one (cutting a torn last record).
  // Then records format 3. DATA_LOSS for a damaged record.
  absl::StatusOr<Replayed> ReplayJournal(
      ColdTier& cold,
      absl::FunctionRef<absl::Status(const JournalRecord&)> apply);

  // Write-back: `cold` (flushed) becomes the crash-recovery point.
  absl::Status MakeRecoveryPoint(ColdTier& cold);
  // The session marker: written once the store is open; removed at a clean
  // close.
  absl::Status MarkSessionOpen();
  void MarkCleanClose();

  // A consistent copy of `cold` (materialized, and flushed under
  // write-back) in `dir/db`, `dir` created here (it must not exist).
  // Write-back also makes it the recovery point. All or nothing: a failed
  // checkpoint leaves no `dir`.
  absl::Status Checkpoint(ColdTier& cold, const std::string& dir);

  // Records in IDENTITY that the store acknowledges pushes (before the
  // first is acknowledged; later calls cost nothing), or that journal
  // record `seq` starts a file (Journal::Options::on_file_started).
  absl::Status NoteAcknowledged();
  absl::Status NoteJournaled(uint64_t seq);

 private:
  // What IDENTITY says.
  struct Identity {
    bool acknowledged = false;  // some push was acknowledged
    uint64_t journaled = 0;     // journal records through it were
  };

  explicit Recovery(const NodeStateStoreOptions& options);
  absl::Status Prepare();
  absl::Status ReadIdentity();
  absl::Status WriteIdentity(const Identity& identity);
  // Restores a crashed write-back session's recovery copy.
  absl::Status RestoreAfterCrash();
  // DATA_LOSS when the database of a store that acknowledged pushes is
  // missing (and no journal from record 1 on covers it).
  absl::Status CheckDatabase() const;
  // DATA_LOSS when the records through `last` are fewer than IDENTITY
  // names.
  absl::Status CheckJournaled(uint64_t last) const;
  // The end of those refusals: how to go on without what is missing.
  std::string HowToGoOn() const;
  absl::Status ReplayLegacyJournal(
      ColdTier& cold,
      absl::FunctionRef<absl::Status(const JournalRecord&)> apply,
      Replayed* replayed);

  const NodeStateStoreOptions options_;
  int lock_fd_ = -1;
  Identity identity_;
};

}  // namespace mnemo::memstore

#endif  // MNEMO_MEMSTORE_RECOVERY_H_
