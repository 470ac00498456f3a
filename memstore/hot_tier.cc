#include "memstore/hot_tier.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <new>
#include <utility>

namespace mnemo::memstore {
namespace {

// Apply prefetch distances (ids ahead): hash buckets, then the slot.
constexpr int64_t kPrefetchIndex = 16;
constexpr int64_t kPrefetchSlot = 6;
// Dense index bounds (HotTier::IndexInsert): at most this many id slots
// per hot id, and ids below kMaxDenseIds (1 GiB of int32).
constexpr uint64_t kDenseSlack = 16;
constexpr uint64_t kMaxDenseIds = uint64_t{1} << 28;
// Rows a pull prefetches ahead of the one it copies.
constexpr int64_t kPrefetchRow = 4;
// Rows between two `ready` calls of PullWithProgress.
constexpr int64_t kReadyRows = 1024;

// Newest-wins: is (v, w) newer than the stored (sv, sw)?
inline bool Newer(uint64_t v, int32_t w, uint64_t sv, int32_t sw) {
  return v > sv || (v == sv && w > sw);
}

}  // namespace

HotTier::HotTier(int dim, int64_t capacity_bytes, bool track_recency,
                 bool track_dirty)
    : dim_(dim),
      row_bytes_(int64_t{dim} * 4),
      capacity_bytes_(capacity_bytes),
      track_recency_(track_recency),
      track_dirty_(track_dirty) {}

int64_t HotTier::Excess() const {
  if (capacity_bytes_ == 0) return 0;
  const int64_t limit = std::max<int64_t>(1, capacity_bytes_ / row_bytes_);
  return hot_states() - limit;
}

// ---------------------------------------------------------------------------
// Slots, index, recency list

float* HotTier::NewChunk() {
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

int32_t HotTier::AllocSlot(int64_t id) {
  int32_t slot;
  if (!free_slots_.empty()) {
    slot = free_slots_.back();
    free_slots_.pop_back();
  } else {
    slot = static_cast<int32_t>(slot_id_.size());
    if ((slot & (kChunkRows - 1)) == 0) {
      chunks_.push_back(NewChunk());
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

void HotTier::IndexInsert(int64_t id, int32_t slot) {
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

void HotTier::IndexErase(int64_t id) {
  index_.erase(id);
  if (static_cast<uint64_t>(id) < dense_.size()) dense_[id] = kNil;
}

void HotTier::FreeSlot(int32_t slot) {
  Unlink(slot);
  IndexErase(slot_id_[slot]);
  slot_id_[slot] = -1;  // a free slot holds no id (see EncodeItems)
  dirty_[slot] = 0;
  free_slots_.push_back(slot);
}

void HotTier::SetSlot(int32_t slot, const float* row, uint64_t version,
                      uint64_t updates, double time, int32_t writer) {
  std::memcpy(Row(slot), row, row_bytes_);
  slot_version_[slot] = version;
  slot_updates_[slot] = updates;
  slot_time_[slot] = time;
  slot_writer_[slot] = writer;
}

void HotTier::LinkHead(int32_t slot) {
  if (!track_recency_) return;
  prev_[slot] = kNil;
  next_[slot] = head_;
  if (head_ != kNil) prev_[head_] = slot;
  head_ = slot;
  if (tail_ == kNil) tail_ = slot;
}

void HotTier::Unlink(int32_t slot) {
  if (!track_recency_) return;
  const int32_t p = prev_[slot], n = next_[slot];
  if (p != kNil) next_[p] = n;
  if (n != kNil) prev_[n] = p;
  if (head_ == slot) head_ = n;
  if (tail_ == slot) tail_ = p;
  prev_[slot] = next_[slot] = kNil;
}

void HotTier::MarkDirty(int32_t slot) {
  // 2 (taken by a materialization in flight) is no longer in dirty_slots_.
  if (!track_dirty_ || dirty_[slot] == 1) return;
  dirty_slots_.push_back(slot);
  dirty_[slot] = 1;
}

void HotTier::EncodeEntry(int32_t slot, char* out) const {
  EncodeKey(static_cast<uint64_t>(slot_id_[slot]), out);
  EncodeHeader(slot_version_[slot], slot_updates_[slot], slot_time_[slot],
               slot_writer_[slot], out + 8);
  std::memcpy(out + 8 + kEntryHeader, Row(slot), row_bytes_);
}

// ---------------------------------------------------------------------------
// Pushes and pulls

int64_t HotTier::Apply(const int64_t* ids, const float* states,
                       const uint64_t* versions, const double* times, int64_t n,
                       int32_t writer) {
  int64_t accepted = 0;
  for (int64_t i = 0; i < n; ++i) {
    // Random ids miss every cache level: prefetch the hash buckets of a
    // later id, and the metadata and row of a nearer one (hints only: the
    // lookup below is the one that counts).
    if (i + kPrefetchIndex < n) PrefetchSlotOf(ids[i + kPrefetchIndex]);
    if (i + kPrefetchSlot < n) {
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
      if (!Newer(v, writer, slot_version_[slot], slot_writer_[slot])) continue;
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
    SetSlot(slot, states + i * dim_, v, updates, times[i], writer);
    LinkHead(slot);
    MarkDirty(slot);
    ++accepted;
  }
  return accepted;
}

void HotTier::Gather(absl::Span<const int64_t> ids, PulledStates* out,
                     std::vector<int64_t>* cold_ids,
                     std::vector<int64_t>* cold_pos, GatherCounts* counts,
                     const std::function<void(int64_t)>* ready) const {
  const int64_t n = static_cast<int64_t>(ids.size());
  out->states.resize(n * dim_);
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
    float* dst = out->states.data() + i * dim_;
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

int64_t HotTier::Promote(const std::vector<int64_t>& cold_ids,
                         const std::vector<int64_t>& cold_pos,
                         const PulledStates& pulled,
                         const std::vector<EntryMeta>& metas) {
  int64_t promoted = 0;
  for (size_t j = 0; j < cold_ids.size(); ++j) {
    auto ct = cold_.find(cold_ids[j]);
    if (ct == cold_.end()) continue;  // duplicate, already promoted
    cold_.erase(ct);
    const int32_t s = AllocSlot(cold_ids[j]);
    SetSlot(s, pulled.states.data() + cold_pos[j] * dim_, metas[j].version,
            metas[j].updates, metas[j].time, metas[j].writer);
    LinkHead(s);
    ++promoted;
  }
  return promoted;
}

int64_t HotTier::PickVictims(int64_t excess, std::vector<int32_t>* victims,
                             std::string* entries) const {
  const size_t entry_bytes = EntryBytes(row_bytes_);
  victims->reserve(excess);
  entries->assign(static_cast<size_t>(excess) * entry_bytes, '\0');
  int64_t written = 0;
  for (int32_t s = tail_;
       s != kNil && static_cast<int64_t>(victims->size()) < excess;
       s = prev_[s]) {
    victims->push_back(s);
    // A clean state (promoted from the cold tier and not pushed since, or
    // materialized since its last push) has its node entry already, equal
    // to it: dropping it from RAM writes nothing. So a scan of cold states
    // (an evaluation pass) costs the reads alone, not a write per read.
    if (dirty_[s] == 0) continue;
    EncodeEntry(s, entries->data() + written * entry_bytes);
    ++written;
  }
  return written;
}

void HotTier::Demote(const std::vector<int32_t>& victims) {
  for (int32_t s : victims) {
    cold_[slot_id_[s]] =
        ColdMeta{slot_version_[s], slot_updates_[s], slot_writer_[s]};
    FreeSlot(s);
  }
}

bool HotTier::Get(int64_t id, NodeStateView* view) const {
  const int32_t s = FindSlot(id);
  if (s == kNil) return false;
  std::memcpy(view->state.data(), Row(s), row_bytes_);
  view->version = slot_version_[s];
  view->time = slot_time_[s];
  view->updates = slot_updates_[s];
  view->writer = slot_writer_[s];
  view->hot = true;
  return true;
}

void HotTier::ForEachVersion(
    absl::FunctionRef<void(uint64_t, int64_t)> fn) const {
  for (const auto& [id, slot] : index_) fn(slot_version_[slot], id);
  for (const auto& [id, m] : cold_) fn(m.version, id);
}

absl::Status HotTier::ForEachEntry(
    absl::FunctionRef<absl::Status(const char* entry)> fn) const {
  std::vector<char> entry(EntryBytes(row_bytes_));
  for (const auto& [id, s] : index_) {
    EncodeEntry(s, entry.data());
    if (absl::Status st = fn(entry.data()); !st.ok()) return st;
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------
// Loading and materialization

void HotTier::LoadHot(int64_t id, const EntryMeta& meta, const char* row) {
  const int32_t slot = AllocSlot(id);
  slot_version_[slot] = meta.version;
  slot_updates_[slot] = meta.updates;
  slot_time_[slot] = meta.time;
  slot_writer_[slot] = meta.writer;
  std::memcpy(Row(slot), row, row_bytes_);
}

void HotTier::LoadCold(int64_t id, const EntryMeta& meta) {
  cold_[id] = ColdMeta{meta.version, meta.updates, meta.writer};
}

void HotTier::FinishLoad() {
  if (!track_recency_) return;
  // Recency list: oldest version at the tail. Every slot was loaded.
  std::vector<std::pair<uint64_t, int32_t>> order;
  order.reserve(slot_id_.size());
  for (size_t slot = 0; slot < slot_id_.size(); ++slot)
    order.emplace_back(slot_version_[slot], static_cast<int32_t>(slot));
  std::sort(order.begin(), order.end());
  for (const auto& [version, slot] : order) LinkHead(slot);
}

std::vector<HotTier::SlotRef> HotTier::TakeDirty() {
  std::vector<SlotRef> items;
  items.reserve(dirty_slots_.size());
  for (int32_t s : dirty_slots_) {
    if (dirty_[s] != 1) continue;
    dirty_[s] = 2;
    items.push_back({slot_id_[s], s});
  }
  dirty_slots_.clear();
  return items;
}

size_t HotTier::EncodeItems(const std::vector<SlotRef>& items, size_t begin,
                            size_t end, char* out) const {
  // A slot freed since the snapshot was spilled: its entry is written
  // already. A slot's state may be newer than the materialization's
  // journal range: journal replay over a newer entry is a no-op under
  // newest-wins.
  const size_t entry_bytes = EntryBytes(row_bytes_);
  size_t copied = 0;
  for (size_t j = begin; j < end; ++j) {
    if (j + 4 < end) {
      const int32_t ahead = items[j + 4].slot;
      __builtin_prefetch(&slot_id_[ahead]);
      __builtin_prefetch(&slot_version_[ahead]);
      __builtin_prefetch(&slot_updates_[ahead]);
      __builtin_prefetch(&slot_time_[ahead]);
      __builtin_prefetch(&slot_writer_[ahead]);
      const char* row = reinterpret_cast<const char*>(Row(ahead));
      for (int64_t b = 0; b < row_bytes_; b += 64) __builtin_prefetch(row + b);
    }
    const SlotRef& it = items[j];
    if (slot_id_[it.slot] != it.id) continue;
    EncodeEntry(it.slot, out + copied * entry_bytes);
    ++copied;
  }
  return copied;
}

void HotTier::SettleDirty(const std::vector<SlotRef>& items, bool written) {
  if (written) {
    for (const SlotRef& it : items)
      if (dirty_[it.slot] == 2) dirty_[it.slot] = 0;
    return;
  }
  // Still 2: neither updated nor freed since the snapshot.
  for (const SlotRef& it : items) {
    if (dirty_[it.slot] != 2) continue;
    dirty_[it.slot] = 1;
    dirty_slots_.push_back(it.slot);
  }
}

void HotTier::Clear() {
  chunks_.clear();
  segments_.clear();
  segment_left_ = 0;
  index_.clear();
  dense_.clear();
  cold_.clear();
}

}  // namespace mnemo::memstore
