#include "trainer/model/attention_ops.h"

#include <ATen/Parallel.h>

#include <array>
#include <cmath>
#include <cstring>
#include <limits>

namespace mnemo::model {
namespace {

using torch::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr int kMaxParts = 3;
// Grain of the parallel loops, in targets (a target is about 2*k*h*w
// multiply-adds: 13,760 for TGN's reference configuration).
constexpr int64_t kGrain = 16;

// o[0, W) += c * y[0, W)
inline __attribute__((always_inline)) void Axpy(float c,
                                                const float* __restrict y,
                                                float* __restrict o,
                                                int64_t W) {
  for (int64_t w = 0; w < W; ++w) o[w] += c * y[w];
}

// x[0, W) . y[0, W) with eight independent partial sums: vectorizable
// without reassociating one long sum.
inline __attribute__((always_inline)) float DotRow(const float* __restrict x,
                                                   const float* __restrict y,
                                                   int64_t W) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t w = 0;
  for (; w + 8 <= W; w += 8) {
    for (int j = 0; j < 8; ++j) acc[j] += x[w + j] * y[w + j];
  }
  float s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) +
            ((acc[2] + acc[6]) + (acc[3] + acc[7]));
  for (; w < W; ++w) s += x[w] * y[w];
  return s;
}

// cos(z) and sin(z) of z = dt * w[j] + b[j] for j in [0, T), one row of the
// time encoding, in one pass (no z tensor). Sleef's cos and sin (what
// LibTorch calls) took 8% of a TGN step's samples: the arguments reach 1e6
// and beyond (time gaps in seconds times w[0] = 1), where Sleef leaves its
// fast path. Here the quadrant reduction runs in double and the two
// polynomials in float on |r| <= pi/4 (Taylor to r^9 and r^10: below 2e-9
// there). k * kPiOver2Hi is rounded (no FMA on this build's targets), which
// puts r within 6e-8 of exact for |z| < 2^29 (1.2e-7 at 2^30, 1e-6 at
// 2^33): rows whose |z| may reach kFastBound, or that hold NaN, take
// std::cos and std::sin. The trainer's times start at 0, so that is a
// time span above 17 years in seconds (Wikipedia: 2.7e6 s), or 6 days in
// milliseconds. `sin_out` may be null.
namespace sincos {
constexpr double kTwoOverPi = 0.63661977236758134308;
constexpr double kPiOver2Hi = 1.5707963267948966;     // double(pi / 2)
constexpr double kPiOver2Lo = 6.123233995736766e-17;  // pi / 2 - kPiOver2Hi
constexpr double kRound = 6755399441055744.0;         // 1.5 * 2^52
constexpr double kFastBound = 536870912.0;            // 2^29
constexpr float kS1 = -1.f / 6, kS2 = 1.f / 120, kS3 = -1.f / 5040,
                kS4 = 1.f / 362880;
constexpr float kC1 = -0.5f, kC2 = 1.f / 24, kC3 = -1.f / 720,
                kC4 = 1.f / 40320, kC5 = -1.f / 3628800;
}  // namespace sincos

typedef float V8f __attribute__((vector_size(32)));
typedef int32_t V8i __attribute__((vector_size(32)));
typedef double V8d __attribute__((vector_size(64)));

// cos and sin of eight arguments of the fast path (|z| < kFastBound).
inline __attribute__((always_inline)) void SinCos8(const V8f& z, V8f* cos_out,
                                                   V8f* sin_out) {
  using namespace sincos;
  const V8d zd = __builtin_convertvector(z, V8d);
  const V8d k = (zd * kTwoOverPi + kRound) - kRound;  // nearest integer
  const V8f r =
      __builtin_convertvector((zd - k * kPiOver2Hi) - k * kPiOver2Lo, V8f);
  const V8d m = (k * 0.25 + kRound) - kRound;
  const V8i q = __builtin_convertvector(k - 4 * m, V8i) & 3;  // k mod 4
  const V8f r2 = r * r;
  const V8f s = r + r * r2 * (kS1 + r2 * (kS2 + r2 * (kS3 + r2 * kS4)));
  const V8f c =
      1 + r2 * (kC1 + r2 * (kC2 + r2 * (kC3 + r2 * (kC4 + r2 * kC5))));
  const V8i odd = (q & 1) != 0;
  const V8f cv = odd ? s : c, sv = odd ? c : s;
  *cos_out = (((q + 1) & 2) != 0) ? -cv : cv;
  *sin_out = ((q & 2) != 0) ? -sv : sv;
}

// |z| <= |dt| * max|w| + max|b| decides a row's path: Fast(dt) rows the
// vectorized one, others (NaN in w or b included) std::cos and std::sin.
struct TimeEncodingBound {
  float wmax = 0, bmax = 0;
  TimeEncodingBound() = default;
  TimeEncodingBound(const float* w, const float* b, int64_t T) {
    for (int64_t j = 0; j < T; ++j) {
      wmax = std::max(wmax, std::abs(w[j]));
      bmax = std::max(bmax, std::abs(b[j]));
      if (std::isnan(w[j]) || std::isnan(b[j])) wmax = bmax = INFINITY;
    }
  }
  bool Fast(float dt) const {
    return static_cast<double>(std::abs(dt)) * wmax + bmax < sincos::kFastBound;
  }
};

