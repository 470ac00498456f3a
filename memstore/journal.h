// Journal: the write-through push log of a local store (StoreImpl), in
// append-only files under data_dir/journal, outside RocksDB.
//
// Each push is one record, appended (in one write, or for a large record
// straight from the pusher's arrays in five) and, with `sync`, fdatasync'ed
// before the push is acknowledged. RocksDB's write-ahead log held
// these records before (format 2 without the journal directory): it
// checksummed them with Debian's portable CRC32C (about 0.4 GB/s), copied
// them into a memtable and flushed the part not yet cut, which together
// were about half of a write-through push.
//
// Files are named by the sequence number of their first record
// (00000000000000000042.log) and hold records in sequence order:
//   magic u32 "NMJ3" | crc u32 (CRC-32C of the rest of the record) |
//   header_crc u32 (CRC-32C of the rest of the header) | dim u32 |
//   seq u64 | writer i32 | 0 u32 | n u64 |
//   ids i64[n] | versions u64[n] | times f64[n] | states f32[n * dim]
// all little-endian. A file is closed once it holds `file_bytes`; files
// whose records are all materialized as node entries are deleted
// (DropThrough), the oldest first, so the files on disk always hold
// consecutive records. Open() replays the files in order. A record cut
// short (its header whole and valid) or failing its checksum at the very
// end of a file is a torn write (a crash during the append, never
// acknowledged): the file is truncated there, and Options::warn says what
// was dropped (a file cut by other means looks the same, and what followed
// the cut is gone: the warning is all that can be said). Any other bad
// record, a damaged header included, is DATA_LOSS naming the file and
// offset, and so are records missing between the files (a file deleted or
// emptied).
//
// After a failed append or sync the journal refuses every later append
// (the file may end in a torn record) until the store is restarted.
#ifndef MNEMO_MEMSTORE_JOURNAL_H_
#define MNEMO_MEMSTORE_JOURNAL_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"

namespace rocksdb {
class FileSystem;
class FSWritableFile;
class IOStatus;
}  // namespace rocksdb

namespace mnemo::memstore {

// One replayed record (pointers valid during the callback only).
struct JournalRecord {
  uint64_t seq = 0;
  int32_t writer = 0;
  int64_t n = 0;
  const int64_t* ids = nullptr;
  const uint64_t* versions = nullptr;
  const double* times = nullptr;
  const float* states = nullptr;  // [n * dim]
  int64_t bytes = 0;              // the record's size in its file
};

// The arrays of a record as both journal formats pack them (ids i64[n] |
// versions u64[n] | times f64[n] | states f32[n * dim], little-endian):
// records are not aligned for int64/double/float, so replay copies them
// out, into arrays kept from one record to the next.
class RecordArrays {
 public:
  // Copies the arrays of `n` states of width `dim` that start at `p`, and
  // points r's arrays (and n) at them until the next call.
  void Unpack(const char* p, uint64_t n, int dim, JournalRecord* r);

 private:
  std::vector<int64_t> ids_;
  std::vector<uint64_t> versions_;
  std::vector<double> times_;
  std::vector<float> states_;
};

class Journal {
 public:
  struct Options {
    rocksdb::FileSystem* fs = nullptr;  // not owned
    std::string dir;                    // created if missing
    int dim = 0;
    bool sync = false;  // fdatasync every record before Append returns
    int64_t file_bytes = 16ll << 20;  // a file is closed past this size
    // Told, one line each, what replay cut (a torn record). Null: nothing.
    std::function<void(const std::string&)> warn;
    // Called by Append once the first record of a new file is written (and
    // synced with `sync`), with its sequence number: every earlier record
    // is acknowledged, and this one is about to be. An error fails the
    // append (and the journal, as a failed write does). Null: nothing.
    std::function<absl::Status(uint64_t seq)> on_file_started;
  };

  // Opens the journal in options.dir and replays its records with a
  // sequence number above `after` (the records up to `after` are kept
  // elsewhere) in order through `apply`; truncates a torn last record.
  // *last_seq: the highest sequence number found (0: none). DATA_LOSS for
  // a damaged record, and for records above `after` missing before a file
  // or between two (naming the records and the files around them). Appends
  // go to a new file.
  static absl::StatusOr<std::unique_ptr<Journal>> Open(
      const Options& options, uint64_t after,
      absl::FunctionRef<absl::Status(const JournalRecord&)> apply,
      uint64_t* last_seq);

