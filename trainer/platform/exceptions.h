// LibTorch's exceptions as text.
#ifndef MNEMO_TRAINER_PLATFORM_EXCEPTIONS_H_
#define MNEMO_TRAINER_PLATFORM_EXCEPTIONS_H_

#include <c10/util/Exception.h>

#include <exception>
#include <string>

namespace mnemo::platform {

// An exception's message without LibTorch's C++ stack trace (c10::Error's
// what() carries one).
inline std::string ExceptionMessage(const std::exception& e) {
  if (const auto* c = dynamic_cast<const c10::Error*>(&e)) {
    return c->what_without_backtrace();
  }
  return e.what();
}

}  // namespace mnemo::platform

#endif  // MNEMO_TRAINER_PLATFORM_EXCEPTIONS_H_
