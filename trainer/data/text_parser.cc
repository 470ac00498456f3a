#include "trainer/data/text_parser.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
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

bool StartsWith(std::string_view s, std::string_view p) {
  return s.size() >= p.size() && s.compare(0, p.size(), p) == 0;
}

bool IsCommentLine(std::string_view s) {
  return !s.empty() && (s.front() == '%' || s.front() == '#');
}

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

// How a text format lays out its lines.
struct LineLayout {
  bool comma = false;       // fields separated by commas, else by blanks
  bool has_header = false;  // a header line precedes the data
  // Fields per line; for JODIE, 4 + k with k set by the first data row.
  size_t expected = 0;
  const char* text = "";  // the layout, as error messages name it
  // Column positions: source, destination, time, and the weight (KONECT,
  // t,u,v,w) or label (TGN and JODIE CSV).
  size_t is = 0, id = 1, it = 2, iw = 0, il = 0;
};

// The layout of `format`; INTERNAL for kAuto.
absl::StatusOr<LineLayout> LayoutOf(Format format) {
  switch (format) {
    case Format::kSnap:
    case Format::kTgnEdges:
      return LineLayout{.expected = 3, .text = "SRC DST TS"};
    case Format::kKonect:
      return LineLayout{
          .expected = 4, .text = "SRC DST WEIGHT TS", .it = 3, .iw = 2};
    case Format::kTuvw:
      return LineLayout{.comma = true,
                        .expected = 4,
                        .text = "t,u,v,w",
                        .is = 1,
                        .id = 2,
                        .it = 0,
                        .iw = 3};
    case Format::kTgnCsv:
      return LineLayout{.comma = true,
                        .has_header = true,
                        .expected = 6,
                        .text = ",u,i,ts,label,idx",
                        .is = 1,
                        .id = 2,
                        .it = 3,
                        .il = 4};
    case Format::kJodieCsv:
      return LineLayout{.comma = true,
                        .has_header = true,
                        .expected = 0,
                        .text = "user_id,item_id,timestamp,state_label,f1..fk",
                        .il = 3};
    case Format::kAuto:
      break;
  }
  return absl::InternalError("format not resolved");
}

// A header line starts with a letter or ',' (TGN's unnamed index column).
bool IsHeaderLine(std::string_view s) {
  const char c = s.front();
  return c == ',' || std::isalpha(static_cast<unsigned char>(c));
}

// What is wrong with a data line of `n` fields, not the `expected` ones
// of layout `text`. (Not given the LineLayout: a reference to it would let
// ParseBuffer's `layout` escape, and its loop reload the fields after every
// call instead of keeping them in registers, ~10% slower.)
std::string FieldCountError(Format format, size_t expected, const char* text,
                            size_t n) {
  if (format == Format::kKonect && n == 3) {
    return "KONECT line has 3 fields (SRC DST WEIGHT) but a temporal graph "
           "needs 4 (SRC DST WEIGHT TS)";
  }
  return absl::StrCat("expected ", expected, " fields (", text, "), got ", n);
}

// A field that ParseRow refused: the parser's error text, and the field
// when it is not an id or the time ("weight", "label", "idx", or
// "feature" with its 1-based number).
struct FieldError {
  const char* err = nullptr;
  const char* field = nullptr;
  size_t feature = 0;

  std::string What() const {
    if (field == nullptr) return err;
    if (feature > 0) return absl::StrCat(err, " (feature ", feature, ")");
    return absl::StrCat(err, " (", field, ")");
  }
};

// Parses one data line's fields (layout.expected of them, as `format`
// lays them out) and appends its event to `raw`. On a bad field it appends
// nothing and returns the field's error (err null: the event was added).
// Called once per line: keep it cheap (the text loader's inner loop).
FieldError ParseRow(const std::string_view* fields, Format format,
                    const LineLayout& layout, RawEvents* raw) {
  int64_t sv, dv;
  double tv;
  const char* err;
  if ((err = ParseId(fields[layout.is], &sv)) ||
      (err = ParseId(fields[layout.id], &dv))) {
    return {err};
  }
  if ((err = ParseTime(fields[layout.it], &tv))) return {err};
  if (format == Format::kKonect || format == Format::kTuvw) {
    double x;
    if ((err = ParseReal(fields[layout.iw], &x))) return {err, "weight"};
    raw->feat.push_back(static_cast<float>(x));
  } else if (format == Format::kJodieCsv || format == Format::kTgnCsv) {
    double x;
    if ((err = ParseReal(fields[layout.il], &x))) return {err, "label"};
    if (format == Format::kTgnCsv) {
      int64_t idx;
      if ((err = ParseId(fields[5], &idx))) return {err, "idx"};
    }
    const size_t feat_start = raw->feat.size();
    for (size_t k = 4; k < layout.expected && format == Format::kJodieCsv;
         ++k) {
      double fv;
      if ((err = ParseReal(fields[k], &fv))) {
        raw->feat.resize(feat_start);
        return {err, "feature", k - 3};
      }
      raw->feat.push_back(static_cast<float>(fv));
    }
    raw->labels.push_back(static_cast<float>(x));
  }
  raw->src.push_back(sv);
  raw->dst.push_back(dv);
  raw->t.push_back(tv);
  return {};
}

