// A worker's copy of node states and the memory store: pulls into and pushes
// from the local node memory with the store's versions (record_codec.h), and
// counts what moved (transfer_stats.h). With a bounded working set
// (--memory-cache-bytes) it also decides which states the local memory
// holds, spilling and restoring the ones only this worker has.
#ifndef MNEMO_TRAINER_MEMORY_STORE_EXCHANGE_H_
#define MNEMO_TRAINER_MEMORY_STORE_EXCHANGE_H_

#include <algorithm>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "memstore/node_state_store.h"
#include "trainer/memory/node_memory.h"
#include "trainer/memory/record_codec.h"
#include "trainer/memory/transfer_stats.h"
#include "trainer/plan/working_set.h"

namespace mnemo::memory {

// States packed for the store (records, versions, event times).
struct PackedStates {
  std::vector<int64_t> nodes;
  std::vector<float> records;
  std::vector<uint64_t> versions;
  std::vector<double> times;
  // Memory and mail still on their way to the host (Pack with
  // `rows_later`): `read` waits for its copy and gives the rows of the
  // records from `first` on (FillRecordRows). PushPacked writes
  // them before it sends.
  struct PendingRows {
    size_t first = 0;
    std::function<torch::Tensor()> read;
  };
  std::vector<PendingRows> pending;
};

// A push running on a thread of its own (StoreExchange::StartPush), as
// c10d's Work: Wait() blocks until it has ended and gives its status (the
// push's, or the error of what ran after it); from then on traffic() holds
// what it counted (calls, states, bytes and its own seconds), for the
// caller to add where its time belongs. A default PushWork has nothing in
// flight (Wait() is OK at once). Destroying one in flight waits for it.
// Not thread-safe: one thread starts, polls and waits.
class PushWork {
 public:
  PushWork() = default;
  PushWork(PushWork&& other);
  PushWork& operator=(PushWork&& other);
  ~PushWork();

  // Started and not yet waited for.
  bool pending() const { return state_ != nullptr; }
  // Whether Wait() would return at once.
  bool Done() const;
  absl::Status Wait();
  const StoreTraffic& traffic() const { return traffic_; }

 private:
  friend class StoreExchange;
  struct State {
    PackedStates packed;
    StoreTraffic traffic;
    std::future<absl::Status> done;
  };
  std::unique_ptr<State> state_;
  StoreTraffic traffic_;
};

class StoreExchange {
 public:
  // Not owned: `store`, `state`, `traffic`, `working_set`. `owned(u)`:
  // this worker owns u. What moves is counted into `traffic`, what a
  // bounded working set does into `working_set`.
  StoreExchange(memstore::NodeStateStore* store, NodeMemory* state,
                std::function<bool(int64_t)> owned, int rank,
                StoreTraffic* traffic, WorkingSetStats* working_set)
      : store_(store),
        state_(state),
        owned_(std::move(owned)),
        rank_(rank),
        traffic_(traffic),
        working_set_(working_set) {}
  ~StoreExchange() { DropPrefetch(); }
  StoreExchange(const StoreExchange&) = delete;
  StoreExchange& operator=(const StoreExchange&) = delete;

