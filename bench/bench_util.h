// Small helpers shared by the C++ benchmarks.
#ifndef MNEMO_BENCH_BENCH_UTIL_H_
#define MNEMO_BENCH_BENCH_UTIL_H_

#include <algorithm>
#include <cstddef>
#include <vector>

namespace mnemo::bench {

// The median of `v` (the mean of the middle two for an even count; 0 when
// empty).
inline double Median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 == 1 ? v[m] : (v[m - 1] + v[m]) / 2;
}

}  // namespace mnemo::bench

#endif  // MNEMO_BENCH_BENCH_UTIL_H_
