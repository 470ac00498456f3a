#include "memstore/journal.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "rocksdb/file_system.h"
#include "rocksdb/io_status.h"
#include "util/crc32c.h"
#include "util/status_macros.h"

namespace mnemo::memstore {
namespace {

constexpr uint32_t kMagic = 0x334a4d4e;  // "NMJ3"
constexpr size_t kHeaderBytes = 40;
constexpr char kSuffix[] = ".log";
constexpr size_t kNameDigits = 20;

struct Header {
  uint32_t magic;
  uint32_t crc;         // of the record's bytes [8, end)
  uint32_t header_crc;  // of the header's bytes [12, 40)
  uint32_t dim;
  uint64_t seq;
  int32_t writer;
  uint32_t reserved;  // 0
  uint64_t n;
};
static_assert(sizeof(Header) == kHeaderBytes);

// Records at least this big are appended in parts straight from the
// caller's arrays (no copy); smaller ones are assembled and appended once.
constexpr int64_t kAppendPartsMin = 64 << 10;

uint32_t Crc(const char* data, size_t n) { return Crc32cExtend(0, data, n); }

absl::Status FromIo(const rocksdb::IOStatus& s, const std::string& what) {
  if (s.ok()) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat(what, ": ", s.ToString()));
}

// The first sequence number of a journal file name, or 0.
uint64_t FirstSeqOf(const std::string& name) {
  if (name.size() != kNameDigits + sizeof(kSuffix) - 1 ||
      name.compare(kNameDigits, std::string::npos, kSuffix) != 0)
    return 0;
  uint64_t seq = 0;
  for (size_t i = 0; i < kNameDigits; ++i) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(name[i]))) return 0;
    seq = seq * 10 + static_cast<uint64_t>(name[i] - '0');
  }
  return seq;
}

// Reads the whole file at `path` into *data.
absl::Status ReadWhole(rocksdb::FileSystem* fs, const std::string& path,
                       std::string* data) {
  rocksdb::IOOptions io;
  uint64_t size = 0;
  RETURN_IF_ERROR(FromIo(fs->GetFileSize(path, io, &size, nullptr),
                         absl::StrCat("size of journal file ", path)));
  std::unique_ptr<rocksdb::FSSequentialFile> in;
  RETURN_IF_ERROR(
      FromIo(fs->NewSequentialFile(path, rocksdb::FileOptions(), &in, nullptr),
             absl::StrCat("open journal file ", path)));
  data->resize(size);
  size_t got = 0;
  while (got < size) {
    rocksdb::Slice piece;
    RETURN_IF_ERROR(
        FromIo(in->Read(size - got, io, &piece, data->data() + got, nullptr),
               absl::StrCat("read journal file ", path)));
    if (piece.size() == 0) break;
    if (piece.data() != data->data() + got)
      std::memcpy(data->data() + got, piece.data(), piece.size());
    got += piece.size();
  }
  data->resize(got);
  return absl::OkStatus();
}

// Cuts the file at `path` to `size` bytes.
absl::Status Truncate(rocksdb::FileSystem* fs, const std::string& path,
                      size_t size) {
  rocksdb::IOOptions io;
  std::unique_ptr<rocksdb::FSWritableFile> cut;
  rocksdb::IOStatus s =
      fs->ReopenWritableFile(path, rocksdb::FileOptions(), &cut, nullptr);
  if (s.ok()) s = cut->Truncate(size, io, nullptr);
  if (s.ok()) s = cut->Close(io, nullptr);
  if (!s.ok())
    return FromIo(s, absl::StrCat("truncate the torn end of journal file ",
                                  path, " at offset ", size));
  return absl::OkStatus();
}

}  // namespace

void RecordArrays::Unpack(const char* p, uint64_t n, int dim,
                          JournalRecord* r) {
  ids_.resize(n);
  versions_.resize(n);
  times_.resize(n);
  states_.resize(n * dim);
  std::memcpy(ids_.data(), p, n * 8);
  std::memcpy(versions_.data(), p + n * 8, n * 8);
  std::memcpy(times_.data(), p + n * 16, n * 8);
  std::memcpy(states_.data(), p + n * 24, n * 4 * dim);
  r->n = static_cast<int64_t>(n);
  r->ids = ids_.data();
  r->versions = versions_.data();
  r->times = times_.data();
  r->states = states_.data();
}

int64_t Journal::RecordBytes(uint64_t n, int dim) {
  return static_cast<int64_t>(kHeaderBytes + n * (24 + 4 * uint64_t(dim)));
}

