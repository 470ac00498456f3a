// The options of a cluster worker's bounded working set of node states
// (--memory-cache-bytes and its companions). Torch-free: the CLI fills it.
#ifndef MNEMO_TRAINER_MEMORY_WORKING_SET_OPTIONS_H_
#define MNEMO_TRAINER_MEMORY_WORKING_SET_OPTIONS_H_

#include <cstdint>
#include <string>

#include "trainer/plan/working_set.h"

namespace mnemo::memory {

// Bytes of node state (memory, mails, times) a worker holds at once, the
// rest in the memory stores and in its own spill store (0: every node's
// state, unbounded); which state a full working set drops (Belady over the
// plan's reads, or LRU); the spill store's directory (empty: a temporary
// one, removed at exit); and how many coming evaluation batches' misses
// are pulled ahead while the batches before them run (0: each batch's when
// it needs them).
struct WorkingSetOptions {
  int64_t budget_bytes = 0;
  plan::Eviction eviction = plan::Eviction::kBelady;
  std::string spill_dir;
  int prefetch = 4;
};

}  // namespace mnemo::memory

#endif  // MNEMO_TRAINER_MEMORY_WORKING_SET_OPTIONS_H_