// The malformed data lines of a file: the first is an error, or with
// skip_bad_lines they are counted and the first one's error kept.
class BadLines {
 public:
  BadLines(const std::string& path, bool skip) : path_(path), skip_(skip) {}
  // INVALID_ARGUMENT "PATH:LINE: WHAT: 'TEXT'" for line `line_no` (its
  // trimmed `text`), or OK when skipping it.
  absl::Status Add(int64_t line_no, std::string_view what,
                   std::string_view text) {
    std::string msg =
        absl::StrCat(path_, ":", line_no, ": ", AV(what), ": ", Quote(text));
    if (!skip_) return absl::InvalidArgumentError(msg);
    if (count_ == 0) first_error_ = std::move(msg);
    ++count_;
    return absl::OkStatus();
  }
  int64_t count() const { return count_; }
  const std::string& first_error() const { return first_error_; }

 private:
  const std::string& path_;
  const bool skip_;
  int64_t count_ = 0;
  std::string first_error_;
};

// The error for a file that parsed to no events: it is empty or all
// comments, has only its header line (`header_only`), or every data line
// is malformed (`bad`).
absl::Status NoEventsError(const std::string& path, bool header_only,
                           bool any_data_line, const BadLines& bad) {
  if (header_only)
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": no events (the file has only a header line)"));
  if (!any_data_line)
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": no events (the file is empty or has only comments)"));
  return absl::InvalidArgumentError(absl::StrCat(
      path, ": no events (all ", bad.count(),
      " data lines are malformed; first: ", bad.first_error(), ")"));
}

}  // namespace

absl::StatusOr<std::string_view> SkipByteOrderMark(const std::string& path,
                                                   std::string_view buf) {
  if (StartsWith(buf, "\xEF\xBB\xBF")) buf.remove_prefix(3);
  if (StartsWith(buf, "\xFF\xFE") || StartsWith(buf, "\xFE\xFF")) {
    return absl::InvalidArgumentError(absl::StrCat(
        path,
        ": the file is UTF-16 text (it starts with a UTF-16 byte-order "
        "mark); save it as UTF-8 or ASCII"));
  }
  return buf;
}

absl::StatusOr<Format> DetectFormat(const std::string& path,
                                    std::string_view buf) {
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

// The text loader's inner loop: per line, trim, split into fields, check
// their count and parse them (ParseRow).
absl::Status ParseBuffer(const std::string& path, std::string_view buf,
                         Format format, const LoadOptions& options,
                         RawEvents* raw, LoadReport* report) {
  ASSIGN_OR_RETURN(LineLayout layout, LayoutOf(format));
  if (format == Format::kKonect || format == Format::kTuvw) raw->feat_dim = 1;
  const size_t est = std::count(buf.begin(), buf.end(), '\n') + 1;
  raw->src.reserve(est);
  raw->dst.reserve(est);
  raw->t.reserve(est);

  std::vector<std::string_view> fields(std::max<size_t>(layout.expected, 8));
  LineReader r(buf);
  std::string_view line;
  bool header_seen = false;
  bool any_data_line = false;
  BadLines bad(path, options.skip_bad_lines);
  while (r.Next(&line)) {
    std::string_view s = Trim(line);
    if (s.empty() || IsCommentLine(s)) continue;
    if (layout.has_header && !header_seen) {
      header_seen = true;
      if (IsHeaderLine(s)) continue;
      return absl::InvalidArgumentError(absl::StrCat(
          path, ":", r.line_no(), ": expected the ", AV(FormatName(format)),
          " header line (", layout.text, "), got ", Quote(s)));
    }
    any_data_line = true;
    const size_t n = layout.comma ? SplitComma(s, fields.data(), fields.size())
                                  : SplitBlank(s, fields.data(), fields.size());
    if (format == Format::kJodieCsv && layout.expected == 0) {
      if (n < 4) {
        RETURN_IF_ERROR(bad.Add(r.line_no(),
                                absl::StrCat("expected at least 4 fields (",
                                             layout.text, "), got ", n),
                                s));
        continue;
      }
      layout.expected = n;
      raw->feat_dim = static_cast<int>(n - 4);
      fields.resize(std::max<size_t>(n, 8));
    }
    if (n != layout.expected) {
      RETURN_IF_ERROR(
          bad.Add(r.line_no(),
                  FieldCountError(format, layout.expected, layout.text, n), s));
      continue;
    }
    if (const FieldError e = ParseRow(fields.data(), format, layout, raw);
        e.err != nullptr) {
      RETURN_IF_ERROR(bad.Add(r.line_no(), e.What(), s));
    }
  }
  if (report) {
    report->lines_read = r.line_no();
    report->bad_lines_skipped = bad.count();
    report->first_bad_line_error = bad.first_error();
  }
  if (raw->src.empty()) {
    return NoEventsError(path,
                         layout.has_header && header_seen && !any_data_line,
                         any_data_line, bad);
  }
  return absl::OkStatus();
}

}  // namespace mnemo::data
