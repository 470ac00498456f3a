#include "trainer/model/memory_models.h"

#include <ATen/autocast_mode.h>

#include <cmath>
#include <limits>
#include <vector>

#include "trainer/model/attention_ops.h"
#include "trainer/model/cell_ops.h"

namespace mnemo::model {
namespace F = torch::nn::functional;

namespace {
// Xavier-uniform bound for a projection whose full input is `fan_in` wide,
// applied to each input part separately (as PyTorch's MultiheadAttention
// initializes its q/k/v projections).
void XavierUniformPart(torch::nn::Linear& layer, int64_t fan_in,
                       int64_t fan_out) {
  torch::NoGradGuard guard;
  double bound = std::sqrt(6.0 / static_cast<double>(fan_in + fan_out));
  layer->weight.uniform_(-bound, bound);
  if (layer->bias.defined()) layer->bias.zero_();
}
void XavierNormal(torch::nn::Linear& layer) {
  torch::NoGradGuard guard;
  torch::nn::init::xavier_normal_(layer->weight);
}
torch::nn::Linear NoBias(int64_t in, int64_t out) {
  return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(false));
}
}  // namespace

MemoryModelImpl::MemoryModelImpl(const ModelOptions& o, bool gru)
    : ModelImpl(o) {
  const int64_t m = o.memory_dim, t = o.time_dim, e = o.edge_dim;
  time_w_ = register_module("time_encoder", MakeTimeEncoder(t));
  const int64_t msg_dim = 2 * m + e + t;
  if (gru) {
    gru_ = register_module("memory_updater", torch::nn::GRUCell(msg_dim, m));
  } else {
    rnn_ = register_module("memory_updater", torch::nn::RNNCell(msg_dim, m));
  }
}

void MemoryModelImpl::RegisterHeads() {
  const int64_t m = options_.memory_dim;
  if (options_.refine) {
    // REFINE is the model's own memory updater (weights shared): a replica
    // is what the node's memory would be after its earlier micro-batch event,
    // as small batches would compute it, and it learns from every update
    // from the first step on (a separate, untrained RNN made one epoch worse
    // than no refinement on CollegeMsg, the shared one better than none).
    refine_gate_ = register_module("refine_gate", torch::nn::Linear(2 * m, m));
  }
  const int64_t d = embedding_width();
  pred1_ = register_module("predictor1", torch::nn::Linear(2 * d, d));
  pred2_ = register_module("predictor2", torch::nn::Linear(d, 1));
  XavierNormal(pred1_);
  XavierNormal(pred2_);
}

torch::Tensor MemoryModelImpl::TimeEncode(const torch::Tensor& dt) {
  return TimeEncoding(dt, time_w_->weight, time_w_->bias);
}

TgnImpl::TgnImpl(const ModelOptions& o) : MemoryModelImpl(o, /*gru=*/true) {
  const int64_t m = o.memory_dim, t = o.time_dim, e = o.edge_dim;
  const int64_t q = m + t;       // query/embed width (memory + time)
  const int64_t kv = m + e + t;  // key/value input width
  q_mem_ = register_module("q_mem", NoBias(m, q));
  q_time_ = register_module("q_time", torch::nn::Linear(t, q));
  k_mem_ = register_module("k_mem", NoBias(m, q));
  k_time_ = register_module("k_time", torch::nn::Linear(t, q));
  v_mem_ = register_module("v_mem", NoBias(m, q));
  v_time_ = register_module("v_time", torch::nn::Linear(t, q));
  for (auto* l : {&q_mem_, &q_time_}) XavierUniformPart(*l, m + t, q);
  for (auto* l : {&k_mem_, &k_time_, &v_mem_, &v_time_}) {
    XavierUniformPart(*l, kv, q);
  }
  if (e > 0) {
    k_edge_ = register_module("k_edge", NoBias(e, q));
    v_edge_ = register_module("v_edge", NoBias(e, q));
    XavierUniformPart(k_edge_, kv, q);
    XavierUniformPart(v_edge_, kv, q);
  }
  // The keys' bias changes no output (see EmbedTargets): frozen, so that
  // nothing waits for a gradient that never comes (gradient buckets).
  k_time_->bias.requires_grad_(false);
  out_proj_ = register_module("out_proj", torch::nn::Linear(q, q));
  {
    torch::NoGradGuard guard;
    out_proj_->bias.zero_();
  }
  merge1_ =
      register_module("merge1", torch::nn::Linear(q + m, o.embedding_dim));
  merge2_ = register_module(
      "merge2", torch::nn::Linear(o.embedding_dim, o.embedding_dim));
  XavierNormal(merge1_);
  XavierNormal(merge2_);
  RegisterHeads();
}

JodieImpl::JodieImpl(const ModelOptions& o)
    : MemoryModelImpl(o, /*gru=*/false) {
  jodie_time_ =
      register_module("time_projection", torch::nn::Linear(1, o.memory_dim));
  {
    torch::NoGradGuard guard;
    jodie_time_->weight.normal_(0, 1.0);
    jodie_time_->bias.normal_(0, 1.0);
  }
  RegisterHeads();
}

