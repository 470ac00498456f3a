// Offline planning of one worker's training epoch: which events it executes
// in each global batch (its targets and the auxiliary events it replays), and
// which remote node states it refreshes at each candidate refresh boundary.
// DepTGL Sec. IV-B, Algorithm 1, Definitions 1-2; and DepBloom's temporally
// bounded sub-chains (DepBloom Sec. 4.2; PlanKind::kSubChains, the
// partitioning itself in subchain_plan.h).
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
#include <string_view>
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
  // DepBloom Sec. 4.2: the stream is cut into windows of `window_events`
  // events; each window is partitioned into world_size sub-chains (by
  // `partitioner`); worker p trains sub-chain p of every window, in its own
  // batches of batch_size events, every event a target. Windows have
  // different lengths (WorkerPlan::window_begin) and all workers run the same
  // number of steps in each window: a worker whose sub-chain needs fewer
  // batches than the window's longest gets EMPTY batches (no events) at the
  // end of the window, so the gradient all-reduces of every step line up.
  // The owner function is not used (may be null).
  kSubChains,
};

// How kSubChains splits a window into sub-chains.
enum class Partitioner {
  // DepBloom's choice: a weighted min-cut partition of the window's
  // interaction graph by METIS (the smaller cut of METIS_PartGraphKway and
  // METIS_PartGraphRecursive), node weights balanced within
  // (1 + imbalance). Deterministic (fixed METIS seed).
  kMetis,
  // A one-pass streaming partition (LDG): nodes in order of first appearance
  // in the window, each to the part holding most of its already placed
  // window neighbours (by edge weight), scaled by the part's remaining
  // capacity under the same (1 + imbalance) bound.
  kGreedy,
  // No graph (DistTGL-style memory parallelism; DepBloom's "W/O" baseline
  // and the sequential partitioning of its Fig. 5): the window's consecutive
  // batches of batch_size events are dealt to the sub-chains in turn; a
  // window shorter than world_size batches is dealt in world_size slices of
  // equal length (within one event) instead.
  kTime,
};

// "metis", "greedy" or "time"; INVALID_ARGUMENT naming --partitioner and
// the accepted values otherwise.
absl::StatusOr<Partitioner> ParsePartitioner(std::string_view name);
std::string_view PartitionerName(Partitioner partitioner);

// How a node partition (kMetis, kGreedy) places a window's events: an
// event's endpoints may lie in two parts (a cut edge), and its sub-chain is
// one of the two.
enum class ChainAssignment {
  // The source's part (DepBloom's reading). On graphs with hubs a hub's
  // in-events scatter over the parts of their sources, so most of its
  // events follow one in another sub-chain.
  kSource,
  // The part of the endpoint with more events in the window (ties: the
  // source's), so that a hub's events stay in its sub-chain and the light
  // endpoint, whose neighbouring events are few, is the one that crosses.
  kHeavier,
  // Each event, in time order, to whichever of its endpoints' parts breaks
  // fewer of their chains (the sub-chains of their latest events so far in
  // the window), ties to the heavier endpoint's part.
  kFollow,
};

