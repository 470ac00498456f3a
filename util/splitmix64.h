// SplitMix64 (Steele, Lea and Flood, 2014): a small, fast, fully specified
// random number generator. Generators of data that must be the same on
// every machine use it with their own samplers, never the C++ library's
// distributions, whose algorithms differ between implementations.
#ifndef MNEMO_UTIL_SPLITMIX64_H_
#define MNEMO_UTIL_SPLITMIX64_H_

#include <cstdint>

namespace mnemo {

class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : s_(seed) {}
  uint64_t Next() {
    uint64_t z = (s_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, 1), 53 bits.
  double Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }
  // Uniform in [0, n) for n >= 1.
  int64_t Below(int64_t n) {
    return static_cast<int64_t>(Uniform() * static_cast<double>(n));
  }

 private:
  uint64_t s_;
};

}  // namespace mnemo

#endif  // MNEMO_UTIL_SPLITMIX64_H_
