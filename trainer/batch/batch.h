// The plain types of one batch, shared by the batch builder that makes
// them, the models that read them and node memory that takes their update:
// what a model needs its batches to carry (BatchNeeds), the index tensors
// of a batch (BatchTensors) and what the batch writes back into node
// memory (PositiveUpdate). Torch types only: this header sits below
// trainer/memory and trainer/model (the rest of trainer/batch/ above them).
#ifndef MNEMO_TRAINER_BATCH_BATCH_H_
#define MNEMO_TRAINER_BATCH_BATCH_H_

#include <torch/types.h>

#include <cstdint>
#include <vector>

namespace mnemo::batch {

// What the batch builder must put into a model's batches.
struct BatchNeeds {
  // Temporal neighbours of each target (BatchTensors::nbr_*).
  bool neighbors = false;
  // 2: also the neighbours of each neighbour before its edge time
  // (BatchTensors::nbr2_*).
  int neighbor_hops = 1;
  // The mail of a batch's events also goes to the endpoints' temporal
  // neighbours (APAN): the builder samples them for the positive events.
  bool mail_to_neighbors = false;
  // A mailbox read as TGL reads it (APAN --apan-mailbox tgl): every slot is
  // a query's (mailbox_mask all true, empty slots at time 0), and a node's
  // mail and memory are the last listed in TGL's order (the sources', the
  // destinations', then the neighbours' by root), not the latest event's.
  bool tgl_mailbox = false;
  // Each target's normalized time since its memory's last update
  // (BatchTensors::target_dt, with TimeGapStats).
  bool target_time_deltas = false;
  // > 0 (DySAT): instead of nbr_* and nbr2_*, the neighbours (and with
  // neighbor_hops 2 theirs) in each of `snapshots` windows of
  // `snapshot_span` before the target's time (BatchTensors::snap_*), by
  // node id: the model reads no node state of theirs.
  int snapshots = 0;
  double snapshot_span = 0;
};

// Normalization of the time since a node's last memory update: sources with
// the source statistics, destinations and negatives with the destination
// statistics (as the TGN reference does for JODIE).
struct TimeGapStats {
  double src_mean = 0, src_std = 1;
  double dst_mean = 0, dst_std = 1;
};

// Index tensors of one batch of B positive events with B negatives.
// Targets are [sources; destinations; negatives] (3B rows). The batch's
// distinct nodes are its slots (unique_rows); every other index refers to a
// slot.
struct BatchTensors {
  int64_t batch_size = 0;  // B
  // [U] int64 rows (memory::NodeMemory::Row) of the distinct nodes, in the
  // memory the batch was built against.
  torch::Tensor unique_rows;
  torch::Tensor target_slot;  // [3B] int64
  // Pending messages to apply before the batch (memory update).
  torch::Tensor mail_slot;  // [Mu] int64 slots with mail
  torch::Tensor mail_node;  // [Mu] int64 their rows in node memory
  torch::Tensor mail_dt;    // [Mu] float: mail time - last update
  // BatchNeeds::neighbors: k neighbour slots per target (padding: slot 0
  // and mask false).
  int64_t k = 0;
  torch::Tensor nbr_slot;       // [3B*k] int64
  torch::Tensor nbr_dt;         // [3B*k] float: target time - edge time
  torch::Tensor nbr_mask;       // [3B, k] bool
  torch::Tensor nbr_edge_feat;  // [3B*k, edge_dim] float (when edge_dim > 0)
  // BatchNeeds::neighbor_hops 2: k neighbours of each neighbour slot before
  // that slot's edge time (padding slots have none).
  torch::Tensor nbr2_dt;         // [3B*k*k] float: edge time - edge time
  torch::Tensor nbr2_mask;       // [3B*k, k] bool
  torch::Tensor nbr2_edge_feat;  // [3B*k*k, edge_dim] (edge_dim > 0)
  // BatchNeeds::snapshots H: for snapshot h (0 the oldest), each target's
  // k neighbours with time in [t - (H - h) span, t - (H - h - 1) span),
  // and with neighbor_hops 2 each of those slots' k neighbours in the same
  // window (the target's time, not the edge time, bounds it). The nodes
  // are rows of `snap_nodes`, the distinct node ids these read (targets
  // and neighbours; no node state of theirs is read). Padding: row 0, mask
  // false.
  torch::Tensor snap_nodes;       // [V] int64 node ids
  torch::Tensor snap_target;      // [3B] int64 row of each target
  torch::Tensor snap_node;        // [H, 3B*k] int64 rows
  torch::Tensor snap_mask;        // [H, 3B, k] bool
  torch::Tensor snap_edge_feat;   // [H, 3B*k, edge_dim] (edge_dim > 0)
  torch::Tensor snap2_node;       // [H, 3B*k*k] int64 rows
  torch::Tensor snap2_mask;       // [H, 3B*k, k] bool
  torch::Tensor snap2_edge_feat;  // [H, 3B*k*k, edge_dim] (edge_dim > 0)
  // A mailbox (RecordLayout::mailbox_slots k > 1): R query rows with their
  // mailboxes' slots: the 3B targets (whose first 2B rows are the positive
  // events' endpoints at their times), then, only when the positives are
  // replayed apart from the targets, both endpoints of each positive event
  // (source, then destination).
  torch::Tensor query_slot;    // [R] int64 slot in `unique`
  torch::Tensor mailbox_dt;    // [R, k] float: query time - mail time
  torch::Tensor mailbox_mask;  // [R, k] bool: the slot holds a mail
  // BatchNeeds::target_time_deltas: normalized time since each target's
  // last memory update.
  torch::Tensor target_dt;  // [3B] float
  // DepBloom intra-batch memory refinement (Eq. 3): R replicas of nodes read
  // in a later micro-batch than one of their events. Replica r refines the
  // memory of slot replica_self[r] with the message of that earlier event
  // (with slot replica_other[r] as the other endpoint); it is slot U + r of
  // the batch's memory, and target/neighbour slots may point to it.
  torch::Tensor replica_self;       // [R] int64
  torch::Tensor replica_other;      // [R] int64
  torch::Tensor replica_dt;         // [R] float: event time - memory time
  torch::Tensor replica_edge_feat;  // [R, edge_dim] (edge_dim > 0)
};

// node keeps the message of its latest event in the batch).
//
// One mail slot (TGN, JODIE): the positive nodes' updated memory and their
// new mail, from the batch's memory slots; `node_ids` are the positive
// nodes. A mailbox (APAN): the positive nodes' memory from the model's
// query rows (memory_row), and the mails delivered: each node in
// `node_ids` (the positives and the neighbours their mails reach) gets the
// mail [rows[self_row], rows[other_row], edge features] of the latest event
// that reaches it.
struct PositiveUpdate {
  torch::Tensor rows;             // [P] int64 rows of the unique positives
  torch::Tensor self_slot;        // [P] slot of the node in the batch's memory
  torch::Tensor other_slot;       // [P] slot of the other endpoint of its event
  torch::Tensor edge_feat;        // [P or M, edge_dim] (edge_dim > 0)
  std::vector<int32_t> node_ids;  // [P or M] every node the batch changes
  std::vector<double> event_time;    // [P or M] time of its latest event
  std::vector<int64_t> event_index;  // [P or M] that event's index in the log
  // Mailbox only.
  torch::Tensor memory_row;           // [P] query row of rows[i]'s memory
  std::vector<int64_t> memory_nodes;  // [P] node ids of `rows` (host)
  std::vector<double> memory_time;    // [P] its event's time
  torch::Tensor self_row, other_row;  // [M] query rows forming the mail
};

}  // namespace mnemo::batch

#endif  // MNEMO_TRAINER_BATCH_BATCH_H_
