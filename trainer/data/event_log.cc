// The event-file readers: format detection, the line parsers of every
// format (whose tokenizers, number parsing and error texts they share,
// which is why they stay in one file past ~600 lines), renumbering and
// time ordering, and the id map.
#include "trainer/data/event_log.h"

#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>
#include <string_view>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "trainer/data/event_file.h"
#include "trainer/data/event_file.h"
#include "util/status_macros.h"

namespace mnemo::data {
namespace {

constexpr size_t kMaxQuoted = 80;  // offending text is truncated to this

// Debian's abseil has its own string_view; StrCat takes only that one.
absl::string_view AV(std::string_view s) { return {s.data(), s.size()}; }

// Quotes a line (or field) for an error message, truncated.
// Bytes that are not printable ASCII are escaped (\xff), never echoed raw.
std::string Quote(std::string_view s) {
  if (s.size() <= kMaxQuoted)
    return absl::StrCat("'", absl::CHexEscape(AV(s)), "'");
  return absl::StrCat("'", absl::CHexEscape(AV(s.substr(0, kMaxQuoted))),
                      "...'");
}

bool IsBlank(char c) { return c == ' ' || c == '\t'; }

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (IsBlank(s.front()) || s.front() == '\r'))
    s.remove_prefix(1);
  while (!s.empty() && (IsBlank(s.back()) || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

// Splits on runs of spaces/tabs. Returns the number of fields; stores at most
// `max` of them (the count keeps going so the caller can report it).
size_t SplitBlank(std::string_view line, std::string_view* out, size_t max) {
  size_t n = 0;
  const char* p = line.data();
  const char* end = p + line.size();
  while (true) {
    while (p < end && IsBlank(*p)) ++p;
    if (p >= end) break;
    const char* b = p;
    while (p < end && !IsBlank(*p)) ++p;
    if (n < max) out[n] = std::string_view(b, p - b);
    ++n;
  }
  return n;
}

// Splits on commas (fields are trimmed of blanks). Same contract as above.
size_t SplitComma(std::string_view line, std::string_view* out, size_t max) {
  size_t n = 0;
  const char* p = line.data();
  const char* end = p + line.size();
  while (true) {
    const char* c = static_cast<const char*>(memchr(p, ',', end - p));
    const char* fe = c ? c : end;
    if (n < max) out[n] = Trim(std::string_view(p, fe - p));
    ++n;
    if (!c) break;
    p = c + 1;
  }
  return n;
}

// Parses a non-negative int64 id; returns an error text or empty.
const char* ParseId(std::string_view f, int64_t* v) {
  if (f.empty()) return "empty id field";
  if (f.front() == '-') return "negative id";
  const char* b = f.data();
  // from_chars takes a '-' but no '+': skip one '+', then no sign.
  if (*b == '+') {
    ++b;
    if (b != f.data() + f.size() && *b == '-') return "invalid id";  // "+-1"
  }
  auto [ptr, ec] = std::from_chars(b, f.data() + f.size(), *v);
  if (ec == std::errc::result_out_of_range) return "id out of int64 range";
  if (ec != std::errc() || ptr != f.data() + f.size()) return "invalid id";
  return nullptr;
}

// Parses a finite double; returns an error text or null.
const char* ParseReal(std::string_view f, double* v) {
  if (f.empty()) return "empty numeric field";
  const char* b = f.data();
  const char* e = b + f.size();
  if (*b == '+') {
    ++b;
    if (b != e && *b == '-') return "invalid number";  // "+-1", as in ParseId
  }
  // Fast path: plain integers (most timestamps).
  int64_t iv;
  auto [ip, iec] = std::from_chars(b, e, iv);
  if (iec == std::errc() && ip == e) {
    *v = static_cast<double>(iv);
    return nullptr;
  }
  auto [ptr, ec] = std::from_chars(b, e, *v);
  if (ec == std::errc::result_out_of_range) return "number out of range";
  if (ec != std::errc() || ptr != e) return "invalid number";
  if (!std::isfinite(*v)) return "non-finite number";
  // Features, weights and time differences are float32 in the model.
  if (std::abs(*v) > std::numeric_limits<float>::max()) {
    return "number outside the float32 range (|x| > 3.4e38)";
  }
  return nullptr;
}

const char* ParseTime(std::string_view f, double* v) {
  if (const char* err = ParseReal(f, v)) {
    if (std::strcmp(err, "invalid number") == 0) return "invalid timestamp";
    if (std::strcmp(err, "non-finite number") == 0)
      return "NaN or infinite timestamp";
    if (std::strncmp(err, "number outside", 14) == 0)
      return "timestamp above 3.4e38: time differences would not fit the "
             "model's float32";
    return err;
  }
  if (*v < 0) return "negative timestamp";
  return nullptr;
}

std::string Stem(const std::string& path) {
  std::string base = path.substr(path.find_last_of('/') + 1);
  if (base.size() > 3 && base.compare(base.size() - 3, 3, ".gz") == 0)
    base.resize(base.size() - 3);
  const size_t dot = base.find_last_of('.');
  if (dot != std::string::npos && dot > 0) base.resize(dot);
  return base;
}

bool StartsWith(std::string_view s, std::string_view p) {
  return s.size() >= p.size() && s.compare(0, p.size(), p) == 0;
}

bool IsCommentLine(std::string_view s) {
  return !s.empty() && (s.front() == '%' || s.front() == '#');
}

// Raw (file-order) columns before sorting and renumbering.
struct RawEvents {
  std::vector<int64_t> src, dst;
  std::vector<double> t;
  std::vector<float> feat;
  std::vector<float> labels;
  int feat_dim = 0;
};

// Iterates the lines of a buffer, tracking the 1-based line number.
class LineReader {
 public:
  explicit LineReader(std::string_view buf) : buf_(buf) {}
  bool Next(std::string_view* line) {
    if (pos_ >= buf_.size()) return false;
    const char* b = buf_.data() + pos_;
    const char* nl =
        static_cast<const char*>(memchr(b, '\n', buf_.size() - pos_));
    size_t len = nl ? static_cast<size_t>(nl - b) : buf_.size() - pos_;
    pos_ += len + (nl ? 1 : 0);
    if (len > 0 && b[len - 1] == '\r') --len;
    *line = std::string_view(b, len);
    ++line_no_;
    return true;
  }
  int64_t line_no() const { return line_no_; }

 private:
  std::string_view buf_;
  size_t pos_ = 0;
  int64_t line_no_ = 0;
};

// Detects the format from the first non-empty, non-comment line.
absl::StatusOr<Format> Detect(const std::string& path, std::string_view buf) {
  LineReader r(buf);
  std::string_view line;
  bool first = true;
  while (r.Next(&line)) {
    std::string_view s = Trim(line);
    if (first && !s.empty() && s.front() == '%') return Format::kKonect;
    first = false;
    if (s.empty() || IsCommentLine(s)) continue;
    if (StartsWith(s, "user_id")) return Format::kJodieCsv;
    if (StartsWith(s, ",u,i,ts") || StartsWith(s, "u,i,ts"))
      return Format::kTgnCsv;
    std::string_view f[8];
    if (s.find(',') != std::string_view::npos) {
      const size_t n = SplitComma(s, f, 8);
      if (n == 4) return Format::kTuvw;
      return absl::InvalidArgumentError(absl::StrCat(
          path, ":", r.line_no(), ": cannot detect the format: ", n,
          " comma-separated fields (t,u,v,w has 4; JODIE/TGN CSV need their "
          "header line) in ",
          Quote(s)));
    }
    const size_t n = SplitBlank(s, f, 8);
    if (n == 3) return Format::kSnap;
    if (n == 4) return Format::kKonect;
    return absl::InvalidArgumentError(absl::StrCat(
        path, ":", r.line_no(), ": cannot detect the format: ", n,
        " whitespace-separated fields (SNAP has 3, KONECT 4) in ", Quote(s)));
  }
  return absl::InvalidArgumentError(
      absl::StrCat(path, ": no events (the file is empty)"));
}

// Parses all lines of `buf` in `format` into `raw`.
absl::Status ParseBuffer(const std::string& path, std::string_view buf,
                         Format format, const LoadOptions& options,
                         RawEvents* raw, LoadReport* report) {
  const bool comma = format == Format::kTgnCsv || format == Format::kJodieCsv ||
                     format == Format::kTuvw;
  const bool has_header =
      format == Format::kTgnCsv || format == Format::kJodieCsv;
  // Expected fields; for JODIE, 4 + k with k set by the first data row.
  size_t expected = 0;
  const char* layout = "";
  switch (format) {
    case Format::kSnap:
    case Format::kTgnEdges:
      expected = 3;
      layout = "SRC DST TS";
      break;
    case Format::kKonect:
      expected = 4;
      layout = "SRC DST WEIGHT TS";
      raw->feat_dim = 1;
      break;
    case Format::kTuvw:
      expected = 4;
      layout = "t,u,v,w";
      raw->feat_dim = 1;
      break;
    case Format::kTgnCsv:
      expected = 6;
      layout = ",u,i,ts,label,idx";
      break;
    case Format::kJodieCsv:
      expected = 0;
      layout = "user_id,item_id,timestamp,state_label,f1..fk";
      break;
    case Format::kAuto:
      return absl::InternalError("format not resolved");
  }
  const size_t est = std::count(buf.begin(), buf.end(), '\n') + 1;
  raw->src.reserve(est);
  raw->dst.reserve(est);
  raw->t.reserve(est);

  std::vector<std::string_view> fields(std::max<size_t>(expected, 8));
  LineReader r(buf);
  std::string_view line;
  bool header_seen = false;
  bool any_data_line = false;
  int64_t bad = 0;
  std::string first_error;

  auto fail = [&](int64_t line_no, std::string_view what,
                  std::string_view text) -> absl::Status {
    std::string msg =
        absl::StrCat(path, ":", line_no, ": ", AV(what), ": ", Quote(text));
    if (!options.skip_bad_lines) return absl::InvalidArgumentError(msg);
    if (bad == 0) first_error = std::move(msg);
    ++bad;
    return absl::OkStatus();
  };

  while (r.Next(&line)) {
    std::string_view s = Trim(line);
    if (s.empty() || IsCommentLine(s)) continue;
    if (has_header && !header_seen) {
      header_seen = true;
      // A header starts with a letter or ',' (TGN's unnamed index column).
      const char c = s.front();
      if (c == ',' || std::isalpha(static_cast<unsigned char>(c))) continue;
      return absl::InvalidArgumentError(absl::StrCat(
          path, ":", r.line_no(), ": expected the ", AV(FormatName(format)),
          " header line (", layout, "), got ", Quote(s)));
    }
    any_data_line = true;
    const size_t n = comma ? SplitComma(s, fields.data(), fields.size())
                           : SplitBlank(s, fields.data(), fields.size());
    if (format == Format::kJodieCsv && expected == 0) {
      if (n < 4) {
        RETURN_IF_ERROR(fail(
            r.line_no(),
            absl::StrCat("expected at least 4 fields (", layout, "), got ", n),
            s));
        continue;
      }
      expected = n;
      raw->feat_dim = static_cast<int>(n - 4);
      fields.resize(std::max<size_t>(n, 8));
    }
    if (n != expected) {
      if (format == Format::kKonect && n == 3) {
        RETURN_IF_ERROR(
            fail(r.line_no(),
                 "KONECT line has 3 fields (SRC DST WEIGHT) but a temporal "
                 "graph needs 4 (SRC DST WEIGHT TS)",
                 s));
      } else {
        RETURN_IF_ERROR(fail(r.line_no(),
                             absl::StrCat("expected ", expected, " fields (",
                                          layout, "), got ", n),
                             s));
      }
      continue;
    }
    // Column positions per format.
    size_t is, id, it, iw = 0, il = 0;
    switch (format) {
      case Format::kTuvw:
        it = 0, is = 1, id = 2, iw = 3;
        break;
      case Format::kKonect:
        is = 0, id = 1, iw = 2, it = 3;
        break;
      case Format::kTgnCsv:
        is = 1, id = 2, it = 3, il = 4;
        break;
      case Format::kJodieCsv:
        is = 0, id = 1, it = 2, il = 3;
        break;
      default:
        is = 0, id = 1, it = 2;
    }
    int64_t sv, dv;
    double tv;
    const char* err;
    if ((err = ParseId(fields[is], &sv)) || (err = ParseId(fields[id], &dv))) {
      RETURN_IF_ERROR(fail(r.line_no(), err, s));
      continue;
    }
    if ((err = ParseTime(fields[it], &tv))) {
      RETURN_IF_ERROR(fail(r.line_no(), err, s));
      continue;
    }
    const size_t feat_start = raw->feat.size();
    bool ok = true;
    double x;
    if (format == Format::kKonect || format == Format::kTuvw) {
      if ((err = ParseReal(fields[iw], &x))) {
        RETURN_IF_ERROR(fail(r.line_no(), absl::StrCat(err, " (weight)"), s));
        continue;
      }
      raw->feat.push_back(static_cast<float>(x));
    } else if (format == Format::kJodieCsv || format == Format::kTgnCsv) {
      if ((err = ParseReal(fields[il], &x))) {
        RETURN_IF_ERROR(fail(r.line_no(), absl::StrCat(err, " (label)"), s));
        continue;
      }
      if (format == Format::kTgnCsv) {
        int64_t idx;
        if ((err = ParseId(fields[5], &idx))) {
          RETURN_IF_ERROR(fail(r.line_no(), absl::StrCat(err, " (idx)"), s));
          continue;
        }
      }
      for (size_t k = 4; k < expected && format == Format::kJodieCsv; ++k) {
        double fv;
        if ((err = ParseReal(fields[k], &fv))) {
          raw->feat.resize(feat_start);
          RETURN_IF_ERROR(fail(r.line_no(),
                               absl::StrCat(err, " (feature ", k - 3, ")"), s));
          ok = false;
          break;
        }
        raw->feat.push_back(static_cast<float>(fv));
      }
      if (!ok) continue;
      raw->labels.push_back(static_cast<float>(x));
    }
    raw->src.push_back(sv);
    raw->dst.push_back(dv);
    raw->t.push_back(tv);
  }
  if (report) {
    report->lines_read = r.line_no();
    report->bad_lines_skipped = bad;
    report->first_bad_line_error = first_error;
  }
  if (raw->src.empty()) {
    if (has_header && header_seen && !any_data_line)
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": no events (the file has only a header line)"));
    if (!any_data_line)
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": no events (the file is empty or has only comments)"));
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": no events (all ", bad,
                     " data lines are malformed; first: ", first_error, ")"));
  }
  return absl::OkStatus();
}

