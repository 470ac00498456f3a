// The event-file loader: reading (gzip or plain), then the text parser
// (text_parser.h) or the columnar file (event_file.h), time ordering and
// renumbering; format names and the id map.
#include "trainer/data/event_log.h"

#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "trainer/data/event_file.h"
#include "trainer/data/text_parser.h"
#include "util/crc32c.h"
#include "util/file.h"
#include "util/status_macros.h"

namespace mnemo::data {
namespace {

// Debian's abseil has its own string_view; StrCat takes only that one.
absl::string_view AV(std::string_view s) { return {s.data(), s.size()}; }

std::string Stem(const std::string& path) {
  std::string base = path.substr(path.find_last_of('/') + 1);
  if (base.size() > 3 && base.compare(base.size() - 3, 3, ".gz") == 0)
    base.resize(base.size() - 3);
  const size_t dot = base.find_last_of('.');
  if (dot != std::string::npos && dot > 0) base.resize(dot);
  return base;
}

// Dense renumbering in order of first appearance. `space` selects one of two
// id spaces (users/items) when the format has separate ones.
class Renumberer {
 public:
  Renumberer(int64_t max_id, int64_t num_events, bool two_spaces)
      : two_spaces_(two_spaces) {
    // A flat table when ids are small relative to the data (at most 64
    // slots per event below 2^26 ids, 4 above), else a hash map: a small
    // file with a large id must not allocate a large table.
    if (max_id < 4 * num_events ||
        (max_id < (int64_t{1} << 26) && max_id / 64 < num_events)) {
      table_[0].assign(max_id + 1, -1);
      if (two_spaces) table_[1].assign(max_id + 1, -1);
      use_table_ = true;
    }
  }
  bool two_spaces() const { return two_spaces_; }
  // Returns the dense id, or -1 on overflow of int32.
  int32_t Map(int64_t id, int space, std::vector<int64_t>* original,
              std::vector<uint8_t>* is_item) {
    int32_t* slot;
    if (use_table_) {
      slot = &table_[space][id];
    } else {
      auto [it, inserted] = map_[space].try_emplace(id, -1);
      slot = &it->second;
    }
    if (*slot < 0) {
      if (original->size() >=
          static_cast<size_t>(std::numeric_limits<int32_t>::max()))
        return -1;
      *slot = static_cast<int32_t>(original->size());
      original->push_back(id);
      if (is_item) is_item->push_back(static_cast<uint8_t>(space));
    }
    return *slot;
  }

 private:
  const bool two_spaces_;
  bool use_table_ = false;
  std::vector<int32_t> table_[2];
  absl::flat_hash_map<int64_t, int32_t> map_[2];
};

template <typename T>
void Permute(std::vector<T>* v, const std::vector<int64_t>& perm, int dim) {
  if (v->empty()) return;
  std::vector<T> out(perm.size() * dim);
  for (size_t i = 0; i < perm.size(); ++i)
    std::copy_n(v->data() + perm[i] * dim, dim, out.data() + i * dim);
  v->swap(out);
}

}  // namespace

absl::StatusOr<Format> ParseFormat(std::string_view name) {
  if (name == "auto") return Format::kAuto;
  if (name == "snap") return Format::kSnap;
  if (name == "tgn") return Format::kTgnEdges;
  if (name == "tgn-csv") return Format::kTgnCsv;
  if (name == "jodie") return Format::kJodieCsv;
  if (name == "konect") return Format::kKonect;
  if (name == "tuvw") return Format::kTuvw;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown format '", AV(name),
                   "'; known: auto, snap, tgn, tgn-csv, jodie, konect, tuvw"));
}

std::string_view FormatName(Format format) {
  switch (format) {
    case Format::kAuto:
      return "auto";
    case Format::kSnap:
      return "snap";
    case Format::kTgnEdges:
      return "tgn";
    case Format::kTgnCsv:
      return "tgn-csv";
    case Format::kJodieCsv:
      return "jodie";
    case Format::kKonect:
      return "konect";
    case Format::kTuvw:
      return "tuvw";
  }
  return "unknown";
}

