// Entry points of the mnemo subcommands (services/cli/cmd_*.cc).
#ifndef MNEMO_SERVICES_CLI_COMMANDS_H_
#define MNEMO_SERVICES_CLI_COMMANDS_H_

#include <string>
#include <vector>

namespace mnemo {

// Each returns the process exit code, one scheme for every command
// (docs/operations.md "Exit codes"): 0 done; 1 failed here; 2 usage error
// (nothing was started); 3 the job failed elsewhere (the message names where);
// 128 + N stopped by signal N before finishing (130 SIGINT, 143 SIGTERM, 129
// SIGHUP), whether the command caught it or died of it. A memory store
// stopped by a signal shuts down cleanly and exits 0.
int TrainMain(int argc, char** argv, int first);
int DataMain(int argc, char** argv, int first);
int MemstoreMain(int argc, char** argv,
                 int first);  // services/cli/cmd_memstore.cc
int QueryMain(int argc, char** argv, int first);  // services/cli/cmd_query.cc
int HealthcheckMain(int argc, char** argv, int first);
int CoordinatorMain(int argc, char** argv, int first);  // cmd_coordinator.cc
int TrainerMain(int argc, char** argv, int first);      // cmd_trainer.cc
int ServeMain(int argc, char** argv, int first);        // cmd_serve.cc

// The dataset search path: `explicit_dirs`, then $MNEMO_DATA_DIR, then
// ../shared/data relative to the working directory and to the executable.
std::vector<std::string> DataSearchDirs(
    const std::vector<std::string>& explicit_dirs);

}  // namespace mnemo

#endif  // MNEMO_SERVICES_CLI_COMMANDS_H_
