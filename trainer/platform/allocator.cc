#include "trainer/platform/allocator.h"

#include <malloc.h>

#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace mnemo::platform {
namespace {

std::string Decide() {
  if (const char* m = std::getenv("MNEMO_MALLOC"); m != nullptr) {
    if (std::strcmp(m, "system") == 0) return "system (MNEMO_MALLOC)";
  }
  for (const char* name : {"MALLOC_MMAP_MAX_", "MALLOC_MMAP_THRESHOLD_",
                           "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_"}) {
    if (const char* v = std::getenv(name); v != nullptr) {
      return absl::StrCat("environment: ", name, "=", v);
    }
  }
  if (const char* t = std::getenv("GLIBC_TUNABLES");
      t != nullptr && std::strstr(t, "glibc.malloc") != nullptr) {
    return absl::StrCat("environment: GLIBC_TUNABLES=", t);
  }
  // Order matters: a trim threshold set explicitly also stops glibc from
  // adapting the mmap threshold.
  if (mallopt(M_TRIM_THRESHOLD, 1 << 30) == 1 &&
      mallopt(M_TOP_PAD, 64 << 20) == 1 && mallopt(M_MMAP_MAX, 0) == 1) {
    return "heap (no mmap, no trim)";
  }
  return "system (mallopt refused)";
}

}  // namespace

std::string TuneAllocatorForTraining() {
  static const std::string* const kApplied = new std::string(Decide());
  return *kApplied;
}

}  // namespace mnemo::platform
