#include "trainer/model/dysat.h"

#include <c10/core/impl/LocalDispatchKeySet.h>

#include <string>

namespace mnemo::model {

DysatImpl::DysatImpl(const ModelOptions& o) : ModelImpl(o) {
  TORCH_CHECK(o.num_nodes > 0, "dysat needs the number of nodes");
  TORCH_CHECK(o.snapshots >= 1 && o.snapshot_span > 0,
              "dysat needs >= 1 snapshot of a positive span");
  TORCH_CHECK(o.layers == 1 || o.layers == 2, "dysat has 1 or 2 layers");
  const int64_t d = o.embedding_dim;
  node_emb_ =
      register_module("node_embedding", torch::nn::Embedding(o.num_nodes, d));
  layers_.resize(o.layers);
  for (int64_t l = 0; l < o.layers; ++l) {
    for (int64_t h = 0; h < o.snapshots; ++h) {
      layers_[l].push_back(register_module(
          "layer" + std::to_string(l) + "_snapshot" + std::to_string(h),
          TemporalAttentionLayer(d, o.edge_dim, /*time_dim=*/0, o.heads,
                                 o.dropout, d)));
    }
  }
  combine_ =
      register_module("combine", torch::nn::RNN(torch::nn::RNNOptions(d, d)));
  pred1_ = register_module("predictor1", torch::nn::Linear(2 * d, d));
  pred2_ = register_module("predictor2", torch::nn::Linear(d, 1));
}

torch::Tensor DysatImpl::Snapshot(int64_t h, const torch::Tensor& table,
                                  const batch::BatchTensors& b) {
  torch::Tensor none;
  const torch::Tensor edge =
      b.snap_edge_feat.defined() ? b.snap_edge_feat[h] : none;
  // Layer 1: the targets over their neighbours (rows of `table`) and, with
  // two layers, the neighbours over theirs (in the same window); layer 2:
  // the targets over the neighbours' layer-1 embeddings.
  // The table's projections serve both first-layer calls.
  const auto projected = layers_[0][h]->ProjectTable(table);
  torch::Tensor h_target = layers_[0][h]->ForwardRows(
      projected, table, b.snap_target, b.snap_node[h], edge, b.snap_mask[h]);
  if (options_.layers == 1) return h_target;
  const torch::Tensor edge2 =
      b.snap2_edge_feat.defined() ? b.snap2_edge_feat[h] : none;
  torch::Tensor h_nbr =
      layers_[0][h]->ForwardRows(projected, table, b.snap_node[h],
                                 b.snap2_node[h], edge2, b.snap2_mask[h]);
  return layers_[1][h]->forward(h_target, h_nbr, edge, none, b.snap_mask[h]);
}

torch::Tensor DysatImpl::TargetEmbeddings(const batch::BatchTensors& b,
                                          const UpdatedMemory& updated) {
  (void)updated;
  // The first layer's input: the embeddings of the nodes the batch reads.
  const torch::Tensor table = node_emb_(b.snap_nodes);  // [V, d]
  std::vector<torch::Tensor> per_snapshot;
  for (int64_t h = 0; h < options_.snapshots; ++h) {
    per_snapshot.push_back(Snapshot(h, table, b));
  }
  // [H, 3B, d], oldest first; the embedding is the output at the last.
  torch::Tensor seq = torch::stack(per_snapshot);
  torch::Tensor emb;
  {
    // CUDA autocast runs cuDNN's RNN in fp16 whatever the autocast type:
    // under bf16 the RNN stays in float32 instead (it is small).
    c10::impl::ExcludeDispatchKeyGuard no_cuda_autocast(
        c10::DispatchKey::AutocastCUDA);
    emb = std::get<0>(combine_(seq.to(torch::kFloat)))[options_.snapshots - 1];
  }
  return emb;
}

LinkScores DysatImpl::Embed(const batch::BatchTensors& b,
                            const UpdatedMemory& updated) {
  return PredictLinks(TargetEmbeddings(b, updated), b.batch_size, pred1_,
                      pred2_);
}

}  // namespace mnemo::model
