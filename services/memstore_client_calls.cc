#include "services/memstore_client_calls.h"

#include <grpcpp/impl/client_unary_call.h>

#include <cstring>

#include "services/grpc_util.h"

namespace mnemo::services {
namespace {

const grpc::internal::RpcMethod kPullMethod(
    "/mnemo.v1.Memstore/Pull", grpc::internal::RpcMethod::NORMAL_RPC);
const grpc::internal::RpcMethod kPullStreamMethod(
    "/mnemo.v1.Memstore/PullStream",
    grpc::internal::RpcMethod::SERVER_STREAMING);

}  // namespace

std::shared_ptr<grpc::Channel> MakeMemstoreChannel(
    const std::string& address,
    const std::shared_ptr<grpc::ChannelCredentials>& credentials) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  // Reconnect quickly to a restarted server.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  // Not a backoff despite its name: gRPC gives each connection attempt
  // (TCP connect, TLS handshake, HTTP/2 settings) max(this, the current
  // backoff) before abandoning it. It was 100 ms: a TLS handshake slower
  // than that (a loaded machine, a busy server) was cut off ("Handshake
  // read failed"), and a fail-fast call got that error. The calls' own
  // deadlines bound how long they wait for a connection.
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 20000);
  // One connection per client, not shared process-wide.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  // A shard that stops answering (frozen, or its host gone) fails the calls
  // in flight within about 10 s instead of at their deadline: a ping every
  // 5 s while calls are active, unanswered for 5 s, closes the connection.
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 5000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5000);
  return grpc::CreateCustomChannel(NormalizeAddress(address), credentials,
                                   args);
}

grpc::Status CallPull(grpc::ChannelInterface* channel, grpc::ClientContext* ctx,
                      const v1::PullRequest& req, grpc::ByteBuffer* answer) {
  return grpc::internal::BlockingUnaryCall(channel, kPullMethod, ctx, req,
                                           answer);
}

grpc::Status ReadPullStream(
    grpc::ChannelInterface* channel, grpc::ClientContext* ctx,
    const v1::PullRequest& req,
    const std::function<absl::Status(const PullResponseView&)>& sink,
    absl::Status* sink_status) {
  std::unique_ptr<grpc::ClientReader<grpc::ByteBuffer>> reader(
      grpc::internal::ClientReaderFactory<grpc::ByteBuffer>::Create(
          channel, kPullStreamMethod, ctx, req));
  grpc::ByteBuffer chunk;
  PullResponseView view;
  while (reader->Read(&chunk)) {
    if (!sink_status->ok()) continue;  // cancelled: drain until Read fails
    absl::Status s = view.Parse(chunk);
    if (s.ok()) s = sink(view);
    if (!s.ok()) {
      *sink_status = s;
      ctx->TryCancel();
    }
  }
  return reader->Finish();
}

void FillPushRequest(const PushRows& rows, int64_t begin, int64_t count,
                     v1::PushRequest* req) {
  const size_t row_bytes =
      size_t{static_cast<size_t>(rows.dim)} * sizeof(float);
  req->mutable_ids()->Add(rows.ids.begin() + begin,
                          rows.ids.begin() + begin + count);
  std::string* s = req->mutable_states();
  std::string* v = req->mutable_version();
  std::string* t = req->mutable_time();
  if (rows.pos == nullptr) {
    s->assign(
        reinterpret_cast<const char*>(rows.states.data() + begin * rows.dim),
        count * row_bytes);
    v->assign(reinterpret_cast<const char*>(rows.versions.data() + begin),
              count * 8);
    t->assign(reinterpret_cast<const char*>(rows.times.data() + begin),
              count * 8);
    return;
  }
  s->resize(count * row_bytes);
  v->resize(count * 8);
  t->resize(count * 8);
  for (int64_t i = 0; i < count; ++i) {
    const int64_t row = rows.pos[begin + i];
    std::memcpy(s->data() + i * row_bytes, rows.states.data() + row * rows.dim,
                row_bytes);
    std::memcpy(v->data() + i * 8, rows.versions.data() + row, 8);
    std::memcpy(t->data() + i * 8, rows.times.data() + row, 8);
  }
}

}  // namespace mnemo::services