// Dense renumbering in order of first appearance. `space` selects one of two
// id spaces (users/items) when the format has separate ones.
class Renumberer {
 public:
  Renumberer(int64_t max_id, int64_t num_events, bool two_spaces) {
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
  unsigned char magic[2] = {0, 0};
  const size_t got = std::fread(magic, 1, 2, f.get());
  const bool gz = got == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
  std::string out;
  if (!gz) {
    std::fseek(f.get(), 0, SEEK_END);
    const long size = std::ftell(f.get());
    if (size < 0)
      return absl::InvalidArgumentError(absl::StrCat(path, ": cannot seek"));
    std::fseek(f.get(), 0, SEEK_SET);
    out.resize(size);
    if (size > 0 &&
        std::fread(out.data(), 1, size, f.get()) != static_cast<size_t>(size))
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": read error: ", std::strerror(errno)));
    return out;
  }
  f.reset();
  gzFile gzf = gzopen(path.c_str(), "rb");
  if (!gzf)
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": cannot open gzip stream"));
  gzbuffer(gzf, 1 << 18);
  constexpr size_t kChunk = 1 << 22;
  size_t len = 0;
  while (true) {
    out.resize(len + kChunk);
    const int n = gzread(gzf, out.data() + len, kChunk);
    if (n < 0) {
      int errnum;
      std::string msg = gzerror(gzf, &errnum);
      gzclose(gzf);
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": corrupt gzip data: ", msg));
    }
    len += n;
    if (n == 0) break;
  }
  // A truncated stream reads as EOF without error; gzclose_r reports it.
  int errnum = 0;
  gzerror(gzf, &errnum);
  gzclose(gzf);
  if (errnum != Z_OK && errnum != Z_STREAM_END)
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": truncated or corrupt gzip data"));
  out.resize(len);
  return out;
}

