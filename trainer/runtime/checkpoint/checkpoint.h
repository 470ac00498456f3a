// Per-epoch checkpoints of a training run: the model, Adam's exact state,
// the best epoch's parameters and memory, and the history, so that --resume
// continues to the same result as an uninterrupted run. A cluster writes one
// file per rank and a manifest (resume_point.h).
#ifndef MNEMO_TRAINER_RUNTIME_CHECKPOINT_CHECKPOINT_H_
#define MNEMO_TRAINER_RUNTIME_CHECKPOINT_CHECKPOINT_H_

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "trainer/memory/node_memory.h"
#include "trainer/model/model.h"
#include "trainer/runtime/checkpoint/checkpoint_file.h"
#include "trainer/runtime/record.h"
#include "trainer/runtime/train.h"

namespace mnemo::runtime {

// Writes <out_dir>/checkpoints/epoch-NNNN.pt with a checksum, durably
// (checkpoint_file.h: temp file, fsync, rename, directory fsync; nothing
// left behind on an error such as a full disk). `meta` carries the run id
// and configuration (meta.epoch is set here). OK without writing when
// out_dir is empty.
absl::Status SaveCheckpoint(const std::string& out_dir, int epoch,
                            uint64_t seed, model::ModelImpl& model,
                            torch::optim::Adam& optimizer,
                            const TrainingRecord& record,
                            const CheckpointMeta& meta);

// Writes rank `rank`'s file of a cluster checkpoint,
// <out_dir>/checkpoints/epoch-NNNN/rank-R.pt (resume_point.h), atomically:
// what SaveCheckpoint writes plus `policy_state` (TrainingPolicy::SaveState).
absl::Status SaveRankCheckpoint(const std::string& out_dir, int epoch, int rank,
                                uint64_t seed, model::ModelImpl& model,
                                torch::optim::Adam& optimizer,
                                const TrainingRecord& record,
                                const std::vector<double>& policy_state,
                                const CheckpointMeta& meta);

struct LoadedCheckpoint {
  int epoch = 0;      // the last finished epoch
  uint64_t seed = 0;  // the run's --seed
  std::string path;
  CheckpointMeta meta;    // run id and configuration (empty: not recorded)
  bool verified = false;  // false: a file from before checksums
};

// Restores the last checkpoint of <resume_dir>/checkpoints into `model`,
// `optimizer` and `record`: a single process's, or rank 0's file of a
// complete cluster set (FindResumePoint). NOT_FOUND (none), INVALID_ARGUMENT
// (another data set or model shape), DATA_LOSS (unreadable or damaged file:
// a checksum mismatch, or parameters, optimizer state or memory that are
// not finite).
absl::StatusOr<LoadedCheckpoint> LoadCheckpoint(
    const std::string& resume_dir, model::ModelImpl& model,
    torch::optim::Adam& optimizer, int64_t num_nodes,
    const memory::RecordLayout& layout, TrainingRecord* record);

// Restores the checkpoint file `path` (either layout). `policy_state`, when
// not null, receives a rank file's policy state (empty for a single
// process's file). Errors as LoadCheckpoint's; NOT_FOUND when `path` does
// not exist.
absl::StatusOr<LoadedCheckpoint> LoadCheckpointFile(
    const std::string& path, model::ModelImpl& model,
    torch::optim::Adam& optimizer, int64_t num_nodes,
    const memory::RecordLayout& layout, TrainingRecord* record,
    std::vector<double>* policy_state);

}  // namespace mnemo::runtime

#endif  // MNEMO_TRAINER_RUNTIME_CHECKPOINT_CHECKPOINT_H_