// Rows of the memory updater's products under bf16 autocast are padded to a
// multiple of this (see MemoryCell).
constexpr int64_t kCellRowBucket = 32;

torch::Tensor MemoryModelImpl::MemoryCell(const torch::Tensor& msg,
                                          const torch::Tensor& prev) {
  // The module's parameters through one fused function (cell_ops.h).
  auto cell = [&](const torch::Tensor& x, const torch::Tensor& h) {
    return gru_ ? Cell(CellKind::kGru, x, h, gru_->weight_ih, gru_->weight_hh,
                       gru_->bias_ih, gru_->bias_hh)
                : Cell(CellKind::kRnnTanh, x, h, rnn_->weight_ih,
                       rnn_->weight_hh, rnn_->bias_ih, rnn_->bias_hh);
  };
  // Under bf16 autocast the cell's four products (two forward, two weight
  // gradients) run in oneDNN, which JIT-compiles a kernel for every new
  // shape, about 1 ms each. Their row count is the number of nodes with
  // mail, different in almost every batch: the compilations took 13% of a
  // bf16 TGN step (AMD EPYC with AVX512_BF16, Wikipedia, ONEDNN_VERBOSE=2).
  // Zero rows up to a multiple of kCellRowBucket keep the shapes few, so
  // oneDNN's primitive cache answers (one epoch: 1.34x the events/s, the
  // same validation AP); their outputs are dropped, so they add exact zeros
  // to the weight gradients. fp32 products go to OpenBLAS, which compiles
  // nothing.
  const int64_t rows = msg.size(0);
  const int64_t padded =
      (rows + kCellRowBucket - 1) / kCellRowBucket * kCellRowBucket;
  if (!at::autocast::is_autocast_enabled(at::kCPU) || padded == rows)
    return cell(msg, prev);
  const int64_t extra = padded - rows;
  return cell(torch::cat(
                  {msg, torch::zeros({extra, msg.size(1)}, msg.options())}),
              torch::cat(
                  {prev, torch::zeros({extra, prev.size(1)}, prev.options())}))
      .narrow(0, 0, rows);
}

torch::Tensor MemoryModelImpl::ApplyMail(const memory::NodeMemory& state,
                                         const batch::BatchTensors& b) {
  torch::Tensor mem = state.memory().index_select(0, b.unique_rows);
  if (b.mail_slot.numel() == 0) return mem;
  // A message is stored data (TGN/TGL, and the TGN reference, which builds
  // it when the event happens and detaches it): its time encoding carries no
  // gradient. Trained through messages, the encoder's slow frequencies turn
  // into noise at the large time gaps of real data (JODIE converged slower).
  torch::Tensor mail_time;
  {
    torch::NoGradGuard no_grad;
    mail_time = TimeEncode(b.mail_dt);
  }
  torch::Tensor msg =
      torch::cat({state.mail().index_select(0, b.mail_node), mail_time}, 1);
  torch::Tensor prev = mem.index_select(0, b.mail_slot);
  torch::Tensor updated = MemoryCell(msg, prev);
  return mem.index_copy(0, b.mail_slot, updated.to(mem.scalar_type()));
}

