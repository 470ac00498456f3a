// Names of an enum's values, for flags and configuration files: one table
// per enum gives both directions and the usage error, e.g.
//
//   constexpr EnumName<Precision> kPrecisionNames[] = {
//       {Precision::kFp32, "fp32"}, {Precision::kBf16, "bf16"}};
//   ParseEnum(kPrecisionNames, "--precision", "fp16")
//     -> INVALID_ARGUMENT "--precision must be fp32 or bf16, got 'fp16'"
//   EnumToName(kPrecisionNames, Precision::kBf16) -> "bf16"
#ifndef MNEMO_UTIL_ENUM_NAMES_H_
#define MNEMO_UTIL_ENUM_NAMES_H_

#include <cstddef>
#include <iterator>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace mnemo {

template <typename E>
struct EnumName {
  E value;
  std::string_view name;
};

// "a", "a or b", "a, b or c".
template <typename Names>
std::string NameList(const Names& names) {
  std::string out;
  const size_t n = std::size(names);
  size_t i = 0;
  for (const auto& name : names) {
    if (i > 0) out += i + 1 == n ? " or " : ", ";
    out += name;
    ++i;
  }
  return out;
}
template <typename E, size_t N>
std::string EnumNameList(const EnumName<E> (&names)[N]) {
  std::string_view list[N];
  for (size_t i = 0; i < N; ++i) list[i] = names[i].name;
  return NameList(list);
}

// The value named `text`; INVALID_ARGUMENT naming `what` (the flag) and
// the accepted names otherwise.
template <typename E, size_t N>
absl::StatusOr<E> ParseEnum(const EnumName<E> (&names)[N],
                            std::string_view what, std::string_view text) {
  for (const EnumName<E>& n : names) {
    if (n.name == text) return n.value;
  }
  return absl::InvalidArgumentError(absl::StrCat(std::string(what), " must be ",
                                                 EnumNameList(names), ", got '",
                                                 std::string(text), "'"));
}

// The name of `value` ("unknown" for a value missing from the table).
template <typename E, size_t N>
std::string_view EnumToName(const EnumName<E> (&names)[N], E value) {
  for (const EnumName<E>& n : names) {
    if (n.value == value) return n.name;
  }
  return "unknown";
}

}  // namespace mnemo

#endif  // MNEMO_UTIL_ENUM_NAMES_H_
