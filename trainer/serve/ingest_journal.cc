#include "trainer/serve/ingest_journal.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "util/crc32c.h"
#include "util/file.h"
#include "util/status_macros.h"

namespace mnemo::serve {
namespace {

constexpr uint32_t kMagic = 0x314a4e4d;  // "MNJ1", little-endian
constexpr size_t kHeader = 12;           // magic, bytes, CRC

void PutU32(uint32_t v, char* p) { std::memcpy(p, &v, 4); }
uint32_t GetU32(const char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

std::string Record(std::string_view payload) {
  std::string r(kHeader, '\0');
  PutU32(kMagic, r.data());
  PutU32(static_cast<uint32_t>(payload.size()), r.data() + 4);
  PutU32(Crc32cExtend(0, payload.data(), payload.size()), r.data() + 8);
  r.append(payload);
  return r;
}

absl::Status Errno(const std::string& what, const std::string& path) {
  return absl::InternalError(
      absl::StrCat("cannot ", what, " ", path, ": ", std::strerror(errno)));
}

// Writes all of `data` at the end of `fd`, then fdatasync.
absl::Status WriteAll(int fd, std::string_view data, const std::string& path) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Errno("write", path);
    }
    done += static_cast<size_t>(n);
  }
  if (::fdatasync(fd) != 0) return Errno("fdatasync", path);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<IngestJournal>> IngestJournal::Open(
    const std::string& dir, const std::string& identity,
    std::vector<std::string>* batches, std::string* warning) {
  namespace fs = std::filesystem;
  batches->clear();
  warning->clear();
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    return absl::InternalError(
        absl::StrCat("cannot create ", dir, ": ", ec.message()));
  }
  const std::string path = (fs::path(dir) / "ingest.journal").string();
  std::string text;
  if (fs::exists(path)) {
    auto read = ReadFileToString(path);
    if (!read.ok()) return read.status();
    text = *std::move(read);
  }
  // The whole records, and where the last one ends.
  size_t at = 0;
  std::vector<std::string> payloads;
  while (at < text.size()) {
    const size_t left = text.size() - at;
    bool whole = left >= kHeader && GetU32(text.data() + at) == kMagic;
    uint32_t bytes = 0;
    if (whole) {
      bytes = GetU32(text.data() + at + 4);
      whole = left - kHeader >= bytes &&
              Crc32cExtend(0, text.data() + at + kHeader, bytes) ==
                  GetU32(text.data() + at + 8);
    }
    if (!whole) {
      // Cut short or damaged: the tail of a write a crash cut (never
      // acknowledged) when nothing whole follows it.
      const bool magic = left >= kHeader && GetU32(text.data() + at) == kMagic;
      const bool zeros = text.find_first_not_of('\0', at) == std::string::npos;
      const bool tail =
          left < kHeader || (magic && left - kHeader <= bytes) || zeros;
      if (!tail) {
        return absl::DataLossError(absl::StrCat(
            path, ": record ", payloads.size(), " (byte ", at,
            ") is damaged and more bytes follow it: the batches after it "
            "cannot be trusted; move the journal away to start from the "
            "checkpoint"));
      }
      *warning =
          absl::StrCat(path, ": cut ", left, " bytes at its end (byte ", at,
                       "): a batch whose write was cut, never acknowledged");
      break;
    }
    payloads.emplace_back(text.data() + at + kHeader, bytes);
    at += kHeader + bytes;
  }
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return Errno("open", path);
  std::unique_ptr<IngestJournal> j(
      new IngestJournal(path, fd, static_cast<int64_t>(at)));
  if (::ftruncate(fd, static_cast<off_t>(at)) != 0 ||
      ::lseek(fd, static_cast<off_t>(at), SEEK_SET) < 0) {
    return Errno("cut", path);
  }
  if (payloads.empty()) {
    RETURN_IF_ERROR(WriteAll(fd, Record(identity), path));
    j->size_ = static_cast<int64_t>(kHeader + identity.size());
    RETURN_IF_ERROR(SyncDirectory(dir));
    return j;
  }
  if (payloads[0] != identity) {
    return absl::FailedPreconditionError(absl::StrCat(
        path, " holds the batches of \"", payloads[0], "\", not of \"",
        identity,
        "\": its batches would not apply to this memory; move it away (or "
        "serve what it was written for)"));
  }
  batches->assign(std::make_move_iterator(payloads.begin() + 1),
                  std::make_move_iterator(payloads.end()));
  return j;
}

IngestJournal::~IngestJournal() {
  if (fd_ >= 0) ::close(fd_);
}

absl::Status IngestJournal::Append(std::string_view batch) {
  const std::string r = Record(batch);
  absl::Status s = WriteAll(fd_, r, path_);
  if (!s.ok()) {
    // Back to the last whole record, so that a later append (or a restart)
    // finds no half-written one in the middle.
    if (::ftruncate(fd_, static_cast<off_t>(size_)) == 0) {
      ::lseek(fd_, static_cast<off_t>(size_), SEEK_SET);
    }
    return s;
  }
  size_ += static_cast<int64_t>(r.size());
  return absl::OkStatus();
}

}  // namespace mnemo::serve