__attribute__((target_clones("avx2", "default"))) void TimeEncodingRow(
    float dt, const float* __restrict w, const float* __restrict b, int64_t T,
    bool fast, float* __restrict cos_out, float* __restrict sin_out) {
  if (!fast) {
    for (int64_t j = 0; j < T; ++j) {
      const float z = dt * w[j] + b[j];
      cos_out[j] = std::cos(z);
      if (sin_out) sin_out[j] = std::sin(z);
    }
    return;
  }
  V8f wv, bv, c, s;
  int64_t j = 0;
  for (; j + 8 <= T; j += 8) {
    std::memcpy(&wv, w + j, sizeof wv);
    std::memcpy(&bv, b + j, sizeof bv);
    SinCos8(dt * wv + bv, &c, &s);
    std::memcpy(cos_out + j, &c, sizeof c);
    if (sin_out) std::memcpy(sin_out + j, &s, sizeof s);
  }
  if (j == T) return;
  // The last, partial vector through zero-padded copies.
  const size_t tail = sizeof(float) * (T - j);
  wv = V8f{};
  bv = V8f{};
  std::memcpy(&wv, w + j, tail);
  std::memcpy(&bv, b + j, tail);
  SinCos8(dt * wv + bv, &c, &s);
  std::memcpy(cos_out + j, &c, tail);
  if (sin_out) std::memcpy(sin_out + j, &s, tail);
}

// The raw buffers of one call (contiguous float32; mask uint8).
struct Buffers {
  int64_t N = 0, K = 0, H = 0, W = 0;  // W: all parts
  int parts = 0;
  std::array<const float*, kMaxParts> x{};
  std::array<int64_t, kMaxParts> width{}, offset{};
  // Part i's row of (n, k) is row index[i][n * K + k] of x[i] (a gather
  // read in place) or, with a null index, row n * K + k.
  std::array<const int64_t*, kMaxParts> index{};
  // Whether part i's gradient is wanted (data such as edge features: no).
  std::array<bool, kMaxParts> grad{};
  const float* y = nullptr;     // [N, H, W]
  const float* bias = nullptr;  // [N, H] or null: none
  const bool* mask = nullptr;   // [N, K]
  const float* keep = nullptr;  // [N, K, H] or null
  // The part the forward kernel computes itself, or -1: the time encoding
  // cos(dt[n * K + k] * time_w + time_b), written to x[time_part] (`cos`,
  // [N * K, T]) and its sine to `sin` (null: not wanted) for the rows
  // whose mask is set; the other rows are left unwritten and never read.
  int time_part = -1;
  const float* dt = nullptr;      // [N * K]
  const float* time_w = nullptr;  // [T]
  const float* time_b = nullptr;  // [T]
  TimeEncodingBound time_bound;
  float* cos = nullptr;
  float* sin = nullptr;
  const float* x_row(int i, int64_t n, int64_t k) const {
    const int64_t r = index[i] != nullptr ? index[i][n * K + k] : n * K + k;
    return x[i] + r * width[i];
  }
};

// The time encoding's rows of target n (forward kernel).
void EncodeTargetTimes(const Buffers& b, int64_t n) {
  const int64_t T = b.width[b.time_part];
  for (int64_t k = 0; k < b.K; ++k) {
    const int64_t r = n * b.K + k;
    if (!b.mask[r]) continue;
    TimeEncodingRow(b.dt[r], b.time_w, b.time_b, T, b.time_bound.Fast(b.dt[r]),
                    b.cos + r * T, b.sin != nullptr ? b.sin + r * T : nullptr);
  }
}

// The kernels' bodies are compiled three times (below): for AVX2 with FMA,
// for AVX2 alone and for plain x86-64, and the CPU's best one runs.
inline __attribute__((always_inline)) void ForwardKernelBody(
    const Buffers& b, int64_t begin, int64_t end, float* prob, float* mix,
    float* weight) {
  const int64_t K = b.K, H = b.H, W = b.W;
  for (int64_t n = begin; n < end; ++n) {
    if (b.time_part >= 0) EncodeTargetTimes(b, n);
    for (int64_t h = 0; h < H; ++h) {
      const float* yr = b.y + (n * H + h) * W;
      float max = -std::numeric_limits<float>::infinity();
      for (int64_t k = 0; k < K; ++k) {
        float s = -std::numeric_limits<float>::infinity();
        if (b.mask[n * K + k]) {
          s = b.bias != nullptr ? b.bias[n * H + h] : 0.f;
          for (int i = 0; i < b.parts; ++i) {
            s += DotRow(b.x_row(i, n, k), yr + b.offset[i], b.width[i]);
          }
        }
        prob[(n * K + k) * H + h] = s;
        max = std::max(max, s);
      }
      float sum = 0;
      for (int64_t k = 0; k < K; ++k) {
        float& p = prob[(n * K + k) * H + h];
        p = b.mask[n * K + k] ? std::exp(p - max) : 0.f;
        sum += p;
      }
      float* o = mix + (n * H + h) * W;
      for (int64_t w = 0; w < W; ++w) o[w] = 0;
      float total = 0;
      for (int64_t k = 0; k < K; ++k) {
        float& p = prob[(n * K + k) * H + h];
        p /= sum;
        const float a = b.keep ? p * b.keep[(n * K + k) * H + h] : p;
        total += a;
        if (a == 0) continue;
        for (int i = 0; i < b.parts; ++i) {
          Axpy(a, b.x_row(i, n, k), o + b.offset[i], b.width[i]);
        }
      }
      weight[n * H + h] = total;
    }
  }
}