Journal::Journal(const Options& options) : options_(options) {}

std::string Journal::FileName(uint64_t first_seq) {
  return absl::StrCat(absl::StrFormat("%020u", first_seq), kSuffix);
}

std::string Journal::PathOf(uint64_t first_seq) const {
  return absl::StrCat(options_.dir, "/", FileName(first_seq));
}

absl::StatusOr<std::unique_ptr<Journal>> Journal::Open(
    const Options& options, uint64_t after,
    absl::FunctionRef<absl::Status(const JournalRecord&)> apply,
    uint64_t* last_seq) {
  std::unique_ptr<Journal> journal(new Journal(options));
  rocksdb::IOOptions io;
  RETURN_IF_ERROR(
      FromIo(options.fs->CreateDirIfMissing(options.dir, io, nullptr),
             absl::StrCat("create journal directory ", options.dir)));
  RETURN_IF_ERROR(journal->Replay(after, apply, last_seq));
  return journal;
}

absl::Status Journal::Replay(
    uint64_t after, absl::FunctionRef<absl::Status(const JournalRecord&)> apply,
    uint64_t* last_seq) {
  rocksdb::IOOptions io;
  std::vector<std::string> names;
  RETURN_IF_ERROR(
      FromIo(options_.fs->GetChildren(options_.dir, io, &names, nullptr),
             absl::StrCat("list journal directory ", options_.dir)));
  std::vector<std::pair<uint64_t, std::string>> found;
  for (const std::string& name : names)
    if (uint64_t first = FirstSeqOf(name); first > 0)
      found.emplace_back(first, options_.dir + "/" + name);
  std::sort(found.begin(), found.end());

  *last_seq = 0;
  std::string data, previous;
  std::vector<File> files;
  uint64_t next = after + 1;  // the first record not kept elsewhere
  for (const auto& [first, path] : found) {
    File file{first, first - 1, path};
    // Before its records are applied: none may be missing before it.
    RETURN_IF_ERROR(CheckFollows(file, previous, after, &next));
    RETURN_IF_ERROR(ReadWhole(options_.fs, path, &data));
    size_t end = 0;
    Tear tear;
    RETURN_IF_ERROR(
        ReplayFile(data, after, apply, last_seq, &file, &end, &tear));
    if (tear.torn) RETURN_IF_ERROR(CutTear(file, end, data.size(), tear));
    if (file.last_seq < file.first_seq) {
      // No whole record (created, then a crash or a failed first append):
      // the next file may take its name.
      RETURN_IF_ERROR(FromIo(options_.fs->DeleteFile(path, io, nullptr),
                             absl::StrCat("delete empty journal file ", path)));
      continue;
    }
    next = std::max(next, file.last_seq + 1);
    previous = path;
    files.push_back(std::move(file));
  }
  absl::MutexLock lock(&mu_);
  files_ = std::move(files);
  return absl::OkStatus();
}

absl::Status Journal::CheckFollows(const File& file,
                                   const std::string& previous, uint64_t after,
                                   uint64_t* next) const {
  if (file.first_seq <= *next) return absl::OkStatus();
  return absl::DataLossError(absl::StrCat(
      "journal ", options_.dir, ": records ", *next, "-", file.first_seq - 1,
      " are missing (",
      previous.empty()
          ? absl::StrCat("the database holds the records through ", after)
          : absl::StrCat(previous, " ends at record ", *next - 1),
      ", and ", file.path, " starts at record ", file.first_seq,
      "): a journal file was deleted or emptied. They were acknowledged "
      "pushes: restore the file, or remove the files from ",
      file.path, " on to start without them (and what followed)"));
}

absl::Status Journal::CutTear(const File& file, size_t end, size_t size,
                              const Tear& tear) {
  // A torn last record was never acknowledged: cut it, so that the file
  // ends at a whole record.
  RETURN_IF_ERROR(Truncate(options_.fs, file.path, end));
  if (!options_.warn) return absl::OkStatus();
  const uint64_t kept = file.last_seq + 1 - file.first_seq;
  options_.warn(absl::StrCat(
      "journal file ", file.path, ": cut at offset ", end, ", dropping ",
      size - end, " bytes: ", tear.what, "; kept ", kept,
      kept == 1 ? " record" : " records",
      kept == 0 ? std::string()
                : absl::StrCat(" (", file.first_seq, "-", file.last_seq, ")"),
      " of this file. A crash during that append (never acknowledged) "
      "leaves this; if the store did not crash then, the file was cut and "
      "the pushes after offset ",
      end, " are lost"));
  return absl::OkStatus();
}

