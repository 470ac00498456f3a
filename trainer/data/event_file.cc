#include "trainer/data/event_file.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "util/crc32c.h"
#include "util/file.h"
#include "util/signal_safe_table.h"
#include "util/status_macros.h"

namespace mnemo::data {
namespace {

constexpr uint32_t kVersion = 1;
constexpr uint64_t kHeaderBytes = 4096;
constexpr uint64_t kAlign = 4096;
constexpr size_t kNameBytes = 128;
enum ColumnId {
  kSrc,
  kDst,
  kTime,
  kFeatures,
  kLabels,
  kOriginalIds,
  kItemFlags,
  kNumColumns
};
constexpr const char* kColumnNames[kNumColumns] = {
    "src",    "dst",          "t",           "edge_features",
    "labels", "original_ids", "node_is_item"};

struct ColumnEntry {
  uint64_t offset, bytes;
  uint32_t crc, zero;
};

// The fixed part of the header, in file order.
struct Header {
  char magic[8];
  uint32_t version;
  uint32_t header_bytes;
  int64_t events;
  int64_t nodes;
  int32_t edge_feature_dim;
  uint8_t format;
  uint8_t bipartite;
  uint8_t has_labels;
  uint8_t has_item_flags;
  double time_offset;
  uint32_t name_length;
  char name[kNameBytes];
  ColumnEntry columns[kNumColumns];
};
static_assert(sizeof(Header) + sizeof(uint32_t) <= kHeaderBytes);

uint64_t AlignUp(uint64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

std::string_view Bytes(const void* p, uint64_t n) {
  return {static_cast<const char*>(p), static_cast<size_t>(n)};
}

// The mappings a SIGBUS may come from: a mapped file cut short on disk
// (rewritten in place: `cp` or `truncate` over it) turns a read past its
// new end into SIGBUS, which would end the process without a word. The
// handler names the file instead.
SignalSafeTable<64> g_mappings;
struct sigaction g_previous_sigbus;

void WriteStderr(const char* text) {
  size_t n = std::strlen(text);
  while (n > 0) {
    const ssize_t w = ::write(STDERR_FILENO, text, n);
    if (w <= 0) return;
    text += w;
    n -= static_cast<size_t>(w);
  }
}

void OnSigbus(int sig, siginfo_t* info, void* context) {
  // si_code > 0: a fault the kernel raised (si_addr is its address); a
  // SIGBUS sent by kill or raise has none.
  const auto addr =
      info->si_code > 0 ? reinterpret_cast<uintptr_t>(info->si_addr) : 0;
  if (addr != 0) {
    g_mappings.ForEach([addr](const auto& e) {
      if (addr < e.begin || addr >= e.end) return;
      WriteStderr("mnemo: ");
      WriteStderr(e.path);
      WriteStderr(
          ": the columnar event file changed on disk while this process "
          "read it (cut short: a read past its new end). Event files must "
          "not be rewritten in place: write a new file and rename it over "
          "the old one, as `mnemo data --convert` does\n");
      ::_exit(1);
    });
  }
  // Not ours: what would have happened without this handler.
  if ((g_previous_sigbus.sa_flags & SA_SIGINFO) &&
      g_previous_sigbus.sa_sigaction != nullptr) {
    g_previous_sigbus.sa_sigaction(sig, info, context);
    return;
  }
  if (g_previous_sigbus.sa_handler != SIG_DFL &&
      g_previous_sigbus.sa_handler != SIG_IGN) {
    g_previous_sigbus.sa_handler(sig);
    return;
  }
  ::signal(SIGBUS, SIG_DFL);
  ::raise(SIGBUS);  // delivered once this returns (a fault also recurs)
}

void InstallSigbusHandler() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction sa;
    std::memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = &OnSigbus;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGBUS, &sa, &g_previous_sigbus);
  });
}

// Claims an entry for [begin, begin + size) of `path` (-1: none free, the
// fault then stays a bare SIGBUS).
int RegisterRange(const char* begin, uint64_t size, const std::string& path) {
  InstallSigbusHandler();
  const auto at = reinterpret_cast<uintptr_t>(begin);
  return g_mappings.Claim(path, at, at + size);
}

