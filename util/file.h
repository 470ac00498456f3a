// Whole-file writes that a crash or a full disk cannot leave half done.
#ifndef MNEMO_UTIL_FILE_H_
#define MNEMO_UTIL_FILE_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace mnemo {

// Writes the concatenation of `parts` to `path` as RocksDB writes its
// files: into path + ".tmp", fsync'ed, renamed over `path`, then the
// directory fsync'ed (the rename is durable once this returns). On any
// error (a full disk: "No space left on device") the temporary file is
// removed, `path` is left as it was, and the error names the file.
absl::Status WriteFileDurably(const std::string& path,
                              const std::vector<std::string_view>& parts);

// The same durable write, a part at a time, for what should not be held
// whole in memory first (a checkpoint's archive streams through one).
// Create opens path + ".tmp"; Commit fsyncs, renames it over `path` and
// fsyncs the directory. The first failed Append or Commit, and a writer
// destroyed before Commit, remove the temporary file and leave `path` as
// it was; after a failure every call returns that error.
class DurableFileWriter {
 public:
  static absl::StatusOr<DurableFileWriter> Create(const std::string& path);
  DurableFileWriter(DurableFileWriter&& other) noexcept;
  DurableFileWriter& operator=(DurableFileWriter&&) = delete;
  DurableFileWriter(const DurableFileWriter&) = delete;
  ~DurableFileWriter();

  absl::Status Append(std::string_view data);
  absl::Status Commit();

 private:
  DurableFileWriter(std::string path, int fd);
  // Closes and removes the temporary file; keeps `err` as the status.
  absl::Status Fail(int err, const std::string& what);

  std::string path_;
  int fd_ = -1;    // -1: committed, failed or moved from
  int slot_ = -1;  // its temporary file's entry for the signal handler
  absl::Status status_;
};

// Makes SIGTERM, SIGINT and SIGHUP remove the temporary files of the
// DurableFileWriters still open (a checkpoint being written), then end the
// process by the signal as before (exit status 128 + N). For commands that
// do not handle those signals otherwise (a single-process `mnemo train`,
// `mnemo trainer`); installing it twice is harmless.
void RemoveTempFilesOnTermination();

// Removes the directory tree `path` once this process has ended, however
// it ends (a return from main, a signal, SIGKILL, a crash): a watcher
// process (/bin/sh) reads a pipe whose write end only this process holds,
// and at its end of file removes the tree. For scratch directories a
// stopped or failed job must not leave behind (spill stores, a launcher's
// temporary job directory); the process may remove them itself before.
absl::Status RemoveWhenProcessEnds(const std::string& path);

// fsync of a directory (after creating or renaming an entry in it).
absl::Status SyncDirectory(const std::string& dir);

// The whole file. NOT_FOUND when it does not exist.
absl::StatusOr<std::string> ReadFileToString(const std::string& path);

}  // namespace mnemo

#endif  // MNEMO_UTIL_FILE_H_
