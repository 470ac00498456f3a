#include "memstore/recovery.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "memstore/cold_tier.h"
#include "memstore/format.h"
#include "rocksdb/env.h"
#include "rocksdb/file_system.h"
#include "util/status_macros.h"

namespace mnemo::memstore {
namespace {

namespace fs = std::filesystem;

absl::Status WriteFileAtomically(const fs::path& path,
                                 const std::string& text) {
  fs::path tmp = path;
  tmp += ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0)
    return absl::UnavailableError(absl::StrCat("open ", tmp.string()));
  bool ok = ::write(fd, text.data(), text.size()) ==
                static_cast<ssize_t>(text.size()) &&
            ::fsync(fd) == 0;
  ::close(fd);
  if (!ok || ::rename(tmp.c_str(), path.c_str()) != 0)
    return absl::UnavailableError(absl::StrCat("write ", path.string()));
  int dfd = ::open(path.parent_path().c_str(), O_RDONLY | O_DIRECTORY);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return absl::OkStatus();
}

// Copies a RocksDB directory (hard links for immutable SST files).
absl::Status CopyDbDir(const fs::path& from, const fs::path& to) {
  std::error_code ec;
  fs::remove_all(to, ec);
  fs::create_directories(to, ec);
  if (ec) return absl::UnavailableError(absl::StrCat("mkdir ", to.string()));
  for (const auto& e : fs::directory_iterator(from, ec)) {
    if (!e.is_regular_file()) continue;
    fs::path dst = to / e.path().filename();
    std::error_code lec;
    if (e.path().extension() == ".sst") {
      fs::create_hard_link(e.path(), dst, lec);
      if (!lec) continue;
    }
    fs::copy_file(e.path(), dst, lec);
    if (lec)
      return absl::UnavailableError(
          absl::StrCat("copy ", e.path().string(), ": ", lec.message()));
  }
  if (ec) return absl::UnavailableError(absl::StrCat("list ", from.string()));
  return absl::OkStatus();
}

// Free space Open() needs before it touches RocksDB: its manifest, options
// file and logs. Debian's RocksDB aborts on an assertion when a write of
// its own fails during DB::Open (a full disk) instead of returning the
// error, so a disk without room is refused here, with the stored data
// untouched.
constexpr int64_t kOpenFreeBytes = 1 << 20;

absl::Status CheckRoomToOpen(const fs::path& dir) {
  std::error_code ec;
  fs::path probe = dir;
  while (!probe.empty() && !fs::exists(probe, ec)) probe = probe.parent_path();
  struct statvfs st;
  if (probe.empty() || ::statvfs(probe.c_str(), &st) != 0) {
    return absl::OkStatus();  // not knowable: Open reports what fails
  }
  const int64_t free_bytes = static_cast<int64_t>(st.f_bavail) * st.f_frsize;
  // The journal's records are materialized into RocksDB on recovery.
  int64_t journal_bytes = 0;
  for (const auto& e : fs::directory_iterator(dir / kJournalDir, ec)) {
    std::error_code size_ec;
    const auto size = e.file_size(size_ec);
    if (!size_ec) journal_bytes += static_cast<int64_t>(size);
  }
  const int64_t need = kOpenFreeBytes + journal_bytes + journal_bytes / 4;
  if (free_bytes >= need) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      "--data-dir ", dir.string(), ": ", free_bytes,
      " bytes free on its file system, opening the store needs ", need,
      " (RocksDB's manifest and logs",
      journal_bytes > 0
          ? absl::StrCat(", and room to materialize the journal's ",
                         journal_bytes, " bytes")
          : std::string(),
      "): free some space and restart; the stored data is untouched"));
}

}  // namespace

Recovery::Recovery(const NodeStateStoreOptions& options) : options_(options) {}