// A read-only mapping of a whole file, and what the file was when mapped.
class Mapping {
 public:
  static absl::StatusOr<std::shared_ptr<Mapping>> Open(
      const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      const int err = errno;
      const std::string what = absl::StrCat(path, ": ", std::strerror(err));
      return err == ENOENT ? absl::NotFoundError(what)
                           : absl::InvalidArgumentError(what);
    }
    struct stat st;
    if (::fstat(fd, &st) != 0) {
      const int err = errno;
      ::close(fd);
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": ", std::strerror(err)));
    }
    auto m = std::make_shared<Mapping>();
    m->path_ = path;
    m->stat_ = st;
    m->size_ = static_cast<uint64_t>(st.st_size);
    if (m->size_ > 0) {
      void* p = ::mmap(nullptr, m->size_, PROT_READ, MAP_SHARED, fd, 0);
      if (p == MAP_FAILED) {
        const int err = errno;
        ::close(fd);
        return absl::InvalidArgumentError(
            absl::StrCat(path, ": cannot map: ", std::strerror(err)));
      }
      m->data_ = static_cast<const char*>(p);
      m->slot_ = RegisterRange(m->data_, m->size_, path);
    }
    ::close(fd);  // the mapping stays valid
    return m;
  }
  Mapping() = default;
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping() {
    g_mappings.Release(slot_);
    if (data_ != nullptr) ::munmap(const_cast<char*>(data_), size_);
  }
  const char* data() const { return data_; }
  uint64_t size() const { return size_; }

  // OK while the file at the path is the one mapped, unchanged: the same
  // inode with the same size and modification time, or another file
  // renamed over it (the mapping still reads the one it mapped).
  absl::Status CheckUnchanged() const {
    struct stat now;
    if (::stat(path_.c_str(), &now) != 0 || now.st_dev != stat_.st_dev ||
        now.st_ino != stat_.st_ino) {
      return absl::OkStatus();  // replaced or removed: ours is intact
    }
    if (now.st_size == stat_.st_size &&
        now.st_mtim.tv_sec == stat_.st_mtim.tv_sec &&
        now.st_mtim.tv_nsec == stat_.st_mtim.tv_nsec) {
      return absl::OkStatus();
    }
    return absl::DataLossError(absl::StrCat(
        path_,
        ": the columnar event file changed on disk while this process read "
        "it (",
        now.st_size == stat_.st_size
            ? std::string("modified")
            : absl::StrCat(stat_.st_size, " bytes then, ", now.st_size, " now"),
        "): what was read since cannot be trusted. Event files must not be "
        "rewritten in place: write a new file and rename it over the old "
        "one, as `mnemo data --convert` does"));
  }

 private:
  std::string path_;
  struct stat stat_ = {};
  const char* data_ = nullptr;
  uint64_t size_ = 0;
  int slot_ = -1;
};

absl::Status Corrupt(const std::string& path, const std::string& what) {
  return absl::InvalidArgumentError(
      absl::StrCat(path, ": not a valid columnar event file: ", what));
}

}  // namespace

bool IsEventFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char magic[kEventFileMagic.size()];
  const ssize_t n = ::pread(fd, magic, sizeof magic, 0);
  ::close(fd);
  return n == static_cast<ssize_t>(sizeof magic) &&
         std::memcmp(magic, kEventFileMagic.data(), sizeof magic) == 0;
}

absl::Status WriteEventFile(const EventLog& log, const std::string& path) {
  const int64_t n = log.num_events();
  const int64_t dim = log.edge_feature_dim;
  if (static_cast<int64_t>(log.dst.size()) != n ||
      static_cast<int64_t>(log.t.size()) != n ||
      static_cast<int64_t>(log.edge_features.size()) != n * dim ||
      (!log.labels.empty() && static_cast<int64_t>(log.labels.size()) != n) ||
      static_cast<int64_t>(log.original_ids.size()) != log.num_nodes ||
      (!log.node_is_item.empty() &&
       static_cast<int64_t>(log.node_is_item.size()) != log.num_nodes)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": the event log's columns disagree in length"));
  }
  Header h;
  std::memset(&h, 0, sizeof h);
  std::memcpy(h.magic, kEventFileMagic.data(), sizeof h.magic);
  h.version = kVersion;
  h.header_bytes = kHeaderBytes;
  h.events = n;
  h.nodes = log.num_nodes;
  h.edge_feature_dim = static_cast<int32_t>(dim);
  h.format = static_cast<uint8_t>(log.format);
  h.bipartite = log.bipartite ? 1 : 0;
  h.has_labels = log.labels.empty() ? 0 : 1;
  h.has_item_flags = log.node_is_item.empty() ? 0 : 1;
  h.time_offset = log.time_offset;
  const size_t name_length = std::min(log.name.size(), kNameBytes);
  h.name_length = static_cast<uint32_t>(name_length);
  std::memcpy(h.name, log.name.data(), name_length);
  const std::string_view columns[kNumColumns] = {
      Bytes(log.src.data(), n * sizeof(int32_t)),
      Bytes(log.dst.data(), n * sizeof(int32_t)),
      Bytes(log.t.data(), n * sizeof(double)),
      Bytes(log.edge_features.data(), log.edge_features.size() * sizeof(float)),
      Bytes(log.labels.data(), log.labels.size() * sizeof(float)),
      Bytes(log.original_ids.data(), log.original_ids.size() * sizeof(int64_t)),
      Bytes(log.node_is_item.data(), log.node_is_item.size())};
  uint64_t offset = kHeaderBytes;
  for (int c = 0; c < kNumColumns; ++c) {
    h.columns[c].offset = offset;
    h.columns[c].bytes = columns[c].size();
    h.columns[c].crc = Crc32cExtend(0, columns[c].data(), columns[c].size());
    offset = AlignUp(offset + columns[c].size());
  }
  std::string header(kHeaderBytes, '\0');
  std::memcpy(header.data(), &h, sizeof h);
  const uint32_t header_crc = Crc32cExtend(0, header.data(), sizeof h);
  std::memcpy(header.data() + sizeof h, &header_crc, sizeof header_crc);
  const std::string zeros(kAlign, '\0');
  std::vector<std::string_view> parts = {header};
  uint64_t at = kHeaderBytes;
  for (int c = 0; c < kNumColumns; ++c) {
    if (columns[c].empty()) continue;
    parts.push_back(columns[c]);
    at += columns[c].size();
    const uint64_t pad = AlignUp(at) - at;
    if (pad > 0 && c + 1 < kNumColumns) {
      parts.push_back(std::string_view(zeros).substr(0, pad));
      at += pad;
    }
  }
  return WriteFileDurably(path, parts);
}

