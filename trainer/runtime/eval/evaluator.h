// Evaluation passes: link prediction over validation or test events, with
// the model's memory advancing through them (TGN protocol).
#ifndef MNEMO_TRAINER_RUNTIME_EVAL_EVALUATOR_H_
#define MNEMO_TRAINER_RUNTIME_EVAL_EVALUATOR_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "trainer/batch/builder.h"
#include "trainer/data/event_log.h"
#include "trainer/data/neighbor_sampler.h"
#include "trainer/memory/record_codec.h"
#include "trainer/memory/worker_memory.h"
#include "trainer/model/model.h"
#include "trainer/runtime/report/progress.h"
#include "trainer/runtime/task.h"

namespace mnemo::runtime {

struct EvalResult {
  double ap = 0, auc = 0, ap_batch_mean = 0, auc_batch_mean = 0;
  double loss = 0;  // mean over batches of the training loss (BCE)
  int64_t events = 0;
};

// A result with no events to measure (all figures NaN).
EvalResult NoEvalResult();

// What an evaluation pass runs on. Pointers are not owned.
struct EvalSetup {
  const data::EventLog* log = nullptr;
  const data::TemporalGraph* graph = nullptr;  // all events
  model::Model model;
  batch::BatchBuilder* builder = nullptr;
  // Normalization of BatchTensors::target_dt (null: the model reads none).
  const batch::TimeGapStats* time_gaps = nullptr;
  int neighbors = 10;
  data::NeighborStrategy strategy = data::NeighborStrategy::kRecent;
  int64_t batch_size = 200;
  bool bf16 = false;
  double lr = 0;  // for the divergence message
  // The versions of the states a bounded memory pulls (the epoch's).
  memory::StateVersions versions;
  // Builds the next batch while the device scores one, where the memory
  // holds every node (a bounded one admits the next batch's states after
  // this one's update); the same results either way.
  bool prepare_ahead = true;
};

// Scores `events` (ascending) against their negatives in batches, each
// batch's events then applied to `memory` (Ready, Advance, EndBatch). The
// batches go through trainer/batch/lookahead.h's loop. INTERNAL when a
// score is not finite (the message names the batch); a bounded memory's
// errors with `label` before them.
absl::StatusOr<EvalResult> Evaluate(const EvalSetup& setup,
                                    const std::vector<int64_t>& events,
                                    const EvalNegatives& negatives,
                                    const std::string& label,
                                    memory::WorkerMemory* memory,
                                    Progress* progress);

}  // namespace mnemo::runtime

#endif  // MNEMO_TRAINER_RUNTIME_EVAL_EVALUATOR_H_