// "source", "heavier" or "follow"; INVALID_ARGUMENT naming
// --chain-assignment and the accepted values otherwise.
absl::StatusOr<ChainAssignment> ParseChainAssignment(std::string_view name);
std::string_view ChainAssignmentName(ChainAssignment assignment);

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

  // kSubChains only (batch_size is then each worker's batch size).
  // Events per temporal window (>= 1; the last window may be shorter).
  // DepBloom's default: 80,000.
  int64_t window_events = 80000;
  // How each window is split into sub-chains.
  Partitioner partitioner = Partitioner::kMetis;
  // How a node partition places events (kTime ignores it). Every event
  // assignment keeps each sub-chain within (1 + imbalance) * events /
  // world_size events (at least one event more than the mean), giving an
  // event the other endpoint's part, then the shortest sub-chain, when its
  // choice is full. This and piece_events default to the paper's cut;
  // mnemo train's defaults are kFollow and 1 (runtime::TrainOptions).
  ChainAssignment chain_assignment = ChainAssignment::kSource;
  // kMetis: when > 0, each window's nodes are cut in time into pieces of at
  // most this many of their events before partitioning (SplitNodes), so
  // that a hub's pieces may lie in different parts; 0 partitions whole
  // nodes (DepBloom Sec. 4.2). With 1 METIS partitions the events'
  // dependency graph itself. kGreedy and kTime ignore it.
  int64_t piece_events = 0;
  // delta: allowed node-weight imbalance of a window's parts (>= 0): each
  // part's weight <= (1 + delta) * total / world_size (DepBloom Sec. 4.2;
  // METIS ufactor = 1000 * delta). kTime ignores it.
  double imbalance = 0.05;
  // The urgent set of window w (WorkerPlan::urgent) holds the nodes read by
  // every worker's first `urgent_batches` batches of window w + 1 (>= 0).
  int urgent_batches = 1;
  // kSubChains: when set, the sub-chain of every training event (as
  // SubChainPartition::chain, one per event of `train`) instead of
  // partitioning here. The runtime partitions on rank 0 and gives every
  // rank that partition (one METIS run per job; the ranks agree by
  // construction). Part of the cache key.
  const std::vector<int32_t>* given_chain = nullptr;
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
  // kSubChains: every node this worker's sub-chain reads in the window.
  absl::Span<const int64_t> refresh;
};

// Worker `rank`'s plan for one epoch.
//
// Batch b is step b of the epoch on every worker: all workers of a plan have
// the same number of batches and the same window boundaries. Use window_of /
// window_first_batch / window_batches rather than sync_every, which is 0 for
// kSubChains.
struct WorkerPlan {
  int rank = 0;
  // Batches per window (K; 1 for kOwnTargets and kFullReplay; 0 for
  // kSubChains, whose windows differ in length: see window_begin).
  int sync_every = 1;
  // [num_batches + 1] offsets into events/target; batch b is
  // [batch_begin[b], batch_begin[b+1]). kSubChains: empty batches (padding)
  // close a window where this worker's sub-chain is shorter than others.
  std::vector<int64_t> batch_begin;
  std::vector<int64_t> events;
  std::vector<uint8_t> target;
  // [num_windows + 1] offsets into refresh; refresh set of window w is
  // refresh[refresh_begin[w], refresh_begin[w+1]).
  std::vector<int64_t> refresh_begin;
  std::vector<int64_t> refresh;
  // [num_windows + 1] batch offsets: window w covers batches
  // [window_begin[w], window_begin[w+1]). Planners fill it for every kind
  // (= min(w*sync_every, num_batches) where sync_every > 0); when empty (a
  // hand-made plan), windows are [w*sync_every, (w+1)*sync_every).
  std::vector<int64_t> window_begin;
  // kSubChains: [num_windows + 1] offsets into urgent_nodes (see urgent());
  // empty for the other kinds.
  std::vector<int64_t> urgent_begin;
  std::vector<int64_t> urgent_nodes;
  // [num_batches]: see step_events(). Empty only in hand-made plans.
  std::vector<int64_t> step_event_counts;

  int64_t num_batches() const;
  int64_t num_windows() const;
  // Requires 0 <= b < num_batches().
  BatchView batch(int64_t b) const;
  // The window that batch b belongs to. Requires 0 <= b < num_batches().
  int64_t window_of(int64_t b) const;
  // First batch of window w and its number of batches. Require
  // 0 <= w < num_windows().
  int64_t window_first_batch(int64_t w) const;
  int64_t window_batches(int64_t w) const;
  // kSubChains: the URGENT set at the end of window w (DepBloom Sec. 4.4):
  // the nodes (ascending) that the first PlanOptions::urgent_batches
  // batches of window w + 1 of ANY worker read (endpoints of their events),
  // i.e. the states some worker needs first when the next window starts,
  // which every worker that advanced them pushes first. The same for every
  // rank of one partition. Empty for the last window and for the other
  // kinds. Requires 0 <= w < num_windows().
  absl::Span<const int64_t> urgent(int64_t w) const;
  // Target events in step b summed over ALL workers (for kSubChains, where
  // every event is a target: the sum of the workers' b-th batch sizes; may
  // be 0 only if every worker's batch b is empty, which planners never
  // produce). For kOwnTargets, kFullReplay and kDependencyScan: the global
  // batch's size. Scales a step's summed gradients to a mean. 0 for a
  // hand-made plan without step_event_counts. Requires 0 <= b <
  // num_batches().
  int64_t step_events(int64_t b) const;

