#include "memstore/store_impl.h"

#include <algorithm>
#include <filesystem>
#include <queue>
#include <utility>

#include "absl/strings/str_cat.h"
#include "memstore/cold_tier.h"
#include "memstore/format.h"
#include "memstore/journal.h"
#include "memstore/materializer.h"
#include "memstore/recovery.h"
#include "util/status_macros.h"

namespace mnemo::memstore {

namespace fs = std::filesystem;

StoreImpl::StoreImpl(const NodeStateStoreOptions& options)
    : options_(options),
      row_bytes_(int64_t{options.dim} * 4),
      hot_(options.dim, options.hot_capacity_bytes,
           /*track_recency=*/!options.data_dir.empty() &&
               options.hot_capacity_bytes > 0,
           /*track_dirty=*/!options.data_dir.empty()) {}

StoreImpl::~StoreImpl() {
  absl::MutexLock journal_lock(&journal_mu_);
  absl::MutexLock lock(&mu_);
  if (!closed_) CloseLocked().IgnoreError();
}

// ---------------------------------------------------------------------------
// Open and close

absl::StatusOr<std::unique_ptr<StoreImpl>> StoreImpl::Open(
    const NodeStateStoreOptions& options) {
  std::unique_ptr<StoreImpl> store(new StoreImpl(options));
  if (!options.data_dir.empty()) RETURN_IF_ERROR(store->OpenDataDir());
  absl::MutexLock lock(&store->mu_);
  store->ready_ = true;
  if (store->mat_ != nullptr &&
      options.write_policy == WritePolicy::kWriteThrough) {
    store->mat_->StartLocked();
  }
  return store;
}

absl::Status StoreImpl::OpenDataDir() {
  ASSIGN_OR_RETURN(recovery_, Recovery::Open(options_));
  ASSIGN_OR_RETURN(cold_, ColdTier::Open(options_));
  absl::MutexLock journal_lock(&journal_mu_);
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(LoadLocked());
  ASSIGN_OR_RETURN(
      Recovery::Replayed replayed,
      recovery_->ReplayJournal(*cold_, [this](const JournalRecord& r) {
        mu_.AssertHeld();
        return ApplyLocked(r.ids, r.states, r.versions, r.times, r.n, r.writer);
      }));
  journal_ = std::move(replayed.journal);
  next_seq_ = replayed.last_seq + 1;
  mat_ = std::make_unique<Materializer>(
      options_, mu_, hot_, *cold_, journal_.get(), broken_,
      Materializer::JournalState{replayed.last_seq, replayed.bytes,
                                 replayed.legacy});
  RETURN_IF_ERROR(SpillLocked());
  if (options_.write_policy == WritePolicy::kWriteBack) {
    // The state at Open is the first recovery point of this session.
    RETURN_IF_ERROR(recovery_->MakeRecoveryPoint(*cold_));
  }
  // Only now mark the session open: a crash before this point leaves the
  // live DB as the last clean Close() left it (a marker written earlier
  // would make the next Open restore a recovery point that may not exist
  // yet, losing that state).
  return recovery_->MarkSessionOpen();
}

absl::Status StoreImpl::LoadLocked() {
  const bool load_hot = options_.hot_capacity_bytes == 0;
  RETURN_IF_ERROR(cold_->ScanNodes(
      [this, load_hot](int64_t id, const EntryMeta& meta, const char* row) {
        mu_.AssertHeld();
        if (load_hot) {
          hot_.LoadHot(id, meta, row);
        } else {
          hot_.LoadCold(id, meta);
        }
      }));
  hot_.FinishLoad();
  return absl::OkStatus();
}

absl::Status StoreImpl::Close() {
  absl::MutexLock journal_lock(&journal_mu_);  // no push in flight
  absl::MutexLock lock(&mu_);
  if (closed_) return absl::FailedPreconditionError("store is closed");
  return CloseLocked();
}

absl::Status StoreImpl::CloseLocked() {
  closed_ = true;
  if (mat_ != nullptr) mat_->StopLocked();
  absl::Status status;
  if (cold_ != nullptr) {
    // A store that failed to open, or stopped after a storage failure,
    // keeps its files untouched (its journal and session marker included):
    // the next Open recovers from them, not from RAM.
    if (ready_ && broken_.ok() && journal_ != nullptr &&
        !journal_->status().ok()) {
      // Writes stopped after a failed journal write: the journal, not RAM,
      // is what the next Open recovers from; keep it as it is.
      status = journal_->status();
    } else if (ready_ && broken_.ok()) {
      status = mat_->MaterializeLocked(/*flush=*/true);
      if (status.ok()) status = cold_->SyncWal();
      // Every journal record is a node entry now.
      if (status.ok() && journal_ != nullptr)
        status = journal_->CloseAndDropThrough(mat_->applied_seq());
    } else if (!broken_.ok()) {
      status = broken_;
    }
    absl::Status close = cold_->Close();
    if (status.ok()) status = close;
    // A clean shutdown: no session marker.
    if (status.ok() && ready_) recovery_->MarkCleanClose();
  }
  recovery_.reset();  // unlocks the data_dir
  hot_.Clear();
  return status;
}

absl::Status StoreImpl::CheckOpen() const {
  if (closed_) return absl::FailedPreconditionError("store is closed");
  if (!broken_.ok()) {
    return absl::Status(
        broken_.code(),
        absl::StrCat("store stopped after a storage failure (restart it to "
                     "recover from its ",
                     options_.write_policy == WritePolicy::kWriteThrough
                         ? "journal"
                         : "last checkpoint",
                     "): ", broken_.message()));
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------
// Push

absl::Status StoreImpl::Push(absl::Span<const int64_t> ids,
                             absl::Span<const float> states,
                             absl::Span<const uint64_t> versions,
                             absl::Span<const double> times, int32_t writer) {
  const int64_t n = static_cast<int64_t>(ids.size());
  if (n > options_.max_batch)
    return absl::ResourceExhaustedError(absl::StrCat(
        "push of ", n, " ids is over max_batch ", options_.max_batch));
  RETURN_IF_ERROR(
      ValidatePush(ids, states, versions, times, writer, options_.dim));

  // The journal record is written holding journal_mu_ only (see
  // store_impl.h); mu_ is taken before journal_mu_ is let go, so records
  // are applied in journal order.
  absl::ReleasableMutexLock journal_lock(&journal_mu_);
  const bool journaled =
      cold_ != nullptr && options_.write_policy == WritePolicy::kWriteThrough;
  RETURN_IF_ERROR(CheckWritable(journaled));
  pushes_.fetch_add(1, std::memory_order_relaxed);
  states_pushed_.fetch_add(n, std::memory_order_relaxed);
  if (n == 0) return absl::OkStatus();
  // Once a store has acknowledged a push it refuses to start without its
  // data (memstore/recovery.h); a journaled push records it with its file.
  if (cold_ != nullptr && !journaled)
    RETURN_IF_ERROR(recovery_->NoteAcknowledged());
  int64_t journal_bytes = 0;
  const uint64_t seq = next_seq_;
  if (journaled) {
    ASSIGN_OR_RETURN(journal_bytes, journal_->Append(seq, ids, states, versions,
                                                     times, writer));
    ++next_seq_;
  }
  absl::MutexLock lock(&mu_);
  journal_lock.Release();
  // Another push may have stopped the store meanwhile (its apply failed):
  // this record then waits in the journal for the restart to replay.
  RETURN_IF_ERROR(CheckOpen());
  if (journaled) mat_->JournaledLocked(journal_bytes);
  if (absl::Status applied = ApplyLocked(
          ids.data(), states.data(), versions.data(), times.data(), n, writer);
      !applied.ok()) {
    // The push may be partly in RAM while its journal record is whole: stop
    // rather than serve (or materialize) a state no restart would rebuild.
    broken_ = applied;
    return applied;
  }
  if (!journaled) return absl::OkStatus();
  mat_->AppliedLocked(seq);  // a materialization may now cut it
  return ThrottleLocked();
}

absl::Status StoreImpl::CheckWritable(bool journaled) {
  bool stopped = false;
  {
    // Close() takes journal_mu_ too: the store stays open until the record
    // is applied.
    absl::ReaderMutexLock lock(&mu_);
    RETURN_IF_ERROR(CheckOpen());
    stopped = journaled && RocksStopped(mat_->error());
  }
  if (!stopped) return absl::OkStatus();
  // The last materialization failed and RocksDB stopped writing: no
  // materialization can succeed before a restart, so take no more pushes
  // (the journal would only grow). Unless a retry succeeds.
  absl::MutexLock lock(&mu_);
  if (absl::Status retry = RetryMaterializeLocked(); RocksStopped(retry))
    return retry;
  return CheckOpen();
}

absl::Status StoreImpl::ThrottleLocked() {
  if (!mat_->DueLocked()) return absl::OkStatus();
  // The last background run failed: retry here, and report.
  if (!mat_->error().ok()) return RetryMaterializeLocked();
  // The materializer is behind (running, or asked and not yet started):
  // bound the journal (and recovery time).
  if (mat_->AwaitRoomLocked()) RETURN_IF_ERROR(CheckOpen());
  mat_->RequestLocked();
  return absl::OkStatus();
}

absl::Status StoreImpl::RetryMaterializeLocked() {
  mat_->AwaitIdleLocked();
  RETURN_IF_ERROR(CheckOpen());
  return mat_->RetryLocked();
}

absl::Status StoreImpl::ApplyLocked(const int64_t* ids, const float* states,
                                    const uint64_t* versions,
                                    const double* times, int64_t n,
                                    int32_t writer) {
  int64_t accepted = 0;
  for (int64_t begin = 0; begin < n; begin += kApplyChunk) {
    const int64_t end = std::min(n, begin + kApplyChunk);
    accepted +=
        hot_.Apply(ids + begin, states + begin * options_.dim, versions + begin,
                   times + begin, end - begin, writer);
    RETURN_IF_ERROR(SpillLocked());
  }
  states_accepted_.fetch_add(accepted, std::memory_order_relaxed);
  return absl::OkStatus();
}

absl::Status StoreImpl::SpillLocked() {
  if (cold_ == nullptr) return absl::OkStatus();
  const int64_t excess = hot_.Excess();
  if (excess <= 0) return absl::OkStatus();
  std::vector<int32_t> victims;
  std::string entries;
  const int64_t written = hot_.PickVictims(excess, &victims, &entries);
  RETURN_IF_ERROR(cold_->PutEntries(entries.data(), written,
                                    ColdTier::WriteKind::kSpill, "spill"));
  // A materialization in flight may ingest older copies of these states
  // after this write: it writes them again (see Materializer::Ingest). (It
  // takes only dirty states, so a clean one has no older copy in it.)
  if (mat_ != nullptr)
    mat_->SpilledLocked(entries.data(), written * EntryBytes(row_bytes_));
  hot_.Demote(victims);
  spills_.fetch_add(static_cast<int64_t>(victims.size()),
                    std::memory_order_relaxed);
  spill_writes_.fetch_add(written, std::memory_order_relaxed);
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------
// Reads

absl::Status StoreImpl::Pull(absl::Span<const int64_t> ids, PulledStates* out) {
  return PullWithProgress(ids, out, nullptr);
}

absl::Status StoreImpl::PullWithProgress(
    absl::Span<const int64_t> ids, PulledStates* out,
    const std::function<void(int64_t)>& ready) {
  const int64_t n = static_cast<int64_t>(ids.size());
  if (n > options_.max_batch)
    return absl::ResourceExhaustedError(absl::StrCat(
        "pull of ", n, " ids is over max_batch ", options_.max_batch));
  for (int64_t id : ids)
    if (id < 0)
      return absl::InvalidArgumentError(absl::StrCat("negative id ", id));
  std::vector<int64_t> cold_ids, cold_pos;
  std::vector<EntryMeta> metas;
  HotTier::GatherCounts counts;
  {
    absl::ReaderMutexLock lock(&mu_);
    RETURN_IF_ERROR(CheckOpen());
    // Rows are final in this pass unless cold hits may be promoted, which
    // redoes the pull under the exclusive lock.
    const bool last_pass = hot_.cold_states() == 0 ||
                           options_.promotion == PromotionPolicy::kNever;
    hot_.Gather(ids, out, &cold_ids, &cold_pos, &counts,
                ready && last_pass ? &ready : nullptr);
    if (cold_ids.empty() || options_.promotion == PromotionPolicy::kNever) {
      RETURN_IF_ERROR(PullColdLocked(cold_ids, cold_pos, out, &metas));
      CountPull(n, counts, static_cast<int64_t>(cold_ids.size()));
      return absl::OkStatus();
    }
  }
  // Cold hits to promote: the whole pull again under the exclusive lock
  // (the store may have changed in between).
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(CheckOpen());
  cold_ids.clear();
  cold_pos.clear();
  counts = HotTier::GatherCounts();
  hot_.Gather(ids, out, &cold_ids, &cold_pos, &counts,
              ready ? &ready : nullptr);
  RETURN_IF_ERROR(PullColdLocked(cold_ids, cold_pos, out, &metas));
  if (!cold_ids.empty()) {
    promotions_.fetch_add(hot_.Promote(cold_ids, cold_pos, *out, metas),
                          std::memory_order_relaxed);
    RETURN_IF_ERROR(SpillLocked());
  }
  CountPull(n, counts, static_cast<int64_t>(cold_ids.size()));
  return absl::OkStatus();
}

absl::Status StoreImpl::PullColdLocked(const std::vector<int64_t>& cold_ids,
                                       const std::vector<int64_t>& cold_pos,
                                       PulledStates* out,
                                       std::vector<EntryMeta>* metas) const {
  if (cold_ids.empty()) return absl::OkStatus();
  const int dim = options_.dim;
  std::vector<float*> rows(cold_ids.size());
  for (size_t j = 0; j < cold_ids.size(); ++j)
    rows[j] = out->states.data() + cold_pos[j] * dim;
  RETURN_IF_ERROR(cold_->Read(cold_ids, rows, metas));
  for (size_t j = 0; j < cold_ids.size(); ++j) {
    out->version[cold_pos[j]] = (*metas)[j].version;
    out->time[cold_pos[j]] = (*metas)[j].time;
  }
  return absl::OkStatus();
}

void StoreImpl::CountPull(int64_t n, const HotTier::GatherCounts& counts,
                          int64_t cold) {
  pulls_.fetch_add(1, std::memory_order_relaxed);
  states_pulled_.fetch_add(n, std::memory_order_relaxed);
  hot_hits_.fetch_add(counts.hot, std::memory_order_relaxed);
  cold_hits_.fetch_add(cold, std::memory_order_relaxed);
  misses_.fetch_add(counts.misses, std::memory_order_relaxed);
}

absl::StatusOr<NodeStateView> StoreImpl::Get(int64_t id) {
  absl::ReaderMutexLock lock(&mu_);
  RETURN_IF_ERROR(CheckOpen());
  NodeStateView view;
  view.id = id;
  view.state.resize(options_.dim);
  if (hot_.Get(id, &view)) return view;
  if (!hot_.IsCold(id))
    return absl::NotFoundError(absl::StrCat("node ", id, " was never updated"));
  std::vector<EntryMeta> metas;
  RETURN_IF_ERROR(cold_->Read({id}, {view.state.data()}, &metas));
  view.version = metas[0].version;
  view.time = metas[0].time;
  view.updates = metas[0].updates;
  view.writer = metas[0].writer;
  view.hot = false;
  return view;
}

absl::StatusOr<std::vector<NodeStateView>> StoreImpl::ListRecent(int64_t n) {
  if (n < 0) return absl::InvalidArgumentError(absl::StrCat("n = ", n));
  struct Cand {
    uint64_t version;
    int64_t id;
  };
  // "a before b" in the answer: higher version first, then smaller id.
  auto before = [](const Cand& a, const Cand& b) {
    return a.version > b.version || (a.version == b.version && a.id < b.id);
  };
  std::vector<Cand> top;
  {
    absl::ReaderMutexLock lock(&mu_);
    RETURN_IF_ERROR(CheckOpen());
    const int64_t total = hot_.hot_states() + hot_.cold_states();
    const size_t k = static_cast<size_t>(std::min(n, total));
    if (k == 0) return std::vector<NodeStateView>();
    // Heap of the best k so far; its front is the worst of them.
    std::priority_queue<Cand, std::vector<Cand>, decltype(before)> heap(before);
    hot_.ForEachVersion([&](uint64_t version, int64_t id) {
      Cand c{version, id};
      if (heap.size() < k) {
        heap.push(c);
      } else if (before(c, heap.top())) {
        heap.pop();
        heap.push(c);
      }
    });
    top.reserve(k);
    while (!heap.empty()) {
      top.push_back(heap.top());
      heap.pop();
    }
  }
  std::reverse(top.begin(), top.end());
  std::vector<NodeStateView> views;
  views.reserve(top.size());
  for (const Cand& c : top) {
    absl::StatusOr<NodeStateView> v = Get(c.id);
    if (absl::IsNotFound(v.status())) continue;  // raced with nothing: ids stay
    if (!v.ok()) return v.status();
    views.push_back(*std::move(v));
  }
  return views;
}

absl::StatusOr<StoreStats> StoreImpl::Stats() {
  StoreStats st;
  {
    // Under the lock: Close() may close the cold tier otherwise.
    absl::ReaderMutexLock lock(&mu_);
    RETURN_IF_ERROR(CheckOpen());
    st.hot_states = hot_.hot_states();
    st.cold_states = hot_.cold_states();
    if (cold_ != nullptr) {
      st.rocksdb_bytes = cold_->DiskBytes();
      if (journal_ != nullptr) st.rocksdb_bytes += journal_->bytes();
    }
  }
  st.dim = options_.dim;
  st.hot_bytes = st.hot_states * row_bytes_;
  st.hot_capacity_bytes = options_.hot_capacity_bytes;
  st.pulls = pulls_.load(std::memory_order_relaxed);
  st.pushes = pushes_.load(std::memory_order_relaxed);
  st.states_pulled = states_pulled_.load(std::memory_order_relaxed);
  st.states_pushed = states_pushed_.load(std::memory_order_relaxed);
  st.states_accepted = states_accepted_.load(std::memory_order_relaxed);
  st.hot_hits = hot_hits_.load(std::memory_order_relaxed);
  st.cold_hits = cold_hits_.load(std::memory_order_relaxed);
  st.misses = misses_.load(std::memory_order_relaxed);
  st.spills = spills_.load(std::memory_order_relaxed);
  st.promotions = promotions_.load(std::memory_order_relaxed);
  st.spill_writes = spill_writes_.load(std::memory_order_relaxed);
  st.checkpoints = checkpoints_.load(std::memory_order_relaxed);
  st.write_policy = std::string(WritePolicyName(options_.write_policy));
  return st;
}

// ---------------------------------------------------------------------------
// Checkpoints

absl::Status StoreImpl::Checkpoint(const std::string& dir) {
  absl::MutexLock journal_lock(&journal_mu_);  // no push in flight
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(CheckOpen());
  if (dir.empty()) return absl::InvalidArgumentError("empty checkpoint dir");
  if (fs::exists(dir))
    return absl::AlreadyExistsError(
        absl::StrCat("checkpoint dir ", dir, " already exists"));
  if (cold_ == nullptr) {
    RETURN_IF_ERROR(CheckpointPureRamLocked(dir));
    checkpoints_.fetch_add(1, std::memory_order_relaxed);
    return absl::OkStatus();
  }
  // After a failed journal write the journal may hold a record RAM does
  // not: only a restart recovers the acknowledged state.
  if (journal_ != nullptr) RETURN_IF_ERROR(journal_->status());
  mat_->AwaitIdleLocked();
  RETURN_IF_ERROR(CheckOpen());
  RETURN_IF_ERROR(mat_->MaterializeLocked(
      /*flush=*/options_.write_policy == WritePolicy::kWriteBack));
  RETURN_IF_ERROR(recovery_->Checkpoint(*cold_, dir));
  checkpoints_.fetch_add(1, std::memory_order_relaxed);
  return absl::OkStatus();
}

absl::Status StoreImpl::CheckpointPureRamLocked(const std::string& dir) {
  NodeStateStoreOptions o;
  o.dim = options_.dim;
  o.data_dir = dir;
  o.hot_capacity_bytes = 1;  // keep the copy cold: no RAM needed here
  o.write_policy = WritePolicy::kWriteBack;
  ASSIGN_OR_RETURN(auto copy, StoreImpl::Open(o));
  // Written without the WAL (the copy is write-back); its Close() flushes.
  ColdTier::Batch batch(copy->cold_.get(), "checkpoint");
  RETURN_IF_ERROR(hot_.ForEachEntry(
      [&batch](const char* entry) { return batch.Put(entry); }));
  RETURN_IF_ERROR(batch.Write());
  {
    absl::MutexLock copy_lock(&copy->mu_);
    // Nothing is dirty in the copy; Close() flushes its memtables.
    RETURN_IF_ERROR(copy->CloseLocked());
  }
  std::error_code ec;
  fs::remove_all(fs::path(dir) / "recovery", ec);
  fs::remove(fs::path(dir) / "LOCK", ec);
  return absl::OkStatus();
}

}  // namespace mnemo::memstore
