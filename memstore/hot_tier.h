// HotTier: the states a local store (StoreImpl) holds in RAM, and the
// metadata of those it holds in its cold tier.
//
// State rows live in a chunked arena (no per-node allocation), with an
// id -> slot hash index, per-slot metadata arrays and an intrusive doubly
// linked recency list (head = most recently updated or promoted) whose tail
// is evicted first. Each slot carries a dirty mark for the materializer:
// clean, dirty (changed since RocksDB last held it) or being materialized.
// Cold nodes keep their version, update count and writer here (their time
// is read with their state), so newest-wins on pushes to cold nodes needs
// no RocksDB read.
//
// Not thread-safe: the store's mutex guards it (shared for the const
// methods, exclusive for the others).
#ifndef MNEMO_MEMSTORE_HOT_TIER_H_
#define MNEMO_MEMSTORE_HOT_TIER_H_

#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/types/span.h"
#include "memstore/format.h"
#include "memstore/node_state_store.h"

namespace mnemo::memstore {

class HotTier {
 public:
  // A hot state taken by a materialization: its slot, and the id the slot
  // held then (a slot freed and reused since holds another).
  struct SlotRef {
    int64_t id;
    int32_t slot;
  };
  // Per-pull counts of Gather().
  struct GatherCounts {
    int64_t hot = 0, misses = 0;
  };

  // `capacity_bytes`: 0 for unlimited. `track_recency`: keep the recency
  // list (only a bounded hot tier over a cold tier spills). `track_dirty`:
  // keep dirty marks (a store with a cold tier materializes).
  HotTier(int dim, int64_t capacity_bytes, bool track_recency,
          bool track_dirty);
  HotTier(const HotTier&) = delete;
  HotTier& operator=(const HotTier&) = delete;

  int64_t hot_states() const { return static_cast<int64_t>(index_.size()); }
  int64_t cold_states() const { return static_cast<int64_t>(cold_.size()); }
  // States held in RAM beyond the capacity (<= 0: none).
  int64_t Excess() const;

  // Applies a validated batch newest-wins (NodeStateStore::Push) over the
  // hot states and the metadata of the cold ones: a cold state that
  // loses to the push is replaced by it in RAM. Returns how many states won.
  // Does not spill: the caller spills what is in excess.
  int64_t Apply(const int64_t* ids, const float* states,
                const uint64_t* versions, const double* times, int64_t n,
                int32_t writer);

  // Fills the rows of `out` (sized here) of hot and never-updated ids and
  // lists the cold ones with their rows in cold_ids and cold_pos. `ready`
  // (may be null): told every kReadyRows rows how many leading rows are
  // final (those before the first cold id).
  void Gather(absl::Span<const int64_t> ids, PulledStates* out,
              std::vector<int64_t>* cold_ids, std::vector<int64_t>* cold_pos,
              GatherCounts* counts,
              const std::function<void(int64_t)>* ready) const;

  // Moves the cold states read by a pull (rows cold_pos[j] of `pulled`,
  // metadata metas[j]) into RAM, clean; skips those no longer cold (a
  // duplicate id). Returns how many moved. Does not spill.
  int64_t Promote(const std::vector<int64_t>& cold_ids,
                  const std::vector<int64_t>& cold_pos,
                  const PulledStates& pulled,
                  const std::vector<EntryMeta>& metas);

  // Eviction, in two steps around the write of the entries: PickVictims
  // lists the `excess` least recently updated states in *victims and
  // encodes the node entries of the dirty ones (EntryBytes each) into
  // *entries, returning how many; Demote then drops the victims from RAM,
  // keeping their metadata as cold states.
  int64_t PickVictims(int64_t excess, std::vector<int32_t>* victims,
                      std::string* entries) const;
  void Demote(const std::vector<int32_t>& victims);

  // Fills `view` from RAM; false when `id` is not hot.
  bool Get(int64_t id, NodeStateView* view) const;
  bool IsCold(int64_t id) const { return cold_.contains(id); }
  // Calls fn(version, id) for every stored node, hot and cold.
  void ForEachVersion(absl::FunctionRef<void(uint64_t, int64_t)> fn) const;
  // Calls fn with the node entry (EntryBytes) of every hot state; stops at
  // the first error.
  absl::Status ForEachEntry(
      absl::FunctionRef<absl::Status(const char* entry)> fn) const;

  // Loading at open (into an empty tier): a stored state kept in RAM, or
  // the metadata of one left cold. FinishLoad orders the recency list by
  // version (oldest at the tail).
  void LoadHot(int64_t id, const EntryMeta& meta, const char* row);
  void LoadCold(int64_t id, const EntryMeta& meta);
  void FinishLoad();