namespace {

bool IsGzipAt(const std::string& bytes, size_t at) {
  return bytes.size() >= at + 2 &&
         static_cast<unsigned char>(bytes[at]) == 0x1f &&
         static_cast<unsigned char>(bytes[at + 1]) == 0x8b;
}

// The gzip file `gz` (read from `path`) inflated: every member, in order
// (`cat a.gz b.gz` is one stream). Bytes after the last member that are
// not another member are an error naming where they start: zlib's gzread
// would drop them without a word (a file with something appended, or two
// files run together).
absl::StatusOr<std::string> Gunzip(const std::string& gz,
                                   const std::string& path) {
  z_stream z{};
  if (inflateInit2(&z, 15 + 16) != Z_OK) {
    return absl::InternalError(absl::StrCat(path, ": cannot start zlib"));
  }
  std::unique_ptr<z_stream, int (*)(z_stream*)> end(&z, &inflateEnd);
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(gz.data()));
  z.avail_in = static_cast<uInt>(gz.size());  // event files are < 4 GiB gz
  std::string out;
  constexpr size_t kChunk = 1 << 22;
  size_t len = 0;
  while (true) {
    out.resize(len + kChunk);
    z.next_out = reinterpret_cast<Bytef*>(out.data() + len);
    z.avail_out = kChunk;
    const int rc = inflate(&z, Z_NO_FLUSH);
    len += kChunk - z.avail_out;
    if (rc == Z_STREAM_END) {
      const size_t at = gz.size() - z.avail_in;
      if (z.avail_in == 0) break;
      if (!IsGzipAt(gz, at)) {
        return absl::InvalidArgumentError(absl::StrCat(
            path, ": ", z.avail_in,
            " trailing bytes after the gzip data, at "
            "offset ",
            at,
            ", that are not gzip: the file was appended to or "
            "two files run together; refusing to guess which events it "
            "holds"));
      }
      inflateReset(&z);  // the next member
      continue;
    }
    if (rc == Z_BUF_ERROR && z.avail_in == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": truncated gzip data (the stream ends at byte ",
                       gz.size(), " before its end)"));
    }
    if (rc != Z_OK && rc != Z_BUF_ERROR) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": corrupt gzip data: ", z.msg ? z.msg : "inflate failed",
          " (at byte ", gz.size() - z.avail_in, ")"));
    }
  }
  out.resize(len);
  return out;
}

}  // namespace

absl::StatusOr<std::string> ReadMaybeGzip(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": is a directory, not an event file"));
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"),
                                          &std::fclose);
  if (!f) {
    if (errno == ENOENT)
      return absl::NotFoundError(absl::StrCat(path, ": no such file"));
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
  }
  std::fseek(f.get(), 0, SEEK_END);
  const long size = std::ftell(f.get());
  if (size < 0)
    return absl::InvalidArgumentError(absl::StrCat(path, ": cannot seek"));
  std::fseek(f.get(), 0, SEEK_SET);
  std::string raw(size, '\0');
  if (size > 0 &&
      std::fread(raw.data(), 1, size, f.get()) != static_cast<size_t>(size))
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": read error: ", std::strerror(errno)));
  if (!IsGzipAt(raw, 0)) return raw;
  return Gunzip(raw, path);
}

namespace {

// LoadEventLog of a columnar event file (mnemo data --convert): mapped,
// not parsed.
absl::StatusOr<EventLog> LoadEventFile(const std::string& path,
                                       const LoadOptions& options,
                                       LoadReport* report) {
  if (options.format != Format::kAuto) {
    return absl::InvalidArgumentError(absl::StrCat(
        path,
        ": a columnar event file (mnemo data --convert) has no text "
        "format: leave the format at auto"));
  }
  ASSIGN_OR_RETURN(EventLog log,
                   MapEventFile(path, options.max_events, options.name));
  report->lines_read = log.num_events();
  report->detected_format = log.format;
  return log;
}

// Sorts raw's events stably by time; returns whether they were sorted
// already.
bool SortByTime(RawEvents* raw) {
  if (std::is_sorted(raw->t.begin(), raw->t.end())) return true;
  std::vector<int64_t> perm(raw->t.size());
  std::iota(perm.begin(), perm.end(), 0);
  std::stable_sort(perm.begin(), perm.end(), [raw](int64_t a, int64_t b) {
    return raw->t[a] < raw->t[b];
  });
  Permute(&raw->src, perm, 1);
  Permute(&raw->dst, perm, 1);
  Permute(&raw->t, perm, 1);
  Permute(&raw->labels, perm, 1);
  Permute(&raw->feat, perm, std::max(raw->feat_dim, 1));
  return false;
}

// Moves the edge features, labels and times (rebased to the first) of
// raw's first `n` events (time-sorted) into `log`.
void TakeEventColumns(int64_t n, RawEvents* raw, EventLog* log) {
  log->edge_feature_dim = raw->feat_dim;
  if (raw->feat_dim > 0) {
    raw->feat.resize(n * raw->feat_dim);
    log->edge_features = std::move(raw->feat);
  }
  if (!raw->labels.empty()) {
    raw->labels.resize(n);
    log->labels = std::move(raw->labels);
  }
  const double offset = raw->t[0];
  log->time_offset = offset;
  std::vector<double> t(n);
  for (int64_t e = 0; e < n; ++e) t[e] = raw->t[e] - offset;
  log->t = std::move(t);
}

// The largest node id of raw's first `n` events.
int64_t MaxNodeId(const RawEvents& raw, int64_t n) {
  int64_t max_id = 0;
  for (int64_t e = 0; e < n; ++e)
    max_id = std::max({max_id, raw.src[e], raw.dst[e]});
  return max_id;
}

// Numbers the nodes of raw's first `n` events with `ren` into log's src,
// dst, original_ids, num_nodes and, with two id spaces (users and items
// apart), node_is_item. OUT_OF_RANGE naming `path` beyond 2^31-1 nodes.
absl::Status RenumberNodes(const std::string& path, const RawEvents& raw,
                           int64_t n, Renumberer* ren, EventLog* log) {
  const bool two_spaces = ren->two_spaces();
  std::vector<uint8_t>* is_item = two_spaces ? &log->node_is_item : nullptr;
  std::vector<int32_t> src(n), dst(n);
  for (int64_t e = 0; e < n; ++e) {
    const int32_t s = ren->Map(raw.src[e], 0, &log->original_ids, is_item);
    const int32_t d =
        ren->Map(raw.dst[e], two_spaces ? 1 : 0, &log->original_ids, is_item);
    if (s < 0 || d < 0)
      return absl::OutOfRangeError(
          absl::StrCat(path, ": more than 2^31-1 distinct nodes"));
    src[e] = s;
    dst[e] = d;
  }
  log->src = std::move(src);
  log->dst = std::move(dst);
  log->num_nodes = static_cast<int64_t>(log->original_ids.size());
  return absl::OkStatus();
}

// Whether no node of `log` is both a source and a destination.
bool IsBipartite(const EventLog& log) {
  std::vector<uint8_t> role(log.num_nodes, 0);  // bit 0: src, bit 1: dst
  for (int64_t e = 0; e < log.num_events(); ++e) {
    role[log.src[e]] |= 1;
    role[log.dst[e]] |= 2;
  }
  return std::none_of(role.begin(), role.end(),
                      [](uint8_t r) { return r == 3; });
}

}  // namespace