  friend bool operator==(const WorkerPlan&, const WorkerPlan&) = default;
};

// One window of a kSubChains plan (the same for every rank).
struct WindowStats {
  int64_t events = 0;  // events in the window
  int64_t nodes = 0;   // nodes that appear in it
  // Events for which the previous event (within the window) of their source
  // or of their destination lies in another sub-chain (our reading of
  // DepBloom Fig. 5's broken dependencies), and their share of the window's
  // events.
  int64_t cross_events = 0;
  double cross_ratio = 0;
  // A looser count: events with an endpoint that also has events in another
  // sub-chain of the window (its memory is advanced by two workers), and
  // their share. For kTime this is the count whose size on real data
  // (95-99%) is that of Fig. 5's sequential partitioning (99.9%).
  int64_t shared_events = 0;
  double shared_ratio = 0;
  // Events whose source and destination lie in different parts (the
  // weighted cut METIS minimises); 0 for kTime, which places events, not
  // nodes.
  int64_t cut_events = 0;
  // Largest sub-chain (events) and max / mean over the world_size sub-chains
  // (1 = balanced): the load imbalance.
  int64_t max_chain_events = 0;
  double imbalance = 0;
  // Max / mean of the parts' node weights (events per node summed), the
  // quantity the balance bound (1 + PlanOptions::imbalance) applies to; 0
  // for kTime.
  double weight_imbalance = 0;
  // Batches each worker runs in this window (the longest sub-chain's).
  int64_t steps = 0;
  // Time to build the window graph and partition it.
  double partition_seconds = 0;
  // METIS failed on this window and kGreedy's partition was used instead.
  bool fallback = false;

  friend bool operator==(const WindowStats&, const WindowStats&) = default;
};

struct PlanStats {
  int64_t batches = 0, windows = 0;
  int64_t targets = 0, auxiliaries = 0;
  int64_t refresh_total = 0, refresh_max = 0;  // refresh-set sizes over windows
  double seconds = 0;  // planning (or loading) time, hashing included
  bool from_cache = false;
  std::string cache_path;  // file used (loaded or written), if any

  // kSubChains (empty / 0 for the other kinds). Loaded from the cache file
  // with the plan, so partition_seconds is the original planning's.
  std::vector<WindowStats> window_stats;
  // Over all windows: cross events / events, shared events / events, the
  // mean and the max of the windows' imbalance, and partitioning time
  // summed.
  double cross_ratio = 0, shared_ratio = 0;
  double mean_imbalance = 0, max_imbalance = 0;
  double partition_seconds = 0;
  // Batches of this worker without events (any kind; for kSubChains the
  // padding that closes its windows).
  int64_t empty_batches = 0;
};

