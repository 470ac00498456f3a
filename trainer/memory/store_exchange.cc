#include "trainer/memory/store_exchange.h"

#include <algorithm>
#include <chrono>
#include <exception>
#include <future>
#include <utility>

#include "absl/strings/str_cat.h"
#include "trainer/platform/cuda_transfer.h"
#include "util/proc.h"
#include "util/status_macros.h"

namespace mnemo::memory {
namespace {

// Appends row i of `from` (its `dim` floats, version and time) to `to`.
void AppendRow(const memstore::PulledStates& from, size_t i, size_t dim,
               memstore::PulledStates* to) {
  to->states.insert(to->states.end(), from.states.begin() + i * dim,
                    from.states.begin() + (i + 1) * dim);
  to->version.push_back(from.version[i]);
  to->time.push_back(from.time[i]);
}

}  // namespace

void StoreExchange::SetWorkingSet(plan::WorkingSetCache* cache,
                                  memstore::NodeStateStore* spill,
                                  bool pulls_every_read) {
  cache_ = cache;
  spill_ = spill;
  pulls_every_read_ = pulls_every_read;
}

void StoreExchange::BeginEpoch(plan::ReadPredictor predicted) {
  DropPrefetch();
  prefetch_batches_ = 0;
  eval_reads_ = {};
  if (!cache_) return;
  cache_->Reset(std::move(predicted));
  const size_t n = static_cast<size_t>(state_->num_nodes());
  changed_.assign(n, 0);
  spilled_version_.assign(n, 0);
  spilled_mail_.assign(n, 0);
  position_ = 0;
  pull_misses_ = false;
}

void StoreExchange::BeginEvaluation(plan::ReadPredictor predicted,
                                    int prefetch_batches) {
  plan::ReadPredictor reads =
      prefetch_batches > 0 ? predicted : plan::ReadPredictor{};
  BeginEpoch(std::move(predicted));
  pull_misses_ = cache_ != nullptr;
  prefetch_batches_ =
      pull_misses_ && reads.reads != nullptr ? prefetch_batches : 0;
  if (prefetch_batches_ > 0) eval_reads_ = std::move(reads);
}

void StoreExchange::CountPrefetched(const Prefetched& p, size_t unused) {
  // Pulled, so counted as traffic, used or not.
  traffic_->states_pulled += static_cast<int64_t>(p.nodes.size());
  traffic_->bytes_pulled +=
      static_cast<int64_t>(p.pulled.states.size() * sizeof(float));
  working_set_->prefetch_unused += static_cast<int64_t>(unused);
}

void StoreExchange::DropPrefetch() {
  for (auto& [batch, pending] : in_flight_) {
    const Prefetched p = pending.get();
    CountPrefetched(p, p.nodes.size());
  }
  in_flight_.clear();
  in_flight_nodes_.clear();
}

void StoreExchange::Prefetch(int64_t batch) {
  if (prefetch_batches_ <= 0 || batch < 0) return;
  const int64_t end =
      std::min(eval_reads_.num_batches, batch + prefetch_batches_);
  int64_t next = in_flight_.empty() ? batch : in_flight_.back().first + 1;
  if (next < batch) {
    DropPrefetch();  // a pass that skipped batches: start afresh
    next = batch;
  }
  std::vector<int64_t> nodes;
  for (; next < end; ++next) {
    nodes.clear();
    eval_reads_.reads(next, &nodes);
    // What Acquire at `next` will pull from the shared store: not held now
    // (a batch's own reads are never dropped to make room for it), with no
    // spilled copy (those are restored from the spill store), and not
    // already coming for an earlier batch (which holds it from then on).
    std::sort(nodes.begin(), nodes.end());
    nodes.erase(std::unique(nodes.begin(), nodes.end()), nodes.end());
    nodes.erase(std::remove_if(nodes.begin(), nodes.end(),
                               [this](int64_t u) {
                                 return cache_->held(u) ||
                                        spilled_version_[u] != 0 ||
                                        in_flight_nodes_.contains(u);
                               }),
                nodes.end());
    in_flight_nodes_.insert(nodes.begin(), nodes.end());
    in_flight_.emplace_back(
        next, std::async(std::launch::async, [store = store_, nodes]() mutable {
          Prefetched p;
          p.status = store->Pull(nodes, &p.pulled);
          p.nodes = std::move(nodes);
          return p;
        }));
  }
}

absl::Status StoreExchange::TakePrefetched(std::vector<int64_t>* pull_nodes,
                                           const StateVersions& versions) {
  // Pulls for batches before this one (a pass that skipped them) are lost.
  while (!in_flight_.empty() && in_flight_.front().first < position_) {
    auto pending = std::move(in_flight_.front().second);
    in_flight_.pop_front();
    const Prefetched p = pending.get();
    for (const int64_t u : p.nodes) in_flight_nodes_.erase(u);
    CountPrefetched(p, p.nodes.size());
  }
  if (in_flight_.empty() || in_flight_.front().first != position_) {
    return absl::OkStatus();
  }
  const double t0 = MonotonicSeconds();
  Prefetched p = in_flight_.front().second.get();
  in_flight_.pop_front();
  traffic_->seconds += MonotonicSeconds() - t0;  // only the wait
  for (const int64_t u : p.nodes) in_flight_nodes_.erase(u);
  ++traffic_->rpcs;
  working_set_->prefetched += static_cast<int64_t>(p.nodes.size());
  RETURN_IF_ERROR(p.status);
  // Both ascending: the prefetched states the batch misses are unpacked,
  // the other misses stay in `pull_nodes`.
  const size_t dim =
      p.nodes.empty() ? 0 : p.pulled.states.size() / p.nodes.size();
  memstore::PulledStates take;
  std::vector<int64_t> taken, rest;
  size_t j = 0;
  for (const int64_t u : *pull_nodes) {
    while (j < p.nodes.size() && p.nodes[j] < u) ++j;
    if (j == p.nodes.size() || p.nodes[j] != u) {
      rest.push_back(u);
      continue;
    }
    taken.push_back(u);
    AppendRow(p.pulled, j, dim, &take);
  }
  CountPrefetched(p, p.nodes.size() - taken.size());
  if (!taken.empty()) UnpackStates(take, taken, versions, state_);
  *pull_nodes = std::move(rest);
  return absl::OkStatus();
}

std::vector<int64_t> StoreExchange::ChangedStates() const {
  std::vector<int64_t> nodes;
  // A state changed since it was pulled or restored, or one with a spilled
  // copy (a restored state still differs from the store's).
  for (size_t u = 0; u < changed_.size(); ++u) {
    if (changed_[u] || spilled_version_[u] != 0) {
      nodes.push_back(static_cast<int64_t>(u));
    }
  }
  return nodes;
}

void StoreExchange::MarkChanged(const std::vector<int32_t>& nodes) {
  if (!cache_) return;
  for (const int32_t u : nodes) changed_[u] = 1;
}

bool StoreExchange::HasMail(int64_t u) const {
  const int64_t row = state_->Row(u);
  if (row >= 0) return state_->has_mail()[row] != 0;
  return cache_ && spilled_version_[u] != 0 && spilled_mail_[u] != 0;
}

absl::Status StoreExchange::Acquire(const std::vector<int64_t>& nodes,
                                    const StateVersions& versions,
                                    bool restore) {
  if (!cache_ || nodes.empty()) return absl::OkStatus();
  const double t0 = MonotonicSeconds();
  std::vector<int64_t> misses, victims;
  if (absl::Status s = cache_->Acquire(position_, nodes, &misses, &victims);
      !s.ok()) {
    const int64_t bytes = HeldStateBytes(state_->layout());
    return absl::InvalidArgumentError(absl::StrCat(
        "--memory-cache-bytes is too small for batch ", position_, ": ",
        s.message(), " (", bytes, " bytes each): raise it to at least ",
        static_cast<int64_t>(nodes.size()) * bytes));
  }
  // Drop the victims, spilling those whose state exists nowhere else.
  RETURN_IF_ERROR(SpillVictims(victims, versions));
  for (const int64_t u : victims) changed_[u] = 0;
  state_->Release(victims);
  state_->Admit(misses);
  // Restore the spilled ones among the misses; in an evaluation pass the
  // others come from the shared store.
  std::vector<int64_t> restore_nodes, pull_nodes;
  if (restore && !pulls_every_read_) {
    for (const int64_t u : misses) {
      if (spilled_version_[u] != 0) {
        restore_nodes.push_back(u);
      } else if (pull_misses_) {
        pull_nodes.push_back(u);
      }
    }
  }
  if (prefetch_batches_ > 0) {
    RETURN_IF_ERROR(TakePrefetched(&pull_nodes, versions));
  }
  if (!pull_nodes.empty()) {
    RETURN_IF_ERROR(PullHeld(pull_nodes, versions, /*keep_newer=*/false));
  }
  if (!restore_nodes.empty()) {
    RETURN_IF_ERROR(RestoreSpilled(restore_nodes, versions));
  }
  CopyWorkingSetStats();
  working_set_->seconds += MonotonicSeconds() - t0;
  return absl::OkStatus();
}

absl::Status StoreExchange::SpillVictims(const std::vector<int64_t>& victims,
                                         const StateVersions& versions) {
  std::vector<int64_t> spill;
  for (const int64_t u : victims) {
    if (pulls_every_read_ || !changed_[u]) continue;
    if (state_->IsReset(state_->Row(u))) {
      spilled_version_[u] = 0;  // a spilled copy is stale
    } else {
      spill.push_back(u);
    }
  }
  if (spill.empty()) return absl::OkStatus();
  PackedStates p;
  PackHeld(spill, versions, &p);
  // The spill store orders by its own sequence (one writer: this worker);
  // the state's version is kept here.
  std::vector<uint64_t> sequence(spill.size());
  for (size_t i = 0; i < spill.size(); ++i) {
    const int64_t u = spill[i];
    spilled_version_[u] = p.versions[i];
    spilled_mail_[u] = state_->has_mail()[state_->Row(u)];
    sequence[i] = ++spill_sequence_;
  }
  RETURN_IF_ERROR(spill_->Push(spill, p.records, sequence, p.times, rank_));
  working_set_->spills += static_cast<int64_t>(spill.size());
  working_set_->spill_bytes +=
      static_cast<int64_t>(p.records.size() * sizeof(float));
  return absl::OkStatus();
}

absl::Status StoreExchange::RestoreSpilled(const std::vector<int64_t>& nodes,
                                           const StateVersions& versions) {
  memstore::PulledStates pulled;
  RETURN_IF_ERROR(spill_->Pull(nodes, &pulled));
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (pulled.version[i] == 0) {
      return absl::InternalError(absl::StrCat(
          "the working set's spill store lost the state of node ", nodes[i]));
    }
    pulled.version[i] = spilled_version_[nodes[i]];
  }
  UnpackStates(pulled, nodes, versions, state_);
  working_set_->restores += static_cast<int64_t>(nodes.size());
  working_set_->restore_bytes +=
      static_cast<int64_t>(pulled.states.size() * sizeof(float));
  return absl::OkStatus();
}

