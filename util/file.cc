#include "util/file.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "util/signal_safe_table.h"

extern char** environ;

namespace mnemo {
namespace {

absl::Status ErrnoError(int err, const std::string& what) {
  const std::string msg = absl::StrCat(what, ": ", std::strerror(err));
  if (err == ENOENT) return absl::NotFoundError(msg);
  return absl::InternalError(msg);
}

// Writes all of `data` to `fd` (retrying short writes and EINTR).
int WriteAll(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return 0;
}

// The temporary files of open DurableFileWriters, for the termination
// handler. More writers at once than entries: the others' files are not
// removed on a signal (the launcher's cleanup still finds them).
SignalSafeTable<16> g_temp_files;

void OnTermination(int sig) {
  g_temp_files.ForEach([](const auto& e) { ::unlink(e.path); });
  ::signal(sig, SIG_DFL);
  ::raise(sig);  // delivered once this returns: the process ends by it
}

}  // namespace

void RemoveTempFilesOnTermination() {
  for (int sig : {SIGTERM, SIGINT, SIGHUP}) ::signal(sig, &OnTermination);
}

absl::Status RemoveWhenProcessEnds(const std::string& path) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    return ErrnoError(errno, "cannot create a pipe");
  }
  // The watcher's stdin is the read end (dup2 clears close-on-exec there);
  // the write end closes on exec in it and in every child this process
  // starts later, so only this process holds it. Its output goes nowhere.
  // The path travels in the environment, not in argv, so that the watcher
  // does not show it in process listings while it waits.
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fds[0], 0);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  std::vector<std::string> env_storage = {"MNEMO_REMOVE_PATH=" + path};
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::strncmp(*e, "MNEMO_REMOVE_PATH=", 18) != 0) {
      env_storage.emplace_back(*e);
    }
  }
  std::vector<char*> env;
  for (std::string& e : env_storage) env.push_back(e.data());
  env.push_back(nullptr);
  char sh[] = "/bin/sh", c[] = "-c",
       script[] = "cat >/dev/null; exec rm -rf -- \"$MNEMO_REMOVE_PATH\"";
  char* argv[] = {sh, c, script, nullptr};
  pid_t pid;
  const int rc = posix_spawn(&pid, sh, &fa, nullptr, argv, env.data());
  posix_spawn_file_actions_destroy(&fa);
  ::close(fds[0]);
  if (rc != 0) {
    ::close(fds[1]);
    return ErrnoError(rc, absl::StrCat("cannot start a watcher to remove ",
                                       path, " when this process ends"));
  }
  // fds[1] stays open for the rest of this process's life.
  return absl::OkStatus();
}

absl::Status SyncDirectory(const std::string& dir) {
  const int fd = ::open(dir.empty() ? "." : dir.c_str(),
                        O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoError(errno, absl::StrCat("cannot open ", dir));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) return ErrnoError(err, absl::StrCat("cannot sync ", dir));
  return absl::OkStatus();
}

absl::StatusOr<DurableFileWriter> DurableFileWriter::Create(
    const std::string& path) {
  const std::string tmp = path + ".tmp";
  const int fd =
      ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError(errno, absl::StrCat("cannot create ", tmp));
  return DurableFileWriter(path, fd);
}

DurableFileWriter::DurableFileWriter(std::string path, int fd)
    : path_(std::move(path)),
      fd_(fd),
      slot_(g_temp_files.Claim(path_ + ".tmp")) {}

DurableFileWriter::DurableFileWriter(DurableFileWriter&& other) noexcept
    : path_(std::move(other.path_)),
      fd_(std::exchange(other.fd_, -1)),
      slot_(std::exchange(other.slot_, -1)),
      status_(std::move(other.status_)) {}

DurableFileWriter::~DurableFileWriter() {
  if (fd_ >= 0) Fail(0, "").IgnoreError();  // dropped before Commit
}

absl::Status DurableFileWriter::Fail(int err, const std::string& what) {
  ::close(fd_);
  fd_ = -1;
  ::unlink((path_ + ".tmp").c_str());
  g_temp_files.Release(std::exchange(slot_, -1));
  if (err != 0) status_ = ErrnoError(err, what);
  return status_;
}

absl::Status DurableFileWriter::Append(std::string_view data) {
  if (fd_ < 0) {
    return status_.ok() ? absl::FailedPreconditionError(
                              absl::StrCat(path_, " is already written"))
                        : status_;
  }
  if (const int err = WriteAll(fd_, data); err != 0) {
    return Fail(err, absl::StrCat("cannot write ", path_));
  }
  return absl::OkStatus();
}

absl::Status DurableFileWriter::Commit() {
  if (fd_ < 0) return Append({});
  // A full disk can also show first at fsync or close (delayed allocation).
  if (::fsync(fd_) != 0)
    return Fail(errno, absl::StrCat("cannot write ", path_));
  const int rc = ::close(fd_);
  const int close_err = errno;
  fd_ = -1;
  const std::string tmp = path_ + ".tmp";
  // Renamed or removed below: no longer the handler's to remove.
  struct Unregister {
    int& slot;
    ~Unregister() { g_temp_files.Release(std::exchange(slot, -1)); }
  } unregister{slot_};
  if (rc != 0) {
    ::unlink(tmp.c_str());
    return status_ =
               ErrnoError(close_err, absl::StrCat("cannot write ", path_));
  }
  if (::rename(tmp.c_str(), path_.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return status_ = ErrnoError(
               err, absl::StrCat("cannot rename ", tmp, " to ", path_));
  }
  status_ =
      absl::FailedPreconditionError(absl::StrCat(path_, " is already written"));
  return SyncDirectory(std::filesystem::path(path_).parent_path().string());
}

absl::Status WriteFileDurably(const std::string& path,
                              const std::vector<std::string_view>& parts) {
  absl::StatusOr<DurableFileWriter> w = DurableFileWriter::Create(path);
  if (!w.ok()) return w.status();
  for (std::string_view part : parts) {
    if (absl::Status s = w->Append(part); !s.ok()) return s;
  }
  return w->Commit();
}

absl::StatusOr<std::string> ReadFileToString(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoError(errno, absl::StrCat("cannot open ", path));
  std::string out;
  char buf[1 << 16];
  while (true) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      return ErrnoError(err, absl::StrCat("cannot read ", path));
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

}  // namespace mnemo