namespace {

// Reads the header of mapped file `m` (at `path`) into *h and checks it:
// the file's size, the magic, version and checksum, the fields' ranges.
// INVALID_ARGUMENT (Corrupt) naming the fault.
absl::Status ReadHeader(const std::string& path, const Mapping& m, Header* h) {
  if (m.size() < kHeaderBytes) {
    return Corrupt(path, absl::StrCat("shorter (", m.size(),
                                      " bytes) than its 4096-byte header"));
  }
  std::memcpy(h, m.data(), sizeof *h);
  if (std::memcmp(h->magic, kEventFileMagic.data(), sizeof h->magic) != 0) {
    return Corrupt(path, "no MNEMOEVT magic");
  }
  if (h->version != kVersion) {
    return Corrupt(path, absl::StrCat("version ", h->version,
                                      ", this build reads version ", kVersion,
                                      " (convert the source again)"));
  }
  uint32_t header_crc;
  std::memcpy(&header_crc, m.data() + sizeof *h, sizeof header_crc);
  if (Crc32cExtend(0, m.data(), sizeof *h) != header_crc) {
    return Corrupt(path, "header checksum mismatch");
  }
  if (h->header_bytes != kHeaderBytes || h->events < 1 || h->nodes < 1 ||
      h->nodes > (int64_t{1} << 31) - 1 || h->edge_feature_dim < 0 ||
      h->name_length > kNameBytes) {
    return Corrupt(path, "header fields out of range");
  }
  return absl::OkStatus();
}

// Sets base[c] to where column c lies in `m`, once its size is the one
// header `h` gives, it lies inside the file and its checksum holds; else
// INVALID_ARGUMENT (Corrupt) naming the column.
absl::Status LocateColumns(const std::string& path, const Mapping& m,
                           const Header& h, const char* base[kNumColumns]) {
  const int64_t n = h.events, dim = h.edge_feature_dim;
  const uint64_t expected[kNumColumns] = {
      n * sizeof(int32_t),
      n * sizeof(int32_t),
      n * sizeof(double),
      static_cast<uint64_t>(n * dim) * sizeof(float),
      h.has_labels ? n * sizeof(float) : 0,
      h.nodes * sizeof(int64_t),
      h.has_item_flags ? static_cast<uint64_t>(h.nodes) : 0};
  for (int c = 0; c < kNumColumns; ++c) {
    const ColumnEntry& e = h.columns[c];
    if (e.bytes != expected[c]) {
      return Corrupt(
          path, absl::StrCat("column ", kColumnNames[c], " holds ", e.bytes,
                             " bytes, the header says ", expected[c]));
    }
    if (e.offset % kAlign != 0 || e.offset < kHeaderBytes ||
        e.offset > m.size() || e.bytes > m.size() - e.offset) {
      return Corrupt(path, absl::StrCat("column ", kColumnNames[c],
                                        " lies outside the file (", m.size(),
                                        " bytes: truncated?)"));
    }
    base[c] = m.data() + e.offset;
    if (Crc32cExtend(0, base[c], e.bytes) != e.crc) {
      return Corrupt(
          path, absl::StrCat("column ", kColumnNames[c], " checksum mismatch"));
    }
  }
  return absl::OkStatus();
}

// The invariants every loader keeps over the `n` events (src, dst, t):
// node ids in [0, nodes), times finite and sorted (a file written by
// another tool, or by a defect, must not reach the trainer). Else
// INVALID_ARGUMENT (Corrupt) naming the first event at fault.
absl::Status CheckEvents(const std::string& path, int64_t n, int64_t nodes,
                         const int32_t* src, const int32_t* dst,
                         const double* t) {
  for (int64_t e = 0; e < n; ++e) {
    if (src[e] < 0 || src[e] >= nodes || dst[e] < 0 || dst[e] >= nodes) {
      return Corrupt(path, absl::StrCat("event ", e, " names node ",
                                        std::min(src[e], dst[e]) < 0
                                            ? std::min(src[e], dst[e])
                                            : std::max(src[e], dst[e]),
                                        ", outside 0..", nodes - 1));
    }
    if (!std::isfinite(t[e]) || (e > 0 && t[e] < t[e - 1])) {
      return Corrupt(path, absl::StrCat("event ", e,
                                        " has a time that is not finite or "
                                        "earlier than the event before"));
    }
  }
  return absl::OkStatus();
}

// The nodes that the first `keep` events name: dense ids are numbered in
// order of first appearance, so they are exactly nodes 0..k-1.
int64_t NodesNamed(const int32_t* src, const int32_t* dst, int64_t keep) {
  int64_t nodes = 0;
  for (int64_t e = 0; e < keep; ++e) {
    nodes = std::max<int64_t>({nodes, src[e] + 1, dst[e] + 1});
  }
  return nodes;
}

// Whether no node of [0, nodes) is both a source and a destination of the
// first `keep` events.
bool IsBipartite(const int32_t* src, const int32_t* dst, int64_t keep,
                 int64_t nodes) {
  std::vector<uint8_t> role(nodes, 0);  // bit 0: src, bit 1: dst
  for (int64_t e = 0; e < keep; ++e) {
    role[src[e]] |= 1;
    role[dst[e]] |= 2;
  }
  return std::none_of(role.begin(), role.end(),
                      [](uint8_t r) { return r == 3; });
}

}  // namespace

