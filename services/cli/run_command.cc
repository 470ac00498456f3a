#include "services/cli/run_command.h"

#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <system_error>

#include "services/cli/commands.h"
#include "trainer/runtime/report/summary.h"

namespace mnemo {
namespace {

constexpr char kUsage[] =
    "usage: mnemo <command> [flags]\n\n"
    "Commands:\n"
    "  train        train a temporal GNN (TGN, JODIE, APAN, TGAT, DySAT) on\n"
    "               an event stream (all roles in one process; --workers N\n"
    "               launches a local cluster; --device cuda: on a GPU)\n"
    "  coordinator  run the coordinator of a training cluster\n"
    "  memstore     serve one shard of node memory over gRPC\n"
    "  trainer      run one trainer worker of a cluster\n"
    "  serve        serve a trained run's model on live node memory over\n"
    "               gRPC (link scores, top-k, streaming ingestion)\n"
    "  data         inspect a dataset or event file\n"
    "  query        read node memory from running memory-store shards\n"
    "  healthcheck  exit 0 when a gRPC server is SERVING\n"
    "  version      print the version, LibTorch's, CUDA's and NCCL's, and\n"
    "               the NVIDIA driver and GPUs found (exit 1: a driver too\n"
    "               old for this build's CUDA)\n\n"
    "Run 'mnemo <command> --help' for a command's flags.\n";

constexpr char kTrainerExeName[] = "mnemo-trainer";

bool IsExecutableFile(const std::string& path) {
  std::error_code ec;
  return std::filesystem::is_regular_file(path, ec) &&
         access(path.c_str(), X_OK) == 0;
}

// Hands argv to the trainer executable. Returns only on failure: 2 where
// this installation has none (a service-only image), 1 where execv failed.
int ExecTrainer(const std::string& cmd, char** argv, bool quiet_if_absent) {
  const std::string self = SelfExe();
  std::string found;
  const std::vector<std::string> candidates = TrainerExeCandidates(self);
  for (const std::string& c : candidates) {
    if (IsExecutableFile(c)) {
      found = c;
      break;
    }
  }
  if (found.empty()) {
    if (quiet_if_absent) return 2;
    std::string looked;
    for (const std::string& c : candidates) looked += "\n  " + c;
    std::fprintf(stderr,
                 "mnemo %s: this installation has the service roles only "
                 "(memstore, coordinator, query, healthcheck, data): the "
                 "trainer executable (%s, which loads LibTorch) is in none "
                 "of:%s\n(set MNEMO_TRAINER_EXE to its path, or use the "
                 "trainer image)\n",
                 cmd.c_str(), kTrainerExeName, looked.c_str());
    return 2;
  }
  // The trainer's launcher starts shards and coordinators from here, so
  // that they load no LibTorch (an operator's own setting wins).
  setenv("MNEMO_SERVICE_EXE", self.c_str(), /*overwrite=*/0);
  execv(found.c_str(), argv);
  std::fprintf(stderr, "mnemo %s: cannot run %s: %s\n", cmd.c_str(),
               found.c_str(), std::strerror(errno));
  return 1;
}

}  // namespace

std::string SelfExe() {
  std::error_code ec;
  auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? "mnemo" : p.string();
}

std::vector<std::string> TrainerExeCandidates(const std::string& self) {
  namespace fs = std::filesystem;
  std::vector<std::string> out;
  if (const char* env = std::getenv("MNEMO_TRAINER_EXE"); env && *env) {
    out.push_back(env);
  }
  const fs::path dir = fs::path(self).parent_path();
  out.push_back((dir / kTrainerExeName).string());
  out.push_back(
      (dir / ".." / "lib" / "mnemo" / kTrainerExeName).lexically_normal());
  return out;
}

std::string ServiceExe() {
  if (const char* env = std::getenv("MNEMO_SERVICE_EXE");
      env && *env && IsExecutableFile(env)) {
    return env;
  }
  return SelfExe();
}

int RunCommand(int argc, char** argv, const TrainerCommands* local) {
  // NCCL without a blocking wait: the host never waits in a collective, and
  // one that outlives the job's --timeout (a dead or frozen peer) is ended
  // by the process group's watchdog, which takes the process down
  // (SkipCleanUp: no ncclCommAbort, which can itself hang). LibTorch's
  // default, named here so that it holds whatever it becomes; an operator's
  // own setting wins. Set before any thread starts (setenv races with other
  // threads' getenv); it survives the execv into the trainer executable.
  setenv("TORCH_NCCL_ASYNC_ERROR_HANDLING", "3", /*overwrite=*/0);
  // A child of `mnemo train --workers N` dies with the launcher, however the
  // launcher ends (SIGKILL included): the launcher names itself here. The
  // setting survives execv.
  if (const char* parent = std::getenv("MNEMO_PARENT_PID")) {
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (std::to_string(getppid()) != parent) return 3;  // already gone
  }
  if (argc < 2 || !std::strcmp(argv[1], "--help") ||
      !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "help")) {
    std::printf("%s", kUsage);
    return argc < 2 ? 2 : 0;
  }
  const std::string cmd = argv[1];
  if (cmd == "data") return DataMain(argc, argv, 2);
  if (cmd == "memstore") return MemstoreMain(argc, argv, 2);
  if (cmd == "coordinator") return CoordinatorMain(argc, argv, 2);
  if (cmd == "query") return QueryMain(argc, argv, 2);
  if (cmd == "healthcheck") return HealthcheckMain(argc, argv, 2);
  const bool version = cmd == "version" || cmd == "--version";
  if (cmd == "train" || cmd == "trainer" || cmd == "serve" || version) {
    if (local != nullptr) {
      if (version) return local->version();
      if (cmd == "serve") return local->serve(argc, argv, 2);
      return cmd == "train" ? local->train(argc, argv, 2)
                            : local->trainer(argc, argv, 2);
    }
    const int rc = ExecTrainer(cmd, argv, /*quiet_if_absent=*/version);
    if (version && rc == 2) {
      std::printf(
          "mnemo %s\nservice roles only: no trainer executable (%s) in this "
          "installation; LibTorch, CUDA and NCCL are not loaded\n",
          runtime::kVersion, kTrainerExeName);
      return 0;
    }
    return rc;
  }
  std::fprintf(stderr, "mnemo: unknown command '%s'\n\n%s", cmd.c_str(),
               kUsage);
  return 2;
}

}  // namespace mnemo
