// mnemo: one command, one subcommand per role. This executable links no
// LibTorch: the service roles run here, and train, trainer and version run
// in mnemo-trainer (services/cli/run_command.h).
#include "services/cli/run_command.h"

int main(int argc, char** argv) {
  return mnemo::RunCommand(argc, argv, /*local=*/nullptr);
}
