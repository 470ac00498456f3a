// Fuzzes the event-log loader (trainer/data/event_log.h) in one format:
// MNEMO_FUZZ_FORMAT is a ParseFormat() name ("auto", "snap", "tgn",
// "tgn-csv", "jodie", "konect", "tuvw"), set per target by CMakeLists.txt.
// The input is the file content (plain or gzip, as the loader detects it).
// Every input must give a status; a loaded log must satisfy EventLog's
// contract.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "tests/fuzz/fuzz_util.h"
#include "trainer/data/event_log.h"

#ifndef MNEMO_FUZZ_FORMAT
#error "MNEMO_FUZZ_FORMAT must name a loader format"
#endif

namespace mnemo::data {
namespace {

using fuzz::Fail;

Format TargetFormat() {
  static const Format format = [] {
    auto f = ParseFormat(MNEMO_FUZZ_FORMAT);
    if (!f.ok()) Fail(std::string(f.status().message()));
    return *f;
  }();
  return format;
}

// EventLog's documented contract (event_log.h).
void CheckLog(const EventLog& log, const LoadOptions& options,
              const LoadReport& report) {
  const int64_t n = log.num_events();
  if (n <= 0) Fail("a loaded log has no events");
  if (options.max_events > 0 && n > options.max_events)
    Fail("more events than max_events");
  if (log.dst.size() != log.src.size() || log.t.size() != log.src.size())
    Fail("src, dst and t differ in length");
  if (options.format != Format::kAuto && log.format != options.format)
    Fail("the log's format is not the requested one");
  if (log.format == Format::kAuto || report.detected_format != log.format)
    Fail("format not reported");
  if (!std::isfinite(log.time_offset) || log.time_offset < 0)
    Fail("bad time offset");
  if (log.t[0] != 0) Fail("times are not rebased to the first event");
  for (int64_t e = 0; e < n; ++e) {
    if (!std::isfinite(log.t[e]) || log.t[e] < 0) Fail("bad time");
    if (e > 0 && log.t[e] < log.t[e - 1]) Fail("events are not time-sorted");
    if (log.src[e] < 0 || log.src[e] >= log.num_nodes || log.dst[e] < 0 ||
        log.dst[e] >= log.num_nodes)
      Fail(absl::StrCat("event ", e, " names a node outside [0, ",
                        log.num_nodes, ")"));
  }
  if (static_cast<int64_t>(log.original_ids.size()) != log.num_nodes)
    Fail("original_ids does not match num_nodes");
  for (int64_t id : log.original_ids) {
    if (id < 0) Fail(absl::StrCat("negative original id ", id));
  }
  if (log.edge_feature_dim < 0 ||
      static_cast<int64_t>(log.edge_features.size()) !=
          n * log.edge_feature_dim)
    Fail("edge_features does not match num_events * edge_feature_dim");
  for (float x : log.edge_features) {
    if (!std::isfinite(x)) Fail("non-finite edge feature");
  }
  if (!log.labels.empty() && static_cast<int64_t>(log.labels.size()) != n)
    Fail("labels does not match num_events");
  if (!log.node_is_item.empty() &&
      static_cast<int64_t>(log.node_is_item.size()) != log.num_nodes)
    Fail("node_is_item does not match num_nodes");
  if (report.bad_lines_skipped > 0 && !options.skip_bad_lines)
    Fail("lines skipped without skip_bad_lines");
}

void Load(const std::string& path, const LoadOptions& options) {
  LoadReport report;
  absl::StatusOr<EventLog> log = LoadEventLog(path, options, &report);
  if (log.ok()) {
    CheckLog(*log, options, report);
    return;
  }
  const absl::StatusCode code = log.status().code();
  if (code != absl::StatusCode::kInvalidArgument &&
      code != absl::StatusCode::kOutOfRange)
    Fail(absl::StrCat("unexpected error code: ", log.status().ToString()));
}

}  // namespace
}  // namespace mnemo::data

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mnemo::data;  // NOLINT(build/namespaces)
  static mnemo::fuzz::MemFile* file = new mnemo::fuzz::MemFile("events");
  file->Write(std::string_view(reinterpret_cast<const char*>(data), size));
  const std::string& path = file->path();
  LoadOptions options;
  options.format = TargetFormat();
  options.name = "fuzz";
  Load(path, options);
  // Again leniently, and cut short (a length-derived limit, so that the
  // content stays all file).
  options.skip_bad_lines = true;
  options.max_events = static_cast<int64_t>(size % 5);
  Load(path, options);
  return 0;
}
