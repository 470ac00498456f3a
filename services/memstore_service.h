// The memory-store gRPC service (proto/mnemo/v1/memstore.proto) over a
// memstore::NodeStateStore, and a server that hosts it with gRPC health,
// server reflection and Prometheus metrics.
//
// The handlers use gRPC's callback API; a reaction never blocks: store work
// runs on a small executor that finishes the RPC. The handlers validate every
// request (shard, dim, sizes, limits, version 0, NaN) before the store sees
// it, so a bad request changes nothing.
#ifndef MNEMO_SERVICES_MEMSTORE_SERVICE_H_
#define MNEMO_SERVICES_MEMSTORE_SERVICE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "memstore/node_state_store.h"
#include "services/security.h"

namespace mnemo::services {

class MetricsRegistry;

// The job's dense <-> original node id map (id_map.csv as written by
// `mnemo train --out` and `mnemo data --id-map`: header
// "dense_id,original_id[,kind]"). Immutable after loading.
class IdMap {
 public:
  struct Entry {
    int64_t original_id = 0;
    std::string kind;  // "user", "item" or empty
  };

  // INVALID_ARGUMENT naming file and line on malformed input; NOT_FOUND if
  // the file cannot be read.
  static absl::StatusOr<IdMap> Load(const std::string& path);

  bool empty() const { return original_.empty(); }
  // One past the largest dense id (0 when empty).
  int64_t dense_end() const { return dense_end_; }
  // The dense ids with this original id (two for a bipartite dataset whose
  // users and items share ids), restricted to `kind` unless it is empty.
  std::vector<int64_t> DenseIds(int64_t original_id,
                                const std::string& kind) const;
  // nullopt when `dense_id` is not in the map.
  std::optional<Entry> Find(int64_t dense_id) const;

 private:
  // Index of `dense_id` in the arrays below, or -1.
  int64_t IndexOf(int64_t dense_id) const;

  // Columns, one entry per mapped node: about 21 bytes a node (a 10M-node
  // job's map costs each shard ~0.2 GB, not the ~1.6 GB of two hash maps
  // of strings and vectors). dense_ is empty when the dense ids are
  // exactly 0..n-1 in order (what mnemo writes): the index is the id.
  std::vector<int64_t> dense_;     // sorted, when not 0..n-1
  std::vector<int64_t> original_;  // [i]: original id of entry i
  std::vector<uint8_t> kind_;      // [i]: index into kinds_
  std::vector<std::string> kinds_;
  std::vector<uint32_t> by_original_;  // entries ordered by (original, dense)
  int64_t dense_end_ = 0;
};

struct MemstoreServerOptions {
  // Address to listen on ("host:port"; ":port" means 127.0.0.1:port; port 0
  // picks a free port, see MemstoreServer::port()).
  std::string listen = "127.0.0.1:0";
  // This server's shard and the job's number of shards. Requests naming
  // another shard get NOT_FOUND.
  int shard_id = 0;
  int num_shards = 1;
  // Largest gRPC message received or sent, in bytes. Unary answers that
  // would be larger fail with RESOURCE_EXHAUSTED; streams chunk below it.
  int64_t max_message_bytes = 4 << 20;
  // Most ids one request may carry (a PushStream counts all its chunks).
  int64_t max_batch = 1 << 22;
  // Threads that run store work for the handlers.
  int executor_threads = 4;
  // Directory under which Checkpoint creates named checkpoints. Empty:
  // Checkpoint fails with FAILED_PRECONDITION.
  std::string checkpoint_root;
  // Advanced (tests): accept an absolute checkpoint path as the name.
  bool allow_absolute_checkpoint_paths = false;
  // Original ids for Get/BatchGet/ListRecent. Empty: original id = dense id.
  IdMap id_map;
  // The job's number of nodes: requests naming a dense id >= num_nodes get
  // INVALID_ARGUMENT. 0: the id map's dense_end() when there is a map, else
  // no bound.
  int64_t num_nodes = 0;
  // TLS, mutual TLS and the bearer token (default: plaintext).
  ServerSecurity security;
};

// A running memory-store server. Thread-safe.
class MemstoreServer {
 public:
  // Starts serving `store` (not owned; must outlive the server). Metrics are
  // registered in `metrics` when given (not owned; must outlive the server).
  // Errors: INVALID_ARGUMENT (bad options), UNAVAILABLE (cannot bind).
  static absl::StatusOr<std::unique_ptr<MemstoreServer>> Start(
      memstore::NodeStateStore* store, MemstoreServerOptions options,
      MetricsRegistry* metrics = nullptr);

  // Calls Shutdown().
  ~MemstoreServer();

  // The bound port, and "127.0.0.1:port"-style address to dial.
  int port() const;
  std::string address() const;

  // Marks the health NOT_SERVING, stops accepting RPCs, lets in-flight ones
  // finish (at most `grace_seconds`, then cancels them) and stops the
  // executor. Idempotent. Does not close the store.
  void Shutdown(double grace_seconds = 5);

  class Impl;

 private:
  explicit MemstoreServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace mnemo::services

#endif  // MNEMO_SERVICES_MEMSTORE_SERVICE_H_
