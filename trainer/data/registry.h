// Dataset registry: find a dataset by name locally, or download it.
#ifndef MNEMO_TRAINER_DATA_REGISTRY_H_
#define MNEMO_TRAINER_DATA_REGISTRY_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "trainer/data/event_log.h"

namespace mnemo::data {

struct DatasetInfo {
  std::string name;                     // "wikipedia", "mathoverflow", ...
  std::vector<std::string> file_names;  // local names, preferred first
  Format format = Format::kAuto;        // format of the local/downloaded file
  std::string url;                      // official download address
  std::string download_name;            // file name the download is saved as
  // Prefix of the sha256 of the decompressed content of the download, when
  // known (empty: not verified).
  std::string sha256_prefix;
  std::string description;
  // When the download is a tar archive: the member to extract (it is then
  // gzip-compressed into the first of file_names). Empty: a plain file.
  std::string archive_member;
};

const std::vector<DatasetInfo>& Datasets();
const DatasetInfo* FindDataset(std::string_view name);

struct ResolveOptions {
  std::vector<std::string>
      search_dirs;  // in order: --data dir, $MNEMO_DATA_DIR, ../shared/data
  bool allow_download = true;
  std::string download_dir;  // where downloads go (default: first search dir)
};

// The usual search path: `data_dir` (the --data flag, if non-empty), then
// $MNEMO_DATA_DIR (if set), then ../shared/data and shared/data relative to
// the working directory.
std::vector<std::string> DefaultSearchDirs(const std::string& data_dir);

// Resolves `name_or_path`: an existing file path is returned as is; a
// registry name is looked up as a file in each search dir, then downloaded
// (curl or wget) from its official address and checked against its checksum.
// NOT_FOUND with instructions when nothing works. `*format` (may be null)
// receives the registry format of the file found, or kAuto for a path.
absl::StatusOr<std::string> ResolveDataset(const std::string& name_or_path,
                                           const ResolveOptions& options,
                                           Format* format);

// Downloads `info.url` into `dir` (created if missing) with curl, or wget
// when curl is missing; extracts `info.archive_member` when set; checks
// `info.sha256_prefix` (via sha256sum) when set; then renames the file into
// place atomically and returns its path. Nothing is left behind on failure.
// Errors: UNAVAILABLE (download/extract failed), DATA_LOSS (checksum).
absl::StatusOr<std::string> FetchDataset(const DatasetInfo& info,
                                         const std::string& dir);

}  // namespace mnemo::data

#endif  // MNEMO_TRAINER_DATA_REGISTRY_H_
