// Small helpers for absl::Status plumbing. Debian's abseil (20220623) ships
// no RETURN_IF_ERROR / ASSIGN_OR_RETURN, so these are ours.
#ifndef MNEMO_UTIL_STATUS_MACROS_H_
#define MNEMO_UTIL_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define MNEMO_CONCAT_INNER_(a, b) a##b
#define MNEMO_CONCAT_(a, b) MNEMO_CONCAT_INNER_(a, b)

// Evaluates `expr` (an absl::Status); returns it from the enclosing function
// when it is not OK.
#define RETURN_IF_ERROR(expr)                      \
  do {                                             \
    ::absl::Status mnemo_status_ = (expr);         \
    if (!mnemo_status_.ok()) return mnemo_status_; \
  } while (0)

// `ASSIGN_OR_RETURN(auto x, Foo());` evaluates Foo() (an absl::StatusOr<T>),
// returns its status on error, otherwise moves the value into `x`.
#define ASSIGN_OR_RETURN(lhs, expr) \
  ASSIGN_OR_RETURN_IMPL_(MNEMO_CONCAT_(mnemo_statusor_, __LINE__), lhs, expr)
#define ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                           \
  if (!tmp.ok()) return tmp.status();          \
  lhs = std::move(tmp).value()

#endif  // MNEMO_UTIL_STATUS_MACROS_H_