absl::Status Journal::ReplayFile(
    const std::string& data, uint64_t after,
    absl::FunctionRef<absl::Status(const JournalRecord&)> apply,
    uint64_t* last_seq, File* file, size_t* end, Tear* tear) {
  const int dim = options_.dim;
  RecordArrays arrays;
  size_t off = 0;
  *tear = Tear();
  auto torn = [&](std::string what) {
    tear->torn = true;
    tear->what = std::move(what);
  };
  while (off < data.size()) {
    const size_t left = data.size() - off;
    auto bad = [&](const std::string& why) {
      return absl::DataLossError(absl::StrCat("journal file ", file->path,
                                              ", offset ", off, ": ", why));
    };
    Header h;
    if (left < kHeaderBytes) {
      torn(absl::StrCat("a record's first ", left, " bytes (its header cut)"));
      break;
    }
    std::memcpy(&h, data.data() + off, kHeaderBytes);
    if (h.magic != kMagic) {
      // Zeros to the end: space allocated but never written (a crash).
      if (std::all_of(data.begin() + off, data.end(),
                      [](char c) { return c == 0; })) {
        torn("zeros (space allocated, never written)");
        break;
      }
      return bad("not a journal record");
    }
    // A whole header that fails its own checksum is damage, not a torn
    // append (a torn append leaves a prefix of its record): without this
    // check, a damaged length would read as a record cut short.
    if (Crc(data.data() + off + 12, kHeaderBytes - 12) != h.header_crc)
      return bad("header checksum mismatch");
    if (h.dim != static_cast<uint32_t>(dim))
      return bad(
          absl::StrCat("a record of dim ", h.dim, " in a store of dim ", dim));
    const uint64_t max_n = left / (24 + 4 * uint64_t(dim));
    if (h.n > max_n || RecordBytes(h.n, dim) > int64_t(left)) {
      // Cut short: the last append did not complete.
      torn(absl::StrCat("record ", h.seq, " (", RecordBytes(h.n, dim),
                        " bytes) cut short"));
      break;
    }
    const int64_t bytes = RecordBytes(h.n, dim);
    if (Crc(data.data() + off + 8, bytes - 8) != h.crc) {
      if (off + bytes == data.size()) {
        torn(absl::StrCat("record ", h.seq,
                          " fails its checksum (partly "
                          "written)"));
        break;
      }
      return bad("checksum mismatch");
    }
    if (h.seq <= *last_seq || h.seq < file->first_seq)
      return bad(absl::StrCat("sequence number ", h.seq,
                              " out of order (after ", *last_seq, ")"));
    *last_seq = h.seq;
    file->last_seq = h.seq;
    if (h.seq > after) {
      JournalRecord r;
      arrays.Unpack(data.data() + off + kHeaderBytes, h.n, dim, &r);
      r.seq = h.seq;
      r.writer = h.writer;
      r.bytes = bytes;
      RETURN_IF_ERROR(apply(r));
    }
    off += bytes;
    file->bytes += bytes;
  }
  *end = off;
  return absl::OkStatus();
}

Journal::~Journal() {
  if (out_ != nullptr)
    out_->Close(rocksdb::IOOptions(), nullptr).PermitUncheckedError();
}

absl::Status Journal::Fail(const rocksdb::IOStatus& s,
                           const std::string& what) {
  failed_ = absl::UnavailableError(absl::StrCat(
      what, ": ", s.ToString(),
      " (the journal stopped writing after this error: restart the store "
      "once the cause is fixed)"));
  return failed_;
}

absl::Status Journal::StartFile(uint64_t seq) {
  rocksdb::IOOptions io;
  if (out_ != nullptr) {
    rocksdb::IOStatus s = out_->Close(io, nullptr);
    out_.reset();
    if (!s.ok()) return Fail(s, "close a journal file");
  }
  const std::string path = PathOf(seq);
  rocksdb::IOStatus s = options_.fs->NewWritableFile(
      path, rocksdb::FileOptions(), &out_, nullptr);
  if (!s.ok()) {
    out_.reset();
    return Fail(s, absl::StrCat("create journal file ", path));
  }
  if (options_.sync) {  // its directory entry must survive a crash too
    std::unique_ptr<rocksdb::FSDirectory> dir;
    s = options_.fs->NewDirectory(options_.dir, io, &dir, nullptr);
    if (s.ok()) s = dir->Fsync(io, nullptr);
    if (!s.ok()) return Fail(s, "sync the journal directory");
  }
  out_bytes_ = 0;
  absl::MutexLock lock(&mu_);
  files_.push_back(File{seq, seq - 1, path});
  out_open_ = true;
  return absl::OkStatus();
}