void StoreExchange::CopyWorkingSetStats() {
  const plan::WorkingSetStats& ws = cache_->stats();
  working_set_->reads = ws.reads;
  working_set_->hits = ws.hits;
  working_set_->misses = ws.misses;
  working_set_->evictions = ws.evictions;
  working_set_->peak_states = ws.peak_states;
}

absl::Status StoreExchange::ForEachHeldPage(
    const std::vector<int64_t>& nodes, const StateVersions& versions,
    bool restore,
    const std::function<absl::Status(const std::vector<int64_t>&)>& f,
    int64_t page_states) {
  const size_t page =
      static_cast<size_t>(std::min(cache_->capacity(), page_states));
  std::vector<int64_t> part;
  for (size_t i = 0; i < nodes.size(); i += page) {
    part.assign(nodes.begin() + i,
                nodes.begin() + std::min(nodes.size(), i + page));
    RETURN_IF_ERROR(Acquire(part, versions, restore));
    RETURN_IF_ERROR(f(part));
  }
  return absl::OkStatus();
}

absl::Status StoreExchange::Pull(const std::vector<int64_t>& nodes,
                                 const StateVersions& versions,
                                 bool keep_newer) {
  if (nodes.empty()) return absl::OkStatus();
  if (!cache_) return PullHeld(nodes, versions, keep_newer);
  // A pull that replaces every state needs no restore first.
  return ForEachHeldPage(
      nodes, versions, /*restore=*/keep_newer,
      [&](const std::vector<int64_t>& part) {
        RETURN_IF_ERROR(PullHeld(part, versions, keep_newer));
        for (const int64_t u : part) changed_[u] = 1;
        return absl::OkStatus();
      });
}

