// gtest matchers for absl::Status / absl::StatusOr (Debian's abseil has none).
#ifndef MNEMO_UTIL_STATUS_MATCHERS_H_
#define MNEMO_UTIL_STATUS_MATCHERS_H_

#include <gmock/gmock.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace mnemo {
inline const absl::Status& GetStatus(const absl::Status& s) { return s; }
template <typename T>
const absl::Status& GetStatus(const absl::StatusOr<T>& s) {
  return s.status();
}
}  // namespace mnemo

MATCHER(IsOk, "is OK") {
  const absl::Status& s = ::mnemo::GetStatus(arg);
  if (!s.ok()) *result_listener << "status: " << s.ToString();
  return s.ok();
}

// Matches a non-OK status with `code` whose message contains `substr`.
MATCHER_P2(StatusIs, code, substr, "") {
  const absl::Status& s = ::mnemo::GetStatus(arg);
  *result_listener << "status: " << s.ToString();
  return s.code() == code &&
         std::string(s.message()).find(substr) != std::string::npos;
}

#endif  // MNEMO_UTIL_STATUS_MATCHERS_H_