// `gx[i]`: part i's gradient rows ([N * K, W_i], row n * K + k whatever
// the part's index), for the parts whose gradient is wanted but the time
// part's: its gradient goes straight on to the encoding's parameters,
// -sum over rows of sin(z) * g times dt (time_w) and times 1 (time_b),
// added to `gtime_w` and `gtime_b` ([T] each).
inline __attribute__((always_inline)) void BackwardKernelBody(
    const Buffers& b, int64_t begin, int64_t end, const float* prob,
    const float* gmix, const float* gweight, std::array<float*, kMaxParts> gx,
    float* gy, float* gbias, float* gtime_w, float* gtime_b) {
  const int64_t K = b.K, H = b.H, W = b.W;
  std::vector<float> gs(K * H), a(K * H);
  std::vector<float> time_row(b.time_part >= 0 ? b.width[b.time_part] : 0);
  for (int64_t n = begin; n < end; ++n) {
    // Scores' gradient through dropout and softmax.
    for (int64_t h = 0; h < H; ++h) {
      const float* g = gmix + (n * H + h) * W;
      float dot_p_gp = 0;
      for (int64_t k = 0; k < K; ++k) {
        const int64_t j = (n * K + k) * H + h;
        const float keep = b.keep ? b.keep[j] : 1.f;
        a[k * H + h] = prob[j] * keep;
        float ga = gweight[n * H + h];
        if (prob[j] != 0 && keep != 0) {
          for (int i = 0; i < b.parts; ++i) {
            ga += DotRow(g + b.offset[i], b.x_row(i, n, k), b.width[i]);
          }
        }
        const float gp = ga * keep;
        gs[k * H + h] = gp;
        dot_p_gp += prob[j] * gp;
      }
      float gb = 0;
      for (int64_t k = 0; k < K; ++k) {
        const float p = prob[(n * K + k) * H + h];
        gs[k * H + h] = p * (gs[k * H + h] - dot_p_gp);
        gb += gs[k * H + h];
      }
      if (gbias != nullptr) gbias[n * H + h] = gb;
    }
    // x[n,k] feeds every head's scores (through y) and mix (through a).
    for (int i = 0; i < b.parts; ++i) {
      const int64_t wi = b.width[i], off = b.offset[i];
      const bool time = i == b.time_part;
      for (int64_t k = 0; k < K && b.grad[i]; ++k) {
        const int64_t r = n * K + k;
        if (time && !b.mask[r]) continue;  // no encoding, no gradient
        float* o = time ? time_row.data() : gx[i] + r * wi;
        for (int64_t w = 0; w < wi; ++w) o[w] = 0;
        for (int64_t h = 0; h < H; ++h) {
          if (a[k * H + h] != 0) {
            Axpy(a[k * H + h], gmix + (n * H + h) * W + off, o, wi);
          }
          if (gs[k * H + h] != 0) {
            Axpy(gs[k * H + h], b.y + (n * H + h) * W + off, o, wi);
          }
        }
        if (time) {
          // d cos(z) = -sin(z) dz, z = dt * w + b.
          const float* sn = b.sin + r * wi;
          const float dt = b.dt[r];
          for (int64_t w = 0; w < wi; ++w) {
            const float gz = sn[w] * o[w];
            gtime_w[w] -= dt * gz;
            gtime_b[w] -= gz;
          }
        }
      }
      for (int64_t h = 0; h < H; ++h) {
        float* o = gy + (n * H + h) * W + off;
        for (int64_t w = 0; w < wi; ++w) o[w] = 0;
        for (int64_t k = 0; k < K; ++k) {
          if (gs[k * H + h] != 0) Axpy(gs[k * H + h], b.x_row(i, n, k), o, wi);
        }
      }
    }
  }
}

// Whether this CPU has AVX2 and FMA (the kernels' best version), asked once.
bool HasFma() {
  static const bool has =
      __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has;
}

__attribute__((target("avx2,fma"))) void ForwardKernelFma(
    const Buffers& b, int64_t begin, int64_t end, float* prob, float* mix,
    float* weight) {
  ForwardKernelBody(b, begin, end, prob, mix, weight);
}

__attribute__((target_clones("avx2", "default"))) void ForwardKernelPlain(
    const Buffers& b, int64_t begin, int64_t end, float* prob, float* mix,
    float* weight) {
  ForwardKernelBody(b, begin, end, prob, mix, weight);
}