absl::Status StoreExchange::PullAndKeep(const std::vector<int64_t>& nodes,
                                        const StateVersions& versions,
                                        memstore::PulledStates* pulled) {
  if (cache_) {
    return absl::FailedPreconditionError(
        "PullAndKeep needs a memory that holds every node");
  }
  *pulled = {};
  if (nodes.empty()) return absl::OkStatus();
  return PullHeld(nodes, versions, /*keep_newer=*/false, pulled);
}

void StoreExchange::Apply(const std::vector<int64_t>& nodes,
                          std::vector<float> records,
                          std::vector<uint64_t> versions,
                          std::vector<double> times,
                          const StateVersions& state_versions) {
  memstore::PulledStates states;
  states.states = std::move(records);
  states.version = std::move(versions);
  states.time = std::move(times);
  UnpackStates(states, nodes, state_versions, state_);
}

absl::Status StoreExchange::PullHeld(const std::vector<int64_t>& nodes,
                                     const StateVersions& versions,
                                     bool keep_newer,
                                     memstore::PulledStates* keep) {
  const double t0 = MonotonicSeconds();
  memstore::PulledStates pulled;
  RETURN_IF_ERROR(store_->Pull(nodes, &pulled));
  if (keep_newer) {
    std::vector<int64_t> take;
    memstore::PulledStates newer;
    const size_t dim = nodes.empty() ? 0 : pulled.states.size() / nodes.size();
    for (size_t i = 0; i < nodes.size(); ++i) {
      if (versions.LastEvent(pulled.version[i]) <
          state_->last_event()[state_->Row(nodes[i])]) {
        continue;
      }
      take.push_back(nodes[i]);
      AppendRow(pulled, i, dim, &newer);
    }
    UnpackStates(newer, take, versions, state_);
  } else {
    UnpackStates(pulled, nodes, versions, state_);
  }
  traffic_->seconds += MonotonicSeconds() - t0;
  ++traffic_->rpcs;
  traffic_->states_pulled += nodes.size();
  traffic_->bytes_pulled += pulled.states.size() * sizeof(float);
  if (keep != nullptr) *keep = std::move(pulled);
  return absl::OkStatus();
}

