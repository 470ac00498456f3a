// A worker's copy of node states and the memory store: pulls into and pushes
// from the local node memory with the store's versions (record_codec.h), and
// counts what moved (CommStats).
#ifndef MNEMO_TRAINER_RUNTIME_STATE_SYNC_H_
#define MNEMO_TRAINER_RUNTIME_STATE_SYNC_H_

#include <algorithm>
#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "memstore/node_state_store.h"
#include "trainer/memory/node_memory.h"
#include "trainer/memory/record_codec.h"
#include "trainer/runtime/train.h"

namespace mnemo::runtime {

using memory::StateVersions;

// States packed for the store (records, versions, event times).
struct PackedStates {
  std::vector<int64_t> nodes;
  std::vector<float> records;
  std::vector<uint64_t> versions;
  std::vector<double> times;
};

class StateSync {
 public:
  // Not owned: `store`, `state`, `comm`. `owned(u)`: this worker owns u.
  StateSync(memstore::NodeStateStore* store, memory::NodeMemory* state,
            std::function<bool(int64_t)> owned, int rank, CommStats* comm)
      : store_(store),
        state_(state),
        owned_(std::move(owned)),
        rank_(rank),
        comm_(comm) {}

  // Replaces the local states of `nodes` with the store's (states of earlier
  // epochs read as reset). `keep_newer`: a local state whose latest event is
  // later than the store's stays (it was advanced here and not pushed).
  absl::Status Pull(const std::vector<int64_t>& nodes,
                    const StateVersions& versions, bool keep_newer = false);
  // Pushes the local states of `nodes` (each with an applied event).
  absl::Status Push(const std::vector<int64_t>& nodes,
                    const StateVersions& versions);
  // Push in two steps, so the transfer can leave the training thread: Pack
  // copies the states (training thread); PushPacked sends them, counting
  // into `comm` (null: this sync's counters). PushPacked may run on another
  // thread with its own `comm` (the store is thread-safe).
  PackedStates Pack(std::vector<int64_t> nodes,
                    const StateVersions& versions) const;
  absl::Status PushPacked(const PackedStates& packed,
                          CommStats* comm = nullptr);
  bool owned(int64_t u) const { return owned_(u); }
  // The events this worker trained this epoch (targets of its executed
  // batches), which win version ties (StateVersions::Of). The engine marks
  // each batch's targets before the policy pushes, and clears them when an
  // epoch begins.
  void MarkTrained(const std::vector<int64_t>& events,
                   const std::vector<uint8_t>& target);
  void ClearTrained() { std::fill(trained_.begin(), trained_.end(), 0); }
  bool trained(int64_t event) const {
    return event >= 0 && event < static_cast<int64_t>(trained_.size()) &&
           trained_[event] != 0;
  }

 private:
  memstore::NodeStateStore* store_;
  memory::NodeMemory* state_;
  std::function<bool(int64_t)> owned_;
  int rank_;
  CommStats* comm_;
  std::vector<uint8_t> trained_;  // by event index
};

}  // namespace mnemo::runtime

#endif  // MNEMO_TRAINER_RUNTIME_STATE_SYNC_H_
