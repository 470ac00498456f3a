#include "services/cli/launcher.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "util/proc.h"

extern char** environ;

namespace mnemo::services {

ProcessGroup::~ProcessGroup() {
  TerminateAll(2);
  for (auto& c : children_) {
    if (c->forwarder.joinable()) c->forwarder.join();
  }
}

absl::StatusOr<int> ProcessGroup::Spawn(
    const std::string& name, const std::vector<std::string>& args,
    const std::vector<std::string>& extra_env) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe: ", std::strerror(errno)));
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDERR_FILENO);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null",
                                   O_RDONLY, 0);
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<std::string> env_storage;
  for (char** e = environ; *e; ++e) env_storage.emplace_back(*e);
  for (const auto& e : extra_env) env_storage.push_back(e);
  // The child ends with us (services/cli/main.cc: PR_SET_PDEATHSIG).
  env_storage.push_back(absl::StrCat("MNEMO_PARENT_PID=", getpid()));
  std::vector<char*> envp;
  for (auto& e : env_storage) envp.push_back(e.data());
  envp.push_back(nullptr);
  pid_t pid = -1;
  int rc = posix_spawn(&pid, args[0].c_str(), &actions, nullptr, argv.data(),
                       envp.data());
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);
  if (rc != 0) {
    close(fds[0]);
    return absl::InternalError(
        absl::StrCat("cannot start ", name, ": ", std::strerror(rc)));
  }
  auto child = std::make_unique<Child>();
  child->name = name;
  child->pid = pid;
  child->out_fd = fds[0];
  Child* raw = child.get();
  child->forwarder = std::thread([this, raw] {
    std::string pending;
    char buf[4096];
    ssize_t n;
    while ((n = read(raw->out_fd, buf, sizeof(buf))) > 0) {
      pending.append(buf, n);
      size_t pos;
      while ((pos = pending.find_first_of("\n\r")) != std::string::npos) {
        std::string line = pending.substr(0, pos);
        pending.erase(0, pos + 1);
        if (line.empty()) continue;
        absl::MutexLock lock(&output_mu_);
        std::fprintf(stdout, "[%s] %s\n", raw->name.c_str(), line.c_str());
        std::fflush(stdout);
      }
    }
    if (!pending.empty()) {
      absl::MutexLock lock(&output_mu_);
      std::fprintf(stdout, "[%s] %s\n", raw->name.c_str(), pending.c_str());
      std::fflush(stdout);
    }
    close(raw->out_fd);
  });
  children_.push_back(std::move(child));
  return static_cast<int>(children_.size()) - 1;
}

bool ProcessGroup::Reap(Child* c, bool block) {
  if (c->exited || c->pid < 0) return c->exited;
  int status = 0;
  pid_t r = waitpid(c->pid, &status, block ? 0 : WNOHANG);
  if (r == c->pid) {
    c->exited = true;
    c->status = status;
  }
  return c->exited;
}

int ProcessGroup::exit_code(int child) const {
  const Child& c = *children_[child];
  if (!c.exited) return -1;
  if (WIFEXITED(c.status)) return WEXITSTATUS(c.status);
  if (WIFSIGNALED(c.status)) return 128 + WTERMSIG(c.status);
  return -1;
}

bool ProcessGroup::Running(int child) {
  return !Reap(children_[child].get(), false);
}

std::vector<std::string> ProcessGroup::Stopped() {
  std::vector<std::string> stopped;
  for (auto& c : children_) {
    if (Reap(c.get(), false)) continue;
    // "pid (comm) state ...": comm may hold spaces and parentheses.
    std::ifstream in(absl::StrCat("/proc/", c->pid, "/stat"));
    std::string stat((std::istreambuf_iterator<char>(in)),
                     std::istreambuf_iterator<char>());
    const size_t close = stat.rfind(')');
    if (close == std::string::npos || close + 2 >= stat.size()) continue;
    const char state = stat[close + 2];
    if (state == 'T' || state == 't') stopped.push_back(c->name);
  }
  return stopped;
}

absl::Status ProcessGroup::Check() {
  // A child that failed itself is named before one that stopped because
  // the job failed elsewhere (exit 3).
  absl::Status elsewhere;
  for (size_t i = 0; i < children_.size(); ++i) {
    Child* c = children_[i].get();
    if (!Reap(c, false) || exit_code(i) == 0) continue;
    const int code = exit_code(i);
    if (WIFSIGNALED(c->status)) {
      return absl::AbortedError(
          absl::StrCat(c->name, " was killed by signal ", WTERMSIG(c->status)));
    }
    if (code != 3) {
      return absl::AbortedError(
          absl::StrCat(c->name, " exited with code ", code));
    }
    if (elsewhere.ok()) {
      elsewhere = absl::AbortedError(absl::StrCat(
          c->name,
          " stopped because the job failed elsewhere (exit 3; its message "
          "above says where)"));
    }
  }
  return elsewhere;
}

absl::Status ProcessGroup::Wait(const std::vector<int>& awaited,
                                const volatile int* interrupted) {
  while (true) {
    bool all_done = true;
    if (absl::Status s = Check(); !s.ok()) return s;
    for (int i : awaited) all_done = all_done && children_[i]->exited;
    if (all_done) return absl::OkStatus();
    if (interrupted && *interrupted) {
      return absl::CancelledError("interrupted");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

void ProcessGroup::TerminateAll(double grace_seconds) {
  for (auto& c : children_) {
    if (!Reap(c.get(), false)) kill(c->pid, SIGTERM);
  }
  const double deadline = MonotonicSeconds() + grace_seconds;
  for (auto& c : children_) {
    while (!Reap(c.get(), false) && MonotonicSeconds() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (!c->exited) {
      kill(c->pid, SIGKILL);
      Reap(c.get(), true);
    }
  }
}

}  // namespace mnemo::services
