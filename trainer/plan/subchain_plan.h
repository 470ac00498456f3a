// DepBloom Sec. 4.2, temporally bounded spatial partitioning: the training
// stream is cut into consecutive windows of events, each window's weighted
// interaction graph is partitioned into P parts, and each part's events, in
// time order, form one sub-chain of the window. A worker trains one
// sub-chain per window; workers meet only at window boundaries.
//
// MakeWorkerPlan (batch_plan.h) with PlanKind::kSubChains is the entry point
// for the runtime; the pieces below are public so that tests and benchmarks
// can partition once and inspect or plan every rank from the same result.
// The functions here do not validate their inputs: they require what
// MakeWorkerPlan requires (and check in LoadOrMakeWorkerPlan).
//
// Torch-free and gRPC-free. Thread-compatible; METIS calls are serialized
// by a process-wide mutex.
#ifndef MNEMO_TRAINER_PLAN_SUBCHAIN_PLAN_H_
#define MNEMO_TRAINER_PLAN_SUBCHAIN_PLAN_H_

#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "trainer/data/event_log.h"
#include "trainer/plan/batch_plan.h"

namespace mnemo::plan {

// A window's interaction graph G_m = (V_m, E_m, w^V, w^E) (DepBloom Sec.
// 4.2) with local node ids 0..num_nodes()-1 in order of first appearance.
// w^E(u, v): events between u and v in either direction (self-loops are not
// edges); w^V(v): events that involve v (a self-loop counts once).
struct WindowGraph {
  std::vector<int32_t> nodes;        // local id -> dense node id of the log
  std::vector<int64_t> node_weight;  // w^V per local id
  // Per event of the window, in order: local ids of its endpoints.
  std::vector<int32_t> event_src, event_dst;
  // Symmetric CSR adjacency: the neighbours of local node v are
  // neighbors[offsets[v], offsets[v+1]) (ascending), with weights w^E.
  std::vector<int64_t> offsets;
  std::vector<int32_t> neighbors;
  std::vector<int64_t> edge_weight;

  int64_t num_nodes() const { return static_cast<int64_t>(nodes.size()); }
  int64_t total_node_weight() const;
};

// G_m over `events` (log indices). O(events log events).
WindowGraph BuildWindowGraph(const data::EventLog& log,
                             absl::Span<const int64_t> events);

// Splits `g` into `parts` (>= 1) parts with `partitioner` (kMetis or
// kGreedy; kTime places events, not nodes: not accepted here) under the
// node-weight bound (1 + imbalance) * total / parts. kMetis runs METIS's
// k-way and recursive-bisection drivers and keeps the smaller weighted cut.
// Returns the part of each local node, in [0, parts). Deterministic. Graphs
// with no edges, with fewer nodes than parts, or too heavy for METIS's 32-bit
// weights (total node weight above 2^30), and parts == 1, are handled without
// METIS (a heaviest-first bin packing for the first two); if METIS itself
// fails, the kGreedy partition is returned and *fallback (if given) set to
// true.
std::vector<int32_t> PartitionWindowGraph(const WindowGraph& g, int parts,
                                          Partitioner partitioner,
                                          double imbalance,
                                          bool* fallback = nullptr);

// The sub-chain of each event of the window whose graph is `g`, from the
// node partition `part` (per local node, in [0, parts)) by `assignment`,
// each sub-chain within max(ceil((1 + imbalance) * events / parts),
// ceil(events / parts) + 1) events (ChainAssignment). Deterministic.
std::vector<int32_t> AssignChains(const WindowGraph& g,
                                  absl::Span<const int32_t> part, int parts,
                                  ChainAssignment assignment, double imbalance);

// G_m with every node cut in time into pieces of at most `piece_events`
// (> 0) of its events: each piece a node of the result (nodes[] holds the
// piece's dense node id, node_weight its events), each event between the
// pieces that hold it, and consecutive pieces of a node joined by an edge of
// weight 1 (placing them apart breaks the node's chain once). A partition of
// the result may place a hub's early and late events apart instead of
// dragging every neighbour of the hub into its part. O(events log events).
WindowGraph SplitNodes(const WindowGraph& g, int64_t piece_events);

// The sub-chains of a whole training stream: the same for every rank.
struct SubChainPartition {
  int parts = 1;
  // [num_windows + 1] positions in `train`: window w holds the events
  // train[window_begin[w], window_begin[w+1]).
  std::vector<int64_t> window_begin;
  // Per position in `train`: the sub-chain (part) of that event, in
  // [0, parts). Node partitions: the part of the event's SOURCE node.
  std::vector<int32_t> chain;
  // Per window.
  std::vector<WindowStats> stats;

  int64_t num_windows() const {
    return window_begin.empty() ? 0
                                : static_cast<int64_t>(window_begin.size()) - 1;
  }
};

// Partitions every window of `train` into options.world_size sub-chains
// with options.partitioner (windows of options.window_events events;
// options.batch_size is kTime's dealing unit, at most 1/world_size of the
// window, and each worker's batch size for WindowStats::steps).
SubChainPartition PartitionSubChains(const data::EventLog& log,
                                     absl::Span<const int64_t> train,
                                     const PlanOptions& options);

// Worker `rank`'s kSubChains plan (see MakeWorkerPlan) from `partition`,
// which must have been made from the same log, train and options.
WorkerPlan SubChainWorkerPlan(const data::EventLog& log,
                              absl::Span<const int64_t> train,
                              const SubChainPartition& partition, int rank,
                              const PlanOptions& options);

// The metric of DepBloom Fig. 5 for any placement of a window's events:
// fills events, nodes, cross_events, cross_ratio, shared_events and
// shared_ratio of `stats` for the window whose graph is `g`, with chain[i]
// the sub-chain of its i-th event (see WindowStats).
void CountCrossEvents(const WindowGraph& g, absl::Span<const int32_t> chain,
                      WindowStats* stats);

}  // namespace mnemo::plan

#endif  // MNEMO_TRAINER_PLAN_SUBCHAIN_PLAN_H_
