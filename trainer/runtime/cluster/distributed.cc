#include "trainer/runtime/cluster/distributed.h"

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"

namespace mnemo::runtime {

void DecisionBoard::Put(int64_t boundary, bool sync) {
  absl::MutexLock lock(&mu_);
  decisions_[boundary] = sync;
  cv_.SignalAll();
}

void DecisionBoard::End(absl::Status status) {
  absl::MutexLock lock(&mu_);
  if (ended_.ok()) ended_ = std::move(status);
  cv_.SignalAll();
}

absl::StatusOr<bool> DecisionBoard::Wait(int64_t boundary, double timeout_s) {
  absl::MutexLock lock(&mu_);
  const absl::Time deadline = absl::Now() + absl::Seconds(timeout_s);
  while (true) {
    auto it = decisions_.find(boundary);
    if (it != decisions_.end()) {
      const bool sync = it->second;
      decisions_.erase(decisions_.begin(), it);  // keep the map small
      return sync;
    }
    if (!ended_.ok()) return ended_;
    if (cv_.WaitWithDeadline(&mu_, deadline)) {
      return absl::DeadlineExceededError(
          absl::StrCat("no sync decision for batch ", boundary, " within ",
                       timeout_s, " s"));
    }
  }
}

int HashOwner(int64_t node, int world_size) {
  uint64_t x = static_cast<uint64_t>(node) + 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  x ^= x >> 31;
  return static_cast<int>(x % static_cast<uint64_t>(world_size));
}

}  // namespace mnemo::runtime
