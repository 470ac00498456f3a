#include "trainer/model/apan.h"

#include "trainer/model/attention_ops.h"

namespace mnemo::model {
namespace F = torch::nn::functional;

ApanImpl::ApanImpl(const ModelOptions& o) : ModelImpl(o) {
  const int64_t d = o.memory_dim, t = o.time_dim;
  const int64_t mail = 2 * d + o.edge_dim;
  time_w_ = register_module("time_encoder", MakeTimeEncoder(t));
  w_q_ = register_module("w_q", torch::nn::Linear(d, d));
  w_k_ = register_module("w_k", torch::nn::Linear(mail + t, d));
  w_v_ = register_module("w_v", torch::nn::Linear(mail + t, d));
  update_norm_ = register_module(
      "update_norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d})));
  mlp_ = register_module("mlp", torch::nn::Linear(d, d));
  embed_norm_ = register_module(
      "embed_norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d})));
  pred1_ = register_module("predictor1", torch::nn::Linear(2 * d, d));
  pred2_ = register_module("predictor2", torch::nn::Linear(d, 1));
}

torch::Tensor ApanImpl::AttendMailbox(const torch::Tensor& mem,
                                      const torch::Tensor& mails,
                                      const torch::Tensor& dt,
                                      const torch::Tensor& mask) {
  const int64_t r = mem.size(0), k = mails.size(1);
  const int64_t d = options_.memory_dim, heads = options_.heads;
  const int64_t dh = d / heads;
  torch::Tensor te =
      TimeEncoding(dt.reshape({-1}), time_w_->weight, time_w_->bias)
          .view({r, k, -1});
  torch::Tensor kv = torch::cat({mails, te}, 2);  // [R, k, mail + t]
  torch::Tensor agg = SlotAttention(
      w_q_(mem).view({r, heads, dh}), w_k_(kv).view({r, k, heads, dh}),
      w_v_(kv).view({r, k, heads, dh}), mask, options_.dropout, is_training());
  torch::Tensor h = mlp_(update_norm_(agg + mem));
  return torch::relu(F::dropout(
      h, F::DropoutFuncOptions().p(options_.dropout).training(is_training())));
}

UpdatedMemory ApanImpl::UpdateMemory(const memory::NodeMemory& state,
                                     const batch::BatchTensors& b) {
  const int64_t k = state.layout().mailbox_slots;
  const int64_t r = b.query_slot.size(0);
  torch::Tensor mem = state.memory().index_select(0, b.unique_rows);  // [U, d]
  torch::Tensor box = state.mail().index_select(0, b.unique_rows);
  torch::Tensor rows =
      AttendMailbox(mem.index_select(0, b.query_slot),
                    box.index_select(0, b.query_slot).view({r, k, -1}),
                    b.mailbox_dt, b.mailbox_mask);
  UpdatedMemory out;
  out.memory = mem;
  out.rows = rows;
  return out;
}

torch::Tensor ApanImpl::TargetEmbeddings(const batch::BatchTensors& b,
                                         const UpdatedMemory& updated) {
  return embed_norm_(updated.rows.narrow(0, 0, 3 * b.batch_size));
}

LinkScores ApanImpl::Embed(const batch::BatchTensors& b,
                           const UpdatedMemory& updated) {
  return PredictLinks(TargetEmbeddings(b, updated), b.batch_size, pred1_,
                      pred2_);
}

}  // namespace mnemo::model
