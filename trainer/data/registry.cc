#include "trainer/data/registry.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "util/status_macros.h"

extern char** environ;

namespace mnemo::data {
namespace {

namespace fs = std::filesystem;

bool IsRegularFile(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// Runs argv[0] (looked up in PATH) with stdin from /dev/null; stdout goes to
// `captured` when non-null (else /dev/null), stderr to `captured_err` (else
// /dev/null). Returns the exit status, 127 when it could not be started, or
// 128 + signal.
int RunProcess(const std::vector<std::string>& args, std::string* captured,
               std::string* captured_err) {
  std::vector<char*> argv;
  for (const std::string& a : args)
    argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  int out_pipe[2] = {-1, -1}, err_pipe[2] = {-1, -1};
  if (captured && ::pipe(out_pipe) != 0) return 127;
  if (captured_err && ::pipe(err_pipe) != 0) return 127;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  if (captured) {
    posix_spawn_file_actions_adddup2(&fa, out_pipe[1], 1);
    posix_spawn_file_actions_addclose(&fa, out_pipe[0]);
    posix_spawn_file_actions_addclose(&fa, out_pipe[1]);
  } else {
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  }
  if (captured_err) {
    posix_spawn_file_actions_adddup2(&fa, err_pipe[1], 2);
    posix_spawn_file_actions_addclose(&fa, err_pipe[0]);
    posix_spawn_file_actions_addclose(&fa, err_pipe[1]);
  } else {
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  }
  pid_t pid;
  const int rc =
      posix_spawnp(&pid, argv[0], &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (captured) ::close(out_pipe[1]);
  if (captured_err) ::close(err_pipe[1]);
  // Reads both pipes to EOF (alternating; outputs here are small).
  auto drain = [](int fd, std::string* sink) {
    if (fd < 0) return;
    char buf[4096];
    ssize_t n;
    while ((n = ::read(fd, buf, sizeof buf)) > 0) sink->append(buf, n);
    ::close(fd);
  };
  if (rc != 0) {
    if (captured) ::close(out_pipe[0]);
    if (captured_err) ::close(err_pipe[0]);
    return 127;
  }
  if (captured) drain(out_pipe[0], captured);
  if (captured_err) drain(err_pipe[0], captured_err);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 127;
}

// Downloads `url` to `out` with curl, falling back to wget.
absl::Status Download(const std::string& url, const std::string& out) {
  std::string err;
  int rc = RunProcess({"curl", "-fsSL", "--max-time", "600", "-o", out, url},
                      nullptr, &err);
  if (rc == 127) {
    err.clear();
    rc = RunProcess({"wget", "-q", "--timeout=60", "-O", out, url}, nullptr,
                    &err);
    if (rc == 127)
      return absl::UnavailableError("neither curl nor wget could be run");
  }
  if (rc != 0) {
    while (!err.empty() && (err.back() == '\n' || err.back() == '\r'))
      err.pop_back();
    return absl::UnavailableError(
        absl::StrCat("download of ", url, " failed (exit ", rc,
                     err.empty() ? "" : ": ", err, ")"));
  }
  return absl::OkStatus();
}

// Writes `content` gzip-compressed to `path`.
absl::Status WriteGzip(const std::string& content, const std::string& path) {
  gzFile f = gzopen(path.c_str(), "wb6");
  if (!f) return absl::InternalError(absl::StrCat("cannot write ", path));
  size_t off = 0;
  while (off < content.size()) {
    const unsigned chunk =
        static_cast<unsigned>(std::min<size_t>(content.size() - off, 1 << 24));
    if (gzwrite(f, content.data() + off, chunk) != static_cast<int>(chunk)) {
      gzclose(f);
      return absl::InternalError(absl::StrCat("gzip write failed: ", path));
    }
    off += chunk;
  }
  if (gzclose(f) != Z_OK)
    return absl::InternalError(absl::StrCat("gzip close failed: ", path));
  return absl::OkStatus();
}

// sha256 (hex) of the decompressed content of `path`, via sha256sum.
absl::StatusOr<std::string> Sha256OfContent(const std::string& path) {
  ASSIGN_OR_RETURN(std::string content, ReadMaybeGzip(path));
  const std::string tmp = path + ".sha-tmp";
  {
    FILE* f = std::fopen(tmp.c_str(), "wb");
    if (!f) return absl::InternalError(absl::StrCat("cannot write ", tmp));
    const bool ok =
        std::fwrite(content.data(), 1, content.size(), f) == content.size();
    if (std::fclose(f) != 0 || !ok)
      return absl::InternalError(absl::StrCat("cannot write ", tmp));
  }
  std::string out;
  const int rc = RunProcess({"sha256sum", tmp}, &out, nullptr);
  std::remove(tmp.c_str());
  if (rc != 0 || out.size() < 64)
    return absl::UnavailableError("sha256sum could not be run");
  return out.substr(0, 64);
}

}  // namespace

absl::StatusOr<std::string> FetchDataset(const DatasetInfo& info,
                                         const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec)
    return absl::UnavailableError(
        absl::StrCat("cannot create ", dir, ": ", ec.message()));
  const std::string tmp =
      absl::StrCat(dir, "/.", info.download_name, ".part.", ::getpid());
  absl::Status st = Download(info.url, tmp);
  std::string final_path = absl::StrCat(dir, "/", info.download_name);
  if (st.ok() && !info.archive_member.empty()) {
    // Extract the member from the tarball and gzip it into file_names[0].
    const std::string xdir = tmp + ".x";
    fs::create_directories(xdir, ec);
    std::string err;
    const int rc = RunProcess(
        {"tar", "-xf", tmp, "-C", xdir, info.archive_member}, nullptr, &err);
    if (rc != 0) {
      st = absl::UnavailableError(absl::StrCat("tar could not extract ",
                                               info.archive_member, " from ",
                                               info.url, ": ", err));
    } else {
      auto content =
          ReadMaybeGzip(absl::StrCat(xdir, "/", info.archive_member));
      st = content.ok() ? WriteGzip(*content, tmp + ".gz") : content.status();
      if (st.ok()) {
        fs::rename(tmp + ".gz", tmp, ec);
        if (ec) st = absl::InternalError(ec.message());
      }
      final_path = absl::StrCat(dir, "/", info.file_names.front());
    }
    fs::remove_all(xdir, ec);
  }
  if (st.ok() && !info.sha256_prefix.empty()) {
    auto sha = Sha256OfContent(tmp);
    if (!sha.ok()) {
      st = sha.status();
    } else if (sha->compare(0, info.sha256_prefix.size(), info.sha256_prefix) !=
               0) {
      st = absl::DataLossError(absl::StrCat(
          "checksum mismatch for ", info.url, ": sha256 of the content is ",
          sha->substr(0, 16), ", expected ", info.sha256_prefix));
    }
  }
  if (st.ok()) {
    fs::rename(tmp, final_path, ec);
    if (ec)
      st = absl::InternalError(absl::StrCat("cannot rename ", tmp, " to ",
                                            final_path, ": ", ec.message()));
  }
  if (!st.ok()) {
    fs::remove(tmp, ec);
    return st;
  }
  return final_path;
}

// The registry itself: one entry per dataset, in the order `mnemo data`
// lists them. Longer than 80 lines on purpose: it is a flat table (data, no
// logic), which reads best whole; another dataset is another entry here.
const std::vector<DatasetInfo>& Datasets() {
  static const std::vector<DatasetInfo>* kDatasets = new std::vector<
      DatasetInfo>{
      {"wikipedia",
       {"wikipedia.txt.gz", "wikipedia.txt"},
       Format::kTgnEdges,
       "http://snap.stanford.edu/jodie/wikipedia.csv",
       "wikipedia.csv",
       "",
       "JODIE Wikipedia edits (Kumar et al., KDD 2019): 157,474 events, "
       "9,227 nodes, bipartite. The local file is TGN's renumbered 'u i ts' "
       "edges; the download is the JODIE CSV with 172-dim edge features.",
       ""},
      {"mathoverflow",
       {"sx-mathoverflow.txt.gz", "sx-mathoverflow.txt"},
       Format::kSnap,
       "https://snap.stanford.edu/data/sx-mathoverflow.txt.gz",
       "sx-mathoverflow.txt.gz",
       "2bf52f784cdba697",
       "SNAP sx-mathoverflow (Paranjape et al., WSDM 2017): 506,550 events, "
       "24,818 nodes; not time-sorted in the file.",
       ""},
      {"collegemsg",
       {"CollegeMsg.txt.gz", "CollegeMsg.txt"},
       Format::kSnap,
       "https://snap.stanford.edu/data/CollegeMsg.txt.gz",
       "CollegeMsg.txt.gz",
       "e00ba2415373dee5",
       "SNAP CollegeMsg (Panzarasa et al. 2009): 59,835 events, 1,899 nodes.",
       ""},
      {"bitcoin-alpha",
       {"soc-sign-bitcoinalpha.konect.gz", "out.soc-sign-bitcoinalpha"},
       Format::kKonect,
       "http://konect.cc/files/download.tsv.soc-sign-bitcoinalpha.tar.bz2",
       "soc-sign-bitcoinalpha.konect.gz",
       "c84fb34301c04011",
       "KONECT soc-sign-bitcoinalpha (Kumar et al. 2016): 24,186 events, "
       "3,783 nodes; rating -10..10 as a 1-dim edge feature. The download is "
       "a tarball; out.soc-sign-bitcoinalpha is extracted and gzipped.",
       "soc-sign-bitcoinalpha/out.soc-sign-bitcoinalpha"},
      {"uslegis",
       {"USLegis.txt.gz", "USLegis.txt"},
       Format::kTuvw,
       "",
       "USLegis.txt.gz",
       "849d044d42c09c1f",
       "US Legislative co-sponsorship (Huang et al., KDD 2020; DyGLib's US "
       "Legis) as 't,u,v,w': 60,396 events, 225 nodes. No official "
       "single-file address (DyGLib ships a zip): place USLegis.txt.gz in a "
       "data dir by hand.",
       ""},
      {"reddit",
       {"reddit.csv", "reddit.csv.gz"},
       Format::kJodieCsv,
       "http://snap.stanford.edu/jodie/reddit.csv",
       "reddit.csv",
       "",
       "JODIE Reddit posts (Kumar et al., KDD 2019), JODIE CSV with 172-dim "
       "edge features.",
       ""},
      {"mooc",
       {"mooc.csv", "mooc.csv.gz"},
       Format::kJodieCsv,
       "http://snap.stanford.edu/jodie/mooc.csv",
       "mooc.csv",
       "",
       "JODIE MOOC actions (Kumar et al., KDD 2019), JODIE CSV with 4-dim "
       "edge features.",
       ""},
      {"lastfm",
       {"lastfm.csv", "lastfm.csv.gz"},
       Format::kJodieCsv,
       "http://snap.stanford.edu/jodie/lastfm.csv",
       "lastfm.csv",
       "",
       "JODIE LastFM listens (Kumar et al., KDD 2019), JODIE CSV.",
       ""},
      {"askubuntu",
       {"sx-askubuntu.txt.gz", "sx-askubuntu.txt"},
       Format::kSnap,
       "https://snap.stanford.edu/data/sx-askubuntu.txt.gz",
       "sx-askubuntu.txt.gz",
       "",
       "SNAP sx-askubuntu (Paranjape et al., WSDM 2017).",
       ""},
  };
  return *kDatasets;
}

const DatasetInfo* FindDataset(std::string_view name) {
  for (const DatasetInfo& d : Datasets())
    if (d.name == name) return &d;
  return nullptr;
}

std::vector<std::string> DefaultSearchDirs(const std::string& data_dir) {
  std::vector<std::string> dirs;
  if (!data_dir.empty()) dirs.push_back(data_dir);
  if (const char* env = std::getenv("MNEMO_DATA_DIR"); env && *env)
    dirs.push_back(env);
  dirs.push_back("../shared/data");
  dirs.push_back("shared/data");
  return dirs;
}

namespace {

// The error for `name_or_path`, which is neither a file nor a registry
// name: INVALID_ARGUMENT when it is a directory (saying how to name a
// dataset in it), else NOT_FOUND listing the known names.
absl::Status UnknownDatasetError(const std::string& name_or_path) {
  std::error_code dir_ec;
  if (std::filesystem::is_directory(name_or_path, dir_ec)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", name_or_path,
        "' is a directory: name a dataset and where to look for it (e.g. "
        "--data wikipedia --data-dir ",
        name_or_path, "), or give the path of an event file"));
  }
  std::vector<std::string> names;
  for (const DatasetInfo& d : Datasets()) names.push_back(d.name);
  return absl::NotFoundError(absl::StrCat(
      "'", name_or_path,
      "' is neither an existing file nor a known dataset name; known "
      "datasets: ",
      absl::StrJoin(names, ", ")));
}

// The first local copy of `info`: in each of `search_dirs` in turn, the
// registry's file names, then the download's name. nullopt when there is
// none. `*format` (may be null) receives the copy's format: the registry's,
// or kAuto for the download's name.
std::optional<std::string> FindLocalCopy(
    const DatasetInfo& info, const std::vector<std::string>& search_dirs,
    Format* format) {
  for (const std::string& dir : search_dirs) {
    for (const std::string& file : info.file_names) {
      std::string p = absl::StrCat(dir, "/", file);
      if (IsRegularFile(p)) {
        if (format) *format = info.format;
        return p;
      }
    }
    std::string p = absl::StrCat(dir, "/", info.download_name);
    if (!info.download_name.empty() && IsRegularFile(p)) {
      if (format) *format = Format::kAuto;
      return p;
    }
  }
  return std::nullopt;
}

// Downloads `info` (FetchDataset) into options.download_dir, by default the
// first search dir, and returns its path; `*format` (may be null) receives
// the downloaded file's format. On failure the status's message says why
// there is no download, for the caller's NOT_FOUND: FAILED_PRECONDITION
// when the dataset has no address, downloads are disabled or there is no
// dir, else FetchDataset's error.
absl::StatusOr<std::string> DownloadDataset(const DatasetInfo& info,
                                            const ResolveOptions& options,
                                            Format* format) {
  if (info.url.empty()) {
    return absl::FailedPreconditionError(
        "it has no official single-file download address");
  }
  if (!options.allow_download) {
    return absl::FailedPreconditionError("downloads are disabled");
  }
  std::string dir = options.download_dir;
  if (dir.empty() && !options.search_dirs.empty())
    dir = options.search_dirs.front();
  if (dir.empty()) {
    return absl::FailedPreconditionError("no download dir was given");
  }
  absl::StatusOr<std::string> got = FetchDataset(info, dir);
  if (got.ok() && format) {
    *format = info.archive_member.empty() &&
                      info.download_name != info.file_names.front()
                  ? Format::kAuto
                  : info.format;
  }
  return got;
}

// How to fetch `info` by hand, up to the dirs it goes into: "place F by
// hand in ", "download URL by hand[, extract ...] into ".
std::string FetchByHandHint(const DatasetInfo& info) {
  if (info.url.empty()) {
    return absl::StrCat("place ", info.file_names.front(), " by hand in ");
  }
  if (!info.archive_member.empty()) {
    return absl::StrCat("download ", info.url, " by hand, extract ",
                        info.archive_member, " and gzip it as ",
                        info.file_names.front(), " into ");
  }
  return absl::StrCat("download ", info.url, " by hand into ");
}

}  // namespace

absl::StatusOr<std::string> ResolveDataset(const std::string& name_or_path,
                                           const ResolveOptions& options,
                                           Format* format) {
  if (IsRegularFile(name_or_path)) {
    if (format) *format = Format::kAuto;
    return name_or_path;
  }
  const DatasetInfo* info = FindDataset(name_or_path);
  if (info == nullptr) return UnknownDatasetError(name_or_path);
  if (std::optional<std::string> local =
          FindLocalCopy(*info, options.search_dirs, format)) {
    return *std::move(local);
  }
  absl::StatusOr<std::string> got = DownloadDataset(*info, options, format);
  if (got.ok()) return got;
  return absl::NotFoundError(
      absl::StrCat("dataset '", info->name, "' not found: looked for ",
                   absl::StrJoin(info->file_names, " or "), " in [",
                   absl::StrJoin(options.search_dirs, ", "), "] and ",
                   got.status().message(),
                   ". To fix: pass --data DIR with a dir that holds it, set "
                   "MNEMO_DATA_DIR=DIR, or ",
                   FetchByHandHint(*info), "one of those dirs."));
}

}  // namespace mnemo::data
