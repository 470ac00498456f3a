// Process facts: resident memory, host name, wall clock.
#ifndef MNEMO_UTIL_PROC_H_
#define MNEMO_UTIL_PROC_H_

#include <chrono>
#include <cstdint>
#include <string>

namespace mnemo {

int64_t PeakRssBytes();     // high-water mark of resident memory (VmHWM)
int64_t CurrentRssBytes();  // current resident memory (VmRSS)
std::string HostName();
std::string NowIso8601();  // UTC, e.g. 2026-11-29T14:49:16Z

// Monotonic seconds since an arbitrary epoch.
inline double MonotonicSeconds() {
  return std::chrono::duration<double>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace mnemo

#endif  // MNEMO_UTIL_PROC_H_
