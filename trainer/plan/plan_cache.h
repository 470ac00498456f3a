// The on-disk cache of planned batches (LoadOrMakeWorkerPlan, batch_plan.h):
// the key that names a plan's inputs, and the file format. Internal to
// trainer/plan/.
#ifndef MNEMO_TRAINER_PLAN_PLAN_CACHE_H_
#define MNEMO_TRAINER_PLAN_PLAN_CACHE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "trainer/data/event_log.h"
#include "trainer/plan/batch_plan.h"

namespace mnemo::plan {

// A stable 64-bit hash of everything a plan depends on: the format
// version, the options (a given partition included), the training events,
// the node owners `own`, the METIS version and, for neighbour reads, the
// temporal graph.
uint64_t PlanCacheKey(const data::EventLog& log,
                      absl::Span<const int64_t> train,
                      const std::vector<int32_t>& own, int rank,
                      const PlanOptions& o);

// The file's bytes for `plan` and its window statistics under `key`.
std::string SerializePlan(const WorkerPlan& plan,
                          const std::vector<WindowStats>& window_stats,
                          uint64_t key);

// The plan in `bytes` (and its window statistics into *window_stats), or
// nullopt when it is not a well-formed plan for `key` (truncated, corrupt,
// another key or version). `train_size`: events of the training stream.
std::optional<WorkerPlan> DeserializePlan(
    const std::string& bytes, uint64_t key, int rank, const PlanOptions& o,
    int64_t train_size, std::vector<WindowStats>* window_stats);

// The whole file, or nullopt when it cannot be read.
std::optional<std::string> ReadPlanFile(const std::string& path);
// Writes `bytes` to `path` atomically: a unique temporary file in the same
// directory, then a rename. False (and nothing left behind) on failure.
bool WritePlanFile(const std::string& path, const std::string& bytes);

}  // namespace mnemo::plan

#endif  // MNEMO_TRAINER_PLAN_PLAN_CACHE_H_
