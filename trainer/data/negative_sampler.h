// Negative destination sampling.
#ifndef MNEMO_TRAINER_DATA_NEGATIVE_SAMPLER_H_
#define MNEMO_TRAINER_DATA_NEGATIVE_SAMPLER_H_

#include <cstdint>
#include <random>
#include <vector>

namespace mnemo::data {

// Draws destinations uniformly from a fixed candidate set. Evaluation
// samplers use fixed seeds and Reset() before each pass, so evaluation
// negatives do not depend on the training seed.
class NegativeSampler {
 public:
  NegativeSampler(std::vector<int32_t> candidates, uint64_t seed)
      : candidates_(std::move(candidates)), seed_(seed), rng_(seed) {}

  void Reset() { rng_.seed(seed_); }
  void Sample(int64_t n, int32_t* out) {
    std::uniform_int_distribution<int64_t> pick(
        0, static_cast<int64_t>(candidates_.size()) - 1);
    for (int64_t i = 0; i < n; ++i) out[i] = candidates_[pick(rng_)];
  }
  std::mt19937_64& rng() { return rng_; }
  const std::vector<int32_t>& candidates() const { return candidates_; }

 private:
  std::vector<int32_t> candidates_;
  uint64_t seed_;
  std::mt19937_64 rng_;
};

}  // namespace mnemo::data

#endif  // MNEMO_TRAINER_DATA_NEGATIVE_SAMPLER_H_
