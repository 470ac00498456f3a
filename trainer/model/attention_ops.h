// TGN's per-target neighbour attention as one autograd function with its
// own CPU kernels.
//
// With the key/value projections moved to the query side (see
// TgnImpl::Embed in memory_models.cc), attention over a target's k neighbours
// is a batch of tiny products: the target's k raw neighbour rows x[n] ([k, w],
// w split into parts: neighbour memory, time encoding, edge features)
// against its per-head projected query y[n] ([heads, w]). LibTorch 1.13's
// bmm runs such a batch as one small matrix product per target (a select
// and an mm call each, 600 per batch of 200 events), which cost more than
// the projections it replaced; and as separate operators, scores, mask,
// softmax, dropout and the weighted sum each made a pass over memory, with
// the two gradients of x added in another. Here one parallel loop over the
// targets does the forward pass and one the backward pass.
#ifndef MNEMO_TRAINER_MODEL_ATTENTION_OPS_H_
#define MNEMO_TRAINER_MODEL_ATTENTION_OPS_H_

#include <torch/torch.h>

#include <vector>

namespace mnemo::model {

struct NeighbourAttentionResult {
  torch::Tensor mix;     // [N, H, W]: sum_k a[n,k,h] x[n,k,:] (W: all parts)
  torch::Tensor weight;  // [N, H]: sum_k a[n,k,h] (1 but for dropout)
};

// For each target n and head h:
//   s[n,k,h] = x[n,k,:] . y[n,h,:] + bias[n,h]   (x: the parts side by side)
//   a[n,:,h] = dropout(softmax over the k with mask[n,k] of s[n,:,h])
// and returns the a-weighted sum of x and the sum of a. Rows whose mask is
// all false must not occur (the caller opens slot 0 for them). `keep` is
// the dropout's scaled keep mask ([N, K, H], 0 or 1/(1-p)) or undefined.
// x parts: [N, K, W_i]; y: [N, H, sum W_i]; bias: [N, H] or undefined
// (none); mask: [N, K]
// bool. Any floating types; computed in float32 and returned in float32.
// Differentiable in the parts, y and bias. CPU tensors run the kernels
// below; tensors on another device (CUDA) NeighbourAttentionOperators.
NeighbourAttentionResult NeighbourAttention(
    const std::vector<torch::Tensor>& x_parts, const torch::Tensor& y,
    const torch::Tensor& bias, const torch::Tensor& mask,
    const torch::Tensor& keep);

// The neighbours' inputs where they lie: memory rows read at their slots
// and a time encoding computed from the time gaps.
struct NeighbourRows {
  torch::Tensor memory;  // [R, M]
  torch::Tensor slot;    // [N * K] integer rows of memory
  torch::Tensor dt;      // [N * K] time gaps (data: no gradient)
  torch::Tensor time_w;  // [T, 1] (a Linear(1, T)'s weight)
  torch::Tensor time_b;  // [T]
  torch::Tensor edge;    // [N, K, E], or undefined: none
};

// NeighbourAttention over the parts memory.index_select(0, slot) viewed
// [N, K, M], TimeEncoding(dt, time_w, time_b) viewed [N, K, T] and edge,
// without a bias, without making either of the first two: the kernel reads
// each memory row at its slot and encodes a neighbour's time gap when it
// reaches it (only for masked-in neighbours), and its backward pass adds
// the memory rows' gradients at their slots and sums the encoding's
// parameter gradients itself (in fixed chunks of targets: the same sums
// whatever the thread count) instead of making the [N * K, T] gradient, its
// product with sin and two reductions. Differentiable in memory, time_w,
// time_b, edge and y; the same values as the composition (the sums of the
// encoding's gradients in another order). Tensors on another device (CUDA)
// run that composition.
NeighbourAttentionResult GatheredNeighbourAttention(const NeighbourRows& rows,
                                                    const torch::Tensor& y,
                                                    const torch::Tensor& mask,
                                                    const torch::Tensor& keep);

// TGN's time encoding cos(dt * w + b): dt [N] -> [N, T] for w [T, 1] (a
// Linear(1, T)'s weight) and b [T], in float32. Differentiable in w and b
// (not dt: time differences are data). One pass computes cos(z) and, when
// a gradient is wanted, sin(z) for the backward pass (sin(z) * grad), with
// its own vectorized sine and cosine (within 2.5e-7 of double precision;
// rows with |z| up to 2^29 or more, or NaN, use std::cos), instead of a z
// tensor, LibTorch's cos and a second pass for sin.
// CPU tensors run the kernel; others TimeEncodingOperators.
torch::Tensor TimeEncoding(const torch::Tensor& dt, const torch::Tensor& w,
                           const torch::Tensor& b);

// The same functions from LibTorch operators, on any device (autograd
// differentiates them): what a GPU runs, and what the CPU kernels are
// checked against. Results in float32 as the kernels'.
NeighbourAttentionResult NeighbourAttentionOperators(
    const std::vector<torch::Tensor>& x_parts, const torch::Tensor& y,
    const torch::Tensor& bias, const torch::Tensor& mask,
    const torch::Tensor& keep);
torch::Tensor TimeEncodingOperators(const torch::Tensor& dt,
                                    const torch::Tensor& w,
                                    const torch::Tensor& b);

}  // namespace mnemo::model

#endif  // MNEMO_TRAINER_MODEL_ATTENTION_OPS_H_