void ForwardKernel(const Buffers& b, int64_t begin, int64_t end, float* prob,
                   float* mix, float* weight) {
  if (HasFma()) {
    ForwardKernelFma(b, begin, end, prob, mix, weight);
  } else {
    ForwardKernelPlain(b, begin, end, prob, mix, weight);
  }
}

__attribute__((target("avx2,fma"))) void BackwardKernelFma(
    const Buffers& b, int64_t begin, int64_t end, const float* prob,
    const float* gmix, const float* gweight, std::array<float*, kMaxParts> gx,
    float* gy, float* gbias, float* gtime_w, float* gtime_b) {
  BackwardKernelBody(b, begin, end, prob, gmix, gweight, gx, gy, gbias, gtime_w,
                     gtime_b);
}

__attribute__((target_clones("avx2", "default"))) void BackwardKernelPlain(
    const Buffers& b, int64_t begin, int64_t end, const float* prob,
    const float* gmix, const float* gweight, std::array<float*, kMaxParts> gx,
    float* gy, float* gbias, float* gtime_w, float* gtime_b) {
  BackwardKernelBody(b, begin, end, prob, gmix, gweight, gx, gy, gbias, gtime_w,
                     gtime_b);
}

void BackwardKernel(const Buffers& b, int64_t begin, int64_t end,
                    const float* prob, const float* gmix, const float* gweight,
                    std::array<float*, kMaxParts> gx, float* gy, float* gbias,
                    float* gtime_w, float* gtime_b) {
  if (HasFma()) {
    BackwardKernelFma(b, begin, end, prob, gmix, gweight, gx, gy, gbias,
                      gtime_w, gtime_b);
  } else {
    BackwardKernelPlain(b, begin, end, prob, gmix, gweight, gx, gy, gbias,
                        gtime_w, gtime_b);
  }
}

Tensor Float(const Tensor& t) { return t.to(torch::kFloat).contiguous(); }

// Buffers of parts [N, K, W_i] (or, with a defined index[i], rows [R, W_i]
// read at index[i]); parts of width 0 are left out. `grad[i]`: whether
// part i's gradient is wanted.
Buffers MakeBuffers(const variable_list& x, const std::vector<Tensor>& index,
                    const std::vector<bool>& grad, const Tensor& y,
                    const Tensor& bias, const Tensor& mask,
                    const Tensor& keep) {
  Buffers b;
  b.N = y.size(0);
  b.H = y.size(1);
  b.W = y.size(2);
  b.K = mask.size(1);
  int64_t offset = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const Tensor& part = x[i];
    const int64_t width = part.size(part.dim() - 1);
    if (width == 0) continue;
    b.x[b.parts] = part.data_ptr<float>();
    b.width[b.parts] = width;
    b.offset[b.parts] = offset;
    b.index[b.parts] = i < index.size() && index[i].defined()
                           ? index[i].data_ptr<int64_t>()
                           : nullptr;
    b.grad[b.parts] = i < grad.size() && grad[i];
    offset += width;
    ++b.parts;
  }
  b.y = y.data_ptr<float>();
  b.bias = bias.numel() > 0 ? bias.data_ptr<float>() : nullptr;
  b.mask = mask.data_ptr<bool>();
  b.keep = keep.numel() > 0 ? keep.data_ptr<float>() : nullptr;
  return b;
}

// Scores, softmax and weighted sums of the parts (forward kernel, parallel
// over targets): probabilities [N, K, H], mix [N, H, W], weight [N, H].
std::array<Tensor, 3> RunForward(const Buffers& b, const Tensor& like) {
  Tensor prob = torch::empty({b.N, b.K, b.H}, like.options());
  Tensor mix = torch::empty({b.N, b.H, b.W}, like.options());
  Tensor weight = torch::empty({b.N, b.H}, like.options());
  float* pp = prob.data_ptr<float>();
  float* mp = mix.data_ptr<float>();
  float* wp = weight.data_ptr<float>();
  at::parallel_for(0, b.N, kGrain, [&](int64_t begin, int64_t end) {
    ForwardKernel(b, begin, end, pp, mp, wp);
  });
  return {prob, mix, weight};
}

struct BackwardResult {
  std::array<Tensor, kMaxParts> gx;  // per buffer part; undefined: not wanted
  Tensor gy, gbias;                  // gbias undefined without a bias
  Tensor gtime_w, gtime_b;           // [T] each with a time part
};

