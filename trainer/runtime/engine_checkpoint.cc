// The engine's cluster checkpoints: every rank's file, the manifest, and
// resume from the last complete set.
#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "trainer/runtime/engine.h"

namespace mnemo::runtime {

absl::Status Engine::ShareFromLeader(std::vector<double>* values) {
  const double t0 = MonotonicSeconds();
  absl::Status s = control_->Broadcast(values, 0);
  comm_.allreduce_seconds += MonotonicSeconds() - t0;
  return s;
}

absl::Status Engine::SaveClusterCheckpoint(int epoch) {
  absl::Status saved = absl::OkStatus();
  if (!o_.out_dir.empty()) {
    saved = SaveRankCheckpoint(o_.out_dir, epoch, rank_, o_.seed, *model_,
                               *optimizer_, record_, policy_->SaveState(),
                               CheckpointMetaNow());
  }
  // {ranks that wrote their file, ranks that failed to}: every rank's
  // file is renamed into place before it enters this collective.
  std::vector<double> t = {saved.ok() && !o_.out_dir.empty() ? 1.0 : 0.0,
                           saved.ok() ? 0.0 : 1.0};
  RETURN_IF_ERROR(control_->Sum(&t));
  RETURN_IF_ERROR(saved);
  const int written = static_cast<int>(t[0]);
  if (t[1] > 0) {
    return absl::InternalError(absl::StrFormat(
        "epoch %d: another rank could not write its checkpoint file", epoch));
  }
  if (!leader() || o_.out_dir.empty()) return absl::OkStatus();
  if (written < world_) {
    if (!said_no_cluster_checkpoint_) {
      progress_.Log(absl::StrFormat(
          "warning: only %d of %d ranks write checkpoint files (the others "
          "have no --out): this job keeps no checkpoint to --resume from",
          written, world_));
      said_no_cluster_checkpoint_ = true;
    }
    return absl::OkStatus();
  }
  ClusterManifest m;
  m.epoch = epoch;
  m.workers = world_;
  m.seed = o_.seed;
  m.policy = policy_->name();
  m.run_id = run_id_;
  m.run_config = o_.run_config;
  return WriteClusterManifest(o_.out_dir, m);
}

absl::Status Engine::CheckResumed(const LoadedCheckpoint& loaded) {
  RETURN_IF_ERROR(CheckRunConfig(loaded.meta.run_config, o_.run_config,
                                 o_.resume_overrides, loaded.path));
  if (!o_.resume_overrides.empty() && leader()) {
    progress_.Log(absl::StrCat(
        "warning: --resume-override ", absl::StrJoin(o_.resume_overrides, ","),
        ": the run will differ from an uninterrupted one"));
  }
  if (!loaded.verified && leader()) {
    progress_.Log(absl::StrCat("warning: ", loaded.path,
                               " has no checksum (written by an older "
                               "mnemo): loaded without verifying it"));
  }
  if (loaded.seed != o_.seed && leader() &&
      (loaded.meta.run_config.empty() || o_.run_config.empty())) {
    progress_.Log(
        "warning: --resume with a different --seed than the checkpoint's; "
        "the result will differ from an uninterrupted run");
  }
  return absl::OkStatus();
}

absl::Status Engine::ShareRunId() {
  // 64 bits as two exact halves.
  uint64_t id = 0;
  if (leader() && !absl::SimpleHexAtoi(run_id_, &id)) id = 0;
  std::vector<double> v = {double(id >> 32), double(id & 0xffffffffu)};
  RETURN_IF_ERROR(ShareFromLeader(&v));
  const uint64_t shared =
      (static_cast<uint64_t>(v[0]) << 32) | static_cast<uint64_t>(v[1]);
  const std::string leader_id = absl::StrFormat("%016x", shared);
  if (!leader() && !run_id_.empty() && !o_.resume_dir.empty() &&
      run_id_ != leader_id) {
    // This rank resumed a file of another run than rank 0's.
    return absl::DataLossError(absl::StrFormat(
        "--resume: rank %d's checkpoint belongs to run %s, rank 0's to run "
        "%s: the set mixes two runs' files",
        rank_, run_id_, leader_id));
  }
  run_id_ = leader_id;
  return absl::OkStatus();
}

absl::StatusOr<int> Engine::ResumeCluster() {
  // Rank 0's choice for all: {epoch (-1: none), workers, cluster set, same
  // job shape (world size and policy)}.
  std::vector<double> v = {-1, 0, 0, 0};
  absl::StatusOr<ResumePoint> point =
      absl::NotFoundError("rank 0 found no checkpoint to resume from");
  if (leader()) {
    // Verified before the job started (the launcher, `mnemo trainer`);
    // each rank's load verifies its own file.
    point = FindResumePoint(o_.resume_dir, /*verify=*/false);
    if (point.ok()) {
      v = {double(point->epoch), double(point->workers),
           point->cluster ? 1.0 : 0.0,
           point->SameJobShape(world_, policy_->name()) ? 1.0 : 0.0};
    }
  }
  RETURN_IF_ERROR(ShareFromLeader(&v));
  if (v[0] < 0) return point.status();
  ResumePoint p;
  p.dir = o_.resume_dir;
  p.epoch = static_cast<int>(v[0]);
  p.workers = static_cast<int>(v[1]);
  p.cluster = v[2] != 0;
  const bool same_shape = v[3] != 0;
  const std::string file = p.FileFor(rank_, world_);
  std::vector<double> policy_state;
  ASSIGN_OR_RETURN(
      LoadedCheckpoint loaded,
      LoadCheckpointFile(file, *model_, *optimizer_, task_->log.num_nodes,
                         model_->layout(), &record_, &policy_state));
  if (loaded.epoch != p.epoch) {
    return absl::DataLossError(
        absl::StrFormat("--resume: %s holds epoch %d, rank 0 resumes from "
                        "epoch %d",
                        file, loaded.epoch, p.epoch));
  }
  if (same_shape) {
    RETURN_IF_ERROR(policy_->RestoreState(policy_state));
  } else if (leader()) {
    progress_.Log(absl::StrFormat(
        "warning: resuming %s with %d workers and policy %s: the model, "
        "optimizer and history continue, but the run will differ from an "
        "uninterrupted one (the plan, each rank's random streams and the "
        "policy's state depend on the worker count and policy)",
        point->describe, world_, policy_->name()));
  }
  RETURN_IF_ERROR(CheckResumed(loaded));
  run_id_ = loaded.meta.run_id;
  progress_.Log(absl::StrFormat("rank %d resumed from %s (epoch %d done)",
                                rank_, loaded.path, loaded.epoch));
  return p.epoch;
}

}  // namespace mnemo::runtime
