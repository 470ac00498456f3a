#include "trainer/runtime/checkpoint/resume_point.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "trainer/runtime/checkpoint/checkpoint_file.h"
#include "util/file.h"
#include "util/status_macros.h"
#include "util/yaml.h"

namespace mnemo::runtime {
namespace fs = std::filesystem;
namespace {

constexpr char kManifest[] = "manifest.yaml";

// N of "epoch-N" / "epoch-N.pt" (-1: not a checkpoint name).
int EpochOf(const std::string& name, bool file) {
  const std::string prefix = "epoch-";
  if (name.rfind(prefix, 0) != 0) return -1;
  std::string digits = name.substr(prefix.size());
  if (file) {
    if (digits.size() < 4 || digits.substr(digits.size() - 3) != ".pt") {
      return -1;
    }
    digits.resize(digits.size() - 3);
  }
  int epoch = 0;
  if (digits.empty() ||
      digits.find_first_not_of("0123456789") != std::string::npos ||
      !absl::SimpleAtoi(digits, &epoch)) {
    return -1;
  }
  return epoch;
}

absl::StatusOr<ClusterManifest> ReadManifest(const fs::path& path) {
  auto kv = ReadFlatYamlFile(path.string());
  if (!kv.ok()) {
    return absl::DataLossError(
        absl::StrCat("cannot read the cluster checkpoint manifest: ",
                     kv.status().message()));
  }
  ClusterManifest m;
  std::string format;
  bool have_epoch = false, have_workers = false;
  for (const auto& [key, value] : *kv) {
    bool ok = true;
    if (key == "format") {
      format = value;
    } else if (key == "epoch") {
      ok = absl::SimpleAtoi(value, &m.epoch);
      have_epoch = true;
    } else if (key == "workers") {
      ok = absl::SimpleAtoi(value, &m.workers);
      have_workers = true;
    } else if (key == "seed") {
      ok = absl::SimpleAtoi(value, &m.seed);
    } else if (key == "policy") {
      m.policy = value;
    } else if (key == "run-id") {  // (the reader spells keys with dashes)
      m.run_id = value;
    } else if (key == "run-config") {
      m.run_config = value;
    }
    if (!ok) {
      return absl::DataLossError(absl::StrFormat("%s: bad value '%s' for %s",
                                                 path.string(), value, key));
    }
  }
  if (format != kClusterManifestFormat || !have_epoch || !have_workers ||
      m.epoch < 1 || m.workers < 1) {
    return absl::DataLossError(absl::StrFormat(
        "%s is not a %s manifest (format, epoch >= 1 and workers >= 1 are "
        "required)",
        path.string(), kClusterManifestFormat));
  }
  return m;
}

}  // namespace

std::string ClusterCheckpointDir(const std::string& out_dir, int epoch) {
  return (fs::path(out_dir) / "checkpoints" /
          absl::StrFormat("epoch-%04d", epoch))
      .string();
}

std::string RankCheckpointPath(const std::string& out_dir, int epoch,
                               int rank) {
  return (fs::path(ClusterCheckpointDir(out_dir, epoch)) /
          absl::StrCat("rank-", rank, ".pt"))
      .string();
}

std::string SingleCheckpointPath(const std::string& out_dir, int epoch) {
  return (fs::path(out_dir) / "checkpoints" /
          absl::StrFormat("epoch-%04d.pt", epoch))
      .string();
}

absl::Status WriteClusterManifest(const std::string& out_dir,
                                  const ClusterManifest& m) {
  const fs::path dir = ClusterCheckpointDir(out_dir, m.epoch);
  const fs::path final_path = dir / kManifest;
  std::string files;
  for (int r = 0; r < m.workers; ++r) {
    absl::StrAppend(&files, r ? "," : "", "rank-", r, ".pt");
  }
  const std::string text = absl::StrCat(
      "# Complete: every rank's file below was written before this.\n",
      "format: ", kClusterManifestFormat, "\n", "epoch: ", m.epoch, "\n",
      "workers: ", m.workers, "\n", "seed: ", m.seed, "\n",
      "policy: ", m.policy, "\n", "run_id: ", m.run_id, "\n", "run_config: \"",
      m.run_config, "\"\n", "files: ", files, "\n");
  return WriteFileDurably(final_path.string(), {text});
}

std::string ResumePoint::FileFor(int rank, int world) const {
  if (!cluster) return SingleCheckpointPath(dir, epoch);
  return RankCheckpointPath(dir, epoch,
                            world == workers ? rank : rank % workers);
}

namespace {

// The latest checkpoints of each kind under a run's checkpoints/ (-1:
// none).
struct CheckpointScan {
  int last_single = -1;      // epoch-N.pt
  int last_cluster = -1;     // epoch-N/ with its manifest
  int last_incomplete = -1;  // epoch-N/ without one
};

// Scans `root`; `ec` receives the error of opening it (none found then).
CheckpointScan ScanCheckpoints(const fs::path& root, std::error_code* ec) {
  CheckpointScan scan;
  for (const auto& entry : fs::directory_iterator(root, *ec)) {
    const std::string name = entry.path().filename().string();
    std::error_code type_ec;
    if (entry.is_directory(type_ec)) {
      const int e = EpochOf(name, /*file=*/false);
      if (e < 0) continue;
      if (fs::exists(entry.path() / kManifest, type_ec)) {
        scan.last_cluster = std::max(scan.last_cluster, e);
      } else {
        scan.last_incomplete = std::max(scan.last_incomplete, e);
      }
    } else {
      scan.last_single =
          std::max(scan.last_single, EpochOf(name, /*file=*/true));
    }
  }
  return scan;
}

// NOT_FOUND for a --resume directory `dir` with nothing to resume from,
// saying what it holds instead (`ec`: the scan's error).
absl::Status NoCheckpointError(const std::string& dir,
                               const CheckpointScan& scan,
                               const std::error_code& ec) {
  std::string what = ec ? absl::StrCat(": ", ec.message()) : "";
  if (scan.last_incomplete >= 0) {
    what = absl::StrFormat(
        "; %s has no manifest.yaml: the job stopped before every rank had "
        "written its file of epoch %d",
        ClusterCheckpointDir(dir, scan.last_incomplete), scan.last_incomplete);
  }
  return absl::NotFoundError(absl::StrCat(
      "--resume ", dir,
      ": no checkpoint to resume from (checkpoints/epoch-N.pt of a single "
      "process, or a complete cluster set: checkpoints/epoch-N/ with its "
      "manifest.yaml)",
      what));
}

// A checkpoint file of this run (under `root`, other than `not_this`)
// that carries mnemo's envelope, or a manifest naming a run id: proof that
// the run was written by a mnemo with checksums. Empty: none.
std::string FileWithChecksum(const fs::path& root,
                             const std::string& not_this) {
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(root, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    const fs::path& path = it->path();
    if (path.string() == not_this || !it->is_regular_file(ec)) continue;
    if (path.filename() == kManifest) {
      absl::StatusOr<ClusterManifest> m = ReadManifest(path);
      if (m.ok() && !m->run_id.empty()) return path.string();
    } else if (path.extension() == ".pt" &&
               HasCheckpointFooter(path.string())) {
      return path.string();
    }
  }
  return std::string();
}

// Fills p->cut_proof when a file of `p` has no checksum though the run's
// other files do.
void CheckUnverified(const std::string& unverified, ResumePoint* p) {
  if (p->verified) return;
  p->unverified_file = unverified;
  p->cut_proof = FileWithChecksum(fs::path(p->dir) / "checkpoints", unverified);
}

// Reads the footer and metadata of every rank's file of the cluster set `p`
// describes (its `manifest`): DATA_LOSS for one that is missing, has a
// damaged footer or is another run's. Clears p->verified when one is from
// before checksums. The payloads' checksums are checked where each file
// loads.
absl::Status VerifyRankFiles(const fs::path& manifest, ResumePoint* p) {
  for (int r = 0; r < p->workers; ++r) {
    const std::string file = RankCheckpointPath(p->dir, p->epoch, r);
    absl::StatusOr<CheckpointEnvelope> env = ReadCheckpointMeta(file);
    if (!env.ok()) {
      return absl::DataLossError(absl::StrCat(
          manifest.string(), " names ", file, ": ", env.status().message()));
    }
    if (!env->verified && p->verified) {
      p->verified = false;
      p->unverified_file = file;
    }
    if (r == 0) p->stop = env->meta.stop;
    if (!p->run_id.empty() && env->verified && env->meta.run_id != p->run_id) {
      return absl::DataLossError(absl::StrFormat(
          "%s belongs to run %s, its manifest %s to run %s: the set mixes "
          "two runs' files",
          file, env->meta.run_id, manifest.string(), p->run_id));
    }
  }
  return absl::OkStatus();
}

// The cluster set of `epoch` in `dir` (its manifest read, and with
// `verify` its files).
absl::StatusOr<ResumePoint> ClusterResumePoint(const std::string& dir,
                                               int epoch, bool verify) {
  const fs::path manifest =
      fs::path(ClusterCheckpointDir(dir, epoch)) / kManifest;
  absl::StatusOr<ClusterManifest> m = ReadManifest(manifest);
  if (!m.ok()) return m.status();
  if (m->epoch != epoch) {
    return absl::DataLossError(absl::StrFormat(
        "%s says epoch %d but lies in the directory of epoch %d",
        manifest.string(), m->epoch, epoch));
  }
  ResumePoint p;
  p.dir = dir;
  p.cluster = true;
  p.epoch = m->epoch;
  p.workers = m->workers;
  p.seed = m->seed;
  p.policy = m->policy;
  p.run_id = m->run_id;
  p.run_config = m->run_config;
  if (verify) {
    RETURN_IF_ERROR(VerifyRankFiles(manifest, &p));
    CheckUnverified(p.unverified_file, &p);
  }
  p.describe =
      absl::StrFormat("%s (%d-worker cluster, policy %s)",
                      ClusterCheckpointDir(dir, p.epoch), p.workers, p.policy);
  return p;
}

// The single process's checkpoint of `epoch` in `dir` (with `verify` its
// footer and metadata read, for its run).
absl::StatusOr<ResumePoint> SingleResumePoint(const std::string& dir, int epoch,
                                              bool verify) {
  ResumePoint p;
  p.dir = dir;
  p.epoch = epoch;
  p.describe = SingleCheckpointPath(dir, p.epoch);
  if (verify) {
    absl::StatusOr<CheckpointEnvelope> env = ReadCheckpointMeta(p.describe);
    if (!env.ok()) return env.status();
    p.verified = env->verified;
    p.run_id = env->meta.run_id;
    p.run_config = env->meta.run_config;
    p.stop = env->meta.stop;
    CheckUnverified(p.describe, &p);
  }
  return p;
}

}  // namespace

absl::Status ResumePoint::CheckVerified(
    const std::vector<std::string>& overrides) const {
  if (verified || cut_proof.empty() ||
      std::find(overrides.begin(), overrides.end(), "unverified") !=
          overrides.end()) {
    return absl::OkStatus();
  }
  return absl::DataLossError(absl::StrCat(
      "--resume: checkpoint ", unverified_file,
      " has no checksum (no mnemo footer), though ", cut_proof,
      " of the same run has one: it was most likely cut where LibTorch's "
      "archive ends, its metadata and checksum lost. Refusing to load it "
      "(its flags could not be compared); remove it (and any later ones) to "
      "resume from the one before, or, if it really was written by an older "
      "mnemo, pass --resume-override unverified"));
}

absl::StatusOr<ResumePoint> FindResumePoint(const std::string& dir,
                                            bool verify) {
  std::error_code ec;
  const CheckpointScan scan =
      ScanCheckpoints(fs::path(dir) / "checkpoints", &ec);
  if (scan.last_single < 0 && scan.last_cluster < 0) {
    return NoCheckpointError(dir, scan, ec);
  }
  if (scan.last_cluster >= scan.last_single) {
    return ClusterResumePoint(dir, scan.last_cluster, verify);
  }
  return SingleResumePoint(dir, scan.last_single, verify);
}

std::map<std::string, std::string> ParseRunConfig(const std::string& text) {
  std::map<std::string, std::string> kv;
  for (absl::string_view item : absl::StrSplit(text, ' ', absl::SkipEmpty())) {
    const size_t eq = item.find('=');
    if (eq == absl::string_view::npos) continue;
    kv[std::string(item.substr(0, eq))] = std::string(item.substr(eq + 1));
  }
  return kv;
}

namespace {

// Keys whose change is not refused: more epochs, another device (or TF32
// on it), other gradient buckets (the same sums, in another order); what
// resumes is the same either way.
constexpr const char* kMayChange[] = {
    "epochs", "patience",  "device_kind", "check_parameters",
    "resume", "bucket_mb", "tf32",        "eval_on"};
// The policy's own flags: compared only when the policy is the same.
constexpr const char* kPolicyKeys[] = {
    "sync_every",    "tau_grad",       "tau_load",         "ema_alpha",
    "ema_beta",      "push_scope",     "sync_scope",       "refine_chunks",
    "window_events", "partitioner",    "chain_assignment", "piece_events",
    "imbalance",     "urgent_batches", "critical_path",    "policy",
    "pipeline_depth"};
// Keys added after checkpoints were written without them: a run that lacks
// one ran with this value.
constexpr std::pair<const char*, const char*> kAddedLater[] = {
    {"apan_mailbox", "mnemo"}};

std::map<std::string, std::string> WithAddedKeys(const std::string& text) {
  std::map<std::string, std::string> keys = ParseRunConfig(text);
  for (const auto& [key, value] : kAddedLater) keys.emplace(key, value);
  return keys;
}

}  // namespace

std::string RunConfigKeyOf(const std::string& flag) {
  std::string key(absl::StripPrefix(flag, "--"));
  std::replace(key.begin(), key.end(), '-', '_');
  return key == "device" ? "device_kind" : key;
}

std::string FlagOfRunConfigKey(const std::string& key) {
  if (key == "device_kind") return "device";
  std::string flag = key;
  std::replace(flag.begin(), flag.end(), '_', '-');
  return flag;
}

bool HasRunConfigKey(const std::string& text, const std::string& key) {
  return ParseRunConfig(text).count(key) > 0;
}

namespace {

struct Difference {
  std::string flag;  // without "--"
  std::string text;  // "--flag a -> b"
};

std::vector<Difference> Differences(const std::string& a, const std::string& b,
                                    const std::vector<std::string>& ignore) {
  const auto ka = WithAddedKeys(a);
  const auto kb = WithAddedKeys(b);
  std::vector<Difference> out;
  auto differ = [&](const std::string& key, const std::string& va,
                    const std::string& vb) {
    if (va == vb) return;
    if (std::find(ignore.begin(), ignore.end(), key) != ignore.end()) return;
    const std::string flag = FlagOfRunConfigKey(key);
    out.push_back({flag, absl::StrCat("--", flag, " ", va.empty() ? "-" : va,
                                      " -> ", vb.empty() ? "-" : vb)});
  };
  for (const auto& [key, va] : ka) {
    auto it = kb.find(key);
    differ(key, va, it == kb.end() ? "" : it->second);
  }
  for (const auto& [key, vb] : kb) {
    if (!ka.count(key)) differ(key, "", vb);
  }
  return out;
}

}  // namespace

std::vector<std::string> RunConfigDifferences(
    const std::string& a, const std::string& b,
    const std::vector<std::string>& ignore) {
  std::vector<std::string> out;
  for (Difference& d : Differences(a, b, ignore)) {
    out.push_back(std::move(d.text));
  }
  return out;
}

absl::Status CheckRunConfig(const std::string& saved, const std::string& now,
                            const std::vector<std::string>& overrides,
                            const std::string& checkpoint) {
  if (saved.empty() || now.empty()) return absl::OkStatus();
  std::vector<std::string> ignore(std::begin(kMayChange), std::end(kMayChange));
  if (ParseRunConfig(saved)["policy"] != ParseRunConfig(now)["policy"]) {
    ignore.insert(ignore.end(), std::begin(kPolicyKeys), std::end(kPolicyKeys));
  }
  for (const std::string& flag : overrides) {
    ignore.push_back(RunConfigKeyOf(flag));
  }
  const std::vector<Difference> diff = Differences(saved, now, ignore);
  if (diff.empty()) return absl::OkStatus();
  std::vector<std::string> items, flags;
  for (const Difference& d : diff) {
    items.push_back(d.text);
    flags.push_back(d.flag);
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "--resume: ", checkpoint, " was trained with other flags than this run (",
      absl::StrJoin(items, ", "),
      "): resuming would silently give another result. Resume with the "
      "checkpoint's flags, or change them on purpose with --resume-override ",
      absl::StrJoin(flags, ",")));
}

