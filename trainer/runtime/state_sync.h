// A worker's copy of node states and the memory store: pulls into and pushes
// from the local node memory with the store's versions (record_codec.h), and
// counts what moved (CommStats).
#ifndef MNEMO_TRAINER_RUNTIME_STATE_SYNC_H_
#define MNEMO_TRAINER_RUNTIME_STATE_SYNC_H_

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

 private:
  memstore::NodeStateStore* store_;
  memory::NodeMemory* state_;
  std::function<bool(int64_t)> owned_;
  int rank_;
  CommStats* comm_;
};

}  // namespace mnemo::runtime

#endif  // MNEMO_TRAINER_RUNTIME_STATE_SYNC_H_