absl::StatusOr<EventLog> LoadEventLog(const std::string& path,
                                      const LoadOptions& options,
                                      LoadReport* report) {
  LoadReport local_report;
  if (report == nullptr) report = &local_report;
  *report = LoadReport();
  if (IsEventFile(path)) {
    // A columnar event file (mnemo data --convert): mapped, not parsed.
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
  ASSIGN_OR_RETURN(std::string buf, ReadMaybeGzip(path));
  // A UTF-8 byte-order mark (Excel and Notepad write one) is not part of
  // the first line. UTF-16 text is refused by name: every other byte of it
  // is a NUL, which would be reported as a malformed first line.
  std::string_view text = buf;
  if (StartsWith(text, "\xEF\xBB\xBF")) text.remove_prefix(3);
  if (StartsWith(text, "\xFF\xFE") || StartsWith(text, "\xFE\xFF")) {
    return absl::InvalidArgumentError(absl::StrCat(
        path,
        ": the file is UTF-16 text (it starts with a UTF-16 byte-order "
        "mark); save it as UTF-8 or ASCII"));
  }

  Format format = options.format;
  if (format == Format::kAuto) {
    ASSIGN_OR_RETURN(format, Detect(path, text));
  }
  report->detected_format = format;

  RawEvents raw;
  RETURN_IF_ERROR(ParseBuffer(path, text, format, options, &raw, report));
  std::string().swap(buf);

  // Stable sort by time.
  const int64_t n_all = static_cast<int64_t>(raw.t.size());
  report->was_sorted = std::is_sorted(raw.t.begin(), raw.t.end());
  if (!report->was_sorted) {
    std::vector<int64_t> perm(n_all);
    std::iota(perm.begin(), perm.end(), 0);
    std::stable_sort(perm.begin(), perm.end(),
                     [&](int64_t a, int64_t b) { return raw.t[a] < raw.t[b]; });
    Permute(&raw.src, perm, 1);
    Permute(&raw.dst, perm, 1);
    Permute(&raw.t, perm, 1);
    Permute(&raw.labels, perm, 1);
    Permute(&raw.feat, perm, std::max(raw.feat_dim, 1));
  }
  const int64_t n = options.max_events > 0
                        ? std::min<int64_t>(options.max_events, n_all)
                        : n_all;

  EventLog log;
  log.name = options.name.empty() ? Stem(path) : options.name;
  log.source_path = path;
  log.format = format;
  log.edge_feature_dim = raw.feat_dim;
  if (raw.feat_dim > 0) {
    raw.feat.resize(n * raw.feat_dim);
    log.edge_features = std::move(raw.feat);
  }
  if (!raw.labels.empty()) {
    raw.labels.resize(n);
    log.labels = std::move(raw.labels);
  }
  log.time_offset = raw.t[0];
  std::vector<double> t(n);
  for (int64_t e = 0; e < n; ++e) t[e] = raw.t[e] - log.time_offset;
  log.t = std::move(t);

  const bool two_spaces = format == Format::kJodieCsv;
  int64_t max_id = 0;
  for (int64_t e = 0; e < n; ++e)
    max_id = std::max({max_id, raw.src[e], raw.dst[e]});
  Renumberer ren(max_id, n, two_spaces);
  std::vector<uint8_t>* is_item = two_spaces ? &log.node_is_item : nullptr;
  std::vector<int32_t> src(n), dst(n);
  for (int64_t e = 0; e < n; ++e) {
    const int32_t s = ren.Map(raw.src[e], 0, &log.original_ids, is_item);
    const int32_t d =
        ren.Map(raw.dst[e], two_spaces ? 1 : 0, &log.original_ids, is_item);
    if (s < 0 || d < 0)
      return absl::OutOfRangeError(
          absl::StrCat(path, ": more than 2^31-1 distinct nodes"));
    src[e] = s;
    dst[e] = d;
  }
  log.src = std::move(src);
  log.dst = std::move(dst);
  log.num_nodes = static_cast<int64_t>(log.original_ids.size());

  std::vector<uint8_t> role(log.num_nodes, 0);  // bit 0: src, bit 1: dst
  for (int64_t e = 0; e < n; ++e) {
    role[log.src[e]] |= 1;
    role[log.dst[e]] |= 2;
  }
  log.bipartite =
      std::none_of(role.begin(), role.end(), [](uint8_t r) { return r == 3; });
  return log;
}

absl::Status SaveIdMap(const EventLog& log, const std::string& path) {
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "w"),
                                          &std::fclose);
  if (!f)
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": cannot write: ", std::strerror(errno)));
  const bool kinds = !log.node_is_item.empty();
  std::fputs(kinds ? "dense_id,original_id,kind\n" : "dense_id,original_id\n",
             f.get());
  for (int64_t i = 0; i < static_cast<int64_t>(log.original_ids.size()); ++i) {
    if (kinds) {
      std::fprintf(f.get(), "%lld,%lld,%s\n", static_cast<long long>(i),
                   static_cast<long long>(log.original_ids[i]),
                   log.node_is_item[i] ? "item" : "user");
    } else {
      std::fprintf(f.get(), "%lld,%lld\n", static_cast<long long>(i),
                   static_cast<long long>(log.original_ids[i]));
    }
  }
  if (std::fflush(f.get()) != 0 || std::ferror(f.get()))
    return absl::InternalError(
        absl::StrCat(path, ": write failed: ", std::strerror(errno)));
  return absl::OkStatus();
}

}  // namespace mnemo::data
