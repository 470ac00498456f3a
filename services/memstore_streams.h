// The memory-store service's streaming RPCs (services/memstore_service.h):
// the PullStream and PushStream reactors, over what they need of the
// service (StreamHost). Internal to the service.
#ifndef MNEMO_SERVICES_MEMSTORE_STREAMS_H_
#define MNEMO_SERVICES_MEMSTORE_STREAMS_H_

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <functional>
#include <memory>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "memstore/node_state_store.h"
#include "mnemo/v1/memstore.grpc.pb.h"

namespace mnemo {
class Executor;
}  // namespace mnemo

namespace mnemo::services {

class MemstoreMetrics;

// The message `T` in `buffer`; INVALID_ARGUMENT naming `method` otherwise.
template <typename T>
absl::Status ParseRequest(const grpc::ByteBuffer& buffer, const char* method,
                          T* out) {
  grpc::ByteBuffer copy(buffer);  // Deserialize consumes its input
  grpc::Status s = grpc::SerializationTraits<T>::Deserialize(&copy, out);
  if (!s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(method, ": the request body is not a ",
                     T::descriptor()->full_name(), ": ", s.error_message()));
  }
  return absl::OkStatus();
}

// What the stream reactors ask of the service: its executor and metrics,
// and the checks and store calls it shares with its unary handlers (each
// returns OK or the error to answer with). Thread-safe.
class StreamHost {
 public:
  virtual ~StreamHost() = default;

  // Runs store work, so that a reaction never blocks.
  virtual Executor& executor() = 0;
  virtual MemstoreMetrics& metrics() = 0;
  virtual int dim() const = 0;
  // States per PullStream chunk (a message's worth).
  virtual int64_t chunk_states() const = 0;

  // A pull request: shard, dim, limits, ids.
  virtual absl::Status ValidatePull(const v1::PullRequest& req,
                                    bool stream) const = 0;
  // A result buffer that returns to the service's pool when released.
  virtual std::shared_ptr<memstore::PulledStates> GetPullBuffer() = 0;
  // Pulls the request's ids into `p`, telling `ready` (unless null) as rows
  // become final (NodeStateStore::PullWithProgress).
  virtual absl::Status StorePull(const v1::PullRequest& req,
                                 memstore::PulledStates* p,
                                 const std::function<void(int64_t)>& ready) = 0;

  // The checks of one push message that its typed arrays cannot make
  // (memstore::ValidatePush makes those): shard, dim, the request's limit,
  // the writer of the push it belongs to, the sizes of its fields, ids in
  // the job's range. `first_index`: the index of its first id in the whole
  // push; `writer`: the push's writer.
  virtual absl::Status CheckPushMessage(const v1::PushRequest& req,
                                        int64_t first_index,
                                        int32_t writer) const = 0;
  // Applies a validated push.
  virtual absl::Status StorePush(absl::Span<const int64_t> ids,
                                 absl::Span<const float> states,
                                 absl::Span<const uint64_t> versions,
                                 absl::Span<const double> times,
                                 int32_t writer) = 0;
};

// The reactors of one call (they delete themselves when it is done).
// `host` must outlive the call.
grpc::ServerWriteReactor<grpc::ByteBuffer>* NewPullStreamReactor(
    StreamHost* host, const grpc::ByteBuffer* request);
grpc::ServerReadReactor<grpc::ByteBuffer>* NewPushStreamReactor(
    StreamHost* host, grpc::CallbackServerContext* ctx,
    grpc::ByteBuffer* response);

}  // namespace mnemo::services

#endif  // MNEMO_SERVICES_MEMSTORE_STREAMS_H_
