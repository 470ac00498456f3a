// PullBufferPool: reusable pull results of the memory-store service.
//
// A pull answer is sent straight from the store's result (pull_wire.h), so
// the result lives until gRPC has written it; then it comes back here,
// keeping its memory: the next pull of a similar size neither allocates
// nor page-faults, and the store's resize() does not zero-fill. Idle
// buffers are bounded in number and size.
#ifndef MNEMO_SERVICES_PULL_BUFFER_POOL_H_
#define MNEMO_SERVICES_PULL_BUFFER_POOL_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "memstore/node_state_store.h"

namespace mnemo::services {

// Thread-safe. Owned by a shared_ptr: the buffers it hands out hold it.
class PullBufferPool : public std::enable_shared_from_this<PullBufferPool> {
 public:
  // Keeps at most `max_idle` idle buffers of `max_idle_bytes` in all.
  PullBufferPool(int max_idle, int64_t max_idle_bytes)
      : max_idle_(max_idle), max_idle_bytes_(max_idle_bytes) {}

  // An idle buffer (or a new one), which returns here when released.
  std::shared_ptr<memstore::PulledStates> Get();

 private:
  static int64_t Bytes(const memstore::PulledStates& p);
  void Put(memstore::PulledStates* p);

  const int max_idle_;
  const int64_t max_idle_bytes_;
  absl::Mutex mu_;
  std::vector<std::unique_ptr<memstore::PulledStates>> idle_
      ABSL_GUARDED_BY(mu_);
  int64_t idle_bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace mnemo::services

#endif  // MNEMO_SERVICES_PULL_BUFFER_POOL_H_
