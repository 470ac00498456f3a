// A run's checkpoints: each epoch's (one file in one process; in a cluster
// every rank's file, then rank 0's manifest that makes the set complete)
// and --resume from the last complete one.
#ifndef MNEMO_TRAINER_RUNTIME_CHECKPOINT_RUN_CHECKPOINTS_H_
#define MNEMO_TRAINER_RUNTIME_CHECKPOINT_RUN_CHECKPOINTS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "trainer/runtime/checkpoint/checkpoint.h"
#include "trainer/runtime/run_parts.h"

namespace mnemo::runtime {

class RunCheckpoints {
 public:
  // `parts` (set up) outlives the checkpoints.
  explicit RunCheckpoints(RunParts* parts) : p_(*parts) {}

  // --resume (or a new run): restores the model, optimizer, history and
  // (the same job shape) the policy's state from the last checkpoint,
  // refusing changed flags and files of another run; sets the run's id
  // (rank 0's in a cluster). Returns the first epoch to train.
  absl::StatusOr<int> Resume();
  // Epoch `epoch`'s checkpoint (nothing without --out).
  absl::Status Save(int epoch);

 private:
  CheckpointMeta MetaNow();
  // data::EventLogFingerprint of the run's data (computed once).
  const std::string& DataFingerprint();
  // In a cluster: rank 0 picks the last complete checkpoint, every rank
  // restores its file of it. Returns the epoch it had finished.
  absl::StatusOr<int> ResumeCluster();
  // Every rank's file of the epoch, then (after a collective that every
  // rank enters once its file is written) rank 0's manifest.
  absl::Status SaveCluster(int epoch);
  // Refuses changed flags (CheckRunConfig) and other data than the
  // checkpoint's (a usage error), and warns of an unverified file.
  absl::Status CheckResumed(const LoadedCheckpoint& loaded);
  // Every rank takes rank 0's run id.
  absl::Status ShareRunId();

  RunParts& p_;
  bool said_no_cluster_checkpoint_ = false;
  std::string data_fingerprint_;  // DataFingerprint's, once computed
};

}  // namespace mnemo::runtime

#endif  // MNEMO_TRAINER_RUNTIME_CHECKPOINT_RUN_CHECKPOINTS_H_