// The backward kernel over fixed chunks of kGrain targets, each with its
// own sums for the time encoding's parameters, added in chunk order after:
// the same sums whatever the thread count.
BackwardResult RunBackward(const Buffers& b, const Tensor& prob,
                           const Tensor& y, bool has_bias, const Tensor& gmix,
                           const Tensor& gweight) {
  BackwardResult r;
  std::array<float*, kMaxParts> gxp{};
  for (int i = 0; i < b.parts; ++i) {
    if (!b.grad[i] || i == b.time_part) continue;
    r.gx[i] = torch::empty({b.N * b.K, b.width[i]}, y.options());
    gxp[i] = r.gx[i].data_ptr<float>();
  }
  r.gy = torch::empty_like(y);
  if (has_bias) r.gbias = torch::empty({b.N, b.H}, y.options());
  const int64_t chunks = (b.N + kGrain - 1) / kGrain;
  const int64_t T = b.time_part >= 0 ? b.width[b.time_part] : 0;
  const bool time_grad = b.time_part >= 0 && b.grad[b.time_part];
  Tensor time_sums = torch::zeros({time_grad ? chunks : 0, 2, T}, y.options());
  const float* pp = prob.data_ptr<float>();
  const float* gm = gmix.data_ptr<float>();
  const float* gw = gweight.data_ptr<float>();
  float* gyp = r.gy.data_ptr<float>();
  float* gbp = has_bias ? r.gbias.data_ptr<float>() : nullptr;
  float* ts = time_grad ? time_sums.data_ptr<float>() : nullptr;
  at::parallel_for(0, chunks, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      float* sums = ts != nullptr ? ts + c * 2 * T : nullptr;
      BackwardKernel(b, c * kGrain, std::min(b.N, (c + 1) * kGrain), pp, gm, gw,
                     gxp, gyp, gbp, sums, sums != nullptr ? sums + T : nullptr);
    }
  });
  if (time_grad) {
    r.gtime_w = torch::zeros({T}, y.options());
    r.gtime_b = torch::zeros({T}, y.options());
    float* w = r.gtime_w.data_ptr<float>();
    float* bb = r.gtime_b.data_ptr<float>();
    for (int64_t c = 0; c < chunks; ++c) {
      for (int64_t j = 0; j < T; ++j) {
        w[j] += ts[(c * 2) * T + j];
        bb[j] += ts[(c * 2 + 1) * T + j];
      }
    }
  }
  return r;
}

std::vector<int64_t> Types(std::initializer_list<Tensor> tensors) {
  std::vector<int64_t> types;
  for (const Tensor& t : tensors) {
    types.push_back(static_cast<int64_t>(t.scalar_type()));
  }
  return types;
}

Tensor As(const Tensor& g, int64_t type) {
  return g.defined() ? g.to(static_cast<c10::ScalarType>(type)) : g;
}

class NeighbourAttentionFunction
    : public torch::autograd::Function<NeighbourAttentionFunction> {
 public:
  // x0..x2: the parts (an empty [N, K, 0] tensor for a missing one).
  static variable_list forward(AutogradContext* ctx, const Tensor& x0,
                               const Tensor& x1, const Tensor& x2,
                               const Tensor& y, const Tensor& bias,
                               const Tensor& mask, const Tensor& keep) {
    variable_list x = {Float(x0), Float(x1), Float(x2)};
    Tensor yf = Float(y), bf = Float(bias), mk = mask.contiguous();
    Tensor kp = Float(keep);  // empty: no dropout
    const Buffers b = MakeBuffers(x, {}, {}, yf, bf, mk, kp);
    auto [prob, mix, weight] = RunForward(b, yf);
    ctx->save_for_backward({x[0], x[1], x[2], yf, bf, mk, kp, prob});
    ctx->saved_data["types"] = Types({x0, x1, x2, y, bias});
    ctx->mark_non_differentiable({prob});
    return {mix, weight};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list s = ctx->get_saved_variables();
    const variable_list x = {s[0], s[1], s[2]};
    const Tensor &y = s[3], &bias = s[4], &mask = s[5], &keep = s[6],
                 &prob = s[7];
    const std::vector<bool> want = {ctx->needs_input_grad(0),
                                    ctx->needs_input_grad(1),
                                    ctx->needs_input_grad(2)};
    const Buffers b = MakeBuffers(x, {}, want, y, bias, mask, keep);
    const bool has_bias = bias.numel() > 0;
    BackwardResult r =
        RunBackward(b, prob, y, has_bias, Float(grads[0]), Float(grads[1]));
    const auto types = ctx->saved_data["types"].toIntVector();
    variable_list out(7);
    int part = 0;
    for (int i = 0; i < kMaxParts; ++i) {
      if (x[i].size(2) == 0) continue;
      if (r.gx[part].defined())
        out[i] = As(r.gx[part].view(x[i].sizes()), types[i]);
      ++part;
    }
    out[3] = As(r.gy, types[3]);
    if (has_bias) out[4] = As(r.gbias, types[4]);
    return out;
  }
};

