// The learning task of a run: the event log, its chronological split, the
// temporal graphs the samplers read, the negatives of every split and the
// time-gap statistics, as the evaluation protocol defines them (docs/
// training.md "Evaluation protocol"). Loaded once per process, before any
// model or cluster exists; read-only afterwards.
#ifndef MNEMO_TRAINER_RUNTIME_TASK_H_
#define MNEMO_TRAINER_RUNTIME_TASK_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "trainer/data/event_log.h"
#include "trainer/data/neighbor_sampler.h"
#include "trainer/data/split.h"
#include "trainer/data/tgb_negatives.h"
#include "trainer/model/model.h"
#include "trainer/runtime/report/progress.h"
#include "trainer/runtime/train.h"

namespace mnemo::runtime {

// Seeds derived from the run seed, so that each epoch's randomness depends
// only on (seed, epoch): a resumed run draws exactly what an uninterrupted
// run draws. Evaluation negatives use fixed seeds (TGN protocol: 0..3).
inline uint64_t EpochSeed(uint64_t seed, int epoch, uint64_t stream) {
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + epoch * 0xBF58476D1CE4E5B9ull +
               stream * 0x94D049BB133111EBull;
  x ^= x >> 31;
  x *= 0xD6E8FEB86659FD93ull;
  x ^= x >> 32;
  return x;
}
constexpr uint64_t kValSeed = 0, kNewNodeValSeed = 1, kTestSeed = 2,
                   kNewNodeTestSeed = 3;

// Negatives of one evaluation split: candidates and a fixed seed.
struct EvalNegatives {
  std::vector<int32_t> candidates;
  uint64_t seed = 0;
};

struct Task {
  std::string data_path;  // the file the dataset resolved to
  data::EventLog log;
  data::LoadReport load_report;
  data::Split split;
  // The training events' graph (training neighbours) and every event's
  // (evaluation; null in a worker that does not evaluate).
  std::unique_ptr<data::TemporalGraph> train_graph, full_graph;
  // Candidates of the training negatives.
  std::vector<int32_t> train_neg_candidates;
  // Negatives of each evaluation split.
  EvalNegatives val_negs, new_node_val_negs, test_negs, new_node_test_negs;
  // Normalization of the time since a node's memory update (JODIE).
  batch::TimeGapStats time_gaps;
  bool reference_protocol = true;  // --protocol tgn-reference
  // --protocol tgb: the validation and test events' ranking negatives.
  bool tgb = false;
  data::RankingNegatives val_ranking, test_ranking;
  std::string tgb_negatives_text;  // how they were made, for the log
};

// Loads the data set `options` names and prepares the task; errors name the
// file and what is wrong with it. Logs a warning for skipped lines. Only a
// worker that `evaluates` gets full_graph (null otherwise: at 20M events
// it is 0.7 GB that the other workers of a cluster never read).
absl::StatusOr<std::unique_ptr<Task>> LoadTask(const TrainOptions& options,
                                               bool evaluates,
                                               Progress* progress);

}  // namespace mnemo::runtime

#endif  // MNEMO_TRAINER_RUNTIME_TASK_H_
