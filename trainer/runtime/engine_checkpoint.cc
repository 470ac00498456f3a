// The engine's cluster checkpoints: every rank's file, the manifest, and
// resume from the last complete set.
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
                               *optimizer_, record_, policy_->SaveState());
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
  return WriteClusterManifest(o_.out_dir, m);
}

absl::StatusOr<int> Engine::ResumeCluster() {
  // Rank 0's choice for all: {epoch (-1: none), workers, cluster set, same
  // job shape (world size and policy)}.
  std::vector<double> v = {-1, 0, 0, 0};
  absl::StatusOr<ResumePoint> point =
      absl::NotFoundError("rank 0 found no checkpoint to resume from");
  if (leader()) {
    point = FindResumePoint(o_.resume_dir);
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
  if (loaded.seed != o_.seed && leader()) {
    progress_.Log(
        "warning: --resume with a different --seed than the checkpoint's; "
        "the result will differ from an uninterrupted run");
  }
  progress_.Log(absl::StrFormat("rank %d resumed from %s (epoch %d done)",
                                rank_, loaded.path, loaded.epoch));
  return p.epoch;
}

}  // namespace mnemo::runtime
