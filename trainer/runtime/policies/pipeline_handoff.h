// Pipeline execution of one chain of batches over a group of workers
// (PipeTGL; DepBloom Sec. 2.2, 4.2, 4.4): the chain's batches are dealt to
// the group's workers in turn (plan::DealToGroup), and each worker hands the
// memory its batch wrote directly to the worker of the next batch, right
// after its memory update, before its embedding and backward pass, so that
// the next worker's memory update overlaps them. Memory order is one
// process's: every batch reads the states every batch before it left.
//
// Which states travel. A batch's slot s in its window (round j, position k:
// s = j * depth + k) reads states written by the batches before it; the
// worker running it wrote slot s - depth itself and missed slots
// s - depth + 1 .. s - 1. So the handoff from slot s to slot s + 1 carries
// every state whose latest write lies in slots s - depth + 2 .. s (for a
// group of 2: the states batch s wrote), taken from the sender's memory,
// which holds them (it received the older ones the same way).
//
// The critical path (DepBloom Sec. 4.4, Fig. 11): with `critical_path` the
// handoff goes in two messages. The first, on the critical path, carries
// the states the next batch is known to read (its events' endpoints and
// negatives, and its targets' most recent temporal neighbours where the
// sampler takes those: the urgent states) and the ids of the others; the
// second, sent right after, carries the other states. The receiver builds and
// updates its batch after the first, and takes the second after its update
// (before it hands on its own), unless its batch reads one of those states (a
// temporal neighbour sampled at random, which the plan cannot know:
// counted as late_rest), when it waits for it first. Without (PipeTGL's order),
// one message carries every state. With `write_back` each worker also writes
// its batch's states back to the memory store on a thread of its own, off the
// critical path, so that the store holds every state at the epoch's end
// (evaluation, queries, checkpoints).
//
// Parameters (PipeTGL's rule, read from its code: scripts/pipeTrain3.py):
// no gradient all-reduce. After its backward pass, the worker of slot s
// waits for the parameters slot s - 1 left (its step applied), replaces its
// own with them, applies its own gradients with its own Adam state, and
// passes the result to slot s + 1. Each step's gradients are thus computed
// on parameters up to depth - 1 steps old and applied in chain order; each
// worker keeps its own Adam moments (as PipeTGL does). At the epoch's end
// the last slot's parameters go to every worker.
//
// Transport: a gloo group of its own (ClusterWorker::pipeline), point to
// point between neighbours; host rows (on a GPU they are copied through the
// host). Not thread-safe: the training thread calls everything.
#ifndef MNEMO_TRAINER_RUNTIME_POLICIES_PIPELINE_HANDOFF_H_
#define MNEMO_TRAINER_RUNTIME_POLICIES_PIPELINE_HANDOFF_H_

#include <torch/types.h>

#include <cstdint>
#include <deque>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "trainer/plan/batch_plan.h"
#include "trainer/runtime/policies/policy.h"

namespace mnemo::runtime {

class PipelineHandoff {
 public:
  // This worker is position `position` of a group whose workers, in chain
  // order, are `ranks` (their ranks in the pipeline group). The plans are
  // set before the first batch (SetPlans).
  // `write_back`: each batch's states go to the store as they are handed
  // on (pipetgl); without, the policy pushes them itself (depbloom, at its
  // window boundaries: another group must not read a state of the window
  // it runs).
  PipelineHandoff(const PolicyEnv& env, std::vector<int> ranks, int position,
                  bool critical_path, bool pass_parameters, bool write_back);

  // `chain`: the group's chain plan (as one worker would run it);
  // `dealt`: this worker's part (plan::DealToGroup(chain, depth, position,
  // one_window)). Not owned; they outlive the handoff.
  void SetPlans(const plan::WorkerPlan* chain, const plan::WorkerPlan* dealt,
                bool one_window);
  int depth() const { return static_cast<int>(ranks_.size()); }

