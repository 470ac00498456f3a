// The mnemo command's dispatch, shared by its two executables:
//  - `mnemo` (services/cli/main.cc) links no LibTorch: it runs the service
//    roles (memstore, coordinator, query, healthcheck, data) itself and
//    hands train, trainer and version to the trainer executable (execv, so
//    the process, its pid and its signals stay the same);
//  - `mnemo-trainer` (services/cli/trainer_main.cc) links LibTorch and runs
//    every command itself.
// docs/design.md "Executables".
#ifndef MNEMO_SERVICES_CLI_RUN_COMMAND_H_
#define MNEMO_SERVICES_CLI_RUN_COMMAND_H_

#include <string>
#include <vector>

namespace mnemo {

// The commands only the trainer executable has.
struct TrainerCommands {
  int (*train)(int argc, char** argv, int first);
  int (*trainer)(int argc, char** argv, int first);
  int (*version)();
  int (*serve)(int argc, char** argv, int first);
};

// Runs argv[1]: the service roles here; the trainer's commands with
// `local` where the executable has them, else by execv of the trainer
// executable (local == nullptr). Returns the exit code.
int RunCommand(int argc, char** argv, const TrainerCommands* local);

// Where a service-only `mnemo` looks for the trainer executable, in order:
// $MNEMO_TRAINER_EXE, then mnemo-trainer beside `self` (a build tree), then
// ../lib/mnemo/mnemo-trainer from `self`'s folder (an installation: bin/mnemo
// beside lib/mnemo/).
std::vector<std::string> TrainerExeCandidates(const std::string& self);

// The executable a launcher starts the service roles (memstore,
// coordinator) from: $MNEMO_SERVICE_EXE, which the service-only `mnemo`
// sets to itself before handing a command to the trainer executable, so
// that shards and coordinators load no LibTorch; else this executable.
std::string ServiceExe();

// This process's executable (/proc/self/exe), or "mnemo" where unreadable.
std::string SelfExe();

}  // namespace mnemo

#endif  // MNEMO_SERVICES_CLI_RUN_COMMAND_H_
