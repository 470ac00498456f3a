// mnemo: one binary, one subcommand per role.
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/status/status.h"
#include "services/cli/commands.h"
#include "trainer/platform/build_info.h"
#include "trainer/runtime/report/summary.h"

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
    "  data         inspect a dataset or event file\n"
    "  query        read node memory from running memory-store shards\n"
    "  healthcheck  exit 0 when a gRPC server is SERVING\n"
    "  version      print the version, LibTorch's, CUDA's and NCCL's, and\n"
    "               the NVIDIA driver and GPUs found (exit 1: a driver too\n"
    "               old for this build's CUDA)\n\n"
    "Run 'mnemo <command> --help' for a command's flags.\n";
}  // namespace

int main(int argc, char** argv) {
  // NCCL without a blocking wait: the host never waits in a collective, and
  // one that outlives the job's --timeout (a dead or frozen peer) is ended
  // by the process group's watchdog, which takes the process down
  // (SkipCleanUp: no ncclCommAbort, which can itself hang). LibTorch's
  // default, named here so that it holds whatever it becomes; an operator's
  // own setting wins. Set before any thread starts (setenv races with other
  // threads' getenv).
  setenv("TORCH_NCCL_ASYNC_ERROR_HANDLING", "3", /*overwrite=*/0);
  // A child of `mnemo train --workers N` dies with the launcher, however the
  // launcher ends (SIGKILL included): the launcher names itself here.
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
  if (cmd == "train") return mnemo::TrainMain(argc, argv, 2);
  if (cmd == "data") return mnemo::DataMain(argc, argv, 2);
  if (cmd == "memstore") return mnemo::MemstoreMain(argc, argv, 2);
  if (cmd == "coordinator") return mnemo::CoordinatorMain(argc, argv, 2);
  if (cmd == "trainer") return mnemo::TrainerMain(argc, argv, 2);
  if (cmd == "query") return mnemo::QueryMain(argc, argv, 2);
  if (cmd == "healthcheck") return mnemo::HealthcheckMain(argc, argv, 2);
  if (cmd == "version" || cmd == "--version") {
    const mnemo::platform::BuildInfo info = mnemo::platform::GetBuildInfo();
    std::printf("mnemo %s\n%s\n", mnemo::runtime::kVersion,
                mnemo::platform::DescribeBuild(info).c_str());
    // A driver too old for this build's CUDA: said here, and the exit code
    // tells scripts (no driver at all is fine: CPU training).
    if (absl::Status s = mnemo::platform::CheckDriver(info); !s.ok()) {
      std::fprintf(stderr, "mnemo: %s\n", std::string(s.message()).c_str());
      return 1;
    }
    return 0;
  }
  std::fprintf(stderr, "mnemo: unknown command '%s'\n\n%s", cmd.c_str(),
               kUsage);
  return 2;
}
