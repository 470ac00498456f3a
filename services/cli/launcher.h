// Child processes of the local launcher (`mnemo train --workers N`): spawned
// from this binary, output forwarded line by line with a role prefix, and
// all stopped together on failure or Ctrl-C (like torchrun --standalone).
#ifndef MNEMO_SERVICES_CLI_LAUNCHER_H_
#define MNEMO_SERVICES_CLI_LAUNCHER_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace mnemo::services {

class ProcessGroup {
 public:
  ProcessGroup() = default;
  ~ProcessGroup();  // terminates whatever still runs

  // Starts `args` (args[0] is the program) with `extra_env` ("K=V") added to
  // this process's environment. Its stdout and stderr are forwarded to ours,
  // each line prefixed with "[name] ". Returns the child's index.
  absl::StatusOr<int> Spawn(const std::string& name,
                            const std::vector<std::string>& args,
                            const std::vector<std::string>& extra_env = {});

  // Waits until every child in `awaited` has exited 0 (returns OK), or any
  // child exits otherwise or `*interrupted` becomes true (returns an error
  // naming it). Polls every 50 ms.
  absl::Status Wait(const std::vector<int>& awaited,
                    const volatile int* interrupted);

  // Without blocking: the error Wait would return for a child that has
  // exited with a failure (or was killed), else OK.
  absl::Status Check();

  // SIGTERM to every live child, SIGKILL after `grace_seconds`.
  void TerminateAll(double grace_seconds = 5);

  int exit_code(int child) const;
  // Whether the child is still running (reaps it if not).
  bool Running(int child);
  // The names of the children that are alive but stopped (SIGSTOP,
  // SIGTSTP or a debugger: state T or t in /proc/PID/stat). Such a child
  // holds its sockets open and answers nothing: its peers see timeouts.
  std::vector<std::string> Stopped();

 private:
  struct Child {
    std::string name;
    pid_t pid = -1;
    int out_fd = -1;
    std::thread forwarder;
    bool exited = false;
    int status = 0;  // raw wait status
  };
  bool Reap(Child* c, bool block);

  std::vector<std::unique_ptr<Child>> children_;
  absl::Mutex output_mu_;  // one line at a time on our stdout
};

}  // namespace mnemo::services

#endif  // MNEMO_SERVICES_CLI_LAUNCHER_H_
