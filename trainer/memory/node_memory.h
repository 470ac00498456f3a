// The owner of a trainer's node memory: the per-node state a memory-based
// model carries between batches (record_layout.h), its device, the map from
// global node ids to the rows it holds, and the post-batch update.
//
// A memory holds every node of the graph (Reset: row u is node u) or a
// given subset of them (ResetHeld: row r is held()[r]), as a worker that
// keeps only the nodes it trains needs. Everything that indexes memory goes
// through Row(): the batch tensors carry rows (BatchTensors::unique_rows,
// mail_node; PositiveUpdate::rows), the record codec packs and unpacks by
// row, the batch builder reads times and flags by row. Memory and mail live
// on device(); times and flags on the host, where the batch builder reads
// them. The training engine holds every node; checkpoints store such
// memories.
#ifndef MNEMO_TRAINER_MEMORY_NODE_MEMORY_H_
#define MNEMO_TRAINER_MEMORY_NODE_MEMORY_H_

#include <torch/types.h>

#include <cstdint>
#include <vector>

#include "trainer/memory/record_layout.h"

namespace mnemo::memory {

// What a batch writes back into node memory (TGN's "last" aggregator: each
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

class NodeMemory {
 public:
  // Every node's state reset (zero memory, no mail, times 0); row u holds
  // node u.
  void Reset(const RecordLayout& layout, int64_t num_nodes,
             torch::Device device = torch::kCPU);
  // Holds only `held` (distinct node ids in [0, num_nodes)), reset: row r
  // holds node held[r]. Row() of any other node is -1.
  void ResetHeld(const RecordLayout& layout, int64_t num_nodes,
                 std::vector<int64_t> held, torch::Device device = torch::kCPU);
  // Holds at most `capacity` nodes and none yet: Admit gives a node a free
  // row, Release takes it back (a trainer's bounded working set,
  // --memory-cache-bytes; runtime/state_sync.h decides which nodes).
  void ResetCache(const RecordLayout& layout, int64_t num_nodes,
                  int64_t capacity, torch::Device device = torch::kCPU);
  // Gives each of `nodes` (distinct, not held) a free row, reset. Needs a
  // cache memory with as many free rows.
  void Admit(const std::vector<int64_t>& nodes);
  // Frees the rows of `nodes` (each held).
  void Release(const std::vector<int64_t>& nodes);
  // Rows a cache memory has free (0 otherwise).
  int64_t free_rows() const { return static_cast<int64_t>(free_.size()); }
  // Whether row `row` holds a reset state (nothing applied, no mail).
  bool IsReset(int64_t row) const {
    return last_event[row] < 0 && !has_mail[row] &&
           (mails_received.empty() || mails_received[row] == 0);
  }
  NodeMemory Clone() const;
  // For a state whose fields were filled directly (checkpoint loading).
  void set_layout(const RecordLayout& layout, torch::Device device) {
    layout_ = layout;
    device_ = device;
  }

  const RecordLayout& layout() const { return layout_; }
  torch::Device device() const { return device_; }
  // Rows held (every node, or the held subset).
  int64_t num_rows() const { return static_cast<int64_t>(has_mail.size()); }
  // Nodes of the graph.
  int64_t num_nodes() const {
    return row_of_.empty() ? num_rows() : static_cast<int64_t>(row_of_.size());
  }
  // Whether rows are a subset of the graph's nodes (ResetHeld, ResetCache).
  bool holds_subset() const { return !row_of_.empty(); }
  // The held nodes, row by row (empty when every node is held; -1 for a free
  // row of a cache memory).
  const std::vector<int64_t>& held() const { return held_; }
  // The row that holds global node `u`; -1 when u is not held.
  int64_t Row(int64_t u) const { return row_of_.empty() ? u : row_of_[u]; }
  bool Holds(int64_t u) const { return row_of_.empty() || row_of_[u] >= 0; }

  // Writes a batch's results (docs/design.md memory semantics: the batch's
  // own events update memory and mail for later batches only).
  // `batch_memory` is the [U (+ replicas), memory_dim] updated memory of
  // the batch's slots; a mailbox reads `rows` instead, the model's updated
  // memory of each query row.
  void Apply(const PositiveUpdate& update, const torch::Tensor& batch_memory,
             const torch::Tensor& rows = {});

  torch::Tensor memory;             // [rows, memory_dim] float
  torch::Tensor mail;               // [rows, mail_dim] float
  std::vector<double> last_update;  // [rows] time of the memory's update
  std::vector<double> mail_time;    // [rows]
  std::vector<uint8_t> has_mail;    // [rows]
  // Index (in the event log) of the latest event applied to the node: the
  // event its mail comes from; -1 before any. Strictly increasing in the
  // order events are applied, so it versions the state (record_codec.h).
  std::vector<int64_t> last_event;  // [rows]
  // Mailbox (layout().mailbox_slots k > 1): `mail` is [rows, k * mail_dim];
  // slot j of node u holds a mail when j < min(mails_received[u], k), the
  // next goes to slot mails_received[u] % k.
  std::vector<double> slot_time;        // [rows * k]
  std::vector<int64_t> mails_received;  // [rows]

 private:
  void ApplyMailbox(const PositiveUpdate& update, const torch::Tensor& rows);
  void ResetRows(const RecordLayout& layout, int64_t rows,
                 torch::Device device);

  RecordLayout layout_;
  torch::Device device_ = torch::kCPU;
  // A subset: node id -> row (-1: not held), and row -> node id (-1: a free
  // row of a cache memory).
  std::vector<int32_t> row_of_;
  std::vector<int64_t> held_;
  std::vector<int64_t> free_;  // free rows of a cache memory
};

}  // namespace mnemo::memory

#endif  // MNEMO_TRAINER_MEMORY_NODE_MEMORY_H_
