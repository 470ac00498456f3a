#include "trainer/runtime/comm_stats.h"

#include <algorithm>
#include <type_traits>
#include <vector>

#include "util/status_macros.h"

namespace mnemo::runtime {
namespace {
// Calls f on every CommStats field, in a fixed order (for gathering them
// across workers as doubles).
template <typename F>
void ForEachCommField(CommStats& c, F f) {
  f(c.sync_count), f(c.rpcs), f(c.states_pulled), f(c.states_pushed);
  f(c.bytes_pulled), f(c.bytes_pushed), f(c.seconds), f(c.allreduce_seconds);
  f(c.allreduce_bytes), f(c.barrier_seconds), f(c.train_seconds);
  f(c.preparation_seconds), f(c.forward_seconds), f(c.backward_seconds);
  f(c.memory_seconds), f(c.target_events), f(c.replayed_events);
  f(c.train_loss), f(c.peak_rss_bytes), f(c.pruned_events);
  f(c.heavy_load_batches), f(c.boundaries), f(c.boundaries_refreshed);
  f(c.boundaries_skipped), f(c.refresh_nodes_total), f(c.refresh_nodes_max);
  f(c.plan_seconds), f(c.eval_states_pulled), f(c.eval_bytes_pulled);
  f(c.eval_pull_seconds), f(c.urgent_states), f(c.urgent_bytes);
  f(c.nonurgent_states), f(c.nonurgent_bytes), f(c.cross_ratio);
  f(c.imbalance), f(c.partition_seconds);
  f(c.cache_capacity_states), f(c.cache_peak_states), f(c.cache_reads);
  f(c.cache_hits), f(c.cache_misses), f(c.cache_evictions), f(c.cache_spills);
  f(c.cache_restores), f(c.cache_spill_bytes), f(c.cache_restore_bytes);
  f(c.cache_seconds), f(c.eval_states_pushed), f(c.eval_bytes_pushed);
  f(c.cache_prefetched), f(c.cache_prefetch_unused);
}

double CommShare(const CommStats& c) {
  return c.train_seconds > 0
             ? (c.seconds + c.allreduce_seconds + c.barrier_seconds) /
                   c.train_seconds
             : 0;
}
}  // namespace

absl::Status GatherCommStats(ControlChannel* control, int rank, int world,
                             const CommStats& mine, double train_loss,
                             TrainResult* result) {
  CommStats comm = mine;
  int fields = 0;
  ForEachCommField(comm, [&](auto&) { ++fields; });
  std::vector<double> all(static_cast<size_t>(world) * fields, 0.0);
  {
    double* row = all.data() + static_cast<size_t>(rank) * fields;
    int i = 0;
    ForEachCommField(comm, [&](auto& v) { row[i++] = static_cast<double>(v); });
  }
  RETURN_IF_ERROR(control->Sum(&all));
  result->per_worker.clear();
  CommStats total;
  for (int r = 0; r < world; ++r) {
    const double* row = all.data() + static_cast<size_t>(r) * fields;
    CommStats w;
    int i = 0;
    ForEachCommField(w, [&](auto& v) {
      v = static_cast<std::decay_t<decltype(v)>>(row[i++]);
    });
    w.share = CommShare(w);
    int j = 0;
    ForEachCommField(total, [&](auto& v) {
      v += static_cast<std::decay_t<decltype(v)>>(row[j++]);
    });
    result->per_worker.push_back(w);
  }
  // Not sums: the largest, or what every worker shares.
  const CommStats& first = result->per_worker[0];
  total.peak_rss_bytes = total.refresh_nodes_max = 0;
  total.plan_seconds = 0;
  total.cache_capacity_states = total.cache_peak_states = 0;
  for (const CommStats& w : result->per_worker) {
    total.cache_capacity_states =
        std::max(total.cache_capacity_states, w.cache_capacity_states);
    total.cache_peak_states =
        std::max(total.cache_peak_states, w.cache_peak_states);
    total.peak_rss_bytes = std::max(total.peak_rss_bytes, w.peak_rss_bytes);
    total.refresh_nodes_max =
        std::max(total.refresh_nodes_max, w.refresh_nodes_max);
    total.plan_seconds = std::max(total.plan_seconds, w.plan_seconds);
  }
  total.boundaries = first.boundaries;
  total.cross_ratio = first.cross_ratio;
  total.imbalance = first.imbalance;
  total.partition_seconds = first.partition_seconds;
  total.boundaries_refreshed = first.boundaries_refreshed;
  total.boundaries_skipped = first.boundaries_skipped;
  total.train_loss = train_loss;
  total.share = CommShare(total);
  result->comm = total;
  return absl::OkStatus();
}

}  // namespace mnemo::runtime
