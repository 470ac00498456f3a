#include "trainer/plan/working_set.h"

#include <algorithm>
#include <limits>
#include <memory>
#include <set>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "util/status_macros.h"

namespace mnemo::plan {
namespace {

constexpr int64_t kNever = std::numeric_limits<int64_t>::max();

}  // namespace

absl::StatusOr<Eviction> ParseEviction(std::string_view name) {
  if (name == "belady") return Eviction::kBelady;
  if (name == "lru") return Eviction::kLru;
  return absl::InvalidArgumentError(
      absl::StrCat("--memory-eviction must be belady or lru, got '",
                   std::string(name), "'"));
}

std::string_view EvictionName(Eviction eviction) {
  return eviction == Eviction::kBelady ? "belady" : "lru";
}

void BatchNodes::Add(absl::Span<const int64_t> batch_nodes) {
  nodes.insert(nodes.end(), batch_nodes.begin(), batch_nodes.end());
  begin.push_back(static_cast<int64_t>(nodes.size()));
}

namespace {

// OK when `reads` and `writes` hold the same number of batches, each
// batch reads at most `capacity` distinct nodes with ids >= 0 and writes
// only nodes it reads; else INVALID_ARGUMENT naming the first batch at
// fault.
absl::Status CheckBatches(const BatchNodes& reads, const BatchNodes& writes,
                          int64_t capacity) {
  const int64_t nb = reads.num_batches();
  if (writes.num_batches() != nb) {
    return absl::InvalidArgumentError(
        absl::StrCat("working set: ", nb, " batches of reads but ",
                     writes.num_batches(), " of writes"));
  }
  // Which batch last read each node.
  absl::flat_hash_map<int64_t, int64_t> last_read;
  for (int64_t b = 0; b < nb; ++b) {
    const auto batch = reads.batch(b);
    if (static_cast<int64_t>(batch.size()) > capacity) {
      return absl::InvalidArgumentError(
          absl::StrCat("working set: batch ", b, " reads ", batch.size(),
                       " node states but the cache holds ", capacity,
                       "; raise --memory-cache-bytes to at least ",
                       batch.size(), " states"));
    }
    for (const int64_t u : batch) {
      if (u < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("working set: batch ", b, " reads node ", u));
      }
      auto [it, inserted] = last_read.try_emplace(u, b);
      if (!inserted && it->second == b) {
        return absl::InvalidArgumentError(absl::StrCat(
            "working set: batch ", b, " reads node ", u, " twice"));
      }
      it->second = b;
    }
    for (const int64_t u : writes.batch(b)) {
      auto it = last_read.find(u);
      if (it == last_read.end() || it->second != b) {
        return absl::InvalidArgumentError(absl::StrCat("working set: batch ", b,
                                                       " writes node ", u,
                                                       " without reading it"));
      }
    }
  }
  return absl::OkStatus();
}

// Belady's keys: per read (an index into reads.nodes), the batch of the
// node's next read, kNever when there is none.
std::vector<int64_t> NextReads(const BatchNodes& reads) {
  std::vector<int64_t> next(reads.nodes.size());
  absl::flat_hash_map<int64_t, int64_t> upcoming;
  for (int64_t b = reads.num_batches() - 1; b >= 0; --b) {
    for (int64_t i = reads.begin[b]; i < reads.begin[b + 1]; ++i) {
      const int64_t u = reads.nodes[i];
      auto [it, inserted] = upcoming.try_emplace(u, b);
      next[i] = inserted ? kNever : it->second;
      it->second = b;
    }
  }
  return next;
}

// The held states ordered for eviction: the largest (key, -node) goes
// first, so equal keys drop the lower node id first.
class EvictionOrder {
 public:
  bool held(int64_t u) const { return key_of_.contains(u); }
  int64_t size() const { return static_cast<int64_t>(key_of_.size()); }
  // Holds `u` (if it is not held yet) under eviction key `key`.
  void SetKey(int64_t u, int64_t key) {
    auto [it, inserted] = key_of_.try_emplace(u, key);
    if (!inserted) {
      order_.erase({it->second, -u});
      it->second = key;
    }
    order_.insert({key, -u});
  }
  // Drops the state that goes first and returns it. Requires size() > 0.
  int64_t PopFirst() {
    const auto top = std::prev(order_.end());
    const int64_t u = -top->second;
    order_.erase(top);
    key_of_.erase(u);
    return u;
  }

