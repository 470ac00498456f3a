// A worker's node memory and everything that writes it: the local columns
// (NodeMemory) and, in a cluster, the exchange with the memory store and a
// bounded working set with its own spill store. A training step and an
// evaluation batch touch it three times, in this order:
//
//   Ready(nodes)     the states the batch reads or writes are held (a
//                    bounded working set admits them, restoring or pulling
//                    what it dropped); after the policy's pulls
//   Advance(update)  the batch's memory update is applied and marked (the
//                    events trained, the states changed)
//   EndBatch()       the working set's clock moves to the next batch
//
// The policy pulls and pushes through exchange() in between. Not
// thread-safe: the training thread owns it (a push it starts copies its
// states first, StoreExchange::Pack).
#ifndef MNEMO_TRAINER_MEMORY_WORKER_MEMORY_H_
#define MNEMO_TRAINER_MEMORY_WORKER_MEMORY_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "memstore/node_state_store.h"
#include "trainer/batch/batch.h"
#include "trainer/memory/node_memory.h"
#include "trainer/memory/record_codec.h"
#include "trainer/memory/store_exchange.h"
#include "trainer/memory/transfer_stats.h"
#include "trainer/memory/working_set_options.h"
#include "trainer/plan/working_set.h"

namespace mnemo::memory {

class WorkerMemory {
 public:
  WorkerMemory() = default;
  ~WorkerMemory();
  WorkerMemory(const WorkerMemory&) = delete;
  WorkerMemory& operator=(const WorkerMemory&) = delete;

  // The memory of `num_nodes` nodes with `layout` on `device` (its rows
  // come with BeginEpoch or ResetColumns). Call once, before the rest.
  void Init(const RecordLayout& layout, int64_t num_nodes,
            torch::Device device);
  // A cluster worker: the exchange of this memory with `store` (not
  // owned), as worker `rank`, owning the nodes `owned` accepts; what moves
  // is counted into `traffic` and what a working set does into
  // `working_set` (both not owned).
  void Connect(memstore::NodeStateStore* store,
               std::function<bool(int64_t)> owned, int rank,
               StoreTraffic* traffic, WorkingSetStats* working_set);
  // A cluster worker (after Connect) that holds at most `options.budget_bytes`
  // of node state: a spill store of its own (under options.spill_dir, or a
  // temporary directory removed with this memory) and the working set's
  // rule. INVALID_ARGUMENT when the budget holds no state or the spill
  // directory cannot be made. `log` gets one line saying what it set up.
  absl::Status Bound(const WorkingSetOptions& options, int rank,
                     const std::function<void(const std::string&)>& log);

  bool bounded() const { return cache_ != nullptr; }
  // States a bounded memory holds at most (0 when unbounded).
  int64_t capacity() const { return capacity_; }
  // The local columns, read-only (batches are built and models read from
  // them).
  const NodeMemory& view() const { return local_; }
  // The exchange with the memory store (null in one process).
  StoreExchange* exchange() const { return exchange_.get(); }

  // A new training epoch: every state reset and nothing held, the trained
  // events forgotten, the clock at batch 0. A bounded memory takes the
  // epoch's predicted reads (Belady) and whether the policy pulls every
  // state a batch reads (then nothing dropped needs a spill).
  void BeginEpoch(plan::ReadPredictor predicted, bool pulls_every_read);
  // An evaluation pass of a bounded memory over the states the store holds
  // (StoreExchange::BeginEvaluation), pulling the misses of up to
  // `prefetch_batches` coming batches ahead.
  void BeginEvaluation(plan::ReadPredictor predicted, int prefetch_batches);

  // Makes `nodes` (every state the batch reads or writes, distinct) held;
  // a no-op unless bounded. Errors: the working set cannot hold them (its
  // budget is too small), or the store or spill store failed.
  absl::Status Ready(const std::vector<int64_t>& nodes,
                     const StateVersions& versions);
  // Writes the batch's update (NodeMemory::Apply; nothing when neither
  // `batch_memory` nor `rows` is defined: a batch without events of its
  // own) and marks it: the
  // batch's `target` events as trained by this worker (they win version
  // ties, StateVersions::Of), the states it changed (a bounded memory
  // spills them when it drops them).
  void Advance(const batch::PositiveUpdate& update,
               const torch::Tensor& batch_memory, const torch::Tensor& rows,
               const std::vector<int64_t>& events,
               const std::vector<uint8_t>& target);
  // The batch is over: the working set's clock moves to the next one (the
  // policy's pulls and pushes until then count as the batch's).
  void EndBatch();

  // A copy of the local columns, and the columns replaced by `columns`
  // (evaluation's snapshots of a memory that holds every node).
  NodeMemory Snapshot() const { return local_.Clone(); }
  void Restore(NodeMemory columns) { local_ = std::move(columns); }
  // The columns every state reset (a bounded memory: nothing held).
  void ResetColumns();

 private:
  // Removes the temporary spill directory it made.
  struct SpillDir {
    std::string path;
    bool remove = false;
    ~SpillDir();
  };

  RecordLayout layout_;
  int64_t num_nodes_ = 0;
  torch::Device device_ = torch::kCPU;
  NodeMemory local_;
  // A bounded working set: its rule and capacity, its spill store (closed
  // before its directory goes).
  SpillDir spill_dir_;
  std::unique_ptr<memstore::NodeStateStore> spill_store_;
  std::unique_ptr<plan::WorkingSetCache> cache_;
  int64_t capacity_ = 0;
  WorkingSetStats* working_set_stats_ = nullptr;
  // Last: destroyed first (a prefetch in flight reads the stores).
  std::unique_ptr<StoreExchange> exchange_;
};

}  // namespace mnemo::memory

#endif  // MNEMO_TRAINER_MEMORY_WORKER_MEMORY_H_
