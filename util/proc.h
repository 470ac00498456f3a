// Process facts: resident memory, host name, wall clock.
#ifndef MNEMO_UTIL_PROC_H_
#define MNEMO_UTIL_PROC_H_

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace mnemo {

int64_t PeakRssBytes();     // high-water mark of resident memory (VmHWM)
int64_t CurrentRssBytes();  // current resident memory (VmRSS)
std::string HostName();
// The CPU's "model name" in /proc/cpuinfo ("unknown" when absent): figures
// differ up to 3x between the CPU models this project runs on.
std::string CpuModel();
// "localhost", 127.0.0.0/8 or ::1 (names are not resolved).
bool IsLoopbackHost(const std::string& host);
std::string NowIso8601();  // UTC, e.g. 2026-11-29T14:49:16Z

// CPUs this process may run on (its affinity mask; at least 1).
int UsableCpuCount();
// The CPUs of the affinity mask, ascending.
std::vector<int> UsableCpus();
// Parses a CPU list such as "0", "2,3" or "0-3,6" (INVALID_ARGUMENT naming
// the bad part).
absl::StatusOr<std::vector<int>> ParseCpuList(const std::string& text);
// Restricts this process (all its threads created afterwards) to `cpus`.
absl::Status PinToCpus(const std::vector<int>& cpus);

// Monotonic seconds since an arbitrary epoch.
inline double MonotonicSeconds() {
  return std::chrono::duration<double>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Adds the seconds it lives to `*acc` (wall time).
class ScopedTimer {
 public:
  explicit ScopedTimer(double* acc) : acc_(acc), start_(MonotonicSeconds()) {}
  ~ScopedTimer() { *acc_ += MonotonicSeconds() - start_; }
  ScopedTimer(const ScopedTimer&) = delete;
  ScopedTimer& operator=(const ScopedTimer&) = delete;

 private:
  double* acc_;
  double start_;
};

}  // namespace mnemo

#endif  // MNEMO_UTIL_PROC_H_
