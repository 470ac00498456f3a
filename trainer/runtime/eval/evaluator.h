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

// The part of a pass this process computes where workers share it
// (eval_share.h): the batches before `score_begin` are replayed (sampled,
// built, the memory updated and advanced as a scoring pass does, but not
// embedded or scored), those in [score_begin, score_end) scored, none after.
struct PassRange {
  int64_t score_begin = 0;
  int64_t score_end = INT64_MAX;
};

// The raw results of the batches a pass scored, in order: each batch's
// events' positive and negative scores and its loss.
struct PassScores {
  std::vector<int64_t> batch_events;  // events per scored batch
  std::vector<float> pos, neg;        // one per event, batch after batch
  std::vector<double> loss;           // one per batch
  // Wall seconds of the replayed and of the scored batches.
  double replay_seconds = 0, score_seconds = 0;
};

// A pass's figures from the scores of all its batches, in order: those
// Evaluate gives for the pass (the same floats added in the same order).
// `events`: the pass's event count. INTERNAL when a score is not finite.
absl::StatusOr<EvalResult> ResultOfScores(const PassScores& scores,
                                          int64_t events);

// Scores `events` (ascending) against their negatives in batches, each
// batch's events then applied to `memory` (Ready, Advance, EndBatch). The
// batches go through trainer/batch/lookahead.h's loop. INTERNAL when a
// score is not finite (the message names the batch); a bounded memory's
// errors with `label` before them. `range`: the batches replayed and
// scored (the whole pass scored by default); `scores` (optional) receives
// the scored batches' raw results. The figures returned are those of the
// scored batches.
absl::StatusOr<EvalResult> Evaluate(const EvalSetup& setup,
                                    const std::vector<int64_t>& events,
                                    const EvalNegatives& negatives,
                                    const std::string& label,
                                    memory::WorkerMemory* memory,
                                    Progress* progress, PassRange range = {},
                                    PassScores* scores = nullptr);

}  // namespace mnemo::runtime

#endif  // MNEMO_TRAINER_RUNTIME_EVAL_EVALUATOR_H_
