// mnemo-trainer: every mnemo command, the trainer's included (LibTorch,
// CUDA, NCCL). Users run `mnemo`, which hands train, trainer and version
// here (services/cli/run_command.h).
#include <cstdio>
#include <string>

#include "absl/status/status.h"
#include "services/cli/commands.h"
#include "services/cli/run_command.h"
#include "trainer/platform/build_info.h"
#include "trainer/runtime/report/summary.h"

namespace {

int Version() {
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

}  // namespace

int main(int argc, char** argv) {
  static const mnemo::TrainerCommands kLocal = {
      &mnemo::TrainMain, &mnemo::TrainerMain, &Version, &mnemo::ServeMain};
  return mnemo::RunCommand(argc, argv, &kLocal);
}
