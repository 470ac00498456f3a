// The element loops of FusedAdam and GradNorm (torch-free, compiled with
// -O3 -fno-math-errno so that they vectorize; AVX2 where the CPU has it).
#ifndef MNEMO_TRAINER_RUNTIME_OPTIM_ADAM_KERNEL_H_
#define MNEMO_TRAINER_RUNTIME_OPTIM_ADAM_KERNEL_H_

#include <cstdint>

namespace mnemo::runtime {

struct AdamScalars {
  float beta1, beta2;     // moment decays
  float one_minus_beta1;  // 1 - beta1, as LibTorch rounds it
  float one_minus_beta2;  // 1 - beta2
  float bias_correction2_sqrt;
  float eps;
  float neg_step_size;  // -lr / (1 - beta1^step)
};

// Elements [begin, end) of one parameter: LibTorch 1.13's Adam update
//   m = m*b1 + (1-b1)*g;  v = v*b2 + (1-b2)*g*g;
//   p += -step_size * m / (sqrt(v) / sqrt(bias_correction2) + eps)
void AdamUpdate(float* p, float* m, float* v, const float* g, int64_t begin,
                int64_t end, const AdamScalars& s);

// sum_i x[i]^2, accumulated in double.
double SumOfSquares(const float* x, int64_t n);

}  // namespace mnemo::runtime

#endif  // MNEMO_TRAINER_RUNTIME_OPTIM_ADAM_KERNEL_H_