  // A new epoch: memory restarted, nothing to hand on.
  void BeginEpoch();
  // Before batch `b` is built (`reads`: every state it reads or writes):
  // the states the batch before handed on, written into local memory.
  absl::Status Receive(const BatchContext& b,
                       const std::vector<int64_t>& reads);
  // After batch `b`'s memory update (`advanced`: the states it wrote): the
  // handoff to the next batch's worker, and the write-back of `advanced`
  // to the store started.
  absl::Status Send(const BatchContext& b,
                    const std::vector<int32_t>& advanced);
  // The parameters the batch before left (not for the epoch's first batch).
  absl::Status ReceiveParameters(const BatchContext& b);
  // The parameters after this batch's step, to the next batch's worker.
  absl::Status PassParameters(const BatchContext& b);
  // Takes the second message of the last handoff if it is still coming
  // (before a window boundary's pulls: its states are older).
  absl::Status Drain(const memory::StateVersions& versions);
  // What is still coming taken, the sends and write-backs done; with
  // parameters passing, every worker gets the last batch's parameters.
  // Collective over the pipeline group.
  absl::Status EndEpoch(const memory::StateVersions& versions);

 private:
  // Where batch `b` lies: its window's slots, its slot in the window, and
  // the window's first chain batch.
  struct Slot {
    int64_t window = 0;
    int64_t index = 0;  // slot in the window
    int64_t count = 0;  // slots in the window
    int64_t first = 0;  // epoch-wide index of the window's slot 0
    int64_t global() const { return first + index; }
  };
  Slot SlotOf(const BatchContext& b) const;
  int upstream() const { return ranks_[(position_ + depth() - 1) % depth()]; }
  int downstream() const { return ranks_[(position_ + 1) % depth()]; }
  // The states the chain's batch `c` is known to read ahead (empty past
  // the chain's end): its events' endpoints, its targets' negatives and,
  // where the sampler takes the most recent ones, the targets' temporal
  // neighbours (plan::PlanReads).
  std::vector<int64_t> KnownReads(int64_t c) const;
  // A message: its header (states, floats per record, ids, the second
  // message's payload bytes) and payload (nodes, versions, times, writers,
  // records, ids).
  struct Message {
    torch::Tensor header, payload;
  };
  // The states of `nodes` (with their writers) and `ids` appended.
  absl::StatusOr<Message> PackMessage(const std::vector<int64_t>& nodes,
                                      const std::vector<int64_t>& ids,
                                      const memory::StateVersions& versions);
  // Starts sending `m` downstream as message `kind`.
  absl::Status SendMessage(const Message& m, int kind);
  // Receives the first message from upstream and writes its states into
  // local memory; gives the ids of the states that follow in the second,
  // whose receive it starts (rest_pending_).
  absl::Status ReceiveFirst(const memory::StateVersions& versions,
                            std::vector<int64_t>* ids);
  // Writes a received message's states into local memory (those newer
  // than this worker's), and gives its ids (when asked).
  absl::Status ApplyMessage(const torch::Tensor& header,
                            const torch::Tensor& payload,
                            const memory::StateVersions& versions,
                            std::vector<int64_t>* ids);
  absl::Status WaitWriteBack();

  PolicyEnv env_;
  std::vector<int> ranks_;
  int position_ = 0;
  bool critical_path_ = true;
  bool pass_parameters_ = false;
  bool write_back_enabled_ = true;
  const plan::WorkerPlan* chain_ = nullptr;
  const plan::WorkerPlan* dealt_ = nullptr;
  bool one_window_ = true;
  plan::ReadPredictor known_reads_;

  // Per node: the epoch-wide slot that wrote its local state last (-1:
  // none known), and the nodes written within the last depth slots.
  std::vector<int64_t> writer_;
  std::vector<int64_t> recent_;
  std::vector<uint8_t> in_recent_;  // per node: in recent_
  void Remember(int64_t u);
  // The second message of the last handoff, its receive started and not
  // yet waited for, and its buffers.
  bool rest_pending_ = false;
  torch::Tensor rest_header_, rest_payload_;
  double received_at_ = -1;  // when the batch's states arrived
  // The sends in flight, oldest first: how many works each handoff or
  // parameter pass started, what it carried, and how many receives of that
  // class this worker must still complete before they prove it delivered
  // (the next worker took it before it sent what came back), so that
  // waiting for it is immediate.
  static constexpr int kStatesClass = 0, kParametersClass = 1;
  struct InFlight {
    int works = 0;
    int cls = kStatesClass;
    int receives_left = 1;
  };
  std::deque<InFlight> in_flight_;
  // A receive of class `cls` completed: waits for the sends it proved
  // delivered, at the front.
  absl::Status Delivered(int cls);
  memory::PushWork write_back_;
  std::vector<uint8_t> mark_;  // scratch, per node
};

}  // namespace mnemo::runtime

#endif  // MNEMO_TRAINER_RUNTIME_POLICIES_PIPELINE_HANDOFF_H_
