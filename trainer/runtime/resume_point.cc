#include "trainer/runtime/resume_point.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
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
  const fs::path tmp = final_path.string() + ".tmp";
  std::string files;
  for (int r = 0; r < m.workers; ++r) {
    absl::StrAppend(&files, r ? "," : "", "rank-", r, ".pt");
  }
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << "# Complete: every rank's file below was written before this.\n"
        << "format: " << kClusterManifestFormat << "\n"
        << "epoch: " << m.epoch << "\n"
        << "workers: " << m.workers << "\n"
        << "seed: " << m.seed << "\n"
        << "policy: " << m.policy << "\n"
        << "files: " << files << "\n";
    out.flush();
    if (!out) {
      return absl::InternalError(absl::StrCat("cannot write ", tmp.string()));
    }
  }
  std::error_code ec;
  fs::rename(tmp, final_path, ec);
  if (ec) {
    return absl::InternalError(absl::StrCat("cannot rename ", tmp.string(),
                                            " to ", final_path.string(), ": ",
                                            ec.message()));
  }
  return absl::OkStatus();
}

std::string ResumePoint::FileFor(int rank, int world) const {
  if (!cluster) return SingleCheckpointPath(dir, epoch);
  return RankCheckpointPath(dir, epoch,
                            world == workers ? rank : rank % workers);
}

absl::StatusOr<ResumePoint> FindResumePoint(const std::string& dir) {
  const fs::path root = fs::path(dir) / "checkpoints";
  std::error_code ec;
  int last_single = -1, last_cluster = -1, last_incomplete = -1;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    const std::string name = entry.path().filename().string();
    std::error_code type_ec;
    if (entry.is_directory(type_ec)) {
      const int e = EpochOf(name, /*file=*/false);
      if (e < 0) continue;
      if (fs::exists(entry.path() / kManifest, type_ec)) {
        last_cluster = std::max(last_cluster, e);
      } else {
        last_incomplete = std::max(last_incomplete, e);
      }
    } else {
      last_single = std::max(last_single, EpochOf(name, /*file=*/true));
    }
  }
  if (last_single < 0 && last_cluster < 0) {
    std::string what = ec ? absl::StrCat(": ", ec.message()) : "";
    if (last_incomplete >= 0) {
      what = absl::StrFormat(
          "; %s has no manifest.yaml: the job stopped before every rank had "
          "written its file of epoch %d",
          ClusterCheckpointDir(dir, last_incomplete), last_incomplete);
    }
    return absl::NotFoundError(absl::StrCat(
        "--resume ", dir,
        ": no checkpoint to resume from (checkpoints/epoch-N.pt of a single "
        "process, or a complete cluster set: checkpoints/epoch-N/ with its "
        "manifest.yaml)",
        what));
  }
  ResumePoint p;
  p.dir = dir;
  if (last_cluster >= last_single) {
    const fs::path manifest =
        fs::path(ClusterCheckpointDir(dir, last_cluster)) / kManifest;
    absl::StatusOr<ClusterManifest> m = ReadManifest(manifest);
    if (!m.ok()) return m.status();
    if (m->epoch != last_cluster) {
      return absl::DataLossError(absl::StrFormat(
          "%s says epoch %d but lies in the directory of epoch %d",
          manifest.string(), m->epoch, last_cluster));
    }
    p.cluster = true;
    p.epoch = m->epoch;
    p.workers = m->workers;
    p.seed = m->seed;
    p.policy = m->policy;
    p.describe = absl::StrFormat("%s (%d-worker cluster, policy %s)",
                                 ClusterCheckpointDir(dir, p.epoch), p.workers,
                                 p.policy);
  } else {
    p.epoch = last_single;
    p.describe = SingleCheckpointPath(dir, p.epoch);
  }
  return p;
}

}  // namespace mnemo::runtime
