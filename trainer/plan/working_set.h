// A trainer's bounded working set of node states (--memory-cache-bytes),
// planned ahead: given the nodes each coming batch reads (its plan) and a
// capacity in node states, which states to pull before each batch (the
// misses, in one batched pull) and which to drop to make room.
//
// Two eviction rules, both deterministic:
//  - kBelady: drop the state whose next read is furthest away (never read
//    again first). Every policy's plan says what each batch reads, so the
//    rule is Belady's optimal one over the plan's horizon (the epoch): no
//    rule pulls fewer states for the same reads and capacity.
//  - kLru: drop the state read least recently (what a cache that does not
//    know the plan can do).
// Ties (same next read, same last read) drop the lower node id first.
//
// A batch's own reads are never dropped before it runs, so the capacity
// must hold every batch's read set. A state that a batch writes (advances)
// is dirty until it is dropped: dropping it means pushing it to the store
// first (WorkingSetStats::dirty_evictions).
//
// Torch-free and gRPC-free. Thread-compatible.
#ifndef MNEMO_TRAINER_PLAN_WORKING_SET_H_
#define MNEMO_TRAINER_PLAN_WORKING_SET_H_

#include <cstdint>
#include <functional>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "trainer/data/event_log.h"
#include "trainer/data/neighbor_sampler.h"
#include "trainer/plan/batch_plan.h"

namespace mnemo::plan {

enum class Eviction { kBelady, kLru };

// "belady" or "lru"; INVALID_ARGUMENT naming --memory-eviction otherwise.
absl::StatusOr<Eviction> ParseEviction(std::string_view name);
std::string_view EvictionName(Eviction eviction);

// Per-batch node sets in compressed form: batch b's nodes are
// nodes[begin[b], begin[b + 1]) (distinct within a batch, any order).
struct BatchNodes {
  std::vector<int64_t> begin = {0};
  std::vector<int64_t> nodes;

  int64_t num_batches() const { return static_cast<int64_t>(begin.size()) - 1; }
  absl::Span<const int64_t> batch(int64_t b) const {
    return absl::MakeConstSpan(nodes).subspan(begin[b],
                                              begin[b + 1] - begin[b]);
  }
  // Appends one batch.
  void Add(absl::Span<const int64_t> batch_nodes);
};

struct WorkingSetStats {
  int64_t reads = 0;      // node reads over all batches
  int64_t hits = 0;       // reads of a state already held
  int64_t misses = 0;     // states pulled (reads - hits)
  int64_t evictions = 0;  // states dropped to make room
  // Dropped states that a batch had advanced since they were pulled: each
  // is pushed to the store before its row is reused.
  int64_t dirty_evictions = 0;
  // Most states held at once (<= capacity).
  int64_t peak_states = 0;
};

struct WorkingSet {
  // Before batch b: drop evict.batch(b) (ascending), then pull
  // load.batch(b) (ascending).
  BatchNodes load, evict;
  WorkingSetStats stats;
};

// Plans the working set over `reads` (what each batch reads) and `writes`
// (what each batch advances: each a subset of its reads), starting empty,
// holding at most `capacity` states. INVALID_ARGUMENT when the batch counts
// differ, a write is not read by its batch, a node id is negative, or a
// batch reads more than `capacity` distinct states (the message names the
// batch and how many it reads). O(reads log capacity).
absl::StatusOr<WorkingSet> PlanWorkingSet(const BatchNodes& reads,
                                          const BatchNodes& writes,
                                          int64_t capacity, Eviction rule);

// Which temporal neighbours a model's batch reads or writes the states of:
// with `graph` and `neighbors` > 0, the `neighbors` most recent ones before
// each target event's time of its source, destination and negative (a
// model that embeds through neighbours: TGN), or with `endpoints_only` of
// its source and destination only (a model that mails them: APAN).
struct NeighborReads {
  const data::TemporalGraph* graph = nullptr;
  int neighbors = 0;
  bool endpoints_only = false;
};

// What the batches of a pass read, one batch at a time: `reads(b, nodes)`
// appends batch b's reads to `nodes` (any order, repeats allowed). A
// working-set cache asks for a window of batches at a time, so that it
// never holds the predicted reads of a whole epoch (about 24 ids an event
// for TGN: 0.7 GB of int32 for a worker's 10M events).
struct ReadPredictor {
  int64_t num_batches = 0;
  std::function<void(int64_t b, std::vector<int64_t>* nodes)> reads;
};

// What each batch of `plan` reads, as a memory model reads it: the
// endpoints of its events, the negative of each target event e
// (`negative_of(e)`), and the targets' temporal neighbours of `nbrs`.
// The functions and `log`, `plan` and the graph must outlive the result.
ReadPredictor PlanReads(const WorkerPlan& plan, const data::EventLog& log,
                        std::function<int32_t(int64_t)> negative_of,
                        const NeighborReads& nbrs);
// The same over `events` (ascending, every one a target) cut into batches
// of `batch_size`: an evaluation pass. `negative_of(i)`: the negative of
// events[i].
ReadPredictor EventReads(absl::Span<const int64_t> events, int64_t batch_size,
                         const data::EventLog& log,
                         std::function<int32_t(int64_t)> negative_of,
                         const NeighborReads& nbrs);
// The batches of `predictor` from `first` (distinct and ascending per
// batch; its batch i is batch first + i), until they hold `max_reads`
// reads or more (at least one batch where one is left): every batch by
// default.
BatchNodes PredictReads(const ReadPredictor& predictor, int64_t first = 0,
                        int64_t max_reads = INT64_MAX);
// PredictReads(PlanReads(...)) and PredictReads(EventReads(...)).
BatchNodes PredictReads(const WorkerPlan& plan, const data::EventLog& log,
                        const std::function<int32_t(int64_t)>& negative_of,
                        const NeighborReads& nbrs);
BatchNodes PredictReads(absl::Span<const int64_t> events, int64_t batch_size,
                        const data::EventLog& log,
                        const std::function<int32_t(int64_t)>& negative_of,
                        const NeighborReads& nbrs);
// The same rules online, for a trainer that learns what a batch reads only
// when it builds the batch, and whose policy also pulls and pushes states
// between batches: each Acquire makes a set of states held, choosing which
// to drop. Belady ranks held states by their next read in `predicted` (the
// plan's reads, which may miss some: an unpredicted read is still served,
// and a state predicted never to be read again goes first). It looks ahead
// a window of batches holding about `window_reads` predicted reads (at
// least one batch): a held state not read within the window ranks as one
// never read again.
class WorkingSetCache {
 public:
  WorkingSetCache(int64_t num_nodes, int64_t capacity, Eviction rule);