  // Materialization (memstore/materializer.h): TakeDirty marks the dirty
  // slots "being materialized" and returns them; EncodeItems encodes the
  // entries of items[begin, end) whose slots still hold their ids into
  // `out`, returning how many; SettleDirty marks them clean once written,
  // or dirty again (`written` false). A push that lands meanwhile marks its
  // slot dirty again, keeping it for the next materialization.
  std::vector<SlotRef> TakeDirty();
  size_t EncodeItems(const std::vector<SlotRef>& items, size_t begin,
                     size_t end, char* out) const;
  void SettleDirty(const std::vector<SlotRef>& items, bool written);

  // Frees every state (a closed store).
  void Clear();

  static constexpr int32_t kNil = -1;

 private:
  // Metadata of a cold node (its time is read with its state).
  struct ColdMeta {
    uint64_t version;
    uint64_t updates;
    int32_t writer;
  };

  float* Row(int32_t slot) const {
    return chunks_[slot >> kChunkShift] +
           static_cast<int64_t>(slot & (kChunkRows - 1)) * dim_;
  }
  // Prefetches every cache line of the row of `slot` (for writing when
  // kWrite is 1).
  template <int kWrite>
  void PrefetchRow(int32_t slot) const {
    const char* row = reinterpret_cast<const char*>(Row(slot));
    for (int64_t b = 0; b < row_bytes_; b += 64)
      __builtin_prefetch(row + b, kWrite);
    __builtin_prefetch(row + row_bytes_ - 1, kWrite);
  }
  // The hot slot of `id`, or kNil. Ids below dense_.size() are looked up
  // in dense_ (one load); the rest in index_.
  int32_t FindSlot(int64_t id) const {
    if (static_cast<uint64_t>(id) < dense_.size()) return dense_[id];
    auto it = index_.find(id);
    return it == index_.end() ? kNil : it->second;
  }
  // Prefetches what FindSlot(id) will read.
  void PrefetchSlotOf(int64_t id) const {
    if (static_cast<uint64_t>(id) < dense_.size()) {
      __builtin_prefetch(&dense_[id]);
    } else {
      index_.prefetch(id);
    }
  }
  // Memory for one more chunk of rows, carved from the last arena segment
  // or a new one.
  float* NewChunk();
  void IndexInsert(int64_t id, int32_t slot);
  void IndexErase(int64_t id);
  int32_t AllocSlot(int64_t id);
  void FreeSlot(int32_t slot);
  void SetSlot(int32_t slot, const float* row, uint64_t version,
               uint64_t updates, double time, int32_t writer);
  void LinkHead(int32_t slot);
  void Unlink(int32_t slot);
  void MarkDirty(int32_t slot);
  // Writes the node entry of `slot` (key and value, EntryBytes) to `out`.
  void EncodeEntry(int32_t slot, char* out) const;

  static constexpr int kChunkShift = 12;
  static constexpr int32_t kChunkRows = 1 << kChunkShift;

  // Constant after construction.
  const int dim_;
  const int64_t row_bytes_;
  const int64_t capacity_bytes_;
  // Recency list upkeep: only a bounded hot tier over a data_dir spills.
  const bool track_recency_;
  const bool track_dirty_;

  // Row memory: chunks of kChunkRows rows, carved in order from segments
  // that double in size (up to 1 GiB), 2 MiB aligned and advised as
  // transparent huge pages: a growing hot tier takes one page fault per
  // 2 MiB instead of one per 4 KiB (about a fifth of a write-through push
  // was first-touch faults).
  struct FreeSegment {
    void operator()(char* p) const { std::free(p); }
  };
  std::vector<std::unique_ptr<char, FreeSegment>> segments_;
  int64_t segment_bytes_ = 0;  // the last segment's
  int64_t segment_left_ = 0;   // bytes not yet carved
  std::vector<float*> chunks_;

  // Where each stored id is: the slots of the hot ids, and the cold ids.
  absl::flat_hash_map<int64_t, int32_t> index_;
  // Slot (or kNil) of every id below its size, which grows while the hot
  // ids are dense enough (see IndexInsert; at most about 2 x kDenseSlack
  // entries per hot id after a doubling): node ids are dense, and a hash
  // lookup of a random id is a cache miss or two that one array load is
  // not (pulls about 1.5x).
  std::vector<int32_t> dense_;
  absl::flat_hash_map<int64_t, ColdMeta> cold_;

  // Per-slot metadata.
  std::vector<int64_t> slot_id_;
  std::vector<uint64_t> slot_version_;
  std::vector<uint64_t> slot_updates_;
  std::vector<double> slot_time_;
  std::vector<int32_t> slot_writer_;
  // The recency list.
  int32_t head_ = kNil;
  int32_t tail_ = kNil;
  std::vector<int32_t> prev_;  // towards head
  std::vector<int32_t> next_;  // towards tail
  // 0 clean, 1 dirty (in dirty_slots_), 2 being materialized.
  std::vector<uint8_t> dirty_;
  std::vector<int32_t> dirty_slots_;
  std::vector<int32_t> free_slots_;
};

}  // namespace mnemo::memstore

#endif  // MNEMO_MEMSTORE_HOT_TIER_H_
