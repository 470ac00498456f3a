#include "trainer/model/cell_ops.h"

#include <ATen/Parallel.h>
#include <ATen/autocast_mode.h>
#include <c10/util/BFloat16.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

namespace mnemo::model {
namespace {

using torch::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// e^x, within 2 ulp of float64's on [-87, 88] (x is clamped to it: the
// gates below only need e^x to saturate there). Range reduction x = k ln2
// + r, |r| <= ln2 / 2, with ln2 in two parts (k * kLn2Hi is exact for
// |k| < 2^9), Taylor to r^7 (below 5e-9 relative there), and 2^k built in
// the exponent bits. Branch-free, so the loops calling it vectorize.
// kRound rounds to the nearest integer by adding 1.5 * 2^23.
constexpr float kLog2e = 1.44269504088896341f;
constexpr float kLn2Hi = 0.693145751953125f;
constexpr float kLn2Lo = 1.42860682030941723e-6f;
constexpr float kRound = 12582912.0f;
inline float Exp(float x) {
  // NaN compares false: it is clamped to -87 here and returned at the end,
  // so no NaN reaches the conversion to an integer.
  float c = x > -87.0f ? x : -87.0f;
  c = c < 88.0f ? c : 88.0f;
  const float k = (c * kLog2e + kRound) - kRound;
  const float r = (c - k * kLn2Hi) - k * kLn2Lo;
  float p = 1.f / 5040;
  p = p * r + 1.f / 720;
  p = p * r + 1.f / 120;
  p = p * r + 1.f / 24;
  p = p * r + 1.f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.f;
  p = p * r + 1.f;
  const uint32_t bits = static_cast<uint32_t>(static_cast<int32_t>(k) + 127)
                        << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return x == x ? p * scale : x;
}
inline float Sigmoid(float a) { return 1.f / (1.f + Exp(-a)); }
// 1 - 2 / (1 + e^2a): within 2e-7 absolute of tanh (relative error grows
// as |a| falls below 1e-2; the state update adds it to terms of order 1).
inline float Tanh(float a) { return 1.f - 2.f / (1.f + Exp(2.f * a)); }

// One row of the GRU's forward pass: gi, gh are the products' rows
// ([3M], no bias), h the previous state; writes h' to out and r, z, n and
// hn (the hidden product's n part with its bias) to the workspace. Every
// array a restrict parameter of its own: GCC vectorizes such loops, not
// ones over blocks M apart of one array or through a struct's pointers.
inline void GruRow(int64_t M, const float* __restrict gi_r,
                   const float* __restrict gi_z, const float* __restrict gi_n,
                   const float* __restrict gh_r, const float* __restrict gh_z,
                   const float* __restrict gh_n, const float* __restrict bi_r,
                   const float* __restrict bi_z, const float* __restrict bi_n,
                   const float* __restrict bh_r, const float* __restrict bh_z,
                   const float* __restrict bh_n, const float* __restrict h,
                   float* __restrict out, float* __restrict ws_r,
                   float* __restrict ws_z, float* __restrict ws_n,
                   float* __restrict ws_hn) {
  for (int64_t j = 0; j < M; ++j) {
    const float r = Sigmoid(gi_r[j] + bi_r[j] + gh_r[j] + bh_r[j]);
    const float z = Sigmoid(gi_z[j] + bi_z[j] + gh_z[j] + bh_z[j]);
    const float hn = gh_n[j] + bh_n[j];
    const float n = Tanh(gi_n[j] + bi_n[j] + r * hn);
    out[j] = n + z * (h[j] - n);  // (1 - z) n + z h, as LibTorch's
    ws_r[j] = r;
    ws_z[j] = z;
    ws_n[j] = n;
    ws_hn[j] = hn;
  }
}

inline void RnnRow(int64_t M, const float* __restrict gi,
                   const float* __restrict gh, const float* __restrict bi,
                   const float* __restrict bh, float* __restrict out) {
  for (int64_t j = 0; j < M; ++j) out[j] = Tanh(gi[j] + bi[j] + gh[j] + bh[j]);
}

inline void Bf16Row(int64_t n, const uint16_t* __restrict in,
                    float* __restrict out) {
  for (int64_t j = 0; j < n; ++j) out[j] = c10::detail::f32_from_bits(in[j]);
}

// The raw buffers of one call. gi, gh: the two products without bias
// ([N, G*M], float32 or bf16); h, out: [N, M]; ws (GRU): [N, 4*M], per row
// r, z, n and hn.
struct Buffers {
  int64_t M = 0;
  bool gru = true;
  bool bf16 = false;
  const void* gi = nullptr;
  const void* gh = nullptr;
  const float* b_ih = nullptr;
  const float* b_hh = nullptr;
  const float* h = nullptr;
  float* out = nullptr;
  float* ws = nullptr;
};

// Compiled for AVX2 where the CPU has it (chosen at load time), plain
// x86-64 elsewhere; neither uses FMA, so every x86-64 CPU with AVX2
// computes the same bits.
__attribute__((target_clones("avx2", "default"))) void ForwardKernel(
    const Buffers& b, int64_t begin, int64_t end) {
  const int64_t M = b.M, GM = (b.gru ? 3 : 1) * M;
  std::vector<float> row_i, row_h;  // a bf16 row in float32
  if (b.bf16) {
    row_i.resize(GM);
    row_h.resize(GM);
  }
  for (int64_t row = begin; row < end; ++row) {
    const float* gi;
    const float* gh;
    if (b.bf16) {
      Bf16Row(GM, static_cast<const uint16_t*>(b.gi) + row * GM, row_i.data());
      Bf16Row(GM, static_cast<const uint16_t*>(b.gh) + row * GM, row_h.data());
      gi = row_i.data();
      gh = row_h.data();
    } else {
      gi = static_cast<const float*>(b.gi) + row * GM;
      gh = static_cast<const float*>(b.gh) + row * GM;
    }
    float* out = b.out + row * M;
    if (!b.gru) {
      RnnRow(M, gi, gh, b.b_ih, b.b_hh, out);
      continue;
    }
    float* ws = b.ws + row * 4 * M;
    GruRow(M, gi, gi + M, gi + 2 * M, gh, gh + M, gh + 2 * M, b.b_ih,
           b.b_ih + M, b.b_ih + 2 * M, b.b_hh, b.b_hh + M, b.b_hh + 2 * M,
           b.h + row * M, out, ws, ws + M, ws + 2 * M, ws + 3 * M);
  }
}

// One row of the GRU's backward pass from g = dL/dh': the gradients of the
// pre-activations, dgi and dgh (r and z parts equal; dgh's n part is dgi's
// times r).
inline void GruBackRow(int64_t M, const float* __restrict g,
                       const float* __restrict h, const float* __restrict ws_r,
                       const float* __restrict ws_z,
                       const float* __restrict ws_n,
                       const float* __restrict ws_hn, float* __restrict di_r,
                       float* __restrict di_z, float* __restrict di_n,
                       float* __restrict dh_r, float* __restrict dh_z,
                       float* __restrict dh_n) {
  for (int64_t j = 0; j < M; ++j) {
    const float r = ws_r[j], z = ws_z[j], n = ws_n[j];
    const float dn = g[j] * (1.f - z) * (1.f - n * n);
    const float dr = dn * ws_hn[j] * r * (1.f - r);
    const float dz = g[j] * (h[j] - n) * z * (1.f - z);
    di_r[j] = dr;
    di_z[j] = dz;
    di_n[j] = dn;
    dh_r[j] = dr;
    dh_z[j] = dz;
    dh_n[j] = dn * r;
  }
}

inline void MulRow(int64_t M, const float* __restrict a,
                   const float* __restrict b, float* __restrict out) {
  for (int64_t j = 0; j < M; ++j) out[j] = a[j] * b[j];
}

inline void TanhBackRow(int64_t M, const float* __restrict g,
                        const float* __restrict out, float* __restrict da) {
  for (int64_t j = 0; j < M; ++j) da[j] = g[j] * (1.f - out[j] * out[j]);
}

// dgi, dgh: [N, 3M] for the GRU; dh_direct = g z where h needs a gradient
// (null otherwise). RNN: dgi [N, M] (dgh is the same) from out = tanh.
struct BackBuffers {
  int64_t M = 0;
  bool gru = true;
  const float* g = nullptr;
  const float* h = nullptr;
  const float* ws = nullptr;   // GRU
  const float* out = nullptr;  // RNN
  float* dgi = nullptr;
  float* dgh = nullptr;
  float* dh_direct = nullptr;
};

__attribute__((target_clones("avx2", "default"))) void BackwardKernel(
    const BackBuffers& b, int64_t begin, int64_t end) {
  const int64_t M = b.M;
  for (int64_t row = begin; row < end; ++row) {
    const float* g = b.g + row * M;
    if (!b.gru) {
      TanhBackRow(M, g, b.out + row * M, b.dgi + row * M);
      continue;
    }
    const float* ws = b.ws + row * 4 * M;
    float* dgi = b.dgi + row * 3 * M;
    float* dgh = b.dgh + row * 3 * M;
    GruBackRow(M, g, b.h + row * M, ws, ws + M, ws + 2 * M, ws + 3 * M, dgi,
               dgi + M, dgi + 2 * M, dgh, dgh + M, dgh + 2 * M);
    if (b.dh_direct != nullptr) MulRow(M, g, ws + M, b.dh_direct + row * M);
  }
}

// Rows per task of the parallel loops: about 16K elements.
int64_t Grain(int64_t M) { return std::max<int64_t>(1, 16384 / (4 * M)); }

class CellFunction : public torch::autograd::Function<CellFunction> {
 public:
  // x, h_low, w_ih, w_hh: in the products' type (float32 or bf16); h,
  // b_ih, b_hh: float32. h_low is h in the products' type (h itself in
  // float32).
  // `gru` last: needs_input_grad counts the tensor inputs alone.
  static Tensor forward(AutogradContext* ctx, const Tensor& x, const Tensor& h,
                        const Tensor& h_low, const Tensor& w_ih,
                        const Tensor& w_hh, const Tensor& b_ih,
                        const Tensor& b_hh, bool gru) {
    c10::impl::ExcludeDispatchKeyGuard no_autocast(
        c10::DispatchKey::AutocastCPU);
    const int64_t N = x.size(0), M = h.size(1);
    const Tensor gi = torch::mm(x, w_ih.t());
    const Tensor gh = torch::mm(h_low, w_hh.t());
    Tensor out = torch::empty({N, M}, h.options());
    Tensor ws = gru ? torch::empty({N, 4 * M}, h.options()) : Tensor();
    Buffers b;
    b.M = M;
    b.gru = gru;
    b.bf16 = gi.scalar_type() == torch::kBFloat16;
    b.gi = gi.data_ptr();
    b.gh = gh.data_ptr();
    b.b_ih = b_ih.data_ptr<float>();
    b.b_hh = b_hh.data_ptr<float>();
    b.h = h.data_ptr<float>();
    b.out = out.data_ptr<float>();
    b.ws = gru ? ws.data_ptr<float>() : nullptr;
    at::parallel_for(0, N, Grain(M), [&](int64_t begin, int64_t end) {
      ForwardKernel(b, begin, end);
    });
    ctx->saved_data["gru"] = gru;
    // The RNN's backward pass reads its output: saved as an output.
    ctx->save_for_backward({x, h, h_low, w_ih, w_hh, gru ? ws : out});
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    c10::impl::ExcludeDispatchKeyGuard no_autocast(
        c10::DispatchKey::AutocastCPU);
    const bool gru = ctx->saved_data["gru"].toBool();
    const variable_list s = ctx->get_saved_variables();
    const Tensor &x = s[0], &h = s[1], &h_low = s[2], &w_ih = s[3],
                 &w_hh = s[4], &kept = s[5];
    const Tensor g = grads[0].to(torch::kFloat).contiguous();
    const int64_t N = g.size(0), M = g.size(1), G = gru ? 3 : 1;
    // Tensor inputs: 0 x, 1 h, 2 h_low, 3 w_ih, 4 w_hh, 5 b_ih, 6 b_hh.
    const bool need_h = ctx->needs_input_grad(1);
    Tensor dgi = torch::empty({N, G * M}, g.options());
    Tensor dgh = gru ? torch::empty({N, G * M}, g.options()) : dgi;
    Tensor dh_direct =
        gru && need_h ? torch::empty({N, M}, g.options()) : Tensor();
    BackBuffers b;
    b.M = M;
    b.gru = gru;
    b.g = g.data_ptr<float>();
    b.h = h.data_ptr<float>();
    (gru ? b.ws : b.out) = kept.data_ptr<float>();
    b.dgi = dgi.data_ptr<float>();
    b.dgh = dgh.data_ptr<float>();
    b.dh_direct = dh_direct.defined() ? dh_direct.data_ptr<float>() : nullptr;
    at::parallel_for(0, N, Grain(M), [&](int64_t begin, int64_t end) {
      BackwardKernel(b, begin, end);
    });
    // The products' gradients in the products' type, as autocast's.
    const auto low = x.scalar_type();
    const Tensor dgi_low = dgi.to(low);
    const Tensor dgh_low = gru ? dgh.to(low) : dgi_low;
    Tensor dx, dh, dw_ih, dw_hh, db_ih, db_hh;
    if (ctx->needs_input_grad(0)) dx = torch::mm(dgi_low, w_ih);
    if (need_h) {
      dh = torch::mm(dgh_low, w_hh).to(torch::kFloat);
      if (dh_direct.defined()) dh.add_(dh_direct);
    }
    if (ctx->needs_input_grad(3)) dw_ih = torch::mm(dgi_low.t(), x);
    if (ctx->needs_input_grad(4)) dw_hh = torch::mm(dgh_low.t(), h_low);
    if (ctx->needs_input_grad(5)) db_ih = dgi.sum(0);
    if (ctx->needs_input_grad(6)) {
      // The RNN's dgh is its dgi: one sum for both biases (a copy: two
      // parameters' gradients must not share storage).
      db_hh = !gru && db_ih.defined() ? db_ih.clone() : dgh.sum(0);
    }
    return {dx, dh, Tensor(), dw_ih, dw_hh, db_ih, db_hh, Tensor()};
  }
};

}  // namespace

Tensor Cell(CellKind kind, const Tensor& x, const Tensor& h, const Tensor& w_ih,
            const Tensor& w_hh, const Tensor& b_ih, const Tensor& b_hh) {
  const int64_t G = kind == CellKind::kGru ? 3 : 1;
  TORCH_CHECK(x.dim() == 2 && h.dim() == 2 && x.size(0) == h.size(0),
              "Cell: expects x [N, X] and h [N, M], got ", x.sizes(), " and ",
              h.sizes());
  const int64_t M = h.size(1), X = x.size(1);
  TORCH_CHECK(w_ih.sizes() == torch::IntArrayRef({G * M, X}) &&
                  w_hh.sizes() == torch::IntArrayRef({G * M, M}) &&
                  b_ih.sizes() == torch::IntArrayRef({G * M}) &&
                  b_hh.sizes() == torch::IntArrayRef({G * M}),
              "Cell: weights [", G * M, ", ", X, "] and [", G * M, ", ", M,
              "], biases [", G * M, "], got ", w_ih.sizes(), ", ", w_hh.sizes(),
              ", ", b_ih.sizes(), ", ", b_hh.sizes());
  if (!x.device().is_cpu() || !w_ih.device().is_cpu()) {
    return CellOperators(kind, x, h, w_ih, w_hh, b_ih, b_hh);
  }
  // The products' type: autocast's where it is on (the weights' casts from
  // its cache, made once a region, as a linear layer takes them).
  const bool low = at::autocast::is_autocast_enabled(at::kCPU);
  const auto type =
      low ? at::autocast::get_autocast_dtype(at::kCPU) : torch::kFloat;
  auto cast = [&](const Tensor& w) {
    return low ? at::autocast::cached_cast(type, w, at::kCPU) : w.to(type);
  };
  const Tensor hf = h.to(torch::kFloat).contiguous();
  return CellFunction::apply(
      x.to(type).contiguous(), hf, hf.to(type).contiguous(),
      cast(w_ih).contiguous(), cast(w_hh).contiguous(),
      b_ih.to(torch::kFloat).contiguous(), b_hh.to(torch::kFloat).contiguous(),
      kind == CellKind::kGru);
}

Tensor CellOperators(CellKind kind, const Tensor& x, const Tensor& h,
                     const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih,
                     const Tensor& b_hh) {
  const Tensor out = kind == CellKind::kGru
                         ? torch::gru_cell(x, h, w_ih, w_hh, b_ih, b_hh)
                         : torch::rnn_tanh_cell(x, h, w_ih, w_hh, b_ih, b_hh);
  return out.to(torch::kFloat);
}

}  // namespace mnemo::model
