// What a worker's node memory counts of its traffic with the memory store
// and of its bounded working set. Torch-free: the runtime's statistics
// (runtime/train.h CommStats) hold these groups, and summary.json, the
// per-batch callbacks and the gathering of a cluster's figures walk them
// through their field lists (Fields), so a new counter is one line here.
#ifndef MNEMO_TRAINER_MEMORY_TRANSFER_STATS_H_
#define MNEMO_TRAINER_MEMORY_TRANSFER_STATS_H_

#include <cstdint>

#include "util/fields.h"

namespace mnemo::memory {

// Pulls and pushes between a worker's memory and the memory store.
struct StoreTraffic {
  int64_t rpcs = 0;  // store calls (pull + push)
  int64_t states_pulled = 0, states_pushed = 0;
  int64_t bytes_pulled = 0, bytes_pushed = 0;  // state payload bytes
  // Time the training thread spent in store pulls and pushes (packing
  // included) and decision waits; for a push made on a thread of its own,
  // only the training thread's wait for it (DepBloom's background pushes
  // count their own time).
  double seconds = 0;

  // Calls f(name, field, merge) for every field, in a fixed order.
  template <typename Self, typename F>
  static void Fields(Self& s, F&& f) {
    f("rpcs", s.rpcs, Merge::kSum);
    f("states_pulled", s.states_pulled, Merge::kSum);
    f("states_pushed", s.states_pushed, Merge::kSum);
    f("bytes_pulled", s.bytes_pulled, Merge::kSum);
    f("bytes_pushed", s.bytes_pushed, Merge::kSum);
    f("seconds", s.seconds, Merge::kSum);
  }
  // Adds what `pushes` counted of pushes (calls, states, bytes; not their
  // time, which the caller places): the counters of pushes made on a
  // thread of their own.
  void AddPushCounts(const StoreTraffic& pushes) {
    rpcs += pushes.rpcs;
    states_pushed += pushes.states_pushed;
    bytes_pushed += pushes.bytes_pushed;
  }
};

// A bounded working set (--memory-cache-bytes; all 0 when unbounded): the
// states it holds at most and did hold at most, states requested from it
// (a batch's reads and the policy's pulls and pushes) and found held,
// states it had to bring in (misses) and dropped (evictions), dropped
// states spilled to the worker's own store because they had changed, and
// spilled states restored, with their bytes and the time spent on both. In
// evaluation, misses pulled ahead while the batch before ran
// (--memory-prefetch; in the pulled states too), and those of them the
// batch did not read after all.
struct WorkingSetStats {
  int64_t capacity_states = 0, peak_states = 0;
  int64_t reads = 0, hits = 0, misses = 0;
  int64_t evictions = 0, spills = 0, restores = 0;
  int64_t spill_bytes = 0, restore_bytes = 0;
  int64_t prefetched = 0, prefetch_unused = 0;
  double seconds = 0;

  template <typename Self, typename F>
  static void Fields(Self& s, F&& f) {
    f("capacity_states", s.capacity_states, Merge::kMax);
    f("peak_states", s.peak_states, Merge::kMax);
    f("reads", s.reads, Merge::kSum);
    f("hits", s.hits, Merge::kSum);
    f("misses", s.misses, Merge::kSum);
    f("evictions", s.evictions, Merge::kSum);
    f("spills", s.spills, Merge::kSum);
    f("restores", s.restores, Merge::kSum);
    f("spill_bytes", s.spill_bytes, Merge::kSum);
    f("restore_bytes", s.restore_bytes, Merge::kSum);
    f("prefetched", s.prefetched, Merge::kSum);
    f("prefetch_unused", s.prefetch_unused, Merge::kSum);
    f("seconds", s.seconds, Merge::kSum);
  }
};

}  // namespace mnemo::memory

#endif  // MNEMO_TRAINER_MEMORY_TRANSFER_STATS_H_