  // Predicted reads looked ahead at once, by default: 64 MiB of them
  // (int64 while a window is made, int32 once it is).
  static constexpr int64_t kWindowReads = int64_t{1} << 23;
  // Holds nothing (a new epoch); Belady's next reads come from `predicted`
  // (batch b at position b). The counters run on.
  void Reset(ReadPredictor predicted, int64_t window_reads = kWindowReads);
  void Reset(BatchNodes predicted);
  // Makes `needed` (distinct ids in [0, num_nodes)) held at plan position
  // `position` (a batch index, nondecreasing between Resets). Appends to
  // `misses` the needed states not held before (ascending) and to
  // `victims` the held states dropped to make room (none of `needed`,
  // ascending). INVALID_ARGUMENT when `needed` is larger than the capacity.
  absl::Status Acquire(int64_t position, absl::Span<const int64_t> needed,
                       std::vector<int64_t>* misses,
                       std::vector<int64_t>* victims);
  bool held(int64_t u) const { return key_[u] != kNotHeld; }
  int64_t size() const { return held_; }
  int64_t capacity() const { return capacity_; }
  // reads, hits, misses, evictions, peak_states (dirty_evictions stays 0:
  // the caller knows which dropped states changed).
  const WorkingSetStats& stats() const { return stats_; }

 private:
  static constexpr int64_t kNotHeld = INT64_MIN;
  // The needed states' key during an Acquire: below every other key, so
  // never dropped (and never in the heap: an Acquire gives each its next
  // key before it returns).
  static constexpr int64_t kInUse = INT64_MIN + 1;
  // Gives held (or newly held) `u` its eviction key.
  void SetKey(int64_t u, int64_t key);
  // Drops the held state with the largest (key, -node).
  int64_t PopVictim();
  // The heap's current entries, one per held state (keys unchanged).
  std::vector<std::pair<int64_t, int64_t>> CurrentEntries();
  // Rebuilds the heap from its current entries alone.
  void Compact();
  int64_t NextRead(int64_t u, int64_t position);
  // Belady: predicts the window of batches from `position` and re-ranks
  // the held states by it.
  void LookAhead(int64_t position);

  const int64_t capacity_;
  const Eviction rule_;
  std::vector<int64_t> key_;  // per node: eviction key, kNotHeld
  int64_t held_ = 0;          // states held
  // Held states by (key, -node) in a max-heap: the top goes first. A
  // state's entries from before its key last changed stay until they
  // reach the top (or a compaction) and are skipped then: an entry is
  // current when its key is the state's key. (A binary heap in one
  // vector: no allocation per key change, which a balanced tree of the
  // same order paid twice per read.)
  std::vector<std::pair<int64_t, int64_t>> heap_;
  ReadPredictor predicted_;
  int64_t window_reads_ = kWindowReads;
  int64_t window_end_ = 0;  // the window: batches [.., window_end_)
  // The window's reads by node (positions ascending) and each node's
  // cursor (int32: a window holds fewer than 2^31 reads).
  std::vector<int32_t> read_begin_;
  std::vector<int32_t> read_at_;
  std::vector<int32_t> cursor_;
  int64_t tick_ = 0;  // LRU's clock
  WorkingSetStats stats_;
};

}  // namespace mnemo::plan

#endif  // MNEMO_TRAINER_PLAN_WORKING_SET_H_
