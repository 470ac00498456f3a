// The memory-store client's calls below MemstoreClient (internal to
// memstore_client.cc): its channels, the raw Pull and PullStream calls
// whose answers pull_wire.h decodes, and the rows of push messages.
#ifndef MNEMO_SERVICES_MEMSTORE_CLIENT_CALLS_H_
#define MNEMO_SERVICES_MEMSTORE_CLIENT_CALLS_H_

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "memstore/node_state_store.h"
#include "mnemo/v1/memstore.grpc.pb.h"
#include "services/pull_wire.h"

namespace mnemo::services {

// A channel to one shard: no message size limit, quick reconnects to a
// restarted server, keepalive pings that fail the calls to a shard that
// stopped answering.
std::shared_ptr<grpc::Channel> MakeMemstoreChannel(
    const std::string& address,
    const std::shared_ptr<grpc::ChannelCredentials>& credentials);

// Pull and PullStream send a protobuf request and read the answer as raw
// bytes, decoded without copies by pull_wire.h. Both are synchronous calls:
// the calling thread polls the connection, reads the socket and copies the
// states out itself. gRPC's callback API, used before, handed every
// received message from its poller threads to the caller through wake-ups;
// on 2 cores that cost about a sixth of a 65,536-state pull's time and a
// third of a 4,096-state one's (bench/results/memstore_grpc_client.md).
grpc::Status CallPull(grpc::ChannelInterface* channel, grpc::ClientContext* ctx,
                      const v1::PullRequest& req, grpc::ByteBuffer* answer);
// Runs a PullStream call, handing each chunk to `sink` as it arrives (the
// next ones keep arriving in the socket's buffers meanwhile). A sink error
// cancels the call and lands in *sink_status; returns the call's status.
grpc::Status ReadPullStream(
    grpc::ChannelInterface* channel, grpc::ClientContext* ctx,
    const v1::PullRequest& req,
    const std::function<absl::Status(const PullResponseView&)>& sink,
    absl::Status* sink_status);

// The rows of a push sent to one shard: id i is row pos[i] of the caller's
// arrays (row i when pos is null).
struct PushRows {
  absl::Span<const int64_t> ids;
  const int64_t* pos = nullptr;
  absl::Span<const float> states;  // rows of `dim` values
  absl::Span<const uint64_t> versions;
  absl::Span<const double> times;
  int dim = 0;
};
// Sets the ids, states, versions and times of `req` to those of ids
// [begin, begin + count).
void FillPushRequest(const PushRows& rows, int64_t begin, int64_t count,
                     v1::PushRequest* req);

}  // namespace mnemo::services

#endif  // MNEMO_SERVICES_MEMSTORE_CLIENT_CALLS_H_