// The same with the neighbours' memory rows read where they lie (memory
// [R, M] at slot [N * K]) and their time encoding computed in the kernel.
class GatheredAttentionFunction
    : public torch::autograd::Function<GatheredAttentionFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const Tensor& memory,
                               const Tensor& slot, const Tensor& dt,
                               const Tensor& time_w, const Tensor& time_b,
                               const Tensor& edge, const Tensor& y,
                               const Tensor& mask, const Tensor& keep,
                               bool time_grad) {
    c10::impl::ExcludeDispatchKeyGuard no_autocast(
        c10::DispatchKey::AutocastCPU);
    const int64_t N = y.size(0), K = mask.size(1), T = time_w.size(0);
    Tensor mf = Float(memory), sl = slot.to(torch::kLong).contiguous();
    Tensor dtf = Float(dt).view({-1}), twf = Float(time_w).view({-1}),
           tbf = Float(time_b), ef = Float(edge);
    Tensor yf = Float(y), mk = mask.contiguous(), kp = Float(keep);
    Tensor cos = torch::empty({N * K, T}, yf.options());
    Tensor sin = time_grad ? torch::empty({N * K, T}, yf.options())
                           : torch::empty({0}, yf.options());
    const Tensor none = torch::empty({0}, yf.options());
    Buffers b = MakeBuffers({mf, cos, ef}, {sl}, {}, yf, none, mk, kp);
    SetTimePart(&b, dtf, twf, tbf, cos, sin);
    auto [prob, mix, weight] = RunForward(b, yf);
    ctx->save_for_backward(
        {mf, sl, dtf, twf, tbf, ef, yf, mk, kp, prob, cos, sin});
    ctx->saved_data["types"] = Types({memory, time_w, time_b, edge, y});
    ctx->mark_non_differentiable({prob});
    return {mix, weight};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    c10::impl::ExcludeDispatchKeyGuard no_autocast(
        c10::DispatchKey::AutocastCPU);
    const variable_list s = ctx->get_saved_variables();
    const Tensor &mf = s[0], &sl = s[1], &dtf = s[2], &twf = s[3], &tbf = s[4],
                 &ef = s[5], &yf = s[6], &mk = s[7], &kp = s[8], &prob = s[9],
                 &cos = s[10], &sin = s[11];
    const bool time_grad = ctx->needs_input_grad(3) || ctx->needs_input_grad(4);
    TORCH_CHECK(!time_grad || sin.numel() == cos.numel(),
                "GatheredNeighbourAttention: the time encoding's parameters "
                "want a gradient they did not want in the forward pass");
    Buffers b = MakeBuffers(
        {mf, cos, ef}, {sl},
        {ctx->needs_input_grad(0), time_grad, ctx->needs_input_grad(5)}, yf,
        torch::empty({0}, yf.options()), mk, kp);
    SetTimePart(&b, dtf, twf, tbf, cos, sin);
    BackwardResult r =
        RunBackward(b, prob, yf, false, Float(grads[0]), Float(grads[1]));
    const auto types = ctx->saved_data["types"].toIntVector();
    variable_list out(10);
    if (r.gx[0].defined()) {
      out[0] = As(torch::zeros_like(mf).index_add_(0, sl, r.gx[0]), types[0]);
    }
    if (time_grad) {
      out[3] = As(r.gtime_w.view({-1, 1}), types[1]);
      out[4] = As(r.gtime_b, types[2]);
    }
    if (b.parts > 2 && r.gx[2].defined()) {
      out[5] = As(r.gx[2].view(ef.sizes()), types[3]);
    }
    out[6] = As(r.gy, types[4]);
    return out;
  }

 private:
  static void SetTimePart(Buffers* b, const Tensor& dt, const Tensor& w,
                          const Tensor& bias, const Tensor& cos,
                          const Tensor& sin) {
    b->time_part = 1;
    b->dt = dt.data_ptr<float>();
    b->time_w = w.data_ptr<float>();
    b->time_b = bias.data_ptr<float>();
    b->cos = cos.data_ptr<float>();
    b->sin = sin.numel() > 0 ? sin.data_ptr<float>() : nullptr;
    b->time_bound = TimeEncodingBound(b->time_w, b->time_b, w.numel());
  }
};

// cos (and sin when `sin_out` is not null) of dt * w^T + b: [N] -> [N, T].
Tensor TimeEncodingKernel(const Tensor& dt, const Tensor& w, const Tensor& b,
                          Tensor* sin_out) {
  const Tensor dtf = Float(dt), wf = Float(w), bf = Float(b);
  const int64_t N = dtf.numel(), T = wf.numel();
  Tensor out = torch::empty({N, T}, dtf.options());
  if (sin_out) *sin_out = torch::empty({N, T}, dtf.options());
  const float* d = dtf.data_ptr<float>();
  const float* wp = wf.data_ptr<float>();
  const float* bp = bf.data_ptr<float>();
  float* op = out.data_ptr<float>();
  float* sp = sin_out ? sin_out->data_ptr<float>() : nullptr;
  const TimeEncodingBound bound(wp, bp, T);
  at::parallel_for(0, N, std::max<int64_t>(1, 16384 / std::max<int64_t>(T, 1)),
                   [&](int64_t begin, int64_t end) {
                     for (int64_t n = begin; n < end; ++n) {
                       TimeEncodingRow(d[n], wp, bp, T, bound.Fast(d[n]),
                                       op + n * T, sp ? sp + n * T : nullptr);
                     }
                   });
  return out;
}

