// The key-value store the trainers' collective group (gloo through c10d)
// rendezvouses through, with c10d::Store's semantics. The coordinator
// serves it over its gRPC service (Coordinator.Rendezvous), so the
// rendezvous listens where the coordinator does and shares its TLS and
// token: LibTorch 1.13's own TCPStore always listens on every interface,
// unauthenticated.
#ifndef MNEMO_COORDINATOR_RENDEZVOUS_KV_H_
#define MNEMO_COORDINATOR_RENDEZVOUS_KV_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace mnemo::coordinator {

struct KvRequest {
  enum Op { kSet, kGet, kAdd, kCompareSet, kDelete, kCheck, kNumKeys, kWait };
  Op op = kSet;
  // One key, except kCheck and kWait (any number) and kNumKeys (none).
  std::vector<std::string> keys;
  std::string value;     // kSet: the value; kCompareSet: the desired value
  std::string expected;  // kCompareSet: the value expected ("" = unset)
  int64_t amount = 0;    // kAdd
  double timeout_s = 0;  // kGet, kWait: how long to wait for the keys
};

struct KvReply {
  std::string value;   // kGet; kCompareSet: the value after the call
  int64_t number = 0;  // kAdd: the sum; kNumKeys
  bool flag = false;   // kDelete: a key was deleted; kCheck: all keys set
};

// What answers KvRequests: the coordinator's store, or a client of it.
class RendezvousKv {
 public:
  virtual ~RendezvousKv() = default;
  virtual absl::StatusOr<KvReply> Call(const KvRequest& request) = 0;
};

// The store itself. Thread-safe.
class KvStore final : public RendezvousKv {
 public:
  // kGet and kWait block until their keys are set: DEADLINE_EXCEEDED naming
  // the missing keys after timeout_s, or Close()'s status. kAdd on a value
  // that is not a decimal integer: INVALID_ARGUMENT. A request with the
  // wrong number of keys: INVALID_ARGUMENT.
  absl::StatusOr<KvReply> Call(const KvRequest& request) override;
  // Ends every wait, now and later, with `status` (not OK).
  void Close(absl::Status status);
  // Whether `request` can wait (the service runs those off its threads).
  static bool MayBlock(const KvRequest& request) {
    return request.op == KvRequest::kGet || request.op == KvRequest::kWait;
  }

 private:
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::string> map_ ABSL_GUARDED_BY(mu_);
  absl::Status closed_ ABSL_GUARDED_BY(mu_);
};

}  // namespace mnemo::coordinator

#endif  // MNEMO_COORDINATOR_RENDEZVOUS_KV_H_