// Plans worker `rank`'s part of the training events `train` (ascending log
// indices), cut into consecutive global batches of options.batch_size (the
// last may be shorter; batch b = train[b*bs, (b+1)*bs)). Windows: batches
// [w*K, (w+1)*K) (kOwnTargets and kFullReplay use K = 1 and empty refresh
// sets: their refresh is decided at run time).
//
// kSubChains instead cuts `train` into windows of options.window_events
// events and plans sub-chain `rank` of each (see PlanKind::kSubChains): batch
// k of window w holds events [k*bs, (k+1)*bs) of the sub-chain (all targets;
// empty past its end); the window's first batch is a boundary whose refresh
// set is every node the sub-chain reads in the window (its events'
// endpoints, ascending). Every rank partitions every window itself
// (deterministically), so ranks planned in separate processes agree.
//
// Preconditions (programmer errors; violations abort with a message):
// options valid (world_size >= 1, 0 <= rank < world_size, batch_size >= 1,
// sync_every >= 1, neighbor_reads >= 0, graph set when neighbor_reads > 0;
// kSubChains: window_events >= 1, imbalance finite and >= 0,
// urgent_batches >= 0), `train` strictly ascending and inside the log,
// owner(u) in [0, world_size) for every node (not for kSubChains).
// LoadOrMakeWorkerPlan checks these and returns INVALID_ARGUMENT instead.
//
// Cost: one owner() call per node of the log, then O(events +
// neighbor_reads * targets) with a per-node epoch-stamped marker array.
// kSubChains: O(events log events) plus one partitioning per window.
WorkerPlan MakeWorkerPlan(const data::EventLog& log,
                          absl::Span<const int64_t> train, const OwnerFn& owner,
                          int rank, const PlanOptions& options,
                          PlanStats* stats = nullptr);

// The same, cached on disk in `cache_dir` (created if missing; empty: no
// cache), keyed by everything the plan depends on: the training events (log
// indices, (src, dst), time, count), the log's node count, the node ownership
// (owner(u) for every node; not for kSubChains), world size, rank, K, batch
// size, kind, neighbor_reads (and the graph's content when used), for
// kSubChains window_events, partitioner, imbalance, urgent_batches (and the
// METIS version), and a format version.
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

// Sets `stats`' counts from `plan` (batches, windows, targets, auxiliaries,
// refresh-set sizes, empty batches) and its plan-wide totals from its
// window_stats (which it keeps); what planning took is left as it is. For
// a plan made otherwise than by LoadOrMakeWorkerPlan, e.g. a worker's part
// of a group's chain (DealToGroup).
void FillPlanStats(const WorkerPlan& plan, PlanStats* stats);

// A pipeline of `depth` workers runs one chain's batches (PipeTGL; DepBloom
// Sec. 2.2 and 4.2: a sub-chain run by a group of workers): within each
// window of `chain` (a plan of the chain, as one worker would run it), the
// chain's batches are dealt to the group's workers in turn, worker
// `position` taking the window's batches position, position + depth, ...
// Step j of a window is round j: its batches j*depth .. j*depth + depth - 1,
// which the group's workers run in that order (each after the one before
// has handed its memory update on). A window has ceil(batches / depth)
// rounds; a position past the window's last batch gets an EMPTY batch.
// `one_window`: the whole epoch is one window (the chain's own windows, e.g.
// one batch each for kOwnTargets, are then no boundaries); its refresh and
// urgent sets are empty. Otherwise each window keeps its refresh and urgent
// sets. step_events of a round sums the chain's step_events of its batches.
// Requires depth >= 1 and 0 <= position < depth.
WorkerPlan DealToGroup(const WorkerPlan& chain, int depth, int position,
                       bool one_window);

// DistTGL's epoch parallelism: every one of `workers` workers runs the whole
// chain, worker `offset` starting `offset` steps late (empty batches before
// it and workers - 1 - offset after it), so that at step t worker k trains
// the chain's batch t - k. One window; step_events of step t sums the
// chain's batches the workers run at it. Requires 0 <= offset < workers.
WorkerPlan StaggerPlan(const WorkerPlan& chain, int workers, int offset);

// A readable dump (like EXPLAIN) of batches [first, first+count) (clipped to
// the plan): a summary line, then per batch a header line
// "batch <b>:" or "batch <b>: boundary, refresh <n> {<ids>}" (long refresh
// sets are elided after 32 ids; kSubChains appends ", urgent <m>", the size
// of the window's urgent set) and one line per event
// "  e<id>(T|A) <src>-><dst>" with dense node ids.
std::string Describe(const data::EventLog& log, const WorkerPlan& plan,
                     int64_t first, int64_t count);

}  // namespace mnemo::plan

#endif  // MNEMO_TRAINER_PLAN_BATCH_PLAN_H_