 private:
  absl::flat_hash_map<int64_t, int64_t> key_of_;
  std::set<std::pair<int64_t, int64_t>> order_;
};

}  // namespace

absl::StatusOr<WorkingSet> PlanWorkingSet(const BatchNodes& reads,
                                          const BatchNodes& writes,
                                          int64_t capacity, Eviction rule) {
  RETURN_IF_ERROR(CheckBatches(reads, writes, capacity));
  const int64_t nb = reads.num_batches();
  const std::vector<int64_t> next =
      rule == Eviction::kBelady ? NextReads(reads) : std::vector<int64_t>();
  // Belady's key is the next read; LRU's is minus the last read.
  EvictionOrder held;
  absl::flat_hash_set<int64_t> dirty;
  WorkingSet ws;
  WorkingSetStats& st = ws.stats;
  std::vector<int64_t> load, evict;
  for (int64_t b = 0; b < nb; ++b) {
    const auto batch = reads.batch(b);
    // The batch's own states get the smallest keys (Belady: every other
    // held state is next read after b; LRU: every other was last read
    // before b), so eviction never takes them.
    const int64_t in_use = rule == Eviction::kBelady ? b : -b;
    load.clear();
    for (const int64_t u : batch) {
      if (held.held(u)) {
        ++st.hits;
        held.SetKey(u, in_use);
      } else {
        load.push_back(u);
      }
    }
    st.reads += static_cast<int64_t>(batch.size());
    st.misses += static_cast<int64_t>(load.size());
    evict.clear();
    const int64_t over =
        held.size() + static_cast<int64_t>(load.size()) - capacity;
    for (int64_t k = 0; k < over; ++k) {
      const int64_t u = held.PopFirst();
      evict.push_back(u);
      st.dirty_evictions += dirty.erase(u);
    }
    st.evictions += static_cast<int64_t>(evict.size());
    for (const int64_t u : load) held.SetKey(u, in_use);
    st.peak_states = std::max(st.peak_states, held.size());
    if (rule == Eviction::kBelady) {
      for (int64_t i = reads.begin[b]; i < reads.begin[b + 1]; ++i) {
        held.SetKey(reads.nodes[i], next[i]);
      }
    }
    for (const int64_t u : writes.batch(b)) dirty.insert(u);
    std::sort(load.begin(), load.end());
    std::sort(evict.begin(), evict.end());
    ws.load.Add(load);
    ws.evict.Add(evict);
  }
  return ws;
}

namespace {

// Appends to `nodes` what target event `e` with negative `neg` reads: its
// endpoints, the negative and their temporal neighbours of `nbrs`.
void AddTargetReads(int64_t e, int32_t neg, const data::EventLog& log,
                    const NeighborReads& nbrs, std::vector<int64_t>* nodes) {
  const int32_t src = log.src[e], dst = log.dst[e];
  nodes->insert(nodes->end(), {src, dst, neg});
  if (nbrs.graph == nullptr || nbrs.neighbors <= 0) return;
  const int count = nbrs.endpoints_only ? 2 : 3;
  const int32_t of[3] = {src, dst, neg};
  for (int i = 0; i < count; ++i) {
    int64_t lo = 0, hi = 0;
    nbrs.graph->Before(of[i], log.t[e], &lo, &hi);
    for (int64_t j = std::max(lo, hi - nbrs.neighbors); j < hi; ++j) {
      nodes->push_back(nbrs.graph->neighbors()[j]);
    }
  }
}

// Adds `nodes` to `out` as one batch, distinct and ascending.
void AddBatch(std::vector<int64_t>* nodes, BatchNodes* out) {
  std::sort(nodes->begin(), nodes->end());
  nodes->erase(std::unique(nodes->begin(), nodes->end()), nodes->end());
  out->Add(*nodes);
}

}  // namespace

