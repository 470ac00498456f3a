// How a trainer's node memory travels through the memory store.
//
// Record layout (float32, record_layout.h):
//   [memory | mail | has_mail | last_update hi | lo]
// last_update (time of the memory's last update) is split into two floats
// (hi = float(t), lo = float(t - hi)) so it survives float32 exactly enough.
// The store carries the time of the node's latest event (its mail time) in
// its own float64 `time` field.
//
// Versions (the store's newest-wins order) follow the order in which events
// are applied, never event time alone (many datasets repeat timestamps):
//   version = ((epoch * (num_events + 1) + last_event + 1) << 1) | owner
// where last_event is the log index of the node's latest applied event. Two
// workers that advance one node in the same batch push the versions of the
// latest event each has seen, so the one holding the later event wins; the
// low bit lets the node's owner win a tie with a worker that computed the
// same event from a stale cache. Memory restarts from zero every epoch: a
// record from an earlier epoch reads as "never updated".
#ifndef MNEMO_TRAINER_MEMORY_RECORD_CODEC_H_
#define MNEMO_TRAINER_MEMORY_RECORD_CODEC_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "memstore/node_state_store.h"
#include "trainer/memory/node_memory.h"

namespace mnemo::memory {

// The version scheme of one epoch of one run.
struct StateVersions {
  int64_t num_events = 0;  // events in the log
  int epoch = 0;           // 1-based

  uint64_t Base() const {
    return static_cast<uint64_t>(epoch) * (num_events + 1);
  }
  // Version of a state whose latest event is `last_event` (>= 0). Two
  // workers that applied the same latest event tie on the event; the tie
  // goes to the worker that trained it (the event was its target), then to
  // the node's owner, and only between two workers that both replayed it
  // to the higher rank (the store's rule): their states are computed alike.
  uint64_t Of(int64_t last_event, bool trained, bool owner) const {
    return ((Base() + static_cast<uint64_t>(last_event) + 1) << 2) |
           (trained ? 2u : 0u) | (owner ? 1u : 0u);
  }
  // The latest event of a state of this epoch with `version`; -1 for a
  // state of an earlier epoch or a never-written one.
  int64_t LastEvent(uint64_t version) const {
    const uint64_t v = version >> 2;
    return v > Base() ? static_cast<int64_t>(v - Base()) - 1 : -1;
  }
};

// Packs the states of `nodes` (each with at least one applied event) into
// records, versions and event times for NodeStateStore::Push. `owned(u)`:
// whether this worker owns u; `trained(e)`: whether this worker trained
// event e this epoch (empty: none).
//
// With `rows`, the records' memory and mail are left unwritten: *rows is
// set to those of the nodes gathered side by side on the memory's device
// ([n, memory_dim + mail floats], row i nodes[i]'s; queued on the current
// stream on a GPU, so later kernels on it do not change it), and
// FillRecordRows writes them once they are on the host. The rest of each
// record (the host-side times and flags) is written now. A push can so
// copy its rows back from a GPU while the host goes on.
void PackStates(const NodeMemory& state, const std::vector<int64_t>& nodes,
                const StateVersions& versions,
                const std::function<bool(int64_t)>& owned,
                const std::function<bool(int64_t)>& trained,
                std::vector<float>* records,
                std::vector<uint64_t>* out_versions, std::vector<double>* times,
                torch::Tensor* rows = nullptr);

// Writes `rows` (on the host: what PackStates left in its `rows`, any
// number of them) into the memory and mail of the records that start at
// `records`, one record per row.
void FillRecordRows(const RecordLayout& layout, const torch::Tensor& rows,
                    float* records);

// Writes pulled records into `state`; records of earlier epochs or never
// written reset the node.
void UnpackStates(const memstore::PulledStates& pulled,
                  const std::vector<int64_t>& nodes,
                  const StateVersions& versions, NodeMemory* state);

}  // namespace mnemo::memory

#endif  // MNEMO_TRAINER_MEMORY_RECORD_CODEC_H_
