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

// fsync of a directory (after creating or renaming an entry in it).
absl::Status SyncDirectory(const std::string& dir);

// The whole file. NOT_FOUND when it does not exist.
absl::StatusOr<std::string> ReadFileToString(const std::string& path);

}  // namespace mnemo

#endif  // MNEMO_UTIL_FILE_H_
