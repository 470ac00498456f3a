// Offline planning of one worker's training epoch: which events it executes
// in each global batch (its targets and the auxiliary events it replays), and
// which remote node states it refreshes at each candidate refresh boundary.
// DepTGL Sec. IV-B, Algorithm 1, Definitions 1-2.
//
// Planners produce plans; the runtime executes them. A plan is plain data
// (event lists, target masks, refresh sets) that can be printed (Describe),
// compared exactly and cached on disk (LoadOrMakeWorkerPlan).
//
// Torch-free and gRPC-free. Every function here is thread-compatible: calls on
// distinct outputs may run concurrently, provided the OwnerFn may be called
// concurrently.
#ifndef MNEMO_TRAINER_PLAN_BATCH_PLAN_H_
#define MNEMO_TRAINER_PLAN_BATCH_PLAN_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "trainer/data/event_log.h"
#include "trainer/data/neighbor_sampler.h"

namespace mnemo::plan {

// pi(u): the rank that owns node u (a dense node id of the log). Must return
// a value in [0, world_size) and be a pure function of u.
using OwnerFn = std::function<int(int64_t node)>;

enum class PlanKind {
  // Vanilla: each worker's targets are the events whose source it owns; no
  // auxiliaries.
  kOwnTargets,
  // Full-cache: targets as above, every other event of the global batch is
  // auxiliary.
  kFullReplay,
  // DepTGL Algorithm 1 over synchronization windows of K global batches.
  kDependencyScan,
};

struct PlanOptions {
  // Which plan to make.
  PlanKind kind = PlanKind::kDependencyScan;
  // Number of workers (>= 1).
  int world_size = 1;
  // Global batch size in events (>= 1).
  int64_t batch_size = 600;
  // K: global batches per synchronization window (Definition 1; >= 1). Only
  // kDependencyScan uses it.
  int sync_every = 6;
  // Refresh-set scope (kDependencyScan). The paper's frontier F holds the
  // remote destinations of targets and the remote endpoints of replayed
  // events; TGN also reads the memory of each target endpoint's temporal
  // neighbours. neighbor_reads > 0 adds, for every target, the remote nodes
  // among the `neighbor_reads` most recent neighbours (strictly before the
  // event's time, in `graph`; as data::NeighborSampler's kRecent strategy
  // picks them) of its source and destination to the window's refresh set
  // (not to F: they are refreshed, not replayed). 0: the paper's F only.
  int neighbor_reads = 0;
  // Required when neighbor_reads > 0: a graph over the same log (same dense
  // node ids). Not owned; only read during planning.
  const data::TemporalGraph* graph = nullptr;
};

// One worker's part of one global batch (DepTGL Definition 2): a time-ordered
// mixed batch. The spans point into the WorkerPlan, which must outlive them.
struct BatchView {
  // Log indices, ascending (= time order).
  absl::Span<const int64_t> events;
  // Per event: 1 target (its loss counts), 0 auxiliary replay.
  absl::Span<const uint8_t> target;
  // First batch of a window: a candidate refresh boundary precedes it.
  bool boundary = false;
  // At a boundary: the window's refresh set N_sync (remote nodes, ascending);
  // else empty. Empty at every boundary for kOwnTargets and kFullReplay.
  absl::Span<const int64_t> refresh;
};

// Worker `rank`'s plan for one epoch.
struct WorkerPlan {
  int rank = 0;
  // Batches per window (K; 1 for kOwnTargets and kFullReplay).
  int sync_every = 1;
  // [num_batches + 1] offsets into events/target; batch b is
  // [batch_begin[b], batch_begin[b+1]).
  std::vector<int64_t> batch_begin;
  std::vector<int64_t> events;
  std::vector<uint8_t> target;
  // [num_windows + 1] offsets into refresh; window w covers batches
  // [w*sync_every, (w+1)*sync_every).
  std::vector<int64_t> refresh_begin;
  std::vector<int64_t> refresh;

  int64_t num_batches() const;
  int64_t num_windows() const;
  // Requires 0 <= b < num_batches().
  BatchView batch(int64_t b) const;

  friend bool operator==(const WorkerPlan&, const WorkerPlan&) = default;
};

struct PlanStats {
  int64_t batches = 0, windows = 0;
  int64_t targets = 0, auxiliaries = 0;
  int64_t refresh_total = 0, refresh_max = 0;  // refresh-set sizes over windows
  double seconds = 0;  // planning (or loading) time, hashing included
  bool from_cache = false;
  std::string cache_path;  // file used (loaded or written), if any
};

// Plans worker `rank`'s part of the training events `train` (ascending log
// indices), cut into consecutive global batches of options.batch_size (the
// last may be shorter; batch b = train[b*bs, (b+1)*bs)). Windows: batches
// [w*K, (w+1)*K) (kOwnTargets and kFullReplay use K = 1 and empty refresh
// sets: their refresh is decided at run time).
//
// Preconditions (programmer errors; violations abort with a message):
// options valid (world_size >= 1, 0 <= rank < world_size, batch_size >= 1,
// sync_every >= 1, neighbor_reads >= 0, graph set when neighbor_reads > 0),
// `train` strictly ascending and inside the log, owner(u) in [0, world_size)
// for every node. LoadOrMakeWorkerPlan checks these and returns
// INVALID_ARGUMENT instead.
//
// Cost: one owner() call per node of the log, then O(events +
// neighbor_reads * targets) with a per-node epoch-stamped marker array.
WorkerPlan MakeWorkerPlan(const data::EventLog& log,
                          absl::Span<const int64_t> train, const OwnerFn& owner,
                          int rank, const PlanOptions& options,
                          PlanStats* stats = nullptr);

// The same, cached on disk in `cache_dir` (created if missing; empty: no
// cache), keyed by everything the plan depends on: the training events (log
// indices, (src, dst), time, count), the log's node count, the node ownership
// (owner(u) for every node), world size, rank, K, batch size, kind,
// neighbor_reads (and the graph's content when used), and a format version.
// The key names the file; the file repeats it and carries a checksum. A
// corrupt or mismatching file is ignored: the plan is made again and the file
// rewritten atomically (temp file + rename). A cache failure (directory not
// creatable, write failed) is not an error: the plan is returned with
// stats->cache_path empty.
//
// Errors: INVALID_ARGUMENT when the inputs break MakeWorkerPlan's
// preconditions. `stats` may be null.
absl::StatusOr<WorkerPlan> LoadOrMakeWorkerPlan(const data::EventLog& log,
                                                absl::Span<const int64_t> train,
                                                const OwnerFn& owner, int rank,
                                                const PlanOptions& options,
                                                const std::string& cache_dir,
                                                PlanStats* stats);

// A readable dump (like EXPLAIN) of batches [first, first+count) (clipped to
// the plan): a summary line, then per batch a header line
// "batch <b>:" or "batch <b>: boundary, refresh <n> {<ids>}" (long refresh
// sets are elided after 32 ids) and one line per event
// "  e<id>(T|A) <src>-><dst>" with dense node ids.
std::string Describe(const data::EventLog& log, const WorkerPlan& plan,
                     int64_t first, int64_t count);

}  // namespace mnemo::plan

#endif  // MNEMO_TRAINER_PLAN_BATCH_PLAN_H_