class TimeEncodingFunction
    : public torch::autograd::Function<TimeEncodingFunction> {
 public:
  static Tensor forward(AutogradContext* ctx, const Tensor& dt, const Tensor& w,
                        const Tensor& b) {
    // In float32 under bf16 autocast too.
    c10::impl::ExcludeDispatchKeyGuard no_autocast(
        c10::DispatchKey::AutocastCPU);
    Tensor sin;
    Tensor out = TimeEncodingKernel(dt, w, b, &sin);
    ctx->save_for_backward({Float(dt).view({-1}), sin});
    ctx->saved_data["w_type"] = static_cast<int64_t>(w.scalar_type());
    ctx->saved_data["b_type"] = static_cast<int64_t>(b.scalar_type());
    return out;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    c10::impl::ExcludeDispatchKeyGuard no_autocast(
        c10::DispatchKey::AutocastCPU);
    const variable_list s = ctx->get_saved_variables();
    // d cos(z) = -sin(z) dz; the sign goes into the two small reductions.
    Tensor gz = s[1].mul(Float(grads[0]));  // -dL/dz
    Tensor gw, gb;
    if (ctx->needs_input_grad(1)) {
      gw = torch::mv(gz.t(), s[0])  // a GEMV, not a GEMM
               .neg_()
               .view({-1, 1})
               .to(static_cast<c10::ScalarType>(
                   ctx->saved_data["w_type"].toInt()));  // [T, 1]
    }
    if (ctx->needs_input_grad(2)) {
      gb = gz.sum(0).neg_().to(
          static_cast<c10::ScalarType>(ctx->saved_data["b_type"].toInt()));
    }
    return {Tensor(), gw, gb};
  }
};

}  // namespace

Tensor TimeEncoding(const Tensor& dt, const Tensor& w, const Tensor& b) {
  TORCH_CHECK(dt.dim() == 1 && w.dim() == 2 && w.size(1) == 1 && b.dim() == 1 &&
                  b.size(0) == w.size(0),
              "TimeEncoding: expects dt [N], w [T, 1], b [T], got ", dt.sizes(),
              ", ", w.sizes(), ", ", b.sizes());
  if (!dt.device().is_cpu() || !w.device().is_cpu()) {
    return TimeEncodingOperators(dt, w, b);
  }
  if (!torch::GradMode::is_enabled() ||
      !(w.requires_grad() || b.requires_grad())) {
    return TimeEncodingKernel(dt, w, b, nullptr);  // no sin needed
  }
  return TimeEncodingFunction::apply(dt, w, b);
}

NeighbourAttentionResult NeighbourAttention(
    const std::vector<torch::Tensor>& x_parts, const torch::Tensor& y,
    const torch::Tensor& bias, const torch::Tensor& mask,
    const torch::Tensor& keep) {
  TORCH_CHECK(!x_parts.empty() && x_parts.size() <= kMaxParts,
              "NeighbourAttention: 1 to ", kMaxParts, " input parts, got ",
              x_parts.size());
  TORCH_CHECK(y.dim() == 3, "NeighbourAttention: y must be [N, H, W], got ",
              y.sizes());
  const int64_t N = y.size(0), H = y.size(1);
  TORCH_CHECK(mask.dim() == 2 && mask.size(0) == N &&
                  mask.scalar_type() == torch::kBool,
              "NeighbourAttention: mask must be a [N, K] bool tensor, got ",
              mask.sizes(), " ", mask.scalar_type());
  const int64_t K = mask.size(1);
  int64_t width = 0;
  for (const auto& p : x_parts) {
    TORCH_CHECK(p.dim() == 3 && p.size(0) == N && p.size(1) == K,
                "NeighbourAttention: input parts must be [N, K, W_i] with N=",
                N, " K=", K, ", got ", p.sizes());
    width += p.size(2);
  }
  TORCH_CHECK(y.size(2) == width, "NeighbourAttention: y is ", y.sizes(),
              " but the parts are ", width, " wide");
  TORCH_CHECK(!bias.defined() || bias.sizes() == torch::IntArrayRef({N, H}),
              "NeighbourAttention: bias must be [N, H], got ", bias.sizes());
  TORCH_CHECK(!keep.defined() || keep.sizes() == torch::IntArrayRef({N, K, H}),
              "NeighbourAttention: keep must be [N, K, H], got ", keep.sizes());
  if (!y.device().is_cpu()) {
    return NeighbourAttentionOperators(x_parts, y, bias, mask, keep);
  }
  // Undefined tensors cannot be a custom function's inputs: empty ones
  // stand for a missing part, no bias and no dropout.
  const Tensor none = torch::empty({N, K, 0}, y.options());
  const variable_list out = NeighbourAttentionFunction::apply(
      x_parts[0], x_parts.size() > 1 ? x_parts[1] : none,
      x_parts.size() > 2 ? x_parts[2] : none, y,
      bias.defined() ? bias : torch::empty({0}, y.options()), mask,
      keep.defined() ? keep : torch::empty({0}, y.options()));
  return {out[0], out[1]};
}