  // A bounded working set (--memory-cache-bytes): `cache` decides which
  // states the local memory (a cache memory, NodeMemory::ResetCache) holds;
  // `spill` (this worker's own store, not the shared one) keeps each
  // dropped state that changed since it was pulled or restored, and gives
  // it back when the state is needed again, so a bounded run computes what
  // an unbounded one does. `pulls_every_read`: the policy pulls every state
  // a batch reads from the shared store before the batch (vanilla), so a
  // dropped state needs no spill. Every Pull, Push and Pack then makes its
  // states held first, in pages of at most the capacity. Not owned.
  void SetWorkingSet(plan::WorkingSetCache* cache,
                     memstore::NodeStateStore* spill, bool pulls_every_read);
  bool bounded() const { return cache_ != nullptr; }
  // A new epoch (the memory was reset): nothing held or spilled; Belady's
  // next reads from `predicted`.
  void BeginEpoch(plan::ReadPredictor predicted);
  // An evaluation pass over the memory the shared store holds (the
  // leader's, with a bounded working set): nothing held or spilled; every
  // state a pass reads that it has not changed comes from the shared
  // store (a miss is pulled there, in one batched call per Acquire), and
  // what it changes stays in this worker (held, or spilled and restored).
  // Belady's next reads from `predicted`. The next BeginEpoch ends it.
  // `prefetch_batches` > 0: Prefetch pulls the misses of up to that many
  // coming batches ahead (`predicted` says which states each reads).
  void BeginEvaluation(plan::ReadPredictor predicted, int prefetch_batches = 0);
  // In an evaluation pass begun with `prefetch_batches` B > 0, after
  // Acquire of the batch before `batch`: makes sure that for each of the
  // batches [batch, batch + B) a pull runs on a thread of its own, of the
  // states the batch is predicted to read that will come from the shared
  // store (neither held, nor spilled, nor coming for an earlier batch), so
  // the pulls overlap the batches that run before. Acquire at a batch's
  // position takes its states (waiting for the pull if it still runs) and
  // pulls only the misses the prediction left out; prefetched states the
  // batch does not miss are dropped (counted). The shared store must not
  // change in between (no pass pushes to it). No-op otherwise, and past the
  // predicted batches.
  void Prefetch(int64_t batch);
  // The states this worker changed since BeginEvaluation (held or
  // spilled), ascending: pushing them makes the shared store hold the
  // memory the pass ended with.
  std::vector<int64_t> ChangedStates() const;
  // Where in the plan the worker is (the batch about to run; the batch
  // count after the last): the working set's clock.
  void set_position(int64_t position) { position_ = position; }
  int64_t position() const { return position_; }
  // Makes `nodes` (distinct, at most the capacity) held: drops others,
  // spilling those that changed, and restores spilled ones unless
  // `restore` is false (they are about to be overwritten).
  absl::Status Acquire(const std::vector<int64_t>& nodes,
                       const StateVersions& versions, bool restore = true);
  // The states of `nodes` changed in the local memory (a batch advanced
  // them), so dropping them means spilling them.
  void MarkChanged(const std::vector<int32_t>& nodes);
  // Whether node u's local state has mail (held or spilled).
  bool HasMail(int64_t u) const;

  // Replaces the local states of `nodes` with the store's (states of earlier
  // epochs read as reset). `keep_newer`: a local state whose latest event is
  // later than the store's stays (it was advanced here and not pushed).
  absl::Status Pull(const std::vector<int64_t>& nodes,
                    const StateVersions& versions, bool keep_newer = false);
  // Pull of `nodes` (unbounded memory only) that also hands the store's
  // answer to `pulled` (records, versions and times as the store sent
  // them): another worker that Applies it holds what a pull of its own
  // would have given it, to the bit.
  absl::Status PullAndKeep(const std::vector<int64_t>& nodes,
                           const StateVersions& versions,
                           memstore::PulledStates* pulled);
  // Writes states that came from another worker (a pipeline's handoff:
  // `records`, `versions` and `times` as Pack gives them, one per node of
  // `nodes`) into the local memory, as a pull of them would. Unbounded
  // memory only (the states must be held).
  void Apply(const std::vector<int64_t>& nodes, std::vector<float> records,
             std::vector<uint64_t> versions, std::vector<double> times,
             const StateVersions& state_versions);
  // Pushes the local states of `nodes` (each with an applied event).
  absl::Status Push(const std::vector<int64_t>& nodes,
                    const StateVersions& versions);
  // Push in two steps, so the transfer can leave the training thread: Pack
  // copies the states (training thread); PushPacked sends them, counting
  // into `traffic` (null: this exchange's counters). PushPacked may run on
  // another thread with its own `traffic` (the store is thread-safe).
  // With a bounded working set Pack makes the states held (so it may fail:
  // an empty result and `status` set).
  // `rows_later`: the states' memory and mail are gathered into one tensor
  // per page on the memory's device and, from a GPU, copied back to pinned
  // host memory asynchronously after the work queued so far; Pack returns
  // without waiting, and PushPacked (on whichever thread) waits for those
  // copies alone. Later changes to the memory (kernels queued after Pack,
  // or on the host, a pull) do not reach the packed states either way.
  PackedStates Pack(std::vector<int64_t> nodes, const StateVersions& versions,
                    absl::Status* status = nullptr, bool rows_later = false);
  absl::Status PushPacked(PackedStates* packed,
                          StoreTraffic* traffic = nullptr);
  // PushPacked of `packed` on a thread of its own, counting into the
  // work's own traffic(), then `after` (when given) on that thread with the
  // push's status, whose result is the work's.
  PushWork StartPush(
      PackedStates packed,
      std::function<absl::Status(absl::Status pushed)> after = nullptr);
  bool owned(int64_t u) const { return owned_(u); }
  // The events this worker trained this epoch (targets of its executed
  // batches), which win version ties (StateVersions::Of). The engine marks
  // each batch's targets before the policy pushes, and clears them when an
  // epoch begins.
  void MarkTrained(const std::vector<int64_t>& events,
                   const std::vector<uint8_t>& target);
  void ClearTrained() { std::fill(trained_.begin(), trained_.end(), 0); }
  bool trained(int64_t event) const {
    return event >= 0 && event < static_cast<int64_t>(trained_.size()) &&
           trained_[event] != 0;
  }

