// The checkpoint file's envelope (torch-free: the launcher reads it before
// anything starts). A checkpoint file is LibTorch's archive (a zip), then a
// metadata block, then a 32-byte footer:
//
//   payload    the archive's bytes (model, optimizer, history, ...)
//   metadata   flat YAML: format, epoch, run_id, run_config, best_epoch,
//              rounds_without_improvement, data
//   footer     "mnemoCK1", payload bytes (u64), metadata bytes (u32),
//              CRC-32C of payload + metadata (u32), CRC-32C of the footer's
//              first 24 bytes (u32), CRC-32C of the metadata (u32; 0 in
//              files written before it); little-endian
//
// A file whose checksum does not match is refused (DATA_LOSS naming it), as
// RocksDB refuses a damaged file. Files from before the envelope (a bare
// zip) are read unverified and say so.
#ifndef MNEMO_TRAINER_RUNTIME_CHECKPOINT_CHECKPOINT_FILE_H_
#define MNEMO_TRAINER_RUNTIME_CHECKPOINT_CHECKPOINT_FILE_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "util/file.h"

namespace mnemo::runtime {

// Where a run stood after a checkpoint's epoch, for `mnemo train --resume`
// to tell a finished run before loading anything.
struct CheckpointStop {
  bool known = false;  // false: a file from before it was recorded
  int best_epoch = 0;
  int rounds_without_improvement = 0;
  // Whether the run stopped early at this epoch with `patience` (> 0).
  bool StoppedEarly(int patience) const {
    return known && patience > 0 && rounds_without_improvement >= patience;
  }
};

struct CheckpointMeta {
  int epoch = 0;
  // The run the file belongs to (NewRunId; kept across --resume).
  std::string run_id;
  // The flags that define the result (RunConfigText), "key=value ...";
  // empty where the caller has none (library callers).
  std::string run_config;
  CheckpointStop stop;
  // The training data's content (data::EventLogFingerprint: events, nodes,
  // time range, CRC-32C); empty: not recorded.
  std::string data;
};

// Writes payload, metadata and footer durably (WriteFileDurably: a temp
// file fsync'ed, renamed, the directory fsync'ed; nothing left behind on an
// error such as a full disk).
absl::Status WriteCheckpointEnvelope(const std::string& path,
                                     std::string_view payload,
                                     const CheckpointMeta& meta);

// The same file with its payload streamed (the archive is never held whole
// in memory): Append the payload's parts, then Finish writes metadata and
// footer and commits the file durably. Dropped before Finish, or after a
// failed call, it leaves nothing behind (DurableFileWriter).
class CheckpointFileWriter {
 public:
  static absl::StatusOr<CheckpointFileWriter> Create(const std::string& path);
  absl::Status Append(std::string_view payload_part);
  absl::Status Finish(const CheckpointMeta& meta);

 private:
  explicit CheckpointFileWriter(DurableFileWriter file)
      : file_(std::move(file)) {}
  DurableFileWriter file_;
  uint64_t payload_bytes_ = 0;
  uint32_t crc_ = 0;  // CRC-32C of the payload so far
};

struct CheckpointEnvelope {
  std::string bytes;        // the whole file
  size_t payload_size = 0;  // the archive is bytes[0, payload_size)
  bool verified = false;    // false: a file from before checksums
  CheckpointMeta meta;
};

// Reads and verifies `path`. NOT_FOUND when it does not exist; DATA_LOSS
// naming the file when its checksum or footer is wrong.
absl::StatusOr<CheckpointEnvelope> ReadCheckpointEnvelope(
    const std::string& path);

// The footer and metadata of `path` alone (`bytes` left empty): what a
// resume decides from before anything loads. The footer's and the
// metadata's own checksums and the sizes are checked (DATA_LOSS naming the
// file), not the payload's: the load reads the whole file and checks it
// once (ReadCheckpointEnvelope). A file whose footer has no metadata
// checksum (written before it) is read and verified whole instead. A file
// from before checksums has `verified` false.
absl::StatusOr<CheckpointEnvelope> ReadCheckpointMeta(const std::string& path);

// Whether `path` ends in a checkpoint footer (its magic; not verified).
bool HasCheckpointFooter(const std::string& path);

// A new run's id: 16 hex digits from the system's random source.
std::string NewRunId();

}  // namespace mnemo::runtime

#endif  // MNEMO_TRAINER_RUNTIME_CHECKPOINT_CHECKPOINT_FILE_H_
