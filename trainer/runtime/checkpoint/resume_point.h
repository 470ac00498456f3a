// Where a run resumes from (torch-free: the launcher and `mnemo trainer`
// check it before starting anything). Two checkpoint layouts share
// <out>/checkpoints/:
//
//   epoch-NNNN.pt                 a single process's checkpoint
//   epoch-NNNN/rank-R.pt          rank R of a cluster (one per rank)
//   epoch-NNNN/manifest.yaml      written last, by rank 0, once every
//                                 rank's file is written: only a set with a
//                                 manifest is complete
//
// A rank file holds what a single process's checkpoint holds (model, Adam's
// state, the history, the best epoch's parameters and memory) plus the
// training policy's state (e.g. DepTGL's gradient-norm EMA). The manifest is
// flat YAML:
//
//   format: mnemo-cluster-checkpoint-1
//   epoch: 2
//   workers: 2
//   seed: 7
//   policy: vanilla
//   run_id: 3f9c0a7d51e2b846
//   run_config: "data=wikipedia ... (RunConfigText)"
//   files: rank-0.pt,rank-1.pt
//
// A run owns its --out directory: a lock file (LOCK) while it runs, and its
// run id in every checkpoint file and manifest. A new run refuses a
// directory holding another run's checkpoints, and --resume refuses changed
// flags that define the result (CheckRunConfig).
#ifndef MNEMO_TRAINER_RUNTIME_CHECKPOINT_RESUME_POINT_H_
#define MNEMO_TRAINER_RUNTIME_CHECKPOINT_RESUME_POINT_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "trainer/runtime/checkpoint/checkpoint_file.h"

namespace mnemo::runtime {

inline constexpr char kClusterManifestFormat[] = "mnemo-cluster-checkpoint-1";

// <out_dir>/checkpoints/epoch-NNNN (a cluster checkpoint's directory).
std::string ClusterCheckpointDir(const std::string& out_dir, int epoch);
// <out_dir>/checkpoints/epoch-NNNN/rank-R.pt
std::string RankCheckpointPath(const std::string& out_dir, int epoch, int rank);
// <out_dir>/checkpoints/epoch-NNNN.pt
std::string SingleCheckpointPath(const std::string& out_dir, int epoch);

struct ClusterManifest {
  int epoch = 0;    // the last finished epoch
  int workers = 0;  // ranks that wrote a file (the job's world size)
  uint64_t seed = 0;
  std::string policy;
  std::string run_id;
  std::string run_config;  // RunConfigText of the run (empty: not recorded)
};

// Writes <out_dir>/checkpoints/epoch-NNNN/manifest.yaml atomically (temp
// file + rename), after every rank's file is written.
absl::Status WriteClusterManifest(const std::string& out_dir,
                                  const ClusterManifest& manifest);

// The last checkpoint of <dir>/checkpoints to resume from: the later of the
// last complete cluster set (one with a manifest) and the last single-process
// file (a cluster set on a tie).
struct ResumePoint {
  std::string dir;  // the --resume directory
  int epoch = 0;    // the last finished epoch
  bool cluster = false;
  int workers = 1;         // the cluster's world size (1: a single process's)
  uint64_t seed = 0;       // cluster sets only (a single file holds its own)
  std::string policy;      // cluster sets only
  std::string describe;    // e.g. "checkpoints/epoch-0002 (2 workers)"
  std::string run_id;      // empty: written before run ids
  std::string run_config;  // empty: not recorded
  bool verified = true;    // false: a file from before checksums
  // With verify: the first file without a checksum, and a file or manifest
  // of the same run that has one (empty: none, the run really is older).
  std::string unverified_file, cut_proof;
  // How the run ended its last checkpointed epoch (the last file's, rank
  // 0's in a cluster set; unknown in files without it).
  CheckpointStop stop;

  // DATA_LOSS naming the file when a file without a checksum lies among a
  // run's files with one (a file cut where LibTorch's archive ends looks
  // like an older one), unless `overrides` (--resume-override) names
  // "unverified".
  absl::Status CheckVerified(const std::vector<std::string>& overrides) const;

  // The file rank `rank` of a `world`-worker run loads: its own rank's when
  // the worker counts agree, else rank (rank mod workers)'s (every rank
  // holds the same model, optimizer and history; rank 0's best memory is
  // the complete one); a single process's file for every rank.
  std::string FileFor(int rank, int world) const;
  // Whether rank-local state (the policy's) continues exactly: a cluster set
  // of the same world size and policy.
  bool SameJobShape(int world, const std::string& policy_name) const {
    return cluster && workers == world && policy == policy_name;
  }
};

// NOT_FOUND (no complete checkpoint: the message says what the directory
// holds instead, e.g. a cluster set without its manifest), DATA_LOSS (an
// unreadable manifest, a missing checkpoint file or one with a damaged
// footer, or a rank file of another run than its manifest). With `verify`
// it reads each file's footer and metadata only (ReadCheckpointMeta): a
// file's payload is read and checksummed once, where it loads.
absl::StatusOr<ResumePoint> FindResumePoint(const std::string& dir,
                                            bool verify = true);

// The flags of a resumed run that may differ from the checkpoint's without
// changing what the run computes up to now: --epochs, --patience, --device
// (and --check-parameters). A changed --policy is allowed with a warning
// (with it, the policy's own flags may change).
// INVALID_ARGUMENT naming every other flag that differs, old and new value,
// unless `overrides` (--resume-override) names it. OK when either text is
// empty (a checkpoint from before run configurations were recorded).
absl::Status CheckRunConfig(const std::string& saved, const std::string& now,
                            const std::vector<std::string>& overrides,
                            const std::string& checkpoint);

// The key=value items of a RunConfigText, by key (items without '='
// skipped).
std::map<std::string, std::string> ParseRunConfig(const std::string& text);

// A RunConfigText's key for a flag name ("lr", "--batch-size", "device")
// and the flag a key stands for ("batch_size" -> "batch-size",
// "device_kind" -> "device"); and the keys of a RunConfigText.
std::string RunConfigKeyOf(const std::string& flag);
std::string FlagOfRunConfigKey(const std::string& key);
bool HasRunConfigKey(const std::string& text, const std::string& key);

// The flags whose values differ between two RunConfigTexts, as
// "--name a -> b" items (empty: none). `ignore`: keys not compared.
std::vector<std::string> RunConfigDifferences(
    const std::string& a, const std::string& b,
    const std::vector<std::string>& ignore = {});

// A new run into `out_dir` (resume_dir empty or another directory) refuses
// a directory that already holds a checkpoint --resume would continue
// (another run's): FAILED_PRECONDITION naming it and what to do. A cluster
// set without its manifest does not count (the new run rewrites it whole).
absl::Status CheckOutputOwner(const std::string& out_dir,
                              const std::string& resume_dir);

// Takes <out_dir>/LOCK (flock, creating out_dir) for this process's
// lifetime, recording its pid. FAILED_PRECONDITION naming the holder's pid
// when another run holds it.
absl::Status LockOutputDir(const std::string& out_dir);

}  // namespace mnemo::runtime

#endif  // MNEMO_TRAINER_RUNTIME_CHECKPOINT_RESUME_POINT_H_