Recovery::~Recovery() {
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

absl::StatusOr<std::unique_ptr<Recovery>> Recovery::Open(
    const NodeStateStoreOptions& options) {
  if (options.env == nullptr) {  // (a test's Env has its own disk)
    RETURN_IF_ERROR(CheckRoomToOpen(options.data_dir));
  }
  std::unique_ptr<Recovery> recovery(new Recovery(options));
  RETURN_IF_ERROR(recovery->Prepare());
  return recovery;
}

// ---------------------------------------------------------------------------
// What the store has promised (IDENTITY)

absl::Status Recovery::ReadIdentity() {
  const fs::path path = fs::path(options_.data_dir) / kIdentityFile;
  std::error_code ec;
  if (!fs::exists(path, ec)) return absl::OkStatus();
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    const size_t colon = line.find(':');
    if (line.empty() || line[0] == '#' || colon == std::string::npos) continue;
    const std::string key = line.substr(0, colon);
    const std::string value(absl::StripAsciiWhitespace(line.substr(colon + 1)));
    if (key == "acknowledged") {
      identity_.acknowledged = value == "yes";
    } else if (key == "journaled" &&
               !absl::SimpleAtoi(value, &identity_.journaled)) {
      return absl::DataLossError(
          absl::StrCat(path.string(), ": unreadable line '", line, "'"));
    }
  }
  if (in.bad())
    return absl::UnavailableError(absl::StrCat("cannot read ", path.string()));
  return absl::OkStatus();
}

absl::Status Recovery::WriteIdentity(const Identity& identity) {
  RETURN_IF_ERROR(WriteFileAtomically(
      fs::path(options_.data_dir) / kIdentityFile,
      absl::StrCat("# What this memory store acknowledged "
                   "(memstore/recovery.h): it refuses to start without it.\n"
                   "acknowledged: ",
                   identity.acknowledged ? "yes" : "no",
                   "\njournaled: ", identity.journaled, "\n")));
  identity_ = identity;
  return absl::OkStatus();
}

absl::Status Recovery::NoteAcknowledged() {
  if (identity_.acknowledged) return absl::OkStatus();
  Identity next = identity_;
  next.acknowledged = true;
  return WriteIdentity(next);
}

absl::Status Recovery::NoteJournaled(uint64_t seq) {
  if (identity_.acknowledged && identity_.journaled >= seq)
    return absl::OkStatus();
  return WriteIdentity(Identity{true, std::max(identity_.journaled, seq)});
}

// How to go on without what is missing, for the refusals below.
std::string Recovery::HowToGoOn() const {
  return absl::StrCat(
      "; restore it, or, to start without it (losing those pushes), remove ",
      (fs::path(options_.data_dir) / kIdentityFile).string());
}

absl::Status Recovery::CheckDatabase() const {
  const fs::path dir(options_.data_dir);
  std::error_code ec;
  if (!identity_.acknowledged || fs::exists(dir / "db" / "CURRENT", ec))
    return absl::OkStatus();
  // A write-through journal from its first record on holds every push:
  // replay rebuilds the database (and checks the journal is whole).
  if (fs::file_size(dir / kJournalDir / Journal::FileName(1), ec) > 0 && !ec)
    return absl::OkStatus();
  return absl::DataLossError(absl::StrCat(
      (dir / "db").string(),
      " is missing (no CURRENT file), but this store acknowledged pushes (",
      (dir / kIdentityFile).string(),
      ") that only its database holds: refusing to start without them",
      HowToGoOn()));
}

absl::Status Recovery::CheckJournaled(uint64_t last) const {
  if (last >= identity_.journaled) return absl::OkStatus();
  const fs::path dir(options_.data_dir);
  return absl::DataLossError(absl::StrCat(
      (dir / kJournalDir).string(),
      ": this store acknowledged pushes through "
      "record ",
      identity_.journaled, " of its journal at least (",
      (dir / kIdentityFile).string(),
      "), but its journal and database hold "
      "the records through ",
      last, " only: records ", last + 1, "-", identity_.journaled,
      " are missing (a journal file deleted or emptied)", HowToGoOn()));
}

