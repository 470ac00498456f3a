// Memory-based temporal graph models: TGN and JODIE.
//
// Both compute a batch the way TGN/TGL do:
//   1. memory update: pending mail of the nodes a batch reads is applied by
//      the memory updater (GRU for TGN, RNN for JODIE);
//   2. embedding: temporal graph attention over the most recent neighbours
//      (TGN) or the time projection m * (1 + W dt) (JODIE);
//   3. link prediction: an MLP over the (source, destination) embeddings.
// MemoryModelImpl holds what they share (time encoder, memory updater,
// DepBloom's refinement, link predictor); each adds its embedding.
#ifndef MNEMO_TRAINER_MODEL_MEMORY_MODELS_H_
#define MNEMO_TRAINER_MODEL_MEMORY_MODELS_H_

#include <torch/torch.h>

#include "trainer/model/model.h"

namespace mnemo::model {

class MemoryModelImpl : public ModelImpl {
 public:
  // The pending mails applied by the memory updater, then DepBloom's
  // refined replicas.
  UpdatedMemory UpdateMemory(const memory::NodeMemory& state,
                             const batch::BatchTensors& batch) override;
  torch::Tensor TargetEmbeddings(const batch::BatchTensors& batch,
                                 const UpdatedMemory& updated) override;
  LinkScores Embed(const batch::BatchTensors& batch,
                   const UpdatedMemory& updated) override;
  torch::Tensor PairLogits(const torch::Tensor& emb, const torch::Tensor& src,
                           const torch::Tensor& dst) override {
    return ScorePairs(emb, src, dst, pred1_, pred2_);
  }
  int64_t mail_dim() const {
    return 2 * options_.memory_dim + options_.edge_dim;
  }
  // Width of the node embeddings fed to the link predictor.
  virtual int64_t embedding_width() const = 0;

  // The memory updater (TGN: GRU, JODIE: RNN) on rows of msg and prev.
  torch::Tensor MemoryCell(const torch::Tensor& msg, const torch::Tensor& prev);

 protected:
  // Registers the time encoder and the memory updater (GRU or RNN); the
  // subclass then registers its embedding's layers and calls
  // RegisterHeads(). This order is the parameters' initialization order.
  MemoryModelImpl(const ModelOptions& options, bool gru);
  // DepBloom's refinement gate (options.refine) and the link predictor.
  void RegisterHeads();
  // [n] -> [n, time_dim]: cos(w * dt + b) (TGN Sec. 3.1; w initialized to
  // 10^-linspace(0,9)).
  torch::Tensor TimeEncode(const torch::Tensor& dt);
  // Embeddings of the batch's targets from the updated memory `mem`.
  virtual torch::Tensor EmbedTargets(const torch::Tensor& mem,
                                     const batch::BatchTensors& b) = 0;

  torch::nn::Linear time_w_{nullptr};

 private:
  // The memory of the batch's slots with their pending mails applied.
  torch::Tensor ApplyMail(const memory::NodeMemory& state,
                          const batch::BatchTensors& b);
  // The batch's memory with the refined replicas appended.
  torch::Tensor Refine(const torch::Tensor& mem, const batch::BatchTensors& b);

  torch::nn::GRUCell gru_{nullptr};
  torch::nn::RNNCell rnn_{nullptr};
  torch::nn::Linear refine_gate_{nullptr};
  torch::nn::Linear pred1_{nullptr}, pred2_{nullptr};
};

// TGN: GRU memory, one layer of temporal graph attention over the k most
// recent (or uniformly sampled) neighbours.
class TgnImpl final : public MemoryModelImpl {
 public:
  explicit TgnImpl(const ModelOptions& options);
  batch::BatchNeeds needs() const override { return {.neighbors = true}; }
  int64_t embedding_width() const override { return options_.embedding_dim; }

 protected:
  torch::Tensor EmbedTargets(const torch::Tensor& mem,
                             const batch::BatchTensors& b) override;

 private:
  // Graph attention: query from [memory, time(0)], keys/values from
  // [neighbour memory, edge features, time(dt)], projections split by input
  // part so the memory part is projected once per unique node.
  torch::nn::Linear q_mem_{nullptr}, q_time_{nullptr};
  torch::nn::Linear k_mem_{nullptr}, k_time_{nullptr}, k_edge_{nullptr};
  torch::nn::Linear v_mem_{nullptr}, v_time_{nullptr}, v_edge_{nullptr};
  torch::nn::Linear out_proj_{nullptr};
  torch::nn::Linear merge1_{nullptr}, merge2_{nullptr};
};

// JODIE: RNN memory, embedding m * (1 + W dt) with dt the normalized time
// since the target's last memory update.
class JodieImpl final : public MemoryModelImpl {
 public:
  explicit JodieImpl(const ModelOptions& options);
  batch::BatchNeeds needs() const override {
    return {.target_time_deltas = true};
  }
  int64_t embedding_width() const override { return options_.memory_dim; }

 protected:
  torch::Tensor EmbedTargets(const torch::Tensor& mem,
                             const batch::BatchTensors& b) override;

 private:
  torch::nn::Linear jodie_time_{nullptr};
};

}  // namespace mnemo::model

#endif  // MNEMO_TRAINER_MODEL_MEMORY_MODELS_H_
