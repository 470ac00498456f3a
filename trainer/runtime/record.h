// A run's history and early-stopping state: what its checkpoints carry
// besides the model and the optimizer.
#ifndef MNEMO_TRAINER_RUNTIME_RECORD_H_
#define MNEMO_TRAINER_RUNTIME_RECORD_H_

#include <torch/types.h>

#include <cstddef>
#include <vector>

#include "trainer/memory/node_memory.h"
#include "trainer/runtime/train.h"

namespace mnemo::runtime {

struct TrainingRecord {
  std::vector<EpochResult> epochs;
  int best_epoch = 0;
  // The best epoch's val AP (the criterion of the protocol).
  double best_score = -1;
  int rounds_without_improvement = 0;
  std::vector<torch::Tensor> best_params;
  memory::NodeMemory best_state;  // the best epoch's post-validation memory
  // With a bounded working set the leader tests each best epoch at once
  // and keeps no memory (best_state has 0 rows): the test and new-node
  // test figures (kBestTestFields: AP, AUC, per-batch mean AP and AUC,
  // events, for each). Empty otherwise.
  std::vector<double> best_test;
  // The run's seconds in each stage of time_breakdown_seconds
  // (kStageNames), summed over every session up to the last checkpoint: a
  // resumed run's summary counts the sessions before it. Empty: none.
  std::vector<double> stage_seconds;
};
inline constexpr size_t kBestTestFields = 10;

}  // namespace mnemo::runtime

#endif  // MNEMO_TRAINER_RUNTIME_RECORD_H_