absl::Status CheckEventFileUnchanged(const EventLog& log) {
  if (log.mapping == nullptr) return absl::OkStatus();  // owns its columns
  return static_cast<const Mapping*>(log.mapping.get())->CheckUnchanged();
}

absl::StatusOr<EventLog> MapEventFile(const std::string& path,
                                      int64_t max_events,
                                      const std::string& name) {
  ASSIGN_OR_RETURN(std::shared_ptr<Mapping> m, Mapping::Open(path));
  Header h;
  RETURN_IF_ERROR(ReadHeader(path, *m, &h));
  const char* base[kNumColumns];
  RETURN_IF_ERROR(LocateColumns(path, *m, h, base));
  const int64_t n = h.events, dim = h.edge_feature_dim;
  const auto* src = reinterpret_cast<const int32_t*>(base[kSrc]);
  const auto* dst = reinterpret_cast<const int32_t*>(base[kDst]);
  const auto* t = reinterpret_cast<const double*>(base[kTime]);
  RETURN_IF_ERROR(CheckEvents(path, n, h.nodes, src, dst, t));

  const int64_t keep = max_events > 0 ? std::min(max_events, n) : n;
  EventLog log;
  log.name = !name.empty() ? name : std::string(h.name, h.name_length);
  log.source_path = path;
  log.format = static_cast<Format>(h.format);
  log.time_offset = h.time_offset;
  log.edge_feature_dim = static_cast<int>(dim);
  log.src = Column<int32_t>::View(src, keep);
  log.dst = Column<int32_t>::View(dst, keep);
  log.t = Column<double>::View(t, keep);
  log.edge_features = Column<float>::View(
      reinterpret_cast<const float*>(base[kFeatures]), keep * dim);
  if (h.has_labels) {
    log.labels = Column<float>::View(
        reinterpret_cast<const float*>(base[kLabels]), keep);
  }
  const int64_t nodes = keep < n ? NodesNamed(src, dst, keep) : h.nodes;
  const auto* ids = reinterpret_cast<const int64_t*>(base[kOriginalIds]);
  log.original_ids.assign(ids, ids + nodes);
  if (h.has_item_flags) {
    const auto* items = reinterpret_cast<const uint8_t*>(base[kItemFlags]);
    log.node_is_item.assign(items, items + nodes);
  }
  log.num_nodes = nodes;
  log.bipartite =
      keep < n ? IsBipartite(src, dst, keep, nodes) : h.bipartite != 0;
  log.mapping = std::move(m);
  return log;
}

}  // namespace mnemo::data
