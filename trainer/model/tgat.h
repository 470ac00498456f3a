// TGAT (Xu et al., ICLR 2020) as TGL configures it: no node memory; node
// embeddings from L layers of temporal graph attention over sampled
// neighbours (default 2 layers of 10 uniformly sampled neighbours, 2 heads),
// each layer with its own time encoding; an MLP link predictor.
//
// A layer embeds a query node at time t from its neighbours' embeddings of
// the layer below (at their edge times), the edge features and the time
// encoding of t - edge time: query from [own embedding, time(0)], keys and
// values from [neighbour embedding, edge features, time(dt)], scores
// LeakyReLU(q . k) per head, softmax over the neighbours, then
// LayerNorm(ReLU(W_out [aggregate, own embedding])). The data sets carry no
// node features, so the first layer's embeddings are empty (its queries
// are the time encoding alone) and a node with no earlier neighbour gets
// the layer's embedding of an empty aggregate.
#ifndef MNEMO_TRAINER_MODEL_TGAT_H_
#define MNEMO_TRAINER_MODEL_TGAT_H_

#include <torch/torch.h>

#include "trainer/model/model.h"

namespace mnemo::model {

// One temporal graph attention layer (TGL's transformer_attention).
class TemporalAttentionLayerImpl : public torch::nn::Module {
 public:
  // `node_dim`: width of the embeddings it reads (0: none, the first layer).
  // `time_dim` 0: no time encoding (DySAT's structural attention).
  TemporalAttentionLayerImpl(int64_t node_dim, int64_t edge_dim,
                             int64_t time_dim, int64_t heads, double dropout,
                             int64_t out_dim);

  // n queries with k neighbour slots each. `self_h` [n, node_dim] and
  // `nbr_h` [n*k, node_dim] (undefined when node_dim is 0), `nbr_edge`
  // [n*k, edge_dim] (undefined when edge_dim is 0), `nbr_dt` [n*k] query
  // time - edge time (unused without a time encoding), `mask` [n, k] valid
  // slots. Returns [n, out_dim].
  torch::Tensor forward(const torch::Tensor& self_h, const torch::Tensor& nbr_h,
                        const torch::Tensor& nbr_edge,
                        const torch::Tensor& nbr_dt, const torch::Tensor& mask);
  // The same without a time encoding, where the embeddings are rows of
  // `table` [T, node_dim]: self_h = table[self_row], nbr_h =
  // table[nbr_row]. The node parts of the query, key and value projections
  // are computed once per table row, not once per slot.
  torch::Tensor ForwardRows(const torch::Tensor& table,
                            const torch::Tensor& self_row,
                            const torch::Tensor& nbr_row,
                            const torch::Tensor& nbr_edge,
                            const torch::Tensor& mask);
  // The node parts of the query, key and value projections of every row
  // of a table ([T, out_dim] each, biases included), for several
  // ForwardRows calls over one table.
  struct TableProjection {
    torch::Tensor q, k, v;
  };
  TableProjection ProjectTable(const torch::Tensor& table);
  torch::Tensor ForwardRows(const TableProjection& projected,
                            const torch::Tensor& table,
                            const torch::Tensor& self_row,
                            const torch::Tensor& nbr_row,
                            const torch::Tensor& nbr_edge,
                            const torch::Tensor& mask);

 private:
  torch::Tensor TimeEncode(const torch::Tensor& dt);
  // ReLU, dropout and LayerNorm of W_out [agg, self_h].
  torch::Tensor Output(const torch::Tensor& agg, const torch::Tensor& self_h);

  int64_t node_dim_, edge_dim_, heads_, out_dim_, time_dim_;
  double dropout_;
  torch::nn::Linear time_w_{nullptr};
  torch::nn::Linear w_q_{nullptr}, w_k_{nullptr}, w_v_{nullptr};
  torch::nn::Linear w_out_{nullptr};
  torch::nn::LayerNorm norm_{nullptr};
};
TORCH_MODULE(TemporalAttentionLayer);

class TgatImpl final : public ModelImpl {
 public:
  explicit TgatImpl(const ModelOptions& options);
  batch::BatchNeeds needs() const override {
    return {.neighbors = true,
            .neighbor_hops = static_cast<int>(options_.layers)};
  }
  // No node memory (NoMemory).
  UpdatedMemory UpdateMemory(const memory::NodeMemory& state,
                             const batch::BatchTensors& batch) override {
    return NoMemory(batch);
  }
  torch::Tensor TargetEmbeddings(const batch::BatchTensors& batch,
                                 const UpdatedMemory& updated) override;
  LinkScores Embed(const batch::BatchTensors& batch,
                   const UpdatedMemory& updated) override;
  torch::Tensor PairLogits(const torch::Tensor& emb, const torch::Tensor& src,
                           const torch::Tensor& dst) override {
    return ScorePairs(emb, src, dst, pred1_, pred2_);
  }

 private:
  std::vector<TemporalAttentionLayer> layers_;
  torch::nn::Linear pred1_{nullptr}, pred2_{nullptr};
};

}  // namespace mnemo::model

#endif  // MNEMO_TRAINER_MODEL_TGAT_H_
