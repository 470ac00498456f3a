// A status that says the command was used wrongly (a flag, or data that do
// not match what --resume continues), found only once the run has read
// something: `mnemo` exits 2 for it, as for a flag refused at parse time,
// not 1 (a failure). The mark is a payload; the code and message stay.
#ifndef MNEMO_UTIL_USAGE_ERROR_H_
#define MNEMO_UTIL_USAGE_ERROR_H_

#include "absl/status/status.h"
#include "absl/strings/cord.h"

namespace mnemo {

inline constexpr char kUsageErrorPayload[] = "mnemo.dev/usage-error";

inline absl::Status UsageError(absl::Status s) {
  if (!s.ok()) s.SetPayload(kUsageErrorPayload, absl::Cord("1"));
  return s;
}

inline bool IsUsageError(const absl::Status& s) {
  return !s.ok() && s.GetPayload(kUsageErrorPayload).has_value();
}

// The exit code of a command that failed with `s`: 2 for a usage error, 1
// otherwise.
inline int ExitCodeOf(const absl::Status& s) { return IsUsageError(s) ? 2 : 1; }

}  // namespace mnemo

#endif  // MNEMO_UTIL_USAGE_ERROR_H_
