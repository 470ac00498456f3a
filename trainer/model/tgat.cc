#include "trainer/model/tgat.h"

#include <string>
#include <vector>

#include "trainer/model/attention_ops.h"

namespace mnemo::model {
namespace F = torch::nn::functional;

TemporalAttentionLayerImpl::TemporalAttentionLayerImpl(
    int64_t node_dim, int64_t edge_dim, int64_t time_dim, int64_t heads,
    double dropout, int64_t out_dim)
    : node_dim_(node_dim),
      edge_dim_(edge_dim),
      heads_(heads),
      out_dim_(out_dim),
      time_dim_(time_dim),
      dropout_(dropout) {
  TORCH_CHECK(node_dim + time_dim > 0,
              "an attention layer needs node embeddings or a time encoding");
  if (time_dim > 0) {
    time_w_ = register_module("time_encoder", MakeTimeEncoder(time_dim));
  }
  w_q_ =
      register_module("w_q", torch::nn::Linear(node_dim + time_dim, out_dim));
  w_k_ = register_module(
      "w_k", torch::nn::Linear(node_dim + edge_dim + time_dim, out_dim));
  w_v_ = register_module(
      "w_v", torch::nn::Linear(node_dim + edge_dim + time_dim, out_dim));
  w_out_ =
      register_module("w_out", torch::nn::Linear(node_dim + out_dim, out_dim));
  norm_ = register_module(
      "norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({out_dim})));
}

torch::Tensor TemporalAttentionLayerImpl::TimeEncode(const torch::Tensor& dt) {
  return TimeEncoding(dt, time_w_->weight, time_w_->bias);
}

torch::Tensor TemporalAttentionLayerImpl::forward(const torch::Tensor& self_h,
                                                  const torch::Tensor& nbr_h,
                                                  const torch::Tensor& nbr_edge,
                                                  const torch::Tensor& nbr_dt,
                                                  const torch::Tensor& mask) {
  const int64_t n = mask.size(0), k = mask.size(1);
  const int64_t dh = out_dim_ / heads_;
  std::vector<torch::Tensor> q_in, kv_in;
  if (node_dim_ > 0) q_in.push_back(self_h);
  if (time_dim_ > 0) {
    q_in.push_back(
        TimeEncode(torch::zeros({1}, nbr_dt.options())).expand({n, -1}));
  }
  if (node_dim_ > 0) kv_in.push_back(nbr_h);
  if (edge_dim_ > 0) kv_in.push_back(nbr_edge);
  if (time_dim_ > 0) kv_in.push_back(TimeEncode(nbr_dt));
  torch::Tensor q = w_q_(torch::cat(q_in, 1)).view({n, heads_, dh});
  torch::Tensor kv = torch::cat(kv_in, 1);
  torch::Tensor agg = SlotAttention(q, w_k_(kv).view({n, k, heads_, dh}),
                                    w_v_(kv).view({n, k, heads_, dh}), mask,
                                    dropout_, is_training());  // [n, out]
  return Output(agg, self_h);
}

torch::Tensor TemporalAttentionLayerImpl::Output(const torch::Tensor& agg,
                                                 const torch::Tensor& self_h) {
  torch::Tensor out =
      node_dim_ > 0 ? w_out_(torch::cat({agg, self_h}, 1)) : w_out_(agg);
  out = torch::relu(F::dropout(
      out, F::DropoutFuncOptions().p(dropout_).training(is_training())));
  return norm_(out);
}

torch::Tensor TemporalAttentionLayerImpl::ForwardRows(
    const torch::Tensor& table, const torch::Tensor& self_row,
    const torch::Tensor& nbr_row, const torch::Tensor& nbr_edge,
    const torch::Tensor& mask) {
  return ForwardRows(ProjectTable(table), table, self_row, nbr_row, nbr_edge,
                     mask);
}

TemporalAttentionLayerImpl::TableProjection
TemporalAttentionLayerImpl::ProjectTable(const torch::Tensor& table) {
  TORCH_CHECK(time_dim_ == 0 && node_dim_ > 0,
              "ForwardRows needs node embeddings and no time encoding");
  auto node_part = [&](torch::nn::Linear& w) {
    return F::linear(table, w->weight.narrow(1, 0, node_dim_), w->bias);
  };
  return {w_q_(table), node_part(w_k_), node_part(w_v_)};
}

torch::Tensor TemporalAttentionLayerImpl::ForwardRows(
    const TableProjection& p, const torch::Tensor& table,
    const torch::Tensor& self_row, const torch::Tensor& nbr_row,
    const torch::Tensor& nbr_edge, const torch::Tensor& mask) {
  const int64_t n = mask.size(0), k = mask.size(1);
  const int64_t dh = out_dim_ / heads_;
  // W [node | edge] x + b = W_node x + (W_edge e) + b, the first per row.
  auto per_slot = [&](const torch::Tensor& rows, torch::nn::Linear& w) {
    torch::Tensor out = rows.index_select(0, nbr_row);
    if (edge_dim_ > 0) {
      out =
          out + F::linear(nbr_edge, w->weight.narrow(1, node_dim_, edge_dim_));
    }
    return out.view({n, k, heads_, dh});
  };
  torch::Tensor q = p.q.index_select(0, self_row).view({n, heads_, dh});
  torch::Tensor agg = SlotAttention(q, per_slot(p.k, w_k_), per_slot(p.v, w_v_),
                                    mask, dropout_, is_training());
  return Output(agg, table.index_select(0, self_row));
}

TgatImpl::TgatImpl(const ModelOptions& o) : ModelImpl(o) {
  const int64_t d = o.embedding_dim;
  for (int64_t l = 0; l < o.layers; ++l) {
    layers_.push_back(register_module(
        "layer" + std::to_string(l),
        TemporalAttentionLayer(l == 0 ? 0 : d, o.edge_dim, o.time_dim, o.heads,
                               o.dropout, d)));
  }
  pred1_ = register_module("predictor1", torch::nn::Linear(2 * d, d));
  pred2_ = register_module("predictor2", torch::nn::Linear(d, 1));
}

torch::Tensor TgatImpl::TargetEmbeddings(const batch::BatchTensors& b,
                                         const UpdatedMemory& updated) {
  (void)updated;
  torch::Tensor none;
  torch::Tensor emb;
  if (options_.layers == 1) {
    emb =
        layers_[0]->forward(none, none, b.nbr_edge_feat, b.nbr_dt, b.nbr_mask);
  } else {
    // Layer 1: the targets (over their neighbours) and the targets'
    // neighbours at their edge times (over theirs); layer 2: the targets
    // over the neighbours' layer-1 embeddings.
    torch::Tensor h_target =
        layers_[0]->forward(none, none, b.nbr_edge_feat, b.nbr_dt, b.nbr_mask);
    torch::Tensor h_nbr = layers_[0]->forward(
        none, none, b.nbr2_edge_feat, b.nbr2_dt, b.nbr2_mask);  // [n*k, d]
    emb = layers_[1]->forward(h_target, h_nbr, b.nbr_edge_feat, b.nbr_dt,
                              b.nbr_mask);
  }
  return emb;
}

LinkScores TgatImpl::Embed(const batch::BatchTensors& b,
                           const UpdatedMemory& updated) {
  return PredictLinks(TargetEmbeddings(b, updated), b.batch_size, pred1_,
                      pred2_);
}

}  // namespace mnemo::model
