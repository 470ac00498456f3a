// EventLog: a continuous-time event stream in columnar form, and the loaders
// that read it from the public file formats.
#ifndef MNEMO_TRAINER_DATA_EVENT_LOG_H_
#define MNEMO_TRAINER_DATA_EVENT_LOG_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "trainer/data/column.h"

namespace mnemo::data {

// The file formats the loaders read. kAuto detects from the content.
enum class Format {
  kAuto,
  kSnap,      // "SRC DST UNIXTS" whitespace separated (SNAP temporal edges)
  kTgnEdges,  // "u i ts" whitespace separated (TGN's preprocessed edges)
  kTgnCsv,    // ",u,i,ts,label,idx" with a header (TGN's ml_*.csv)
  kJodieCsv,  // "user_id,item_id,timestamp,state_label,f1..fk" + header
  kKonect,    // "%" comments, then "SRC DST WEIGHT TS" (tab or space)
  kTuvw,      // "t,u,v,w" comma separated (DyGLib US Legis)
};

// Parses "auto", "snap", "tgn", "tgn-csv", "jodie", "konect", "tuvw".
absl::StatusOr<Format> ParseFormat(std::string_view name);
std::string_view FormatName(Format format);

// A time-sorted event stream with dense node ids.
//
// Events are stably sorted by time (ties keep file order). Node ids are dense,
// 0..num_nodes-1, assigned in order of first appearance in the sorted stream;
// `original_ids[dense]` is the id in the file. In formats with separate user
// and item id spaces (JODIE CSV, TGN CSV) `node_is_item[dense]` tells which
// space an id came from (original id 5 may be both a user and an item).
//
// The per-event columns own their values, or (a log read from a columnar
// event file, event_file.h) view them in a read-only mapping of the file
// that `mapping` keeps alive; copies of the log share it.
struct EventLog {
  std::string name;         // dataset name (registry name or file stem)
  std::string source_path;  // file it was read from
  Format format = Format::kAuto;

  Column<int32_t> src;     // dense source id per event
  Column<int32_t> dst;     // dense destination id per event
  Column<double> t;        // timestamp per event, rebased: t - time_offset
  double time_offset = 0;  // first (smallest) original timestamp

  // Row-major [num_events x edge_feature_dim]; empty when dim is 0.
  int edge_feature_dim = 0;
  Column<float> edge_features;

  // Per-event labels (JODIE state_label, TGN label); empty when absent.
  Column<float> labels;

  int64_t num_nodes = 0;
  std::vector<int64_t> original_ids;  // dense id -> id in the file
  std::vector<uint8_t> node_is_item;  // empty unless the format has 2 spaces
  bool bipartite = false;  // no node is ever both a source and a destination

  // The mapped file the viewed columns read (null: every column is owned).
  std::shared_ptr<const void> mapping;

  int64_t num_events() const { return static_cast<int64_t>(src.size()); }
  const float* edge_feature(int64_t e) const {
    return edge_features.data() + e * edge_feature_dim;
  }
};

struct LoadOptions {
  // Format of the file; kAuto detects it from the first lines.
  Format format = Format::kAuto;
  // Skip malformed lines (and count them) instead of failing on the first.
  bool skip_bad_lines = false;
  // Read at most this many events (0: all). Applied after sorting.
  int64_t max_events = 0;
  // Dataset name recorded in the log (default: file stem).
  std::string name;
};

struct LoadReport {
  int64_t lines_read = 0;
  int64_t bad_lines_skipped = 0;
  std::string first_bad_line_error;  // the first skipped line's error
  bool was_sorted = true;            // false when the loader had to sort
  Format detected_format = Format::kAuto;
};

// Reads an event file (plain or .gz, detected by content). Errors:
// NOT_FOUND (no such file), INVALID_ARGUMENT (malformed content: the message
// names the file, the 1-based line number and what is wrong; empty file;
// header-only file; NaN/infinite/negative timestamps; ids out of int64 range),
// OUT_OF_RANGE (more than 2^31-1 distinct nodes).
absl::StatusOr<EventLog> LoadEventLog(const std::string& path,
                                      const LoadOptions& options,
                                      LoadReport* report = nullptr);

// What the log holds, as one line: "events=N nodes=M t=[first,last]
// crc32c=XXXXXXXX", the CRC over the events' ids (as in the file), times,
// labels and features. The same events read from a copy, a touched file or
// its columnar conversion give the same line; other events another. A
// resumed run compares it with its checkpoint's.
std::string EventLogFingerprint(const EventLog& log);

// Writes "dense_id,original_id[,kind]" lines (with a header) to `path`.
absl::Status SaveIdMap(const EventLog& log, const std::string& path);

// Reads the whole (possibly gzip-compressed) file into memory.
absl::StatusOr<std::string> ReadMaybeGzip(const std::string& path);

}  // namespace mnemo::data

#endif  // MNEMO_TRAINER_DATA_EVENT_LOG_H_
