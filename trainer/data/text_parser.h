// The text event files' parser (LoadEventLog's first half): format
// detection and the line parsers of every format, which share their
// tokenizers, number parsing and error texts, into raw (file-order)
// columns. Internal to trainer/data: event_log.h is the interface.
#ifndef MNEMO_TRAINER_DATA_TEXT_PARSER_H_
#define MNEMO_TRAINER_DATA_TEXT_PARSER_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "trainer/data/event_log.h"

namespace mnemo::data {

// Raw (file-order) columns before sorting and renumbering.
struct RawEvents {
  std::vector<int64_t> src, dst;
  std::vector<double> t;
  std::vector<float> feat;
  std::vector<float> labels;
  int feat_dim = 0;
};

// `buf`, the content of `path`, without a UTF-8 byte-order mark (Excel
// and Notepad write one; it is not part of the first line). UTF-16 text is
// refused by name (INVALID_ARGUMENT): every other byte of it is a NUL,
// which would be reported as a malformed first line.
absl::StatusOr<std::string_view> SkipByteOrderMark(const std::string& path,
                                                   std::string_view buf);

// Detects the format of `buf` (the content of `path`) from its first
// non-empty, non-comment line. INVALID_ARGUMENT naming the file and the
// line when no format fits, or when there is no such line.
absl::StatusOr<Format> DetectFormat(const std::string& path,
                                    std::string_view buf);

// Parses all lines of `buf` (the content of `path`) in `format` (not
// kAuto) into `raw`, and fills report's lines_read, bad_lines_skipped and
// first_bad_line_error (`report` may be null). INVALID_ARGUMENT naming the
// file, the line and what is wrong for a malformed line (unless
// options.skip_bad_lines), a missing header line or no events at all.
absl::Status ParseBuffer(const std::string& path, std::string_view buf,
                         Format format, const LoadOptions& options,
                         RawEvents* raw, LoadReport* report);

}  // namespace mnemo::data

#endif  // MNEMO_TRAINER_DATA_TEXT_PARSER_H_
