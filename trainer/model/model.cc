#include "trainer/model/model.h"

#include <limits>

namespace mnemo::model {
namespace F = torch::nn::functional;

torch::Tensor Loss(const LinkScores& out) {
  return F::binary_cross_entropy_with_logits(out.pos_logits,
                                             torch::ones_like(out.pos_logits)) +
         F::binary_cross_entropy_with_logits(out.neg_logits,
                                             torch::zeros_like(out.neg_logits));
}

torch::nn::Linear MakeTimeEncoder(int64_t time_dim) {
  torch::nn::Linear encoder(1, time_dim);
  torch::NoGradGuard guard;
  encoder->weight.copy_(
      torch::pow(10.0, -torch::linspace(0, 9, time_dim)).reshape({-1, 1}));
  encoder->bias.zero_();
  return encoder;
}

LinkScores PredictLinks(const torch::Tensor& emb, int64_t batch_size,
                        torch::nn::Linear& pred1, torch::nn::Linear& pred2) {
  const int64_t bs = batch_size;
  const int64_t d = emb.size(1);
  torch::Tensor w = pred1->weight;  // [d, 2d]: [source part | dest part]
  torch::Tensor src =
      F::linear(emb.narrow(0, 0, bs), w.narrow(1, 0, d), pred1->bias);
  torch::Tensor dst = F::linear(emb.narrow(0, bs, 2 * bs), w.narrow(1, d, d));
  torch::Tensor hidden =
      torch::relu(src.repeat({2, 1}) + dst);  // [pos rows; neg rows]
  torch::Tensor logits = pred2(hidden).squeeze(1).to(torch::kFloat);
  return {logits.narrow(0, 0, bs), logits.narrow(0, bs, bs)};
}

torch::Tensor ScorePairs(const torch::Tensor& emb, const torch::Tensor& src,
                         const torch::Tensor& dst, torch::nn::Linear& pred1,
                         torch::nn::Linear& pred2) {
  const int64_t d = emb.size(1);
  torch::Tensor w = pred1->weight;  // [d, 2d]: [source part | dest part]
  torch::Tensor as_src = F::linear(emb, w.narrow(1, 0, d), pred1->bias);
  torch::Tensor as_dst = F::linear(emb, w.narrow(1, d, d));
  torch::Tensor hidden =
      torch::relu(as_src.index_select(0, src) + as_dst.index_select(0, dst));
  return pred2(hidden).squeeze(1).to(torch::kFloat);
}

UpdatedMemory NoMemory(const batch::BatchTensors& b) {
  UpdatedMemory out;
  out.memory = torch::empty({b.unique_rows.size(0), 0},
                            b.unique_rows.options().dtype(torch::kFloat));
  return out;
}

torch::Tensor SlotAttention(const torch::Tensor& q, const torch::Tensor& key,
                            const torch::Tensor& value,
                            const torch::Tensor& mask, double dropout,
                            bool training) {
  const int64_t n = key.size(0);
  torch::Tensor scores =
      F::leaky_relu((q.unsqueeze(1) * key).sum(-1),
                    F::LeakyReLUFuncOptions().negative_slope(0.2));  // [n,k,h]
  // A query without valid slots attends to slot 0 and its weights are
  // zeroed after the softmax (so no row is all -inf and no gradient NaN).
  torch::Tensor open = mask.clone();
  open.select(1, 0).logical_or_(mask.any(1).logical_not());
  scores = scores.masked_fill(open.logical_not().unsqueeze(-1),
                              -std::numeric_limits<float>::infinity());
  torch::Tensor att =
      torch::softmax(scores, 1) * mask.unsqueeze(-1).to(scores.scalar_type());
  att = F::dropout(att, F::DropoutFuncOptions().p(dropout).training(training));
  return (att.unsqueeze(-1) * value).sum(1).reshape({n, -1});
}

double ParameterChecksum(torch::nn::Module& module) {
  torch::NoGradGuard guard;
  double sum = 0;
  for (const auto& p : module.parameters()) {
    sum += p.to(torch::kDouble).sum().item<double>();
  }
  return sum;
}

}  // namespace mnemo::model
