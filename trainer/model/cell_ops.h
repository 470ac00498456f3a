// The memory updaters' recurrent cells (TGN: GRU; JODIE: tanh RNN) as
// one autograd function each, with their own CPU kernels for the
// element-wise work.
//
// LibTorch's GRU cell is two linear layers and then nine element-wise
// operators (chunks, adds, two sigmoids, a tanh, the blend), each a pass
// over memory, an allocation and an autograd node, and twice as many in
// the backward pass; under bf16 autocast its gates are computed in bf16.
// Here the two products (no bias: the biases are added in the kernel) are
// followed by one parallel pass that computes the gates and the new state
// in float32 and keeps what the backward pass needs (r, z, n and the
// hidden product's n part); the backward pass is one element-wise pass and
// the products of the gradients. The same function and parameters as
// torch::nn::GRUCell / RNNCell (PyTorch's gate order r, z, n).
#ifndef MNEMO_TRAINER_MODEL_CELL_OPS_H_
#define MNEMO_TRAINER_MODEL_CELL_OPS_H_

#include <torch/torch.h>

namespace mnemo::model {

enum class CellKind { kGru, kRnnTanh };

// h' = cell(x, h) for x [N, X], h [N, M], w_ih [G*M, X], w_hh [G*M, M],
// b_ih and b_hh [G*M] (G = 3 for the GRU, 1 for the RNN). Returns h' in
// float32. Under CPU autocast the two products (and their gradients' four)
// run in the autocast type, with each weight's cast taken from autocast's
// cache as a linear layer's would be; the gates and the state update are
// float32 either way. Differentiable in every input. CPU tensors run the
// kernels; others CellOperators.
torch::Tensor Cell(CellKind kind, const torch::Tensor& x,
                   const torch::Tensor& h, const torch::Tensor& w_ih,
                   const torch::Tensor& w_hh, const torch::Tensor& b_ih,
                   const torch::Tensor& b_hh);

// The same from LibTorch's operators (torch::gru_cell, torch::rnn_tanh_cell):
// what a GPU runs, and what the kernels are checked against.
torch::Tensor CellOperators(CellKind kind, const torch::Tensor& x,
                            const torch::Tensor& h, const torch::Tensor& w_ih,
                            const torch::Tensor& w_hh,
                            const torch::Tensor& b_ih,
                            const torch::Tensor& b_hh);

}  // namespace mnemo::model

#endif  // MNEMO_TRAINER_MODEL_CELL_OPS_H_
