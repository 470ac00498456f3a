#include "services/pull_buffer_pool.h"

#include <utility>

namespace mnemo::services {

std::shared_ptr<memstore::PulledStates> PullBufferPool::Get() {
  memstore::PulledStates* p = nullptr;
  {
    absl::MutexLock l(&mu_);
    if (!idle_.empty()) {
      p = idle_.back().release();
      idle_.pop_back();
      idle_bytes_ -= Bytes(*p);
    }
  }
  if (p == nullptr) p = new memstore::PulledStates;
  return std::shared_ptr<memstore::PulledStates>(
      p,
      [pool = shared_from_this()](memstore::PulledStates* p) { pool->Put(p); });
}

int64_t PullBufferPool::Bytes(const memstore::PulledStates& p) {
  return p.states.capacity() * sizeof(float) +
         p.version.capacity() * sizeof(uint64_t) +
         p.time.capacity() * sizeof(double);
}

void PullBufferPool::Put(memstore::PulledStates* p) {
  std::unique_ptr<memstore::PulledStates> own(p);
  const int64_t bytes = Bytes(*p);
  absl::MutexLock l(&mu_);
  if (static_cast<int>(idle_.size()) < max_idle_ &&
      idle_bytes_ + bytes <= max_idle_bytes_) {
    idle_bytes_ += bytes;
    idle_.push_back(std::move(own));
  }
}

}  // namespace mnemo::services