absl::Status CheckOutputOwner(const std::string& out_dir,
                              const std::string& resume_dir) {
  if (out_dir.empty()) return absl::OkStatus();
  std::error_code ec;
  if (!resume_dir.empty() && fs::exists(resume_dir, ec) &&
      fs::equivalent(fs::path(out_dir), fs::path(resume_dir), ec)) {
    return absl::OkStatus();  // the run continues in its own directory
  }
  // Only a checkpoint a --resume would continue counts: a cluster set
  // without its manifest is rewritten whole by the next run before its
  // manifest makes it complete.
  absl::StatusOr<ResumePoint> point =
      FindResumePoint(out_dir, /*verify=*/false);
  if (!point.ok() && absl::IsNotFound(point.status())) return absl::OkStatus();
  const std::string newest =
      point.ok() ? point->describe : std::string(point.status().message());
  return absl::FailedPreconditionError(absl::StrCat(
      "--out ", out_dir, " already holds another run's checkpoints (newest ",
      newest,
      "): a new run there would mix its files with them and a later --resume "
      "would continue the wrong run. Continue that run with --resume ",
      out_dir, ", or choose another --out, or remove ",
      (fs::path(out_dir) / "checkpoints").string()));
}

absl::Status LockOutputDir(const std::string& out_dir) {
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--out ", out_dir, ": cannot create the directory: ", ec.message()));
  }
  const std::string path = (fs::path(out_dir) / "LOCK").string();
  // Kept open (and locked) until the process exits.
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("--out ", out_dir, ": cannot open ", path, ": ",
                     std::strerror(errno), " (is the directory writable?)"));
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char buf[64] = {};
    const ssize_t n = ::pread(fd, buf, sizeof(buf) - 1, 0);
    ::close(fd);
    if (err == EWOULDBLOCK) {
      std::string holder(buf, n > 0 ? static_cast<size_t>(n) : 0);
      holder = std::string(absl::StripTrailingAsciiWhitespace(holder));
      return absl::FailedPreconditionError(absl::StrCat(
          "--out ", out_dir, " is in use by another run (",
          holder.empty() ? "pid unknown" : holder, ", holding ", path,
          "): two runs in one directory would mix their files"));
    }
    return absl::FailedPreconditionError(absl::StrCat(
        "--out ", out_dir, ": cannot lock ", path, ": ", std::strerror(err)));
  }
  const std::string me = absl::StrCat("pid ", getpid(), "\n");
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, me.data(), me.size(), 0) !=
                                     static_cast<ssize_t>(me.size())) {
    const int err = errno;
    ::close(fd);
    return absl::FailedPreconditionError(absl::StrCat(
        "--out ", out_dir, ": cannot write ", path, ": ", std::strerror(err)));
  }
  return absl::OkStatus();
}

}  // namespace mnemo::runtime
