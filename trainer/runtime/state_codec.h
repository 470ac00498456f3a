// How a trainer's node state travels through the memory store.
//
// Record layout (float32, DESIGN.md "Node state"):
//   [memory (M) | mail (2M + edge_dim) | has_mail | last_update hi | lo]
// last_update (time of the memory's last update) is split into two floats
// (hi = float(t), lo = float(t - hi)) so it survives float32 exactly enough.
// The store's own last-writer-wins key is the time of the node's latest
// event (its mail time) plus `key_base`, a per-epoch offset that keeps keys
// increasing across epochs (memory restarts from zero every epoch, and a
// record from an earlier epoch reads as "never updated").
#ifndef MNEMO_TRAINER_RUNTIME_STATE_CODEC_H_
#define MNEMO_TRAINER_RUNTIME_STATE_CODEC_H_

#include <cstdint>
#include <vector>

#include "memstore/node_state_store.h"
#include "trainer/model/temporal_model.h"

namespace mnemo::runtime {

int64_t StateRecordDim(int64_t memory_dim, int64_t mail_dim);

void PackStates(const model::NodeState& state,
                const std::vector<int64_t>& nodes, double key_base,
                std::vector<float>* records, std::vector<double>* keys);

// Writes pulled records into `state`; records with a key below `key_base`
// (earlier epochs) or never written reset the node.
void UnpackStates(const memstore::PulledStates& pulled,
                  const std::vector<int64_t>& nodes, double key_base,
                  model::NodeState* state);

}  // namespace mnemo::runtime

#endif  // MNEMO_TRAINER_RUNTIME_STATE_CODEC_H_
