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
inline void Axpy(float c, const float* __restrict y, float* __restrict o,
                 int64_t W) {
  for (int64_t w = 0; w < W; ++w) o[w] += c * y[w];
}

// x[0, W) . y[0, W) with eight independent partial sums: vectorizable
// without reassociating one long sum.
inline float DotRow(const float* __restrict x, const float* __restrict y,
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

// The raw buffers of one call (contiguous float32; mask uint8).
struct Buffers {
  int64_t N = 0, K = 0, H = 0, W = 0;  // W: all parts
  int parts = 0;
  std::array<const float*, kMaxParts> x{};
  std::array<int64_t, kMaxParts> width{}, offset{};
  const float* y = nullptr;     // [N, H, W]
  const float* bias = nullptr;  // [N, H] or null: none
  const bool* mask = nullptr;   // [N, K]
  const float* keep = nullptr;  // [N, K, H] or null
  const float* x_row(int i, int64_t n, int64_t k) const {
    return x[i] + (n * K + k) * width[i];
  }
};

// Compiled for AVX2 where the CPU has it (chosen at load time), plain
// x86-64 elsewhere.
__attribute__((target_clones("avx2", "default"))) void ForwardKernel(
    const Buffers& b, int64_t begin, int64_t end, float* prob, float* mix,
    float* weight) {
  const int64_t K = b.K, H = b.H, W = b.W;
  for (int64_t n = begin; n < end; ++n) {
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

__attribute__((target_clones("avx2", "default"))) void BackwardKernel(
    const Buffers& b, int64_t begin, int64_t end, const float* prob,
    const float* gmix, const float* gweight, std::array<float*, kMaxParts> gx,
    float* gy, float* gbias) {
  const int64_t K = b.K, H = b.H, W = b.W;
  std::vector<float> gs(K * H), a(K * H);
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
      for (int64_t k = 0; k < K; ++k) {
        float* o = gx[i] + (n * K + k) * wi;
        for (int64_t w = 0; w < wi; ++w) o[w] = 0;
        for (int64_t h = 0; h < H; ++h) {
          if (a[k * H + h] != 0) {
            Axpy(a[k * H + h], gmix + (n * H + h) * W + off, o, wi);
          }
          if (gs[k * H + h] != 0) {
            Axpy(gs[k * H + h], b.y + (n * H + h) * W + off, o, wi);
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

Tensor Float(const Tensor& t) { return t.to(torch::kFloat).contiguous(); }

Buffers MakeBuffers(const variable_list& x, const Tensor& y, const Tensor& bias,
                    const Tensor& mask, const Tensor& keep) {
  Buffers b;
  b.N = y.size(0);
  b.H = y.size(1);
  b.W = y.size(2);
  b.K = mask.size(1);
  int64_t offset = 0;
  for (const Tensor& part : x) {
    if (part.size(2) == 0) continue;
    b.x[b.parts] = part.data_ptr<float>();
    b.width[b.parts] = part.size(2);
    b.offset[b.parts] = offset;
    offset += part.size(2);
    ++b.parts;
  }
  b.y = y.data_ptr<float>();
  b.bias = bias.numel() > 0 ? bias.data_ptr<float>() : nullptr;
  b.mask = mask.data_ptr<bool>();
  b.keep = keep.numel() > 0 ? keep.data_ptr<float>() : nullptr;
  return b;
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
    const Buffers b = MakeBuffers(x, yf, bf, mk, kp);
    Tensor prob = torch::empty({b.N, b.K, b.H}, yf.options());
    Tensor mix = torch::empty({b.N, b.H, b.W}, yf.options());
    Tensor weight = torch::empty({b.N, b.H}, yf.options());
    float* pp = prob.data_ptr<float>();
    float* mp = mix.data_ptr<float>();
    float* wp = weight.data_ptr<float>();
    at::parallel_for(0, b.N, kGrain, [&](int64_t begin, int64_t end) {
      ForwardKernel(b, begin, end, pp, mp, wp);
    });
    ctx->save_for_backward({x[0], x[1], x[2], yf, bf, mk, kp, prob});
    ctx->saved_data["types"] =
        std::vector<int64_t>{static_cast<int64_t>(x0.scalar_type()),
                             static_cast<int64_t>(x1.scalar_type()),
                             static_cast<int64_t>(x2.scalar_type()),
                             static_cast<int64_t>(y.scalar_type()),
                             static_cast<int64_t>(bias.scalar_type())};
    ctx->mark_non_differentiable({prob});
    return {mix, weight};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list s = ctx->get_saved_variables();
    const variable_list x = {s[0], s[1], s[2]};
    const Tensor &y = s[3], &bias = s[4], &mask = s[5], &keep = s[6],
                 &prob = s[7];
    const Buffers b = MakeBuffers(x, y, bias, mask, keep);
    const Tensor gmix = Float(grads[0]), gweight = Float(grads[1]);
    variable_list gx = {torch::empty_like(x[0]), torch::empty_like(x[1]),
                        torch::empty_like(x[2])};
    std::array<float*, kMaxParts> gxp{};
    int part = 0;
    for (const Tensor& g : gx) {
      if (g.size(2) > 0) gxp[part++] = g.data_ptr<float>();
    }
    const bool has_bias = bias.numel() > 0;
    Tensor gy = torch::empty_like(y);
    Tensor gbias = has_bias ? torch::empty_like(bias) : Tensor();
    const float* pp = prob.data_ptr<float>();
    const float* gm = gmix.data_ptr<float>();
    const float* gw = gweight.data_ptr<float>();
    float* gyp = gy.data_ptr<float>();
    float* gbp = has_bias ? gbias.data_ptr<float>() : nullptr;
    at::parallel_for(0, b.N, kGrain, [&](int64_t begin, int64_t end) {
      BackwardKernel(b, begin, end, pp, gm, gw, gxp, gyp, gbp);
    });
    const auto types = ctx->saved_data["types"].toIntVector();
    auto as = [&](const Tensor& g, int64_t i) {
      return g.to(static_cast<c10::ScalarType>(types[i]));
    };
    return {as(gx[0], 0),
            as(gx[1], 1),
            as(gx[2], 2),
            as(gy, 3),
            has_bias ? as(gbias, 4) : Tensor(),
            Tensor(),
            Tensor()};
  }
};

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
  // |z| <= |dt| * max|w| + max|b| decides a row's path (NaN: the slow one).
  float wmax = 0, bmax = 0;
  for (int64_t j = 0; j < T; ++j) {
    wmax = std::max(wmax, std::abs(wp[j]));
    bmax = std::max(bmax, std::abs(bp[j]));
    if (std::isnan(wp[j]) || std::isnan(bp[j])) wmax = bmax = INFINITY;
  }
  at::parallel_for(0, N, std::max<int64_t>(1, 16384 / std::max<int64_t>(T, 1)),
                   [&](int64_t begin, int64_t end) {
                     for (int64_t n = begin; n < end; ++n) {
                       const bool fast =
                           static_cast<double>(std::abs(d[n])) * wmax + bmax <
                           sincos::kFastBound;
                       TimeEncodingRow(d[n], wp, bp, T, fast, op + n * T,
                                       sp ? sp + n * T : nullptr);
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