absl::Status StoreExchange::Push(const std::vector<int64_t>& nodes,
                                 const StateVersions& versions) {
  if (nodes.empty()) return absl::OkStatus();
  // A push changes the shared store: no prefetch may read across it.
  DropPrefetch();
  if (cache_) {
    // A page at a time: packed, sent, then the next.
    return ForEachHeldPage(
        nodes, versions, /*restore=*/true,
        [&](const std::vector<int64_t>& part) {
          const double t0 = MonotonicSeconds();
          PackedStates p;
          PackHeld(part, versions, &p);
          p.nodes = part;
          traffic_->seconds += MonotonicSeconds() - t0;
          return PushPacked(&p);
        },
        kPushPageStates);
  }
  // Unbounded: a page at a time too, so that neither this worker nor a
  // shard holds more than a page of a large push (an epoch's end pushes
  // every state a worker advanced) in flight.
  for (size_t at = 0; at < nodes.size(); at += kPushPageStates) {
    const double t0 = MonotonicSeconds();
    const size_t end = std::min(nodes.size(), at + kPushPageStates);
    PackedStates p;
    p.nodes.assign(nodes.begin() + at, nodes.begin() + end);
    PackHeld(p.nodes, versions, &p);
    traffic_->seconds += MonotonicSeconds() - t0;
    RETURN_IF_ERROR(PushPacked(&p));
  }
  return absl::OkStatus();
}

PackedStates StoreExchange::Pack(std::vector<int64_t> nodes,
                                 const StateVersions& versions,
                                 absl::Status* status, bool rows_later) {
  PackedStates p;
  if (!cache_) {
    PackHeld(nodes, versions, &p, rows_later);
  } else if (absl::Status s =
                 ForEachHeldPage(nodes, versions, /*restore=*/true,
                                 [&](const std::vector<int64_t>& part) {
                                   PackHeld(part, versions, &p, rows_later);
                                   return absl::OkStatus();
                                 });
             !s.ok()) {
    if (status) *status = s;
    return {};
  }
  p.nodes = std::move(nodes);
  return p;
}

