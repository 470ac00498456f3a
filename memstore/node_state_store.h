// NodeStateStore: the authoritative node states of a training job.
//
// A node state is a fixed-width float32[dim] record plus the caller-given
// `version` that orders its updates, the event `time` of the state
// (informational), the rank of the `writer` that made it and the number of
// accepted `updates`. The store does not interpret the record; the trainer
// defines its layout (docs/design.md "Node state").
//
// Pushes are newest-wins by `version` (a uint64 >= 1; 0 means "never
// updated"), ties broken by the higher writer rank; a push that is not newer
// than the stored state is ignored. So pushes are idempotent and
// order-independent, and a retried push is safe. The version must be
// strictly monotone in the order the caller applies events (e.g. epoch and
// global event index), never the event time alone: datasets repeat
// timestamps, and an update at the same time must still win.
//
// Implementations: an in-RAM hot tier (contiguous arena, hash index) with an
// optional RocksDB cold tier (memstore/), and a gRPC client that shards ids
// over several memory-store services (services/). All are safe for
// concurrent use from multiple threads without external synchronization.
#ifndef MNEMO_MEMSTORE_NODE_STATE_STORE_H_
#define MNEMO_MEMSTORE_NODE_STATE_STORE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace rocksdb {
class Env;
}  // namespace rocksdb

namespace mnemo::memstore {

// When acknowledged pushes reach durable storage.
enum class WritePolicy {
  // Every acknowledged push is in the store's journal before Push()
  // returns: it survives a process crash (with `sync`, a machine crash).
  kWriteThrough,
  // Hot states reach RocksDB at Checkpoint() and at a clean Close(). After a
  // crash the store reopens exactly at its last checkpoint.
  kWriteBack,
};

// What a pull of a cold (spilled) state does to it.
enum class PromotionPolicy {
  kNever,   // stays cold; served from RocksDB every time
  kOnRead,  // moved back into the hot tier (may spill others)
};

// The most cold-read threads a store starts (NodeStateStoreOptions::
// cold_read_threads): point reads are bound by memory latency, and more
// threads than cores only add switching.
inline constexpr int kMaxColdReadThreads = 256;

struct NodeStateStoreOptions {
  // Width of every state record, in float32 values. Required (> 0).
  int dim = 0;
  // Bytes of state the hot tier may hold before it spills the least recently
  // updated states to the cold tier. 0: unlimited (pure RAM, no spilling).
  int64_t hot_capacity_bytes = 0;
  // RocksDB directory of the cold tier and of durable state. Empty: pure RAM
  // store (no spilling, no durability; hot_capacity_bytes must be 0).
  std::string data_dir;
  WritePolicy write_policy = WritePolicy::kWriteThrough;
  // write-through only: fdatasync the journal before acknowledging a push.
  bool sync = false;
  PromotionPolicy promotion = PromotionPolicy::kOnRead;
  // Largest number of ids one Pull/Push may carry (RESOURCE_EXHAUSTED above).
  int64_t max_batch = 1 << 22;
  // Advanced: RocksDB block cache for cold reads, in bytes.
  int64_t block_cache_bytes = 64ll << 20;
  // Advanced: RocksDB memtable of the cold tier, in bytes (up to two are
  // held while one flushes). Smaller: less memory, more and smaller L0
  // files to compact.
  int64_t write_buffer_bytes = 64ll << 20;
  // Advanced: read the cold tier's SST files through mmap (cold pulls about
  // 1.7x faster: a cache miss copies from the mapped page instead of a
  // pread). The price: a disk read error during a pull is a SIGBUS that
  // ends the process instead of an error returned to the caller (a restart
  // recovers every acknowledged push). false: pread, errors are returned.
  bool mmap_reads = true;
  // Advanced: threads that read a large cold pull in parallel with the
  // pulling thread, each a contiguous part of its sorted ids (RocksDB's
  // point reads are bound by memory latency, not by one lock). -1: one less
  // than the CPUs, at most 7; 0: the pulling thread reads alone. At most
  // kMaxColdReadThreads.
  int cold_read_threads = -1;
  // Advanced, write-through only: once the push journal holds this many
  // bytes, the hot states it changed are written as per-node entries and its
  // files are deleted; pushes wait for that when twice as many are pending.
  // Bounds disk use and the replay at restart: the journal holds at most
  // about 4x this (2x covered by the write in flight, 2x newer; replayed at
  // about 360 MB/s on a 2-core EPYC). A state pushed several times within
  // the window is written once: larger is faster when pushes revisit nodes
  // (256 MiB against 64 MiB: 1.7x over 1M random ids) and slower to recover.
  int64_t journal_limit_bytes = 256ll << 20;
  // Advanced: told, one line each, what recovery at Open() changed that the
  // operator should know (a torn journal record cut, and what it held).
  // Null: stderr, "mnemo memstore: warning: ...". Called during Open().
  std::function<void(const std::string&)> warn;
  // For tests: fault injection. The RocksDB Env that every file of the cold
  // tier goes through (its DB, the SSTs it ingests, its checkpoints); null:
  // RocksDB's default. Not owned; must outlive the store.
  rocksdb::Env* env = nullptr;
};

// The states of a pull, row i for the i-th requested id.
struct PulledStates {
  std::vector<float> states;      // [n * dim], zeros for never-updated ids
  std::vector<uint64_t> version;  // [n], the stored version; 0: never updated
  std::vector<double> time;       // [n], event time; 0 for never-updated ids
};

// One stored node.
struct NodeStateView {
  int64_t id = 0;
  std::vector<float> state;  // [dim]
  uint64_t version = 0;      // version of the stored state (>= 1)
  double time = 0;           // event time of the stored state
  uint64_t updates = 0;      // pushes of this node that were accepted
  int32_t writer = 0;        // rank that pushed the stored state
  bool hot = true;           // false: served from the cold tier
};

struct StoreStats {
  int dim = 0;
  int64_t hot_states = 0, cold_states = 0;
  int64_t hot_bytes = 0, hot_capacity_bytes = 0;
  int64_t pulls = 0, pushes = 0;  // calls
  int64_t states_pulled = 0, states_pushed = 0;
  int64_t states_accepted = 0;                      // pushed states that won
  int64_t hot_hits = 0, cold_hits = 0, misses = 0;  // per pulled id
  int64_t spills = 0, promotions = 0;
  // Spilled states whose node entry the spill wrote (the others were clean:
  // RocksDB held them already).
  int64_t spill_writes = 0;
  // Live bytes on disk: RocksDB's SST and WAL files and the push journal.
  int64_t rocksdb_bytes = 0;
  int64_t checkpoints = 0;
  std::string write_policy;
};

class NodeStateStore {
 public:
  virtual ~NodeStateStore() = default;

