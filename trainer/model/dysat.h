// DySAT (Sankar et al., WSDM 2020) as TGL and Cascade configure it for
// continuous-time data: the graph before an event's time is read as H
// snapshots of a fixed span (default 3 of 10,000 time units); in each, L
// layers (default 2) of structural self-attention over 10 neighbours
// sampled uniformly in that snapshot's window (TGL's
// transformer_attention with no time encoding), with their own weights per
// layer and snapshot; a recurrent network (Elman, tanh) over the snapshot
// embeddings, oldest first, gives the node embedding at the last one; an
// MLP link predictor.
//
// No node memory. The data sets carry no node features: as DySAT does
// without features (one-hot node identities times a learned matrix), every
// node has a learned embedding of --embedding-dim, the first layer's input.
// A node first seen after training keeps its initial embedding. A query
// with no neighbour in a snapshot gets the layer's output of an empty
// aggregate and its own embedding.
#ifndef MNEMO_TRAINER_MODEL_DYSAT_H_
#define MNEMO_TRAINER_MODEL_DYSAT_H_

#include <torch/torch.h>

#include <vector>

#include "trainer/model/model.h"
#include "trainer/model/tgat.h"

namespace mnemo::model {

class DysatImpl final : public ModelImpl {
 public:
  // Needs options.num_nodes (> 0), options.snapshots (>= 1) and
  // options.snapshot_span (> 0).
  explicit DysatImpl(const ModelOptions& options);
  batch::BatchNeeds needs() const override {
    return {.neighbors = true,
            .neighbor_hops = static_cast<int>(options_.layers),
            .snapshots = static_cast<int>(options_.snapshots),
            .snapshot_span = options_.snapshot_span};
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
  // The targets' embeddings in snapshot h [3B, d]; `table` holds the
  // first layer's input of each of BatchTensors::snap_nodes.
  torch::Tensor Snapshot(int64_t h, const torch::Tensor& table,
                         const batch::BatchTensors& b);

  torch::nn::Embedding node_emb_{nullptr};
  // layers_[l][h]: layer l of snapshot h.
  std::vector<std::vector<TemporalAttentionLayer>> layers_;
  torch::nn::RNN combine_{nullptr};
  torch::nn::Linear pred1_{nullptr}, pred2_{nullptr};
};

}  // namespace mnemo::model

#endif  // MNEMO_TRAINER_MODEL_DYSAT_H_
