// Evaluation passes: link prediction over validation or test events, with
// the model's memory advancing through them (TGN protocol).
#ifndef MNEMO_TRAINER_RUNTIME_EVALUATOR_H_
#define MNEMO_TRAINER_RUNTIME_EVALUATOR_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "trainer/data/event_log.h"
#include "trainer/data/neighbor_sampler.h"
#include "trainer/data/tgb_negatives.h"
#include "trainer/memory/node_memory.h"
#include "trainer/model/model.h"
#include "trainer/runtime/batch_builder.h"
#include "trainer/runtime/progress.h"

namespace mnemo::runtime {

struct EvalResult {
  double ap = 0, auc = 0, ap_batch_mean = 0, auc_batch_mean = 0;
  double loss = 0;  // mean over batches of the training loss (BCE)
  int64_t events = 0;
};

// A result with no events to measure (all figures NaN).
EvalResult NoEvalResult();

// Negatives of one evaluation split: candidates and a fixed seed.
struct EvalNegatives {
  std::vector<int32_t> candidates;
  uint64_t seed = 0;
};

// What an evaluation pass runs on. Pointers are not owned.
struct EvalSetup {
  const data::EventLog* log = nullptr;
  const data::TemporalGraph* graph = nullptr;  // all events
  model::Model model;
  BatchBuilder* builder = nullptr;
  // Normalization of BatchTensors::target_dt (null: the model reads none).
  const model::TimeGapStats* time_gaps = nullptr;
  int neighbors = 10;
  data::NeighborStrategy strategy = data::NeighborStrategy::kRecent;
  int64_t batch_size = 200;
  bool bf16 = false;
  double lr = 0;  // for the divergence message
  // A memory that holds a bounded working set (Evaluate only): called
  // before batch `batch` is finished with every state it reads or writes
  // (BatchBuilder::StateNodes), which must then be held, and after the
  // batch with the nodes whose states it advanced. Empty: the memory holds
  // every node.
  std::function<absl::Status(int64_t batch, const std::vector<int64_t>&)>
      acquire;
  std::function<void(const std::vector<int32_t>&)> changed;
  // Builds the next batch while the device scores one (without `acquire`;
  // the same results either way).
  bool prepare_ahead = true;
};

// Scores `events` (ascending) against their negatives in batches, updating
// `state` with each batch's events. INTERNAL when a score is not finite
// (the message names the batch).
absl::StatusOr<EvalResult> Evaluate(const EvalSetup& setup,
                                    const std::vector<int64_t>& events,
                                    const EvalNegatives& negatives,
                                    const std::string& label,
                                    memory::NodeMemory* state,
                                    Progress* progress);

struct RankResult {
  double mrr = 0, hits_at_10 = 0;
  int64_t events = 0;
  int64_t negatives = 0;  // scored in all
};

// TGB's one-vs-many protocol: each batch of `events` (ascending) is first
// scored, every positive against its negatives (`negatives`, one list per
// event) with the memory before the batch, then applied to `state`
// (predict, then update). Negatives are scored in chunks of at most
// `max_rows` rows (a row: the positive's source, destination and one
// negative). INTERNAL when a score is not finite.
absl::StatusOr<RankResult> EvaluateRanking(
    const EvalSetup& setup, const std::vector<int64_t>& events,
    const data::RankingNegatives& negatives, const std::string& label,
    memory::NodeMemory* state, Progress* progress, int64_t max_rows = 8192);

}  // namespace mnemo::runtime

#endif  // MNEMO_TRAINER_RUNTIME_EVALUATOR_H_
