#include "trainer/runtime/checkpoint/run_checkpoints.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "trainer/data/event_log.h"
#include "trainer/runtime/checkpoint/resume_point.h"
#include "util/status_macros.h"
#include "util/usage_error.h"

namespace mnemo::runtime {

CheckpointMeta RunCheckpoints::MetaNow() {
  CheckpointMeta m;
  m.run_id = p_.run_id;
  m.run_config = p_.o.run.run_config;
  m.data = DataFingerprint();
  return m;
}

const std::string& RunCheckpoints::DataFingerprint() {
  if (data_fingerprint_.empty()) {
    data_fingerprint_ = data::EventLogFingerprint(p_.task->log);
  }
  return data_fingerprint_;
}

absl::StatusOr<int> RunCheckpoints::Resume() {
  int start_epoch = 1;
  if (!p_.o.run.resume_dir.empty() && p_.distributed()) {
    ASSIGN_OR_RETURN(const int done, ResumeCluster());
    start_epoch = done + 1;
  } else if (!p_.o.run.resume_dir.empty()) {
    ASSIGN_OR_RETURN(
        LoadedCheckpoint loaded,
        LoadCheckpoint(p_.o.run.resume_dir, *p_.model, *p_.optimizer,
                       p_.task->log.num_nodes, p_.model->layout(), &p_.record));
    RETURN_IF_ERROR(CheckResumed(loaded));
    p_.run_id = loaded.meta.run_id;
    p_.progress.Log(absl::StrFormat("resumed from %s (epoch %d done)",
                                    loaded.path, loaded.epoch));
    start_epoch = loaded.epoch + 1;
  }
  if (p_.run_id.empty() && p_.leader()) p_.run_id = NewRunId();
  if (p_.distributed()) RETURN_IF_ERROR(ShareRunId());
  return start_epoch;
}

absl::Status RunCheckpoints::Save(int epoch) {
  if (p_.distributed()) return SaveCluster(epoch);
  return SaveCheckpoint(p_.o.run.out_dir, epoch, p_.o.optim.seed, *p_.model,
                        *p_.optimizer, p_.record, MetaNow());
}

absl::Status RunCheckpoints::SaveCluster(int epoch) {
  const std::string& out = p_.o.run.out_dir;
  absl::Status saved = absl::OkStatus();
  if (!out.empty()) {
    saved = SaveRankCheckpoint(out, epoch, p_.rank(), p_.o.optim.seed,
                               *p_.model, *p_.optimizer, p_.record,
                               p_.policy->SaveState(), MetaNow());
  }
  // {ranks that wrote their file, ranks that failed to}: every rank's
  // file is renamed into place before it enters this collective.
  std::vector<double> t = {saved.ok() && !out.empty() ? 1.0 : 0.0,
                           saved.ok() ? 0.0 : 1.0};
  RETURN_IF_ERROR(p_.cluster->control()->Sum(&t));
  RETURN_IF_ERROR(saved);
  const int written = static_cast<int>(t[0]);
  if (t[1] > 0) {
    return absl::InternalError(absl::StrFormat(
        "epoch %d: another rank could not write its checkpoint file", epoch));
  }
  if (!p_.leader() || out.empty()) return absl::OkStatus();
  if (written < p_.world()) {
    if (!said_no_cluster_checkpoint_) {
      p_.progress.Log(absl::StrFormat(
          "warning: only %d of %d ranks write checkpoint files (the others "
          "have no --out): this job keeps no checkpoint to --resume from",
          written, p_.world()));
      said_no_cluster_checkpoint_ = true;
    }
    return absl::OkStatus();
  }
  ClusterManifest m;
  m.epoch = epoch;
  m.workers = p_.world();
  m.seed = p_.o.optim.seed;
  m.policy = p_.policy->name();
  m.run_id = p_.run_id;
  m.run_config = p_.o.run.run_config;
  return WriteClusterManifest(out, m);
}

absl::Status RunCheckpoints::CheckResumed(const LoadedCheckpoint& loaded) {
  const RunOptions& run = p_.o.run;
  RETURN_IF_ERROR(CheckRunConfig(loaded.meta.run_config, run.run_config,
                                 run.resume_overrides, loaded.path));
  if (!run.resume_overrides.empty() && p_.leader()) {
    p_.progress.Log(absl::StrCat(
        "warning: --resume-override ", absl::StrJoin(run.resume_overrides, ","),
        ": the run will differ from an uninterrupted one"));
  }
  if (!loaded.meta.data.empty()) {
    const std::string& now = DataFingerprint();
    const bool overridden =
        std::find(run.resume_overrides.begin(), run.resume_overrides.end(),
                  "data") != run.resume_overrides.end();
    if (loaded.meta.data != now && !overridden) {
      return UsageError(absl::InvalidArgumentError(absl::StrCat(
          "--resume: ", loaded.path, " was trained on other data than ",
          p_.task->data_path, " holds now (then: ", loaded.meta.data,
          "; now: ", now,
          "): the file changed since. Give the data it trained on, or "
          "--resume-override data to continue on these")));
    }
    if (loaded.meta.data != now && p_.leader()) {
      p_.progress.Log(
          absl::StrCat("warning: --resume-override data: ", p_.task->data_path,
                       " holds other data than the checkpoint was trained on"));
    }
  }
  if (!loaded.verified && p_.leader()) {
    p_.progress.Log(absl::StrCat("warning: ", loaded.path,
                                 " has no checksum (written by an older "
                                 "mnemo): loaded without verifying it"));
  }
  if (loaded.seed != p_.o.optim.seed && p_.leader() &&
      (loaded.meta.run_config.empty() || run.run_config.empty())) {
    p_.progress.Log(
        "warning: --resume with a different --seed than the checkpoint's; "
        "the result will differ from an uninterrupted run");
  }
  return absl::OkStatus();
}

absl::Status RunCheckpoints::ShareRunId() {
  // 64 bits as two exact halves.
  uint64_t id = 0;
  if (p_.leader() && !absl::SimpleHexAtoi(p_.run_id, &id)) id = 0;
  std::vector<double> v = {double(id >> 32), double(id & 0xffffffffu)};
  RETURN_IF_ERROR(p_.cluster->ShareFromLeader(&v));
  const uint64_t shared =
      (static_cast<uint64_t>(v[0]) << 32) | static_cast<uint64_t>(v[1]);
  const std::string leader_id = absl::StrFormat("%016x", shared);
  if (!p_.leader() && !p_.run_id.empty() && !p_.o.run.resume_dir.empty() &&
      p_.run_id != leader_id) {
    // This rank resumed a file of another run than rank 0's.
    return absl::DataLossError(absl::StrFormat(
        "--resume: rank %d's checkpoint belongs to run %s, rank 0's to run "
        "%s: the set mixes two runs' files",
        p_.rank(), p_.run_id, leader_id));
  }
  p_.run_id = leader_id;
  return absl::OkStatus();
}

absl::StatusOr<int> RunCheckpoints::ResumeCluster() {
  // Rank 0's choice for all: {epoch (-1: none), workers, cluster set, same
  // job shape (world size and policy)}.
  std::vector<double> v = {-1, 0, 0, 0};
  absl::StatusOr<ResumePoint> point =
      absl::NotFoundError("rank 0 found no checkpoint to resume from");
  if (p_.leader()) {
    // Verified before the job started (the launcher, `mnemo trainer`);
    // each rank's load verifies its own file.
    point = FindResumePoint(p_.o.run.resume_dir, /*verify=*/false);
    if (point.ok()) {
      v = {double(point->epoch), double(point->workers),
           point->cluster ? 1.0 : 0.0,
           point->SameJobShape(p_.world(), p_.policy->name()) ? 1.0 : 0.0};
    }
  }
  RETURN_IF_ERROR(p_.cluster->ShareFromLeader(&v));
  if (v[0] < 0) return point.status();
  ResumePoint rp;
  rp.dir = p_.o.run.resume_dir;
  rp.epoch = static_cast<int>(v[0]);
  rp.workers = static_cast<int>(v[1]);
  rp.cluster = v[2] != 0;
  const bool same_shape = v[3] != 0;
  const std::string file = rp.FileFor(p_.rank(), p_.world());
  std::vector<double> policy_state;
  ASSIGN_OR_RETURN(
      LoadedCheckpoint loaded,
      LoadCheckpointFile(file, *p_.model, *p_.optimizer, p_.task->log.num_nodes,
                         p_.model->layout(), &p_.record, &policy_state));
  if (loaded.epoch != rp.epoch) {
    return absl::DataLossError(
        absl::StrFormat("--resume: %s holds epoch %d, rank 0 resumes from "
                        "epoch %d",
                        file, loaded.epoch, rp.epoch));
  }
  if (same_shape) {
    RETURN_IF_ERROR(p_.policy->RestoreState(policy_state));
  } else if (p_.leader()) {
    p_.progress.Log(absl::StrFormat(
        "warning: resuming %s with %d workers and policy %s: the model, "
        "optimizer and history continue, but the run will differ from an "
        "uninterrupted one (the plan, each rank's random streams and the "
        "policy's state depend on the worker count and policy)",
        point->describe, p_.world(), p_.policy->name()));
  }
  RETURN_IF_ERROR(CheckResumed(loaded));
  p_.run_id = loaded.meta.run_id;
  p_.progress.Log(absl::StrFormat("rank %d resumed from %s (epoch %d done)",
                                  p_.rank(), loaded.path, loaded.epoch));
  return rp.epoch;
}

}  // namespace mnemo::runtime