 private:
  // With a bounded working set: makes `nodes` held page by page (pages of
  // at most `page_states` states, and at most the capacity; `restore` as for
  // Acquire) and calls `f` on each.
  absl::Status ForEachHeldPage(
      const std::vector<int64_t>& nodes, const StateVersions& versions,
      bool restore,
      const std::function<absl::Status(const std::vector<int64_t>&)>& f,
      int64_t page_states = INT64_MAX);
  // Waits for the prefetches in flight, if any, and forgets them (what a
  // push, which changes the store, or a new pass does first).
  void DropPrefetch();
  // The prefetch for the batch at `position_`, if one was started: unpacks
  // the states of `pull_nodes` (ascending) it holds and removes them from
  // `pull_nodes`.
  absl::Status TakePrefetched(std::vector<int64_t>* pull_nodes,
                              const StateVersions& versions);
  // States a push (Push) packs and sends at once, bounded or not: what a
  // push holds in flight (records, the client's messages, the shard's
  // request) stays about this many states, not every state it pushes (an
  // epoch's final push of every advanced state was the trainers' and the
  // shards' peak).
  static constexpr int64_t kPushPageStates = 16384;
  // Acquire's parts. Spills the `victims` (about to be dropped) whose
  // state changed and exists nowhere else; a reset one's spilled copy is
  // forgotten instead (stale).
  absl::Status SpillVictims(const std::vector<int64_t>& victims,
                            const StateVersions& versions);
  // Restores the spilled states of `nodes` (each held) from the spill
  // store, with their own versions; INTERNAL when it lost one.
  absl::Status RestoreSpilled(const std::vector<int64_t>& nodes,
                              const StateVersions& versions);
  // The working set's figures (reads, hits, ...) into working_set_.
  void CopyWorkingSetStats();
  // Pull of `nodes`, each held; `keep` (optional) receives the store's
  // answer as it came (the whole of it: without `keep_newer`).
  absl::Status PullHeld(const std::vector<int64_t>& nodes,
                        const StateVersions& versions, bool keep_newer,
                        memstore::PulledStates* keep = nullptr);
  // Appends the states of `nodes` (each held) to `p`'s records, versions
  // and times (their rows to `p`'s pending ones with `rows_later`).
  void PackHeld(const std::vector<int64_t>& nodes,
                const StateVersions& versions, PackedStates* p,
                bool rows_later = false) const;

  memstore::NodeStateStore* store_;
  NodeMemory* state_;
  std::function<bool(int64_t)> owned_;
  int rank_;
  StoreTraffic* traffic_;
  WorkingSetStats* working_set_;
  std::vector<uint8_t> trained_;  // by event index

  // Bounded working set.
  plan::WorkingSetCache* cache_ = nullptr;
  memstore::NodeStateStore* spill_ = nullptr;
  bool pulls_every_read_ = false;
  bool pull_misses_ = false;  // evaluation: misses come from the store
  int64_t position_ = 0;
  uint64_t spill_sequence_ = 0;   // the spill store's versions
  std::vector<uint8_t> changed_;  // per node: changed since pulled/restored
  // Per node: the state version (StateVersions) of its spilled copy, 0 for
  // none, and whether that copy has mail.
  std::vector<uint64_t> spilled_version_;
  std::vector<uint8_t> spilled_mail_;

  // Evaluation's prefetch (BeginEvaluation with `prefetch_batches`).
  struct Prefetched {
    std::vector<int64_t> nodes;  // ascending
    memstore::PulledStates pulled;
    absl::Status status;
  };
  // Counts prefetch `p` as pulled traffic, `unused` of its states unread.
  void CountPrefetched(const Prefetched& p, size_t unused);
  int prefetch_batches_ = 0;
  plan::ReadPredictor eval_reads_;
  // Pulls running or done, by batch (ascending), and the nodes they carry.
  std::deque<std::pair<int64_t, std::future<Prefetched>>> in_flight_;
  absl::flat_hash_set<int64_t> in_flight_nodes_;
};

}  // namespace mnemo::memory

#endif  // MNEMO_TRAINER_MEMORY_STORE_EXCHANGE_H_