absl::StatusOr<int64_t> Journal::Append(uint64_t seq,
                                        absl::Span<const int64_t> ids,
                                        absl::Span<const float> states,
                                        absl::Span<const uint64_t> versions,
                                        absl::Span<const double> times,
                                        int32_t writer) {
  if (!failed_.ok()) return failed_;
  rocksdb::IOOptions io;
  // A new file, named by its first record.
  if (out_ == nullptr || out_bytes_ >= options_.file_bytes)
    RETURN_IF_ERROR(StartFile(seq));
  const uint64_t n = ids.size();
  const int64_t bytes = RecordBytes(n, options_.dim);
  const rocksdb::Slice parts[4] = {
      rocksdb::Slice(reinterpret_cast<const char*>(ids.data()), n * 8),
      rocksdb::Slice(reinterpret_cast<const char*>(versions.data()), n * 8),
      rocksdb::Slice(reinterpret_cast<const char*>(times.data()), n * 8),
      rocksdb::Slice(reinterpret_cast<const char*>(states.data()),
                     states.size() * 4)};
  Header h{kMagic, 0,      0, static_cast<uint32_t>(options_.dim),
           seq,    writer, 0, n};
  char header[kHeaderBytes];
  std::memcpy(header, &h, kHeaderBytes);
  const uint32_t header_crc = Crc(header + 12, kHeaderBytes - 12);
  std::memcpy(header + 8, &header_crc, 4);
  uint32_t crc = Crc(header + 8, kHeaderBytes - 8);
  for (const rocksdb::Slice& part : parts)
    crc = Crc32cExtend(crc, part.data(), part.size());
  std::memcpy(header + 4, &crc, 4);
  rocksdb::IOStatus s;
  if (bytes >= kAppendPartsMin) {
    s = out_->Append(rocksdb::Slice(header, kHeaderBytes), io, nullptr);
    for (size_t i = 0; i < 4 && s.ok(); ++i)
      s = out_->Append(parts[i], io, nullptr);
  } else {
    record_.assign(header, kHeaderBytes);
    for (const rocksdb::Slice& part : parts)
      record_.append(part.data(), part.size());
    s = out_->Append(rocksdb::Slice(record_), io, nullptr);
  }
  if (!s.ok()) return Fail(s, "append to the journal");
  if (options_.sync) {
    s = out_->Sync(io, nullptr);
    if (!s.ok()) return Fail(s, "sync the journal");
  }
  if (out_bytes_ == 0 && options_.on_file_started) {
    if (absl::Status started = options_.on_file_started(seq); !started.ok()) {
      failed_ = absl::Status(
          started.code(),
          absl::StrCat(started.message(),
                       " (the journal stopped writing after this error: "
                       "restart the store once the cause is fixed)"));
      return failed_;
    }
  }
  out_bytes_ += bytes;
  absl::MutexLock lock(&mu_);
  files_.back().last_seq = seq;
  files_.back().bytes += bytes;
  return bytes;
}

absl::Status Journal::DropLocked(uint64_t seq, size_t end) {
  size_t dropped = 0;
  absl::Status status;
  while (dropped < end && files_[dropped].last_seq <= seq) {
    const std::string& path = files_[dropped].path;
    status =
        FromIo(options_.fs->DeleteFile(path, rocksdb::IOOptions(), nullptr),
               absl::StrCat("delete journal file ", path));
    if (!status.ok()) break;
    ++dropped;
  }
  files_.erase(files_.begin(), files_.begin() + dropped);
  return status;
}

absl::Status Journal::DropThrough(uint64_t seq) {
  absl::MutexLock lock(&mu_);
  return DropLocked(seq, out_open_ ? files_.size() - 1 : files_.size());
}

absl::Status Journal::CloseAndDropThrough(uint64_t seq) {
  absl::Status status;
  if (out_ != nullptr) {
    status = FromIo(out_->Close(rocksdb::IOOptions(), nullptr),
                    "close the journal file");
    out_.reset();
  }
  absl::MutexLock lock(&mu_);
  out_open_ = false;
  if (!status.ok()) return status;
  return DropLocked(seq, files_.size());
}

int64_t Journal::bytes() const {
  absl::MutexLock lock(&mu_);
  int64_t sum = 0;
  for (const File& f : files_) sum += f.bytes;
  return sum;
}

}  // namespace mnemo::memstore
