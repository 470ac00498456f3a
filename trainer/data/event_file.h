// The columnar event file: an EventLog as `mnemo data --convert` writes it,
// which trainers map read-only instead of parsing text into their own heap,
// so that N trainers on one host hold one copy of the events (in the page
// cache) instead of N.
//
// Layout (little-endian, version 1): a 4 KiB header, then the columns, each
// at a 4 KiB-aligned offset:
//
//   magic "MNEMOEVT", u32 version, u32 header bytes (4096),
//   i64 events, i64 nodes, i32 edge_feature_dim, u8 format (of the source),
//   u8 bipartite, u8 has_labels, u8 has_item_flags, f64 time_offset,
//   u32 name length, 128 bytes of name,
//   7 x {u64 offset, u64 bytes, u32 crc32c, u32 zero}: src (i32), dst (i32),
//     t (f64, rebased), edge_features (f32, row-major), labels (f32),
//     original_ids (i64 per node), node_is_item (u8 per node),
//   u32 crc32c of the header up to here.
//
// The loader (LoadEventLog detects the magic) checks the header, the file
// size, every column's checksum and the invariants an EventLog keeps (ids
// below `nodes`, times sorted and finite), so a damaged or truncated file is
// refused with the file and the part named, never half read.
#ifndef MNEMO_TRAINER_DATA_EVENT_FILE_H_
#define MNEMO_TRAINER_DATA_EVENT_FILE_H_

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "trainer/data/event_log.h"

namespace mnemo::data {

// The file's first bytes.
inline constexpr std::string_view kEventFileMagic = "MNEMOEVT";

// Whether the file at `path` starts with kEventFileMagic (false when it
// cannot be read: the loaders report that).
bool IsEventFile(const std::string& path);

// Writes `log` to `path` as a columnar event file (durably: a temporary
// file renamed over `path`).
absl::Status WriteEventFile(const EventLog& log, const std::string& path);

// Maps the columnar event file at `path`: the event columns view the
// mapping, which the log's `mapping` keeps alive; the per-node columns are
// copied. `max_events` > 0 keeps the first events only (and the nodes they
// name: the same log as loading the source with that limit). `name`: the
// log's name (empty: the one stored in the file).
absl::StatusOr<EventLog> MapEventFile(const std::string& path,
                                      int64_t max_events = 0,
                                      const std::string& name = "");

// OK unless `log` views a mapped event file that was rewritten in place
// since it was mapped (the same inode with another size or modification
// time): DATA_LOSS naming the file. A log that owns its columns, and a
// file replaced by a rename, are fine. A file cut short while mapped is
// found sooner: the next read past its new end ends the process (exit 1)
// with a message naming the file, from a SIGBUS handler that mapping
// installs (other SIGBUS faults keep their usual effect). Event files must
// not be rewritten in place.
absl::Status CheckEventFileUnchanged(const EventLog& log);

}  // namespace mnemo::data

#endif  // MNEMO_TRAINER_DATA_EVENT_FILE_H_
