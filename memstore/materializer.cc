#include "memstore/materializer.h"

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "memstore/cold_tier.h"
#include "memstore/format.h"
#include "memstore/journal.h"
#include "util/executor.h"
#include "util/status_macros.h"

namespace mnemo::memstore {
namespace {

namespace fs = std::filesystem;

// Materializations of at least this many states go through an SST file
// ingested into the nodes column family (no memtable, no WAL).
constexpr size_t kIngestMinStates = 2048;
// Rows a background materialization copies per hold of the store lock.
constexpr size_t kCopyChunk = 2048;
// A background materialization is written in parallel parts of at least
// this many states (SST files ingested together).
constexpr size_t kSstPartMin = 65536;

}  // namespace

Materializer::Materializer(const NodeStateStoreOptions& options,
                           absl::Mutex& mu, HotTier& hot, ColdTier& cold,
                           Journal* journal, absl::Status& broken,
                           const JournalState& journal_state)
    : write_through_(options.write_policy == WritePolicy::kWriteThrough),
      limit_bytes_(options.journal_limit_bytes),
      row_bytes_(int64_t{options.dim} * 4),
      data_dir_(options.data_dir),
      cold_(cold),
      journal_(journal),
      mu_(mu),
      hot_(hot),
      broken_(broken),
      applied_seq_(journal_state.applied_seq),
      journal_bytes_(journal_state.bytes),
      legacy_journal_(journal_state.legacy) {}

Materializer::~Materializer() {
  if (!thread_.joinable()) return;
  absl::MutexLock lock(&mu_);
  StopLocked();
}

void Materializer::StartLocked() {
  mu_.AssertHeld();
  // Large background materializations write their SSTs in parallel parts
  // (pushes wait for them once the journal is far enough ahead): on the
  // materializer and up to 3 more threads.
  const int cpus = static_cast<int>(std::thread::hardware_concurrency());
  sst_writer_threads_ = std::clamp(cpus - 1, 0, 3);
  if (sst_writer_threads_ > 0)
    sst_writers_ = std::make_unique<Executor>(sst_writer_threads_);
  thread_ = std::thread([this] { Loop(); });
}

void Materializer::StopLocked() {
  mu_.AssertHeld();
  if (!thread_.joinable()) return;
  stop_ = true;
  mu_.Await(absl::Condition(this, &Materializer::ExitedLocked));
  // It holds no lock after setting exited_.
  thread_.join();
}

// ---------------------------------------------------------------------------
// The store's calls

absl::Status Materializer::MaterializeLocked(bool flush) {
  mu_.AssertHeld();
  Job job = Begin();
  absl::Status written = job.ingest ? WriteSstLocked(&job) : absl::OkStatus();
  return Complete(&job, std::move(written), flush);
}

void Materializer::AwaitIdleLocked() {
  mu_.AssertHeld();
  mu_.Await(absl::Condition(this, &Materializer::IdleLocked));
}

absl::Status Materializer::RetryLocked() {
  mu_.AssertHeld();
  error_ = MaterializeLocked(/*flush=*/false);
  return error_;
}

const absl::Status& Materializer::error() const {
  mu_.AssertReaderHeld();
  return error_;
}

void Materializer::JournaledLocked(int64_t bytes) {
  mu_.AssertHeld();
  journal_bytes_ += bytes;
}

void Materializer::AppliedLocked(uint64_t seq) {
  mu_.AssertHeld();
  applied_seq_ = seq;
}

uint64_t Materializer::applied_seq() const {
  mu_.AssertReaderHeld();
  return applied_seq_;
}

bool Materializer::DueLocked() const {
  mu_.AssertHeld();
  return journal_bytes_ >= limit_bytes_;
}

bool Materializer::AwaitRoomLocked() {
  mu_.AssertHeld();
  if (journal_bytes_ < 2 * limit_bytes_) return false;
  mu_.Await(absl::Condition(this, &Materializer::JournalMayGrowLocked));
  return true;
}

void Materializer::RequestLocked() {
  mu_.AssertHeld();
  if (!running_) requested_ = true;
}

void Materializer::SpilledLocked(const char* entries, size_t bytes) {
  mu_.AssertHeld();
  if (running_) respill_.append(entries, bytes);
}

// ---------------------------------------------------------------------------
// Phases

Materializer::Job Materializer::Begin() {
  // Pushes that land later re-mark their slots dirty (2 -> 1) and keep
  // their journal records.
  Job job;
  job.items = hot_.TakeDirty();
  job.covered_seq = applied_seq_;
  job.covered_bytes = journal_bytes_;
  journal_bytes_ = 0;
  job.ingest = job.items.size() >= kIngestMinStates;
  if (job.ingest) {
    job.sst_prefix =
        (fs::path(data_dir_) / absl::StrCat("ingest-", job.covered_seq))
            .string();
  }
  running_ = true;
  respill_.clear();
  return job;
}

absl::Status Materializer::WriteSst(
    Job* job, size_t parts,
    absl::FunctionRef<size_t(size_t begin, size_t end, char* out)> encode) {
  std::sort(job->items.begin(), job->items.end(),
            [](const HotTier::SlotRef& a, const HotTier::SlotRef& b) {
              return a.id < b.id;
            });
  const size_t n = job->items.size();
  parts = std::clamp<size_t>(n / kSstPartMin, 1, std::max<size_t>(parts, 1));
  const size_t entry_bytes = EntryBytes(row_bytes_);
  job->sst_paths.clear();
  for (size_t p = 0; p < parts; ++p)
    job->sst_paths.push_back(absl::StrCat(job->sst_prefix, "-", p, ".sst"));
  // Part p: items [n * p / parts, n * (p + 1) / parts), a key range of its
  // own (the ids are distinct).
  std::vector<absl::StatusOr<size_t>> written(parts, size_t{0});
  auto part = [&](size_t p) -> absl::StatusOr<size_t> {
    const size_t first = n * p / parts, last = n * (p + 1) / parts;
    ColdTier::SstWriter writer(cold_);
    RETURN_IF_ERROR(writer.Open(job->sst_paths[p]));
    std::vector<char> buf(std::min(last - first, kCopyChunk) * entry_bytes);
    for (size_t begin = first; begin < last; begin += kCopyChunk) {
      const size_t end = std::min(last, begin + kCopyChunk);
      const size_t copied = encode(begin, end, buf.data());
      RETURN_IF_ERROR(writer.Add(buf.data(), copied));
    }
    return writer.Finish();
  };
  if (parts > 1) {
    // Parts 1.. on the writers, part 0 here; then this thread runs queued
    // parts itself until all are done.
    std::atomic<int64_t> pending(static_cast<int64_t>(parts) - 1);
    for (size_t p = 1; p < parts; ++p) {
      sst_writers_->Submit([&part, &written, &pending, p] {
        written[p] = part(p);
        pending.fetch_sub(1);
      });
    }
    written[0] = part(0);
    sst_writers_->RunUntilZero(&pending);
  } else {
    written[0] = part(0);
  }
  job->sst_files.clear();
  for (size_t p = 0; p < parts; ++p) {
    RETURN_IF_ERROR(written[p].status());
    if (*written[p] > 0) job->sst_files.push_back(job->sst_paths[p]);
  }
  return absl::OkStatus();
}

absl::Status Materializer::WriteSstLocked(Job* job) {
  // One part: a writer thread could not take the lock held here.
  return WriteSst(job, 1, [this, job](size_t begin, size_t end, char* out) {
    mu_.AssertReaderHeld();  // held by the caller throughout
    return hot_.EncodeItems(job->items, begin, end, out);
  });
}

absl::Status Materializer::WriteSstUnlocked(Job* job) {
  // The job is this thread's: sorting it needs no lock.
  return WriteSst(job, 1 + static_cast<size_t>(sst_writer_threads_),
                  [this, job](size_t begin, size_t end, char* out) {
                    // Shared: the parts copy their rows at once.
                    absl::ReaderMutexLock lock(&mu_);
                    return hot_.EncodeItems(job->items, begin, end, out);
                  });
}

absl::Status Materializer::Ingest(const Job& job) {
  absl::Status st;
  if (!job.sst_files.empty()) st = cold_.IngestFiles(job.sst_files);
  if (!st.ok() || respill_.empty()) return st;
  // States spilled while the SST was written are newer than what it now
  // holds for them: write them again at once, before anything else reads
  // `nodes`. If that fails, RocksDB holds older states than the cold
  // metadata says: stop the store (a restart replays the journal, which
  // still covers them).
  st = cold_.PutEntries(
      respill_.data(), respill_.size() / EntryBytes(row_bytes_),
      ColdTier::WriteKind::kMaterialize, "materialize: rewrite spills");
  if (!st.ok()) broken_ = st;
  return st;
}

absl::Status Materializer::Complete(Job* job, absl::Status status, bool flush) {
  ColdTier::Batch batch(&cold_, "materialize");
  if (status.ok() && job->ingest) {
    status = Ingest(*job);
  } else if (status.ok()) {
    // Node entries may land before the journal is cut: replay over a newer
    // entry is a no-op under newest-wins.
    std::vector<char> entry(EntryBytes(row_bytes_));
    for (size_t j = 0; j < job->items.size() && status.ok(); ++j) {
      if (hot_.EncodeItems(job->items, j, j + 1, entry.data()) == 0) continue;
      status = batch.Put(entry.data());
    }
  }
  for (const std::string& path : job->sst_paths) {
    std::error_code ec;
    fs::remove(path, ec);
  }
  // The journal records this covers: durable as node entries once the
  // batch is written (write-through: through the WAL) or flushed.
  const bool cut = (write_through_ || flush) && job->covered_seq > 0;
  if (status.ok() && cut) batch.CutJournal(job->covered_seq, legacy_journal_);
  if (status.ok()) status = batch.Write();
  if (status.ok() && flush) status = cold_.Flush();
  if (status.ok() && cut) {
    legacy_journal_ = false;
    if (journal_ != nullptr) status = journal_->DropThrough(job->covered_seq);
  }
  hot_.SettleDirty(job->items, status.ok());
  if (!status.ok()) journal_bytes_ += job->covered_bytes;
  respill_.clear();
  running_ = false;
  return status;
}

void Materializer::Loop() {
  for (;;) {
    Job job;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(this, &Materializer::WakeLocked));
      if (stop_) {
        exited_ = true;  // then holds no lock
        return;
      }
      requested_ = false;
      job = Begin();
      if (!job.ingest) {
        absl::Status st = Complete(&job, absl::OkStatus(), /*flush=*/false);
        if (!st.ok()) error_ = st;
        continue;
      }
    }
    // A large set: the SST is written without the lock (taken only to copy
    // rows), so pushes and pulls go on meanwhile.
    absl::Status written = WriteSstUnlocked(&job);
    absl::MutexLock lock(&mu_);
    absl::Status st = Complete(&job, std::move(written), /*flush=*/false);
    if (!st.ok()) error_ = st;
  }
}

}  // namespace mnemo::memstore
