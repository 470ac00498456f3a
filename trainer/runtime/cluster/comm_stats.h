// A cluster's communication statistics: every rank's CommStats gathered
// into TrainResult::per_worker and their totals (sums, or the largest where
// a sum means nothing).
#ifndef MNEMO_TRAINER_RUNTIME_CLUSTER_COMM_STATS_H_
#define MNEMO_TRAINER_RUNTIME_CLUSTER_COMM_STATS_H_

#include "absl/status/status.h"
#include "trainer/runtime/cluster/control.h"
#include "trainer/runtime/train.h"

namespace mnemo::runtime {

// Collective: every rank calls it with its own `mine`; every rank ends with
// all ranks' figures. `train_loss`: the last epoch's (the same everywhere).
absl::Status GatherCommStats(ControlChannel* control, int rank, int world,
                             const CommStats& mine, double train_loss,
                             TrainResult* result);

}  // namespace mnemo::runtime

#endif  // MNEMO_TRAINER_RUNTIME_CLUSTER_COMM_STATS_H_
