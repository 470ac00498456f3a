// Turns a range of events into the index tensors of one model batch.
#ifndef MNEMO_TRAINER_BATCH_BUILDER_H_
#define MNEMO_TRAINER_BATCH_BUILDER_H_

#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "trainer/batch/dense_index.h"
#include "trainer/data/event_log.h"
#include "trainer/data/neighbor_sampler.h"
#include "trainer/memory/node_memory.h"
#include "trainer/model/model.h"

namespace mnemo::batch {

// Reusable scratch space; not thread-safe.
//
// Two phases, so a distributed worker can fetch the states of exactly the
// nodes a batch reads before the state-dependent part is built:
//   Prepare(): targets, neighbours, the batch's unique nodes;
//   Finish():  pending-mail tensors, target time deltas, positive updates.
// Build() does both.
class BatchBuilder {
 public:
  BatchBuilder(const data::EventLog* log, int64_t num_nodes);
  // What the model's batches carry (batch::BatchNeeds): with `neighbors`
  // (the default) Prepare() samples the targets' neighbours when given a
  // sampler, with neighbor_hops 2 also theirs; with `mail_to_neighbors` the
  // positive events' endpoints' neighbours, whom their mails reach.
  void set_needs(const batch::BatchNeeds& needs) { needs_ = needs; }
  // Where Finish() puts the batch's tensors (default the CPU). They are
  // built on the host; for a GPU packed into one pinned buffer and copied
  // over asynchronously on the device's copy stream, with the compute
  // stream waiting for the copy (staging.h). Nothing waits for the
  // copy on the host: in one process the engine's loop finishes the next
  // batch while this one computes, so the copy runs beside its kernels.
  void set_device(torch::Device device) { device_ = device; }
  torch::Device device() const { return device_; }

  // Target events `events[0..n)` (ascending, so time-ordered) with
  // `negatives[0..n)`: their predictions form the loss. Positive events
  // `positives[0..n_pos)` (null: the target events) update node state after
  // the batch; the full-cache policy replays more events than it predicts.
  // `sampler` is null for models that read no neighbours. `chunks` > 1
  // (DepBloom's intra-batch memory refinement, IMR(k); only without separate
  // positives): the batch is k consecutive micro-batches; a node read in
  // micro-batch i that had an event in an earlier micro-batch is read through a
  // refined replica of its memory (BatchTensors::replica_*), and its state
  // after the batch is its latest replica's.
  void Prepare(const int64_t* events, const int32_t* negatives, int64_t n,
               const int64_t* positives, int64_t n_pos,
               data::NeighborSampler* sampler, int chunks = 1);
  // Distinct nodes the prepared batch reads (and the positives it writes).
  const std::vector<int64_t>& unique_nodes() const { return slots_.ids(); }
  // Distinct nodes whose state the prepared batch reads or writes: the
  // unique nodes and, with mails to neighbours (APAN), the neighbours its
  // mails reach. A memory must hold them all before Finish().
  std::vector<int64_t> StateNodes() const;
  // Reads the node memory's times and mail flags. `time_gaps`: the
  // normalization of BatchTensors::target_dt (null: the batch carries none).
  void Finish(const memory::NodeMemory& state,
              const batch::TimeGapStats* time_gaps, batch::BatchTensors* batch,
              PositiveUpdate* update);

  void Build(const int64_t* events, const int32_t* negatives, int64_t n,
             const memory::NodeMemory& state, data::NeighborSampler* sampler,
             const batch::TimeGapStats* time_gaps, batch::BatchTensors* batch,
             PositiveUpdate* update) {
    Prepare(events, negatives, n, nullptr, 0, sampler);
    Finish(state, time_gaps, batch, update);
  }

