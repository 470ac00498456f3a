// StoreImpl: the local NodeStateStore (hidden behind memstore::Open()), a
// composition of
//   HotTier       the states in RAM and the metadata of the cold ones
//                 (memstore/hot_tier.h)
//   ColdTier      RocksDB, when data_dir is set: spilled states and
//                 materialized node entries (memstore/cold_tier.h; the
//                 on-disk format is in memstore/format.h)
//   Journal       the write-through push journal (memstore/journal.h)
//   Materializer  moves journaled states into RocksDB and cuts the journal
//                 (memstore/materializer.h)
//   Recovery      the data_dir's lock and session marker, journal replay
//                 and recovery points at open, checkpoints; durability per
//                 write policy is described there (memstore/recovery.h).
// StoreImpl itself validates calls, orders pushes through the journal,
// spills the hot tier over its capacity, and counts.
#ifndef MNEMO_MEMSTORE_STORE_IMPL_H_
#define MNEMO_MEMSTORE_STORE_IMPL_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "memstore/hot_tier.h"
#include "memstore/node_state_store.h"

namespace mnemo::memstore {

class ColdTier;
class Journal;
class Materializer;
class Recovery;

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
  explicit StoreImpl(const NodeStateStoreOptions& options);

  // Open-time steps (single-threaded, before the store is shared): opens
  // the data_dir's parts, loads the stored states and replays the journal.
  absl::Status OpenDataDir();
  absl::Status LoadLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Applies a validated batch newest-wins; spills every kApplyChunk ids.
  absl::Status ApplyLocked(const int64_t* ids, const float* states,
                           const uint64_t* versions, const double* times,
                           int64_t n, int32_t writer)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Evicts least recently updated states to RocksDB until under capacity.
  absl::Status SpillLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Push, in parts. CheckWritable: the store takes pushes (a store whose
  // RocksDB stopped writing takes none until a materialization succeeds).
  // ThrottleLocked, after a journaled push: asks for a materialization once
  // the journal is over its limit, waiting while it is far behind.
  absl::Status CheckWritable(bool journaled)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(journal_mu_) ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status ThrottleLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // After a failed background materialization: waits for the materializer,
  // then materializes here; its error() keeps how it went (also returned,
  // as is a closed store).
  absl::Status RetryMaterializeLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Reads cold states of a pull (those HotTier::Gather listed) into their
  // rows of `out`.
  absl::Status PullColdLocked(const std::vector<int64_t>& cold_ids,
                              const std::vector<int64_t>& cold_pos,
                              PulledStates* out,
                              std::vector<EntryMeta>* metas) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  void CountPull(int64_t n, const HotTier::GatherCounts& counts, int64_t cold);

  absl::Status CheckpointPureRamLocked(const std::string& dir)
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  absl::Status CloseLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CheckOpen() const ABSL_SHARED_LOCKS_REQUIRED(mu_);

  static constexpr int64_t kApplyChunk = 4096;

  // Constant after construction.
  const NodeStateStoreOptions options_;
  const int64_t row_bytes_;

  // Constant after Open() (null without a data_dir). The cold tier is
  // internally synchronized; Close() closes it holding both locks.
  std::unique_ptr<Recovery> recovery_;
  std::unique_ptr<ColdTier> cold_;
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
  HotTier hot_ ABSL_GUARDED_BY(mu_);
  // With a cold tier (set by Open()); its state is guarded by mu_ too.
  std::unique_ptr<Materializer> mat_ ABSL_PT_GUARDED_BY(mu_);

  // Counters (relaxed atomics: bumped under a shared lock too).
  std::atomic<int64_t> pulls_{0}, pushes_{0}, states_pulled_{0},
      states_pushed_{0}, states_accepted_{0}, hot_hits_{0}, cold_hits_{0},
      misses_{0}, spills_{0}, promotions_{0}, checkpoints_{0}, spill_writes_{0};
};

}  // namespace mnemo::memstore

#endif  // MNEMO_MEMSTORE_STORE_IMPL_H_