ReadPredictor PlanReads(const WorkerPlan& plan, const data::EventLog& log,
                        std::function<int32_t(int64_t)> negative_of,
                        const NeighborReads& nbrs) {
  ReadPredictor p;
  p.num_batches = plan.num_batches();
  p.reads = [&plan, &log, negative_of = std::move(negative_of), nbrs](
                int64_t b, std::vector<int64_t>* nodes) {
    const BatchView v = plan.batch(b);
    for (size_t i = 0; i < v.events.size(); ++i) {
      const int64_t e = v.events[i];
      if (v.target[i]) {
        AddTargetReads(e, negative_of(e), log, nbrs, nodes);
      } else {
        nodes->insert(nodes->end(), {log.src[e], log.dst[e]});
      }
    }
  };
  return p;
}

ReadPredictor EventReads(absl::Span<const int64_t> events, int64_t batch_size,
                         const data::EventLog& log,
                         std::function<int32_t(int64_t)> negative_of,
                         const NeighborReads& nbrs) {
  ReadPredictor p;
  const int64_t total = static_cast<int64_t>(events.size());
  p.num_batches = (total + batch_size - 1) / batch_size;
  p.reads = [events, batch_size, total, &log,
             negative_of = std::move(negative_of),
             nbrs](int64_t b, std::vector<int64_t>* nodes) {
    const int64_t end = std::min(total, (b + 1) * batch_size);
    for (int64_t i = b * batch_size; i < end; ++i) {
      AddTargetReads(events[i], negative_of(i), log, nbrs, nodes);
    }
  };
  return p;
}

BatchNodes PredictReads(const ReadPredictor& predictor, int64_t first,
                        int64_t max_reads) {
  BatchNodes out;
  std::vector<int64_t> nodes;
  for (int64_t b = first;
       b < predictor.num_batches &&
       (b == first || static_cast<int64_t>(out.nodes.size()) < max_reads);
       ++b) {
    nodes.clear();
    predictor.reads(b, &nodes);
    AddBatch(&nodes, &out);
  }
  return out;
}

BatchNodes PredictReads(const WorkerPlan& plan, const data::EventLog& log,
                        const std::function<int32_t(int64_t)>& negative_of,
                        const NeighborReads& nbrs) {
  return PredictReads(PlanReads(plan, log, negative_of, nbrs));
}

BatchNodes PredictReads(absl::Span<const int64_t> events, int64_t batch_size,
                        const data::EventLog& log,
                        const std::function<int32_t(int64_t)>& negative_of,
                        const NeighborReads& nbrs) {
  return PredictReads(EventReads(events, batch_size, log, negative_of, nbrs));
}

WorkingSetCache::WorkingSetCache(int64_t num_nodes, int64_t capacity,
                                 Eviction rule)
    : capacity_(capacity), rule_(rule), key_(num_nodes, kNotHeld) {}

void WorkingSetCache::Reset(BatchNodes predicted) {
  auto batches = std::make_shared<const BatchNodes>(std::move(predicted));
  ReadPredictor p;
  p.num_batches = batches->num_batches();
  p.reads = [batches](int64_t b, std::vector<int64_t>* nodes) {
    const auto batch = batches->batch(b);
    nodes->insert(nodes->end(), batch.begin(), batch.end());
  };
  Reset(std::move(p));
}

void WorkingSetCache::Reset(ReadPredictor predicted, int64_t window_reads) {
  for (const auto& [key, neg] : heap_) key_[-neg] = kNotHeld;
  heap_.clear();
  held_ = 0;
  predicted_ = std::move(predicted);
  window_reads_ = std::max<int64_t>(1, window_reads);
  window_end_ = 0;
  read_begin_.clear();
  read_at_.clear();
  cursor_.clear();
  if (rule_ != Eviction::kBelady) {
    predicted_ = ReadPredictor();
    return;
  }
  LookAhead(0);
}

