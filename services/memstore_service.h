// The memory-store gRPC service (proto/mnemo/v1/memstore.proto) over a
// memstore::NodeStateStore, and a server that hosts it with gRPC health,
// server reflection and Prometheus metrics.
//
// The handlers use gRPC's callback API; a reaction never blocks: store work
// runs on a small executor that finishes the RPC. The handlers validate every
// request (shard, dim, sizes, limits, version 0, NaN; a push's contents with
// memstore::ValidatePush, as the store does) before the store sees it, so a
// bad request changes nothing. The streaming RPCs' reactors are in
// memstore_streams.h, the metrics in memstore_metrics.h.
#ifndef MNEMO_SERVICES_MEMSTORE_SERVICE_H_
#define MNEMO_SERVICES_MEMSTORE_SERVICE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "memstore/node_state_store.h"
#include "services/id_map.h"
#include "services/security.h"

namespace mnemo::services {

class MetricsRegistry;

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

// The smallest MemstoreServerOptions::max_message_bytes a server of
// states of width `dim` accepts (one state and the message's framing); the
// largest is 2^31 - 1.
int64_t MinMessageBytes(int dim);

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
