// A NodeStateStore over one or several memory-store services (gRPC).
//
// Node id u lives on shard options.shard_of(u, S) (default u % S); a call
// that touches several shards fans out to them in parallel. Every RPC has a
// deadline; idempotent calls (Pull, Push, Get, ListRecent, Stats; Push is
// idempotent by newest-wins) are retried with exponential backoff on
// UNAVAILABLE, within that deadline. Checkpoint is never retried. Requests
// whose messages would exceed max_message_bytes switch to the streaming
// RPCs (PullStream, PushStream) automatically; pulls of more than 2 MiB of
// states use PullStream even when they would fit one message, so chunks are
// copied out while later ones are in flight. Pull answers are decoded
// without protobuf copies: states go from gRPC's receive buffers straight
// into the caller's PulledStates (services/pull_wire.h).
//
// Thread safety: safe for concurrent use from multiple threads.
// This header does not include gRPC.
#ifndef MNEMO_SERVICES_MEMSTORE_CLIENT_H_
#define MNEMO_SERVICES_MEMSTORE_CLIENT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "memstore/node_state_store.h"
#include "services/security.h"

namespace mnemo::services {

// Maps a dense node id to its shard in [0, num_shards).
using ShardFunction = std::function<int(int64_t id, int num_shards)>;

struct MemstoreClientOptions {
  // Address ("host:port"; ":port" = 127.0.0.1) of shard i at index i.
  std::vector<std::string> addresses;
  // State width; 0: ask shard 0 at Connect().
  int dim = 0;
  // Shard of each id; empty: id % num_shards.
  ShardFunction shard_of;
  // Deadline of each call (all retries together), in seconds.
  double deadline_seconds = 10;
  // Attempts per idempotent call (1: no retries).
  int max_attempts = 5;
  // How long Connect() waits for every shard to answer, retrying refused
  // connections (a shard that starts after the client); 0: Connect() does
  // not wait, and a shard that is not up fails the first call after
  // max_attempts.
  double connect_wait_seconds = 0;
  // Backoff before the first retry, doubled up to max_backoff_seconds (with
  // jitter).
  double initial_backoff_seconds = 0.02;
  double max_backoff_seconds = 1;
  // Largest message the client sends, and the size above which pulls are
  // streamed; should equal the servers' --max-message-bytes.
  int64_t max_message_bytes = 4 << 20;
  // TLS, mutual TLS and the bearer token (default: plaintext).
  ClientSecurity security;
};

// A node as a memory-store service reports it.
struct RemoteNodeState {
  memstore::NodeStateView view;
  int64_t original_id = 0;
  std::string kind;  // "user", "item" or empty
  int shard = 0;
};

// One shard's Stats().
struct ShardStats {
  int shard_id = 0;
  int num_shards = 1;
  std::string address;
  int64_t max_message_bytes = 0;
  bool has_id_map = false;
  memstore::StoreStats stats;
};

class MemstoreClient : public memstore::NodeStateStore {
 public:
  // Creates channels to the shards. Contacts shard 0 only when options.dim
  // is 0. Errors: INVALID_ARGUMENT (bad options), what Stats() returns.
  static absl::StatusOr<std::unique_ptr<MemstoreClient>> Connect(
      MemstoreClientOptions options);
  ~MemstoreClient() override;

  // NodeStateStore. Errors as documented there, plus UNAVAILABLE (shard
  // unreachable) and DEADLINE_EXCEEDED; messages name the shard.
  // Stats() sums the shards, except `pulls` and `pushes`: the most calls any
  // shard served (a call spanning several shards counts once per shard).
  // With several shards, Push validates before sending, so a rejected push
  // changes no shard.
  // Checkpoint(dir) asks each shard to checkpoint to `dir` (one shard) or
  // `dir`-shard<i> (several): a name under the server's checkpoint root, or
  // an absolute path where the server allows it.
  absl::Status Pull(absl::Span<const int64_t> ids,
                    memstore::PulledStates* out) override;
  absl::Status Push(absl::Span<const int64_t> ids,
                    absl::Span<const float> states,
                    absl::Span<const uint64_t> versions,
                    absl::Span<const double> times, int32_t writer) override;
  absl::StatusOr<memstore::NodeStateView> Get(int64_t id) override;
  absl::StatusOr<std::vector<memstore::NodeStateView>> ListRecent(
      int64_t n) override;
  absl::StatusOr<memstore::StoreStats> Stats() override;
  absl::Status Checkpoint(const std::string& dir) override;
  absl::Status Close() override;
  int dim() const override;

  // A node by its ORIGINAL id (translated by the servers' id maps), asking
  // every shard. `kind` ("user", "item" or empty) picks one side of a
  // bipartite dataset. NOT_FOUND when no shard has it.
  absl::StatusOr<RemoteNodeState> GetByOriginalId(int64_t original_id,
                                                  const std::string& kind = "");
  // ListRecent with original ids and shards.
  absl::StatusOr<std::vector<RemoteNodeState>> ListRecentNodes(int64_t n);
  // Each shard's statistics.
  absl::StatusOr<std::vector<ShardStats>> StatsPerShard();
  int num_shards() const;

  class Impl;

 private:
  explicit MemstoreClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// grpc.health.v1 Check of `service` (empty: the whole server) at `address`.
// Returns true when SERVING, false for any other answer; UNAVAILABLE /
// DEADLINE_EXCEEDED when there is no answer within `deadline_seconds`.
absl::StatusOr<bool> CheckHealth(const std::string& address,
                                 double deadline_seconds,
                                 const std::string& service = "",
                                 const ClientSecurity& security = {});

}  // namespace mnemo::services

#endif  // MNEMO_SERVICES_MEMSTORE_CLIENT_H_