absl::StatusOr<EventLog> LoadEventLog(const std::string& path,
                                      const LoadOptions& options,
                                      LoadReport* report) {
  LoadReport local_report;
  if (report == nullptr) report = &local_report;
  *report = LoadReport();
  if (IsEventFile(path)) return LoadEventFile(path, options, report);
  ASSIGN_OR_RETURN(std::string buf, ReadMaybeGzip(path));
  ASSIGN_OR_RETURN(const std::string_view text, SkipByteOrderMark(path, buf));
  Format format = options.format;
  if (format == Format::kAuto) {
    ASSIGN_OR_RETURN(format, DetectFormat(path, text));
  }
  report->detected_format = format;

  RawEvents raw;
  RETURN_IF_ERROR(ParseBuffer(path, text, format, options, &raw, report));
  std::string().swap(buf);
  report->was_sorted = SortByTime(&raw);
  const int64_t n_all = static_cast<int64_t>(raw.t.size());
  const int64_t n = options.max_events > 0
                        ? std::min<int64_t>(options.max_events, n_all)
                        : n_all;

  EventLog log;
  log.name = options.name.empty() ? Stem(path) : options.name;
  log.source_path = path;
  log.format = format;
  TakeEventColumns(n, &raw, &log);
  // `ren` outlives the renumbering on purpose: with its table freed before
  // the raw columns, glibc gives the top of the heap back to the system at
  // the end of a load, and a process that loads again (bench_loader)
  // page-faults it in anew.
  Renumberer ren(MaxNodeId(raw, n), n, format == Format::kJodieCsv);
  RETURN_IF_ERROR(RenumberNodes(path, raw, n, &ren, &log));
  log.bipartite = IsBipartite(log);
  return log;
}

std::string EventLogFingerprint(const EventLog& log) {
  uint32_t crc = 0;
  auto add = [&crc](const void* data, size_t bytes) {
    crc = Crc32cExtend(crc, static_cast<const char*>(data), bytes);
  };
  // Original ids and times, so that a renumbering or a rebasing of the same
  // events stays the same; a chunk at a time.
  const int64_t n = log.num_events();
  constexpr int64_t kChunk = 1 << 16;
  std::vector<int64_t> ends;
  std::vector<double> times;
  for (int64_t first = 0; first < n; first += kChunk) {
    const int64_t last = std::min(n, first + kChunk);
    ends.clear();
    times.clear();
    for (int64_t e = first; e < last; ++e) {
      ends.push_back(log.original_ids[log.src[e]]);
      ends.push_back(log.original_ids[log.dst[e]]);
      times.push_back(log.t[e] + log.time_offset);
    }
    add(ends.data(), ends.size() * sizeof(int64_t));
    add(times.data(), times.size() * sizeof(double));
  }
  add(log.labels.data(), log.labels.size() * sizeof(float));
  add(log.edge_features.data(), log.edge_features.size() * sizeof(float));
  return absl::StrFormat("events=%d nodes=%d t=[%.17g,%.17g] crc32c=%08x", n,
                         log.num_nodes, n ? log.t[0] + log.time_offset : 0.0,
                         n ? log.t[n - 1] + log.time_offset : 0.0, crc);
}

absl::Status SaveIdMap(const EventLog& log, const std::string& path) {
  const bool kinds = !log.node_is_item.empty();
  std::string text =
      kinds ? "dense_id,original_id,kind\n" : "dense_id,original_id\n";
  for (int64_t i = 0; i < static_cast<int64_t>(log.original_ids.size()); ++i) {
    absl::StrAppend(&text, i, ",", log.original_ids[i]);
    if (kinds) absl::StrAppend(&text, log.node_is_item[i] ? ",item" : ",user");
    text += '\n';
  }
  // Whole or not at all (a full disk leaves the file as it was).
  return WriteFileDurably(path, {text});
}

}  // namespace mnemo::data
