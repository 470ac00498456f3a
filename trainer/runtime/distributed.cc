#include "trainer/runtime/distributed.h"

#include "absl/strings/str_cat.h"

namespace mnemo::runtime {

absl::StatusOr<Policy> ParsePolicy(std::string_view name) {
  if (name == "vanilla") return Policy::kVanilla;
  if (name == "full-cache") return Policy::kFullCache;
  return absl::InvalidArgumentError(absl::StrCat(
      "--policy must be vanilla or full-cache, got '", std::string(name), "'"));
}

std::string_view PolicyName(Policy policy) {
  switch (policy) {
    case Policy::kVanilla:
      return "vanilla";
    case Policy::kFullCache:
      return "full-cache";
  }
  return "unknown";
}

int HashOwner(int64_t node, int world_size) {
  uint64_t x = static_cast<uint64_t>(node) + 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  x ^= x >> 31;
  return static_cast<int>(x % static_cast<uint64_t>(world_size));
}

}  // namespace mnemo::runtime