  // The name of the file whose first record is `first_seq`.
  static std::string FileName(uint64_t first_seq);

  // Bytes of the record of `n` states of width `dim`.
  static int64_t RecordBytes(uint64_t n, int dim);

  ~Journal();
  Journal(const Journal&) = delete;
  Journal& operator=(const Journal&) = delete;

  // Appends the record `seq` (above every earlier one); returns its size in
  // bytes. One caller at a time (the store's journal_mu_). After a failure
  // every later call fails.
  absl::StatusOr<int64_t> Append(uint64_t seq, absl::Span<const int64_t> ids,
                                 absl::Span<const float> states,
                                 absl::Span<const uint64_t> versions,
                                 absl::Span<const double> times,
                                 int32_t writer);

  // Deletes the closed files whose records all have a sequence number of at
  // most `seq` (they are materialized). May run beside Append().
  absl::Status DropThrough(uint64_t seq);

  // Closes the file being appended to and deletes every file whose records
  // are all at most `seq` (a clean Close() after its last
  // materialization). No Append() may run beside it or after it.
  absl::Status CloseAndDropThrough(uint64_t seq);

  // OK, or the failure after which Append() refuses (the caller of Append
  // only).
  const absl::Status& status() const { return failed_; }

  // Bytes of whole records in the files now on disk.
  int64_t bytes() const;

 private:
  struct File {
    uint64_t first_seq;
    uint64_t last_seq;  // of its last record (first_seq - 1: empty)
    std::string path;
    int64_t bytes = 0;  // of whole records
  };

  // A torn record at the end of a file: where it starts and what it is.
  struct Tear {
    bool torn = false;
    std::string what;  // "record 5 (1576 bytes) cut short", ...
  };

  explicit Journal(const Options& options);
  absl::Status Replay(uint64_t after,
                      absl::FunctionRef<absl::Status(const JournalRecord&)>,
                      uint64_t* last_seq);
  // Replays the records of one file's bytes `data` (`file` describes it,
  // and is updated) above `after` through `apply`. *end: where its whole
  // records end; *tear: whether (and what) torn record follows them.
  absl::Status ReplayFile(
      const std::string& data, uint64_t after,
      absl::FunctionRef<absl::Status(const JournalRecord&)> apply,
      uint64_t* last_seq, File* file, size_t* end, Tear* tear);
  // Cuts the torn end of `file` (its whole records end at `end`, of
  // `size` bytes) and says what was dropped.
  absl::Status CutTear(const File& file, size_t end, size_t size,
                       const Tear& tear);
  // DATA_LOSS when records [*next, file.first_seq) are missing (and
  // above `after`); then *next follows the file. `previous`: the file
  // before it (empty: none).
  absl::Status CheckFollows(const File& file, const std::string& previous,
                            uint64_t after, uint64_t* next) const;
  // Closes the file being appended to (if any) and starts the one whose
  // first record is `seq`.
  absl::Status StartFile(uint64_t seq);
  // Records a failed append: every later Append() returns it.
  absl::Status Fail(const rocksdb::IOStatus& s, const std::string& what);
  std::string PathOf(uint64_t first_seq) const;
  // Deletes the files [0, end) of files_ that are all at most `seq`.
  absl::Status DropLocked(uint64_t seq, size_t end)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  mutable absl::Mutex mu_;
  // Every file on disk, in sequence order; with out_ open, the last one is
  // the file being appended to.
  std::vector<File> files_ ABSL_GUARDED_BY(mu_);
  bool out_open_ ABSL_GUARDED_BY(mu_) = false;

  // Used by Append() only (serialized by the caller).
  std::unique_ptr<rocksdb::FSWritableFile> out_;
  int64_t out_bytes_ = 0;
  std::string record_;  // a small record being assembled (keeps its buffer)
  absl::Status failed_;
};

}  // namespace mnemo::memstore

#endif  // MNEMO_MEMSTORE_JOURNAL_H_
