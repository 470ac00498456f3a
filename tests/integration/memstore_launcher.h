// Localhost launcher for multi-process tests and benchmarks (after ps-lite's
// tests/local.sh): starts `mnemo memstore ...` on a free port, waits until
// it reports SERVING over grpc.health.v1, and always kills it when the
// handle goes (SIGKILL; the child also dies with its parent via
// PR_SET_PDEATHSIG, so a crashed test leaves no server behind).
#ifndef MNEMO_TESTS_INTEGRATION_MEMSTORE_LAUNCHER_H_
#define MNEMO_TESTS_INTEGRATION_MEMSTORE_LAUNCHER_H_

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "services/memstore_client.h"

namespace mnemo::testing {

class MemstoreProcess {
 public:
  // $MNEMO_BIN, else `fallback`.
  static std::string Binary(const std::string& fallback = "mnemo") {
    const char* bin = std::getenv("MNEMO_BIN");
    return bin && *bin ? bin : fallback;
  }

  // Runs `bin memstore --listen 127.0.0.1:0 args...`, output to `log_path`.
  // Returns once the server is SERVING; UNAVAILABLE (with the log's tail)
  // if it exits or is not serving within `timeout_seconds`.
  static absl::StatusOr<std::unique_ptr<MemstoreProcess>> Start(
      const std::string& bin, const std::vector<std::string>& args,
      const std::string& log_path, double timeout_seconds = 30) {
    return StartCommand(bin, "memstore", args, log_path, timeout_seconds);
  }
  // The same for another serving command (`mnemo serve`, `mnemo
  // coordinator`): one that prints "listening on HOST:PORT".
  static absl::StatusOr<std::unique_ptr<MemstoreProcess>> StartCommand(
      const std::string& bin, const std::string& command,
      const std::vector<std::string>& args, const std::string& log_path,
      double timeout_seconds = 30) {
    std::vector<std::string> argv = {bin, command, "--listen", "127.0.0.1:0"};
    argv.insert(argv.end(), args.begin(), args.end());
    std::remove(log_path.c_str());  // never read a previous run's address
    const pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) return absl::InternalError("fork failed");
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(127);
      FILE* log = std::fopen(log_path.c_str(), "w");
      if (log) {
        dup2(fileno(log), 1);
        dup2(fileno(log), 2);
      }
      std::vector<char*> cargv;
      for (auto& a : argv) cargv.push_back(a.data());
      cargv.push_back(nullptr);
      execv(cargv[0], cargv.data());
      _exit(127);
    }
    std::unique_ptr<MemstoreProcess> p(new MemstoreProcess(pid, log_path));
    const auto deadline =
        std::chrono::steady_clock::now() +
        std::chrono::milliseconds(static_cast<int64_t>(timeout_seconds * 1e3));
    while (std::chrono::steady_clock::now() < deadline) {
      int status = 0;
      if (waitpid(pid, &status, WNOHANG) == pid) {
        p->pid_ = -1;
        return absl::UnavailableError(
            absl::StrCat("mnemo ", command, " exited early: ", p->Log()));
      }
      if (p->address_.empty()) {
        const std::string log = p->Log();
        const std::string key = "listening on ";
        auto at = log.find(key);
        if (at != std::string::npos) {
          auto end = log.find_first_of(" \n", at + key.size());
          if (end != std::string::npos) {
            p->address_ = log.substr(at + key.size(), end - at - key.size());
          }
        }
      }
      if (!p->address_.empty()) {
        auto serving = services::CheckHealth(p->address_, 1.0);
        if (serving.ok() && *serving) return p;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return absl::UnavailableError(
        absl::StrCat("mnemo ", command, " not serving in time: ", p->Log()));
  }

  ~MemstoreProcess() { Kill(SIGKILL); }

  // Sends `sig` and reaps the process; returns its wait status (-1 if it
  // was already gone).
  // Safe to call from another thread.
  int Kill(int sig) {
    const pid_t pid = pid_.exchange(-1);
    if (pid <= 0) return -1;
    ::kill(pid, sig);
    int status = 0;
    waitpid(pid, &status, 0);
    return status;
  }

  const std::string& address() const { return address_; }
  pid_t pid() const { return pid_; }
  std::string Log() const {
    std::ifstream in(log_path_);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

 private:
  MemstoreProcess(pid_t pid, std::string log_path)
      : pid_(pid), log_path_(std::move(log_path)) {}

  std::atomic<pid_t> pid_;
  std::string log_path_, address_;
};

}  // namespace mnemo::testing

#endif  // MNEMO_TESTS_INTEGRATION_MEMSTORE_LAUNCHER_H_