absl::Status Recovery::Prepare() {
  const fs::path dir(options_.data_dir);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec)
    return absl::UnavailableError(absl::StrCat(
        "cannot create data_dir ", dir.string(), ": ", ec.message()));
  lock_fd_ = ::open((dir / "LOCK").c_str(), O_RDWR | O_CREAT, 0644);
  if (lock_fd_ < 0 || ::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0)
    return absl::FailedPreconditionError(
        absl::StrCat("data_dir ", dir.string(), " is in use"));
  RETURN_IF_ERROR(ReadIdentity());

  // SST files of a materialization a crash interrupted (written, or linked
  // into RocksDB and not yet removed): the journal still covers them.
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end;
       it.increment(ec)) {
    const std::string name = it->path().filename().string();
    std::error_code removed;
    if (absl::StartsWith(name, "ingest-") && absl::EndsWith(name, ".sst"))
      fs::remove(it->path(), removed);
  }
  RETURN_IF_ERROR(RestoreAfterCrash());
  return CheckDatabase();
}

absl::Status Recovery::RestoreAfterCrash() {
  const fs::path dir(options_.data_dir);
  // A session marker left behind means the last session crashed.
  const fs::path session = dir / kSessionFile;
  if (!fs::exists(session)) return absl::OkStatus();
  std::ifstream in(session);
  std::string policy;
  in >> policy;
  if (policy != WritePolicyName(WritePolicy::kWriteBack))
    return absl::OkStatus();
  std::error_code ec;
  fs::path point = dir / "recovery";
  if (!fs::exists(point / "CURRENT")) point = dir / "recovery.old";
  if (identity_.acknowledged && !fs::exists(point / "CURRENT")) {
    return absl::DataLossError(absl::StrCat(
        (dir / "recovery").string(),
        " is missing (and so is recovery.old): the last write-back session "
        "crashed, and its recovery point holds the pushes it acknowledged (",
        (dir / kIdentityFile).string(),
        "): refusing to start without them; the live database is left as it "
        "was",
        HowToGoOn()));
  }
  fs::remove_all(dir / "db", ec);
  if (fs::exists(point / "CURRENT")) {
    RETURN_IF_ERROR(CopyDbDir(point, dir / "db.restore"));
    fs::rename(dir / "db.restore", dir / "db", ec);
    if (ec)
      return absl::UnavailableError(
          absl::StrCat("restore ", dir.string(), ": ", ec.message()));
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------
// Journal replay

absl::StatusOr<Recovery::Replayed> Recovery::ReplayJournal(
    ColdTier& cold,
    absl::FunctionRef<absl::Status(const JournalRecord&)> apply) {
  Replayed replayed;
  RETURN_IF_ERROR(ReplayLegacyJournal(cold, apply, &replayed));
  // Records up to here are in RocksDB (materialized, or format 2's journal).
  const uint64_t kept = std::max(cold.MaterializedSeq(), replayed.last_seq);
  rocksdb::Env* env =
      options_.env != nullptr ? options_.env : rocksdb::Env::Default();
  Journal::Options jo;
  jo.fs = env->GetFileSystem().get();
  jo.dir = (fs::path(options_.data_dir) / kJournalDir).string();
  jo.dim = options_.dim;
  jo.sync = options_.sync;
  // About four files per journal_limit_bytes: materializations delete
  // whole files.
  jo.file_bytes = std::clamp<int64_t>(options_.journal_limit_bytes / 4,
                                      int64_t{4} << 10, int64_t{64} << 20);
  jo.warn = options_.warn ? options_.warn : [](const std::string& line) {
    std::fprintf(stderr, "mnemo memstore: warning: %s\n", line.c_str());
  };
  jo.on_file_started = [this](uint64_t seq) { return NoteJournaled(seq); };
  uint64_t last = 0;
  ASSIGN_OR_RETURN(replayed.journal, Journal::Open(
                                         jo, kept,
                                         [&](const JournalRecord& r) {
                                           RETURN_IF_ERROR(apply(r));
                                           replayed.bytes += r.bytes;
                                           return absl::OkStatus();
                                         },
                                         &last));
  // Materialized records may be gone from both journals.
  replayed.last_seq = std::max(kept, last);
  RETURN_IF_ERROR(CheckJournaled(replayed.last_seq));
  // Format 2's journal column family is read above; from now on the store
  // is format 3.
  RETURN_IF_ERROR(cold.UpgradeFormat());
  return replayed;
}

absl::Status Recovery::ReplayLegacyJournal(
    ColdTier& cold, absl::FunctionRef<absl::Status(const JournalRecord&)> apply,
    Replayed* replayed) {
  const int dim = options_.dim;
  const uint64_t row_bytes = uint64_t{4} * dim;
  RecordArrays arrays;
  return cold.ScanLegacyJournal([&](uint64_t seq, std::string_view v) {
    LegacyJournalHeader h;
    if (v.size() < sizeof h)
      return absl::DataLossError("malformed journal record");
    std::memcpy(&h, v.data(), sizeof h);
    const uint64_t n = h.n;
    if (h.magic != kLegacyJournalMagic || h.dim != static_cast<uint32_t>(dim) ||
        v.size() != sizeof h + n * (24 + row_bytes))
      return absl::DataLossError(absl::StrCat("malformed journal record ", seq,
                                              " of ", v.size(), " bytes"));
    // Copy out: the iterator's buffer is not aligned for int64/double/float.
    JournalRecord r;
    arrays.Unpack(v.data() + sizeof h, n, dim, &r);
    r.seq = seq;
    r.writer = h.writer;
    r.bytes = static_cast<int64_t>(v.size());
    RETURN_IF_ERROR(apply(r));
    replayed->last_seq = std::max(replayed->last_seq, seq);
    replayed->bytes += r.bytes;
    replayed->legacy = true;
    return absl::OkStatus();
  });
}

// ---------------------------------------------------------------------------
// Recovery points, session marker, checkpoints

absl::Status Recovery::MakeRecoveryPoint(ColdTier& cold) {
  const fs::path dir(options_.data_dir);
  std::error_code ec;
  fs::remove_all(dir / "recovery.tmp", ec);
  RETURN_IF_ERROR(cold.CreateCheckpoint((dir / "recovery.tmp").string(),
                                        "create recovery point"));
  // recovery -> recovery.old -> (new) recovery; Open() falls back to .old.
  if (fs::exists(dir / "recovery")) {
    fs::remove_all(dir / "recovery.old", ec);
    fs::rename(dir / "recovery", dir / "recovery.old", ec);
  }
  fs::rename(dir / "recovery.tmp", dir / "recovery", ec);
  if (ec)
    return absl::UnavailableError(
        absl::StrCat("install recovery point: ", ec.message()));
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  fs::remove_all(dir / "recovery.old", ec);
  return absl::OkStatus();
}

absl::Status Recovery::MarkSessionOpen() {
  return WriteFileAtomically(
      fs::path(options_.data_dir) / kSessionFile,
      std::string(WritePolicyName(options_.write_policy)) + "\n");
}

void Recovery::MarkCleanClose() {
  std::error_code ec;
  fs::remove(fs::path(options_.data_dir) / kSessionFile, ec);
}

absl::Status Recovery::Checkpoint(ColdTier& cold, const std::string& dir) {
  std::error_code ec;
  if (!fs::create_directories(dir, ec) || ec)
    return absl::UnavailableError(
        absl::StrCat("cannot create checkpoint dir ", dir, ": ", ec.message()));
  absl::Status status =
      cold.CreateCheckpoint((fs::path(dir) / "db").string(), "checkpoint");
  if (status.ok() && options_.write_policy == WritePolicy::kWriteBack)
    status = MakeRecoveryPoint(cold);
  if (!status.ok()) {
    // All or nothing: a failed checkpoint leaves no directory behind (it
    // would open as an empty store, and a retry would find its name taken).
    fs::remove_all(dir, ec);
  }
  return status;
}

}  // namespace mnemo::memstore
