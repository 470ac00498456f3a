// The journal of `mnemo serve --journal DIR`: every ingested batch, as the
// client sent it, appended and fdatasync'ed before its ack, so that a
// restarted server applies them again (predict, then update, the same
// draws) and stands where the last acknowledged batch left it.
//
// DIR/ingest.journal is a sequence of records, each
//   u32 magic 0x314a4e4d ("MNJ1"), u32 payload bytes, u32 CRC-32C of the
//   payload, the payload;
// the first record's payload is the identity of what the batches apply to
// (the run, its checkpoint, where the memory started), the others are
// serialized mnemo.v1.IngestRequest messages. Torch-free.
#ifndef MNEMO_TRAINER_SERVE_INGEST_JOURNAL_H_
#define MNEMO_TRAINER_SERVE_INGEST_JOURNAL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace mnemo::serve {

class IngestJournal {
 public:
  // Opens (or starts) DIR/ingest.journal for `identity`, creating DIR.
  // `batches` receives the batches already there, in order. A last record
  // cut short or damaged (a write the crash cut: it was never acknowledged)
  // is cut off, and `warning` says so. FAILED_PRECONDITION: a journal of
  // another identity (naming both); DATA_LOSS: a damaged record with others
  // after it; INTERNAL: the file cannot be read or written.
  static absl::StatusOr<std::unique_ptr<IngestJournal>> Open(
      const std::string& dir, const std::string& identity,
      std::vector<std::string>* batches, std::string* warning);
  ~IngestJournal();
  IngestJournal(const IngestJournal&) = delete;
  IngestJournal& operator=(const IngestJournal&) = delete;

  // Appends one batch and makes it durable (fdatasync). On an error the
  // file is cut back to where it was, as far as the disk allows.
  absl::Status Append(std::string_view batch);
  const std::string& path() const { return path_; }

 private:
  IngestJournal(std::string path, int fd, int64_t size)
      : path_(std::move(path)), fd_(fd), size_(size) {}
  std::string path_;
  int fd_ = -1;
  int64_t size_ = 0;  // bytes of whole records
};

}  // namespace mnemo::serve

#endif  // MNEMO_TRAINER_SERVE_INGEST_JOURNAL_H_
