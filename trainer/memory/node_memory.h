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

#include "absl/status/status.h"
#include "memstore/node_state_store.h"
#include "trainer/batch/batch.h"
#include "trainer/memory/record_layout.h"

namespace torch::serialize {
class InputArchive;
class OutputArchive;
}  // namespace torch::serialize

namespace mnemo::memory {

struct StateVersions;  // record_codec.h

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
  // --memory-cache-bytes; store_exchange.h decides which nodes).
  void ResetCache(const RecordLayout& layout, int64_t num_nodes,
                  int64_t capacity, torch::Device device = torch::kCPU);
  // A memory that holds every node (Reset) to `num_nodes` rows, the rows
  // added reset (a serving process's room for the nodes it meets).
  // `num_nodes` is at least num_rows().
  void Grow(int64_t num_nodes);
  // Gives each of `nodes` (distinct, not held) a free row, reset. Needs a
  // cache memory with as many free rows.
  void Admit(const std::vector<int64_t>& nodes);
  // Frees the rows of `nodes` (each held).
  void Release(const std::vector<int64_t>& nodes);
  // Rows a cache memory has free (0 otherwise).
  int64_t free_rows() const { return static_cast<int64_t>(free_.size()); }
  // Whether row `row` holds a reset state (nothing applied, no mail).
  bool IsReset(int64_t row) const {
    return last_event_[row] < 0 && !has_mail_[row] &&
           (mails_received_.empty() || mails_received_[row] == 0);
  }
  NodeMemory Clone() const;

  const RecordLayout& layout() const { return layout_; }
  torch::Device device() const { return device_; }
  // Rows held (every node, or the held subset).
  int64_t num_rows() const { return static_cast<int64_t>(has_mail_.size()); }
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
  void Apply(const batch::PositiveUpdate& update,
             const torch::Tensor& batch_memory, const torch::Tensor& rows = {});

  // Writes every column into `archive` (a checkpoint's "best" memory).
  // FAILED_PRECONDITION for a memory that holds a subset of the nodes:
  // checkpoints store one row per node of the graph.
  absl::Status Save(torch::serialize::OutputArchive* archive) const;
  // Replaces this memory by the one Save wrote into `archive`, on `device`,
  // with `layout`; it must hold `num_nodes` rows (or none: a cluster worker
  // with a bounded working set keeps no best memory). INVALID_ARGUMENT
  // naming what does not match (another --model, widths or data).
  absl::Status Load(torch::serialize::InputArchive& archive,
                    const RecordLayout& layout, int64_t num_nodes,
                    torch::Device device);

  // The columns, row by row (read-only: only this class, the record codec
  // that unpacks pulled states and the tests' peer write them).
  // Memory and mail: [rows, memory_dim] and [rows, mail floats] on
  // device(). A mailbox (layout().mailbox_slots k > 1): mail is [rows, k *
  // mail_dim]; slot j of node u holds a mail when j < min(mails_received[u],
  // k), the next goes to slot mails_received[u] % k.
  const torch::Tensor& memory() const { return memory_; }
  const torch::Tensor& mail() const { return mail_; }
  // Time of the memory's last update, and of the pending mail.
  const std::vector<double>& last_update() const { return last_update_; }
  const std::vector<double>& mail_time() const { return mail_time_; }
  const std::vector<uint8_t>& has_mail() const { return has_mail_; }
  // Index (in the event log) of the latest event applied to the node: the
  // event its mail comes from; -1 before any. Strictly increasing in the
  // order events are applied, so it versions the state (record_codec.h).
  const std::vector<int64_t>& last_event() const { return last_event_; }
  const std::vector<double>& slot_time() const {
    return slot_time_;
  }  // [rows * k]
  const std::vector<int64_t>& mails_received() const { return mails_received_; }

 private:
  friend void UnpackStates(const memstore::PulledStates& pulled,
                           const std::vector<int64_t>& nodes,
                           const StateVersions& versions, NodeMemory* state);
  friend class NodeMemoryTestPeer;
  void ApplyMailbox(const batch::PositiveUpdate& update,
                    const torch::Tensor& rows);
  void ResetRows(const RecordLayout& layout, int64_t rows,
                 torch::Device device);

  RecordLayout layout_;
  torch::Device device_ = torch::kCPU;
  // The columns (see their accessors).
  torch::Tensor memory_, mail_;
  std::vector<double> last_update_, mail_time_;
  std::vector<uint8_t> has_mail_;
  std::vector<int64_t> last_event_;
  std::vector<double> slot_time_;
  std::vector<int64_t> mails_received_;
  // A subset: node id -> row (-1: not held), and row -> node id (-1: a free
  // row of a cache memory).
  std::vector<int32_t> row_of_;
  std::vector<int64_t> held_;
  std::vector<int64_t> free_;  // free rows of a cache memory
};

}  // namespace mnemo::memory

#endif  // MNEMO_TRAINER_MEMORY_NODE_MEMORY_H_
