// Field lists of plain statistics structs: a struct S that declares
//
//   template <typename Self, typename F> static void Fields(Self& s, F&& f);
//
// calling f(name, field, merge) for each of its numeric fields in a fixed
// order can be summed, gathered across workers and written out without
// listing its fields again (trainer/memory/transfer_stats.h,
// trainer/runtime/train.h CommStats).
#ifndef MNEMO_UTIL_FIELDS_H_
#define MNEMO_UTIL_FIELDS_H_

#include <type_traits>
#include <vector>

namespace mnemo {

// How a figure of several workers makes the job's: their sum, the largest,
// or the first worker's (a figure every worker shares).
enum class Merge { kSum, kMax, kFirst };

// The fields of `s` as doubles, in their order (exact for integers below
// 2^53).
template <typename S>
std::vector<double> FieldValues(const S& s) {
  std::vector<double> v;
  S::Fields(s, [&](const char*, const auto& x, Merge) {
    v.push_back(static_cast<double>(x));
  });
  return v;
}

// Sets the fields of `s` from `v` (FieldValues' order), starting at `*at`,
// which ends past them.
template <typename S>
void SetFieldValues(const std::vector<double>& v, size_t* at, S* s) {
  S::Fields(*s, [&](const char*, auto& x, Merge) {
    x = static_cast<std::decay_t<decltype(x)>>(v[(*at)++]);
  });
}

// `into` += `k` * `from`, field by field.
template <typename S>
void AddFields(const S& from, double k, S* into) {
  const std::vector<double> v = FieldValues(from);
  size_t i = 0;
  S::Fields(*into, [&](const char*, auto& x, Merge) {
    x += static_cast<std::decay_t<decltype(x)>>(k * v[i++]);
  });
}

}  // namespace mnemo

#endif  // MNEMO_UTIL_FIELDS_H_