void StoreExchange::PackHeld(const std::vector<int64_t>& nodes,
                             const StateVersions& versions, PackedStates* out,
                             bool rows_later) const {
  const size_t first = out->versions.size();
  torch::Tensor rows;
  torch::Tensor* rows_out = rows_later ? &rows : nullptr;
  auto trained = [this](int64_t e) { return this->trained(e); };
  if (first == 0) {  // the first page: pack in place
    PackStates(*state_, nodes, versions, owned_, trained, &out->records,
               &out->versions, &out->times, rows_out);
  } else {
    PackedStates p;  // PackStates fills its outputs from the start
    PackStates(*state_, nodes, versions, owned_, trained, &p.records,
               &p.versions, &p.times, rows_out);
    out->records.insert(out->records.end(), p.records.begin(), p.records.end());
    out->versions.insert(out->versions.end(), p.versions.begin(),
                         p.versions.end());
    out->times.insert(out->times.end(), p.times.begin(), p.times.end());
  }
  if (rows.defined() && rows.size(0) > 0) {
    // A GPU's rows come back on the compute stream, after the kernels
    // queued so far (the batch's memory update) and before any queued
    // later; a host tensor is a copy already.
    std::function<torch::Tensor()> read;
    if (rows.is_cuda()) {
      read = platform::ReadToHostLater(rows);
    } else {
      read = [rows] { return rows; };
    }
    out->pending.push_back({first, std::move(read)});
  }
}

void StoreExchange::MarkTrained(const std::vector<int64_t>& events,
                                const std::vector<uint8_t>& target) {
  for (size_t i = 0; i < events.size(); ++i) {
    if (!target[i]) continue;
    const int64_t e = events[i];
    if (e >= static_cast<int64_t>(trained_.size())) {
      trained_.resize(std::max<size_t>(e + 1, 2 * trained_.size()), 0);
    }
    trained_[e] = 1;
  }
}

absl::Status StoreExchange::PushPacked(PackedStates* packed,
                                       StoreTraffic* traffic) {
  if (traffic == nullptr) traffic = traffic_;
  PackedStates& p = *packed;
  if (p.nodes.empty()) return absl::OkStatus();
  const double t0 = MonotonicSeconds();
  const int64_t dim = state_->layout().RecordFloats();
  // On a pushing thread of its own an exception would end the process: a
  // failed copy from the GPU (a fault of the batch's kernels) is an error.
  try {
    for (const PackedStates::PendingRows& rows : p.pending) {
      FillRecordRows(state_->layout(), rows.read(),
                     p.records.data() + rows.first * dim);
    }
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat(
        "push of ", p.nodes.size(),
        " node states: copying them from the device failed: ", e.what()));
  }
  p.pending.clear();
  RETURN_IF_ERROR(store_->Push(p.nodes, p.records, p.versions, p.times, rank_));
  traffic->seconds += MonotonicSeconds() - t0;
  ++traffic->rpcs;
  traffic->states_pushed += p.nodes.size();
  traffic->bytes_pushed += p.records.size() * sizeof(float);
  return absl::OkStatus();
}

PushWork::PushWork(PushWork&& other)
    : state_(std::move(other.state_)), traffic_(other.traffic_) {}

PushWork& PushWork::operator=(PushWork&& other) {
  if (this != &other) {
    if (pending()) Wait().IgnoreError();
    state_ = std::move(other.state_);
    traffic_ = other.traffic_;
  }
  return *this;
}

PushWork::~PushWork() {
  if (pending()) Wait().IgnoreError();
}

bool PushWork::Done() const {
  return !pending() || state_->done.wait_for(std::chrono::seconds(0)) ==
                           std::future_status::ready;
}

absl::Status PushWork::Wait() {
  if (!pending()) return absl::OkStatus();
  absl::Status status = state_->done.get();
  traffic_ = state_->traffic;
  state_.reset();
  return status;
}

PushWork StoreExchange::StartPush(
    PackedStates packed,
    std::function<absl::Status(absl::Status pushed)> after) {
  PushWork work;
  work.state_ = std::make_unique<PushWork::State>();
  PushWork::State* st = work.state_.get();
  st->packed = std::move(packed);
  st->done = std::async(std::launch::async, [this, st, after] {
    absl::Status s = PushPacked(&st->packed, &st->traffic);
    st->packed = PackedStates();  // the records' memory goes at once
    return after ? after(std::move(s)) : s;
  });
  return work;
}

}  // namespace mnemo::memory
