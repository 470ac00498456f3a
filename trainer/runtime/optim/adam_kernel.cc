#include "trainer/runtime/optim/adam_kernel.h"

#include <cmath>

namespace mnemo::runtime {

__attribute__((target_clones("avx2", "default"))) void AdamUpdate(
    float* __restrict p, float* __restrict m, float* __restrict v,
    const float* __restrict g, int64_t begin, int64_t end,
    const AdamScalars& s) {
  const float b1 = s.beta1, b2 = s.beta2, a1 = s.one_minus_beta1,
              a2 = s.one_minus_beta2, bc2 = s.bias_correction2_sqrt,
              eps = s.eps, neg_step = s.neg_step_size;
  for (int64_t i = begin; i < end; ++i) {
    const float gi = g[i];
    const float mi = m[i] * b1 + a1 * gi;
    const float vi = v[i] * b2 + a2 * (gi * gi);
    m[i] = mi;
    v[i] = vi;
    p[i] += neg_step * (mi / (std::sqrt(vi) / bc2 + eps));
  }
}

__attribute__((target_clones("avx2", "default"))) double SumOfSquares(
    const float* __restrict x, int64_t n) {
  // Independent partial sums: vectorizable without reassociating one sum.
  double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) {
      const double xi = x[i + j];
      acc[j] += xi * xi;
    }
  }
  double s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) +
             ((acc[2] + acc[6]) + (acc[3] + acc[7]));
  for (; i < n; ++i) s += static_cast<double>(x[i]) * x[i];
  return s;
}

}  // namespace mnemo::runtime