void WorkingSetCache::LookAhead(int64_t position) {
  const int64_t n = static_cast<int64_t>(key_.size());
  // The window's batches, distinct per batch.
  const BatchNodes window = PredictReads(predicted_, position, window_reads_);
  window_end_ = position + std::max<int64_t>(window.num_batches(), 1);
  read_begin_.assign(n + 1, 0);
  for (const int64_t u : window.nodes) {
    if (u >= 0 && u < n) ++read_begin_[u + 1];
  }
  for (int64_t u = 0; u < n; ++u) read_begin_[u + 1] += read_begin_[u];
  read_at_.assign(read_begin_[n], 0);
  read_at_.shrink_to_fit();
  cursor_.assign(read_begin_.begin(), read_begin_.end() - 1);
  for (int64_t i = 0; i < window.num_batches(); ++i) {
    for (const int64_t u : window.batch(i)) {
      if (u >= 0 && u < n) {
        read_at_[cursor_[u]++] = static_cast<int32_t>(position + i);
      }
    }
  }
  cursor_.assign(read_begin_.begin(), read_begin_.end() - 1);
  // Re-rank what is held: its next read at or after `position`.
  heap_ = CurrentEntries();
  for (auto& [key, neg] : heap_) {
    key = NextRead(-neg, position - 1);
    key_[-neg] = key;
  }
  std::make_heap(heap_.begin(), heap_.end());
}

std::vector<std::pair<int64_t, int64_t>> WorkingSetCache::CurrentEntries() {
  std::vector<std::pair<int64_t, int64_t>> current;
  current.reserve(held_);
  for (const auto& [key, neg] : heap_) {
    const int64_t u = -neg;
    // Outdated, or a second current entry of a state already taken.
    if (key_[u] != key) continue;
    current.emplace_back(key, neg);
    key_[u] = kInUse;
  }
  for (const auto& [key, neg] : current) key_[-neg] = key;
  return current;
}

void WorkingSetCache::Compact() {
  heap_ = CurrentEntries();
  std::make_heap(heap_.begin(), heap_.end());
}

int64_t WorkingSetCache::PopVictim() {
  while (true) {
    std::pop_heap(heap_.begin(), heap_.end());
    const auto [key, neg] = heap_.back();
    heap_.pop_back();
    const int64_t u = -neg;
    if (key_[u] != key) continue;  // an entry from before its key changed
    key_[u] = kNotHeld;
    --held_;
    return u;
  }
}

int64_t WorkingSetCache::NextRead(int64_t u, int64_t position) {
  if (cursor_.empty()) return INT64_MAX;  // no prediction
  int32_t& c = cursor_[u];
  const int32_t end = read_begin_[u + 1];
  while (c < end && read_at_[c] <= position) ++c;
  return c < end ? read_at_[c] : INT64_MAX;
}

void WorkingSetCache::SetKey(int64_t u, int64_t key) {
  if (key_[u] == kNotHeld) ++held_;
  key_[u] = key;
  if (key == kInUse) return;  // given its next key before Acquire returns
  heap_.emplace_back(key, -u);
  std::push_heap(heap_.begin(), heap_.end());
  if (heap_.size() > 2 * static_cast<size_t>(held_) + 4096) Compact();
}

absl::Status WorkingSetCache::Acquire(int64_t position,
                                      absl::Span<const int64_t> needed,
                                      std::vector<int64_t>* misses,
                                      std::vector<int64_t>* victims) {
  if (static_cast<int64_t>(needed.size()) > capacity_) {
    return absl::InvalidArgumentError(
        absl::StrCat("a step needs ", needed.size(),
                     " node states at once and the "
                     "working set holds ",
                     capacity_));
  }
  if (rule_ == Eviction::kBelady && position >= window_end_ &&
      position < predicted_.num_batches) {
    LookAhead(position);
  }
  const size_t first_miss = misses->size(), first_victim = victims->size();
  // The needed states get the smallest keys: eviction never takes them.
  ++tick_;
  for (const int64_t u : needed) {
    if (held(u)) {
      ++stats_.hits;
    } else {
      misses->push_back(u);
    }
    SetKey(u, kInUse);
  }
  stats_.reads += static_cast<int64_t>(needed.size());
  const int64_t loaded = static_cast<int64_t>(misses->size() - first_miss);
  stats_.misses += loaded;
  for (int64_t over = size() - capacity_; over > 0; --over) {
    victims->push_back(PopVictim());
  }
  stats_.evictions += static_cast<int64_t>(victims->size() - first_victim);
  for (const int64_t u : needed) {
    SetKey(u, rule_ == Eviction::kBelady ? NextRead(u, position) : -tick_);
  }
  stats_.peak_states = std::max(stats_.peak_states, size());
  std::sort(misses->begin() + first_miss, misses->end());
  std::sort(victims->begin() + first_victim, victims->end());
  return absl::OkStatus();
}

}  // namespace mnemo::plan