torch::Tensor TgnImpl::EmbedTargets(const torch::Tensor& mem,
                                    const batch::BatchTensors& b) {
  const int64_t n = b.target_slot.size(0);  // 3B targets
  const int64_t k = b.k;
  const int64_t q_width = options_.memory_dim + options_.time_dim;
  const int64_t heads = options_.heads;
  const int64_t dh = q_width / heads;

  torch::Tensor h = mem.index_select(0, b.target_slot);  // [n, m]
  torch::Tensor zero_dt = torch::zeros({1}, mem.options());
  torch::Tensor q = q_mem_(h) + q_time_(TimeEncode(zero_dt));  // [n, q]

  // Keys and values are linear in their input parts (neighbour memory, time
  // encoding, edge features): key = Wk [x_mem, x_time, x_edge] + bk. So
  // instead of projecting all n*k neighbour rows to q wide (what dominated
  // the step: n*k*q*(m+t) multiply-adds for keys and again for values), the
  // query is projected back into the input per head (n*q*(m+t)), scores are
  // q_h . key = (Wk_h^T q_h) . x + q_h . bk_h, and the attention-weighted
  // sum of the raw inputs is projected once per head:
  // sum_k a_k (Wv x_k + bv) = Wv_h (sum_k a_k x_k) + bv_h sum_k a_k.
  // The key bias adds q_h . bk_h to every score of a target and head, which
  // softmax does not see (TGN's keys carry it, so the parameter stays, but
  // it changes no output and its gradient is 0 in exact arithmetic): it is
  // left out, and with it the rounding noise Adam would take for its
  // gradient.
  // The same model and parameters with k times fewer multiply-adds; scores,
  // softmax, dropout and the weighted sum run in one kernel
  // (attention_ops.h).
  // The neighbours' memory rows and time encodings are read and computed
  // inside the kernel (GatheredNeighbourAttention), not gathered and
  // encoded into [n * k, m] and [n * k, t] tensors first.
  NeighbourRows rows{mem,           b.nbr_slot,     b.nbr_dt, time_w_->weight,
                     time_w_->bias, torch::Tensor()};
  std::vector<torch::Tensor> wk = {k_mem_->weight, k_time_->weight};
  std::vector<torch::Tensor> wv = {v_mem_->weight, v_time_->weight};
  if (options_.edge_dim > 0) {
    rows.edge = b.nbr_edge_feat.view({n, k, -1});
    wk.push_back(k_edge_->weight);
    wv.push_back(v_edge_->weight);
  }
  torch::Tensor key_weight = torch::cat(wk, 1);  // [q, w]
  const int64_t w = key_weight.size(1);
  torch::Tensor qh = (q / std::sqrt(static_cast<double>(dh)))
                         .view({n, heads, dh})
                         .transpose(0, 1);  // [heads, n, dh]
  torch::Tensor qk =
      torch::bmm(qh, key_weight.view({heads, dh, w}))  // [h, n, w]
          .transpose(0, 1);
  // Targets without any neighbour attend to slot 0 and are zeroed after, as
  // the reference does, so softmax never sees an all -inf row.
  torch::Tensor has_nbr = b.nbr_mask.any(1);  // [n]
  torch::Tensor mask = b.nbr_mask.clone();
  mask.select(1, 0).logical_or_(has_nbr.logical_not());
  // Dropout on the attention weights, drawn as F::dropout draws it.
  torch::Tensor keep;
  if (is_training() && options_.dropout > 0) {
    keep = torch::empty({n, k, heads}, mem.options().dtype(torch::kFloat))
               .bernoulli_(1 - options_.dropout)
               .div_(1 - options_.dropout);
  }
  NeighbourAttentionResult attention =
      GatheredNeighbourAttention(rows, qk, mask, keep);
  torch::Tensor agg = attention.mix.transpose(0, 1);  // [heads, n, w]
  torch::Tensor out =
      torch::bmm(agg.to(mem.scalar_type()),
                 torch::cat(wv, 1).view({heads, dh, w}).transpose(1, 2)) +
      attention.weight.t().unsqueeze(-1) *
          v_time_->bias.view({heads, 1, dh});  // [heads, n, dh]
  out = out.transpose(0, 1).reshape({n, q_width});
  out = out_proj_(out) * has_nbr.unsqueeze(1).to(out.scalar_type());
  return merge2_(torch::relu(merge1_(torch::cat({out, h}, 1))));
}

torch::Tensor JodieImpl::EmbedTargets(const torch::Tensor& mem,
                                      const batch::BatchTensors& b) {
  torch::Tensor h = mem.index_select(0, b.target_slot);
  return h * (1 + jodie_time_(b.target_dt.unsqueeze(1)));
}

torch::Tensor MemoryModelImpl::Refine(const torch::Tensor& mem,
                                      const batch::BatchTensors& b) {
  if (!refine_gate_ || !b.replica_self.defined() ||
      b.replica_self.numel() == 0) {
    return mem;
  }
  torch::Tensor base = mem.index_select(0, b.replica_self);
  std::vector<torch::Tensor> parts = {base,
                                      mem.index_select(0, b.replica_other)};
  if (options_.edge_dim > 0) parts.push_back(b.replica_edge_feat);
  {
    torch::NoGradGuard no_grad;  // as a stored message's (ApplyMail)
    parts.push_back(TimeEncode(b.replica_dt));
  }
  torch::Tensor msg = torch::cat(parts, 1);
  torch::Tensor refined = MemoryCell(msg, base).to(base.scalar_type());
  // COMB: a gate between the plain update and its refinement.
  torch::Tensor gate =
      torch::sigmoid(refine_gate_(torch::cat({base, refined}, 1)))
          .to(base.scalar_type());
  return torch::cat({mem, gate * refined + (1 - gate) * base}, 0);
}

UpdatedMemory MemoryModelImpl::UpdateMemory(const memory::NodeMemory& state,
                                            const batch::BatchTensors& b) {
  UpdatedMemory out;
  out.memory = Refine(ApplyMail(state, b), b);
  return out;
}

torch::Tensor MemoryModelImpl::TargetEmbeddings(const batch::BatchTensors& b,
                                                const UpdatedMemory& updated) {
  return EmbedTargets(updated.memory, b);
}

LinkScores MemoryModelImpl::Embed(const batch::BatchTensors& b,
                                  const UpdatedMemory& updated) {
  return PredictLinks(TargetEmbeddings(b, updated), b.batch_size, pred1_,
                      pred2_);
}

}  // namespace mnemo::model