  // Fills states/version/time for `ids` (any order, duplicates allowed).
  // Never-updated ids read as zero state, version 0, time 0.
  // Errors: RESOURCE_EXHAUSTED (over max_batch), INVALID_ARGUMENT (negative
  // id), UNAVAILABLE/INTERNAL (storage or peer failure).
  [[nodiscard]] virtual absl::Status Pull(absl::Span<const int64_t> ids,
                                          PulledStates* out) = 0;

  // Pull that also calls `ready(k)` whenever rows [0, k) of `out` are
  // final (they do not change again before Pull returns), so a caller can
  // send them while the rest is read; `out` is sized before the first call.
  // `ready` runs on the pulling thread, possibly under the store's lock: it
  // must be quick and must not call the store. The rows are one consistent
  // read, as with Pull. By default `ready` is not called: all rows are final
  // when it returns OK.
  [[nodiscard]] virtual absl::Status PullWithProgress(
      absl::Span<const int64_t> ids, PulledStates* out,
      const std::function<void(int64_t)>& ready) {
    (void)ready;
    return Pull(ids, out);
  }

  // Newest-wins update of `ids` with `states` ([n * dim]), made by `writer`
  // (a rank, >= 0): id i takes states[i] when (versions[i], writer) is
  // greater than the stored (version, writer), comparing versions first.
  // `versions` ([n], >= 1) order the updates; `times` ([n], finite) are the
  // event times of the states, stored and returned but never compared.
  // Within one push a later duplicate id competes like a separate push.
  // Validated before any change: INVALID_ARGUMENT (size mismatch, version 0,
  // NaN/inf state or time, negative id or writer), RESOURCE_EXHAUSTED (over
  // max_batch). OK means durable according to the write policy.
  [[nodiscard]] virtual absl::Status Push(absl::Span<const int64_t> ids,
                                          absl::Span<const float> states,
                                          absl::Span<const uint64_t> versions,
                                          absl::Span<const double> times,
                                          int32_t writer) = 0;

  // One node: NOT_FOUND when it was never updated.
  [[nodiscard]] virtual absl::StatusOr<NodeStateView> Get(int64_t id) = 0;

  // The `n` most recently updated nodes, most recent first: ordered by
  // version descending, ties by id ascending (so the answer depends only on
  // the set of accepted pushes, not on their order). INVALID_ARGUMENT for
  // n < 0.
  [[nodiscard]] virtual absl::StatusOr<std::vector<NodeStateView>> ListRecent(
      int64_t n) = 0;

  [[nodiscard]] virtual absl::StatusOr<StoreStats> Stats() = 0;

  // A consistent copy of the store in `dir` (must not exist), openable as a
  // data_dir. Write-back stores also make it their crash-recovery point.
  [[nodiscard]] virtual absl::Status Checkpoint(const std::string& dir) = 0;

  // Flushes (write-back: all hot states to RocksDB) and closes. Further calls
  // fail with FAILED_PRECONDITION. Called by the destructor if needed.
  [[nodiscard]] virtual absl::Status Close() = 0;

  virtual int dim() const = 0;
};

// Opens (creating if needed) a local store. Errors: INVALID_ARGUMENT (bad
// options, a data_dir holding a different dim, or one written by another
// on-disk format, such as format 1 of mnemo versions that ordered states by
// event time), DATA_LOSS (a damaged journal record, or a data_dir that lost
// acknowledged pushes: its database, its recovery point or journal files
// deleted or emptied; the message names what is missing and the data_dir
// is left as it was), storage errors.
absl::StatusOr<std::unique_ptr<NodeStateStore>> Open(
    const NodeStateStoreOptions& options);

// Checks a push against NodeStateStore::Push's contract, before anything
// changes: OK, or INVALID_ARGUMENT naming the first problem found, in this
// order: a negative writer; sizes that do not match `ids` and `dim`; a
// negative id; a NaN or infinite state value; version 0 or a NaN or
// infinite time. Messages name the node and its index in the push, counted
// from `first_index` (the index of ids[0] when a push arrives in parts).
// The batch limit is the caller's to check. The local store, the
// memory-store service and its client all check pushes with it.
[[nodiscard]] absl::Status ValidatePush(absl::Span<const int64_t> ids,
                                        absl::Span<const float> states,
                                        absl::Span<const uint64_t> versions,
                                        absl::Span<const double> times,
                                        int32_t writer, int dim,
                                        int64_t first_index = 0);

absl::StatusOr<WritePolicy> ParseWritePolicy(std::string_view name);
std::string_view WritePolicyName(WritePolicy policy);

}  // namespace mnemo::memstore

#endif  // MNEMO_MEMSTORE_NODE_STATE_STORE_H_