NeighbourAttentionResult GatheredNeighbourAttention(const NeighbourRows& rows,
                                                    const torch::Tensor& y,
                                                    const torch::Tensor& mask,
                                                    const torch::Tensor& keep) {
  TORCH_CHECK(y.dim() == 3,
              "GatheredNeighbourAttention: y must be [N, H, W], got ",
              y.sizes());
  const int64_t N = y.size(0), H = y.size(1);
  TORCH_CHECK(mask.dim() == 2 && mask.size(0) == N &&
                  mask.scalar_type() == torch::kBool,
              "GatheredNeighbourAttention: mask must be a [N, K] bool tensor, "
              "got ",
              mask.sizes(), " ", mask.scalar_type());
  const int64_t K = mask.size(1);
  TORCH_CHECK(rows.memory.dim() == 2,
              "GatheredNeighbourAttention: memory must be [R, M], got ",
              rows.memory.sizes());
  TORCH_CHECK(rows.slot.dim() == 1 && rows.slot.size(0) == N * K &&
                  !at::isFloatingType(rows.slot.scalar_type()),
              "GatheredNeighbourAttention: slot must be N*K=", N * K,
              " integers, got ", rows.slot.sizes(), " ",
              rows.slot.scalar_type());
  TORCH_CHECK(rows.dt.dim() == 1 && rows.dt.size(0) == N * K,
              "GatheredNeighbourAttention: dt must be [N*K=", N * K, "], got ",
              rows.dt.sizes());
  TORCH_CHECK(rows.time_w.dim() == 2 && rows.time_w.size(1) == 1 &&
                  rows.time_b.dim() == 1 &&
                  rows.time_b.size(0) == rows.time_w.size(0),
              "GatheredNeighbourAttention: expects time_w [T, 1] and time_b "
              "[T], got ",
              rows.time_w.sizes(), ", ", rows.time_b.sizes());
  const int64_t E = rows.edge.defined() ? rows.edge.size(-1) : 0;
  TORCH_CHECK(
      !rows.edge.defined() || (rows.edge.dim() == 3 && rows.edge.size(0) == N &&
                               rows.edge.size(1) == K),
      "GatheredNeighbourAttention: edge must be [N, K, E] with N=", N, " K=", K,
      ", got ", rows.edge.sizes());
  const int64_t W = rows.memory.size(1) + rows.time_w.size(0) + E;
  TORCH_CHECK(y.size(2) == W, "GatheredNeighbourAttention: y is ", y.sizes(),
              " but the parts are ", W, " wide");
  TORCH_CHECK(!keep.defined() || keep.sizes() == torch::IntArrayRef({N, K, H}),
              "GatheredNeighbourAttention: keep must be [N, K, H], got ",
              keep.sizes());
  const bool cpu = y.device().is_cpu() && rows.memory.device().is_cpu();
  if (!cpu) {
    std::vector<torch::Tensor> parts = {
        rows.memory.index_select(0, rows.slot).view({N, K, -1}),
        TimeEncoding(rows.dt, rows.time_w, rows.time_b).view({N, K, -1})};
    if (E > 0) parts.push_back(rows.edge);
    return NeighbourAttention(parts, y, torch::Tensor(), mask, keep);
  }
  const bool time_grad =
      torch::GradMode::is_enabled() &&
      (rows.time_w.requires_grad() || rows.time_b.requires_grad());
  const variable_list out = GatheredAttentionFunction::apply(
      rows.memory, rows.slot, rows.dt, rows.time_w, rows.time_b,
      E > 0 ? rows.edge : torch::empty({N, K, 0}, y.options()), y, mask,
      keep.defined() ? keep : torch::empty({0}, y.options()), time_grad);
  return {out[0], out[1]};
}

NeighbourAttentionResult NeighbourAttentionOperators(
    const std::vector<torch::Tensor>& x_parts, const torch::Tensor& y,
    const torch::Tensor& bias, const torch::Tensor& mask,
    const torch::Tensor& keep) {
  // Scores and softmax in float32 (as the kernels); the two products may
  // run in bf16 under autocast.
  const auto type =
      at::promote_types(x_parts[0].scalar_type(), y.scalar_type());
  std::vector<torch::Tensor> parts;
  for (const auto& p : x_parts) parts.push_back(p.to(type));
  torch::Tensor x = torch::cat(parts, 2);  // [N, K, W]
  torch::Tensor s =
      torch::bmm(x, y.to(type).transpose(1, 2)).to(torch::kFloat);  // [N,K,H]
  if (bias.defined()) s = s + bias.to(torch::kFloat).unsqueeze(1);
  s = s.masked_fill(mask.logical_not().unsqueeze(-1),
                    -std::numeric_limits<float>::infinity());
  torch::Tensor a = torch::softmax(s, 1);
  if (keep.defined()) a = a * keep.to(torch::kFloat);
  return {
      torch::bmm(a.transpose(1, 2).to(x.scalar_type()), x).to(torch::kFloat),
      a.sum(1)};
}

torch::Tensor TimeEncodingOperators(const torch::Tensor& dt,
                                    const torch::Tensor& w,
                                    const torch::Tensor& b) {
  // Element-wise (no linear layer): autocast keeps them in float32, which
  // the slow frequencies' large arguments need.
  return torch::cos(dt.detach().to(torch::kFloat).unsqueeze(1) *
                        w.to(torch::kFloat).view({1, -1}) +
                    b.to(torch::kFloat));
}

}  // namespace mnemo::model
