// TGB's one-vs-many evaluation protocol (--protocol tgb): MRR and Hits@10.
#ifndef MNEMO_TRAINER_RUNTIME_EVAL_RANKING_H_
#define MNEMO_TRAINER_RUNTIME_EVAL_RANKING_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "trainer/data/tgb_negatives.h"
#include "trainer/memory/worker_memory.h"
#include "trainer/runtime/eval/evaluator.h"
#include "trainer/runtime/report/progress.h"

namespace mnemo::runtime {

struct RankResult {
  double mrr = 0, hits_at_10 = 0;
  int64_t events = 0;
  int64_t negatives = 0;  // scored in all
};

// Each batch of `events` (ascending) is first scored, every positive
// against its negatives (`negatives`, one list per event) with the memory
// before the batch, then applied to `memory` (predict, then update; the
// memory holds every node). Negatives are scored in chunks of at most
// `max_rows` rows (a row: the positive's source, destination and one
// negative). INTERNAL when a score is not finite.
absl::StatusOr<RankResult> EvaluateRanking(
    const EvalSetup& setup, const std::vector<int64_t>& events,
    const data::RankingNegatives& negatives, const std::string& label,
    memory::WorkerMemory* memory, Progress* progress, int64_t max_rows = 8192);

}  // namespace mnemo::runtime

#endif  // MNEMO_TRAINER_RUNTIME_EVAL_RANKING_H_