 private:
  // Prepare()'s parts, in its order.
  // The targets (sources, destinations, negatives), their times and slots.
  void SetTargets(const int64_t* events, const int32_t* negatives, int64_t n);
  // The events that update node state, and their endpoints' slots; `replay`:
  // given apart from the targets.
  void SetPositives(const int64_t* positives, int64_t n_pos, bool replay);
  // BatchNeeds::mail_to_neighbors: the neighbours of both endpoints of each
  // positive event, at its time, into block_pos_.
  void SamplePositiveNeighbors(data::NeighborSampler* sampler);
  // The targets' neighbours (and with neighbor_hops 2 theirs) into
  // pending_; their slots into `nbr_slot` (3n x k, 0 for padding).
  void SampleNeighbors(data::NeighborSampler* sampler,
                       std::vector<int64_t>* nbr_slot);
  // The second hop: the neighbours of block_'s, into pending_.nbr2_*.
  void SampleSecondHop(data::NeighborSampler* sampler);
  // BatchNeeds::snapshots: the targets' neighbours per snapshot window
  // into pending_.snap_* (not in unique_: no node state of theirs is read).
  void SampleSnapshots(data::NeighborSampler* sampler);
  DenseIndex snap_rows_;  // node -> row of snap_nodes
  // IMR: replicas of nodes read in a later micro-batch than one of their
  // events; remaps target and neighbour slots to them.
  void BuildReplicas(int chunks, std::vector<int64_t>* nbr_slot);
  // The slot a node is read through in micro-batch `chunk`.
  int64_t ReadSlot(int32_t node, int chunk) const;

  const data::EventLog* log_;
  DenseIndex slots_;  // node -> slot in the current batch (its unique nodes)
  std::vector<int32_t> targets_;
  std::vector<double> target_time_;
  std::vector<int64_t> target_slot_;
  std::vector<int64_t> positives_;
  int64_t n_ = 0;
  bool replay_ = false;  // positives given apart from the targets
  data::NeighborBlock block_, block2_, block_pos_;
  batch::BatchNeeds needs_{.neighbors = true};
  // A mailbox's receivers while building: node -> index in the update.
  DenseIndex receivers_;

  // Finish()'s parts, in its order (`state` holds every node they read).
  // The pending mail of every node the batch reads (mail_*).
  void FinishMail(const memory::NodeMemory& state,
                  batch::BatchTensors* batch) const;
  // The targets' normalized time since their memory (target_dt).
  void FinishTargetGaps(const memory::NodeMemory& state,
                        const batch::TimeGapStats& g,
                        batch::BatchTensors* batch) const;
  // IMR: what each replica is refined from (replica_*).
  void FinishReplicas(const memory::NodeMemory& state,
                      batch::BatchTensors* batch) const;
  // Each positive node's latest event in the batch, into `update`.
  void FinishPositives(const memory::NodeMemory& state,
                       PositiveUpdate* update) const;
  // Finish() for a mailbox layout (APAN): queries, memory, mails.
  void FinishMailbox(const memory::NodeMemory& state,
                     batch::BatchTensors* batch, PositiveUpdate* update);
  // Mailbox query row of positive event i's source (r 0) or destination
  // (r 1): target rows i and n + i, or with replayed positives rows of
  // their own after the targets.
  int64_t MailboxQueryRow(int64_t i, int r) const;
  // The query rows' slots and mailbox time deltas and mask (query_slot,
  // mailbox_*), and target_slot.
  void FinishMailboxQueries(const memory::NodeMemory& state,
                            batch::BatchTensors* batch) const;
  // Memory: each positive node takes its latest event's query row.
  void FinishMailboxMemory(const memory::NodeMemory& state,
                           PositiveUpdate* update) const;
  // Mails: every endpoint and the neighbours of each (sampled at the
  // event), the latest event that reaches a node wins, its own event
  // before a neighbour's of the same event.
  void FinishMailboxMails(PositiveUpdate* update);
  // Moves every tensor of the finished batch to device_.
  void Stage(batch::BatchTensors* batch, PositiveUpdate* update) const;
  torch::Device device_ = torch::kCPU;
  batch::BatchTensors pending_;  // neighbour tensors built by Prepare
  // IMR state of the prepared batch.
  int chunks_ = 1;
  int64_t chunk_size_ = 0;
  absl::flat_hash_map<int64_t, int32_t> replica_of_;  // node*chunks+chunk
  std::vector<int64_t> replica_self_, replica_other_, replica_event_;
  std::vector<int64_t> last_event_pos_;  // per node, while building
};

}  // namespace mnemo::batch

#endif  // MNEMO_TRAINER_BATCH_BUILDER_H_
