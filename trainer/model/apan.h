// APAN (Wang et al., SIGMOD 2021) as TGL configures it: each node keeps its
// memory and a mailbox of its last k mails (k = 10); a batch's events send
// their mails to both endpoints and to the endpoints' most recent
// neighbours (asynchronous propagation); a node is read through attention
// of its memory over its mailbox, and that updated memory, layer-normed, is
// its embedding.
//
// Memory update ("transformer" updater): q = W_q m, keys and values from
// [mail, time(t - mail time)] per filled slot, LeakyReLU(0.2) scores per
// head, softmax over the slots, then ReLU(W (LayerNorm(sum att v + m))).
// A mail is [updated memory of the node, of the other endpoint, edge
// features] of the event; each node receives at most one mail per batch,
// the latest event's that reaches it (its own wins a tie with a
// neighbour's).
#ifndef MNEMO_TRAINER_MODEL_APAN_H_
#define MNEMO_TRAINER_MODEL_APAN_H_

#include <torch/torch.h>

#include "trainer/model/model.h"

namespace mnemo::model {

class ApanImpl final : public ModelImpl {
 public:
  explicit ApanImpl(const ModelOptions& options);
  batch::BatchNeeds needs() const override {
    return {.mail_to_neighbors = true,
            .tgl_mailbox = options_.apan_mailbox == ApanMailbox::kTgl};
  }
  // memory: the batch's slots, unchanged; rows: the updated memory of every
  // query row (BatchTensors::query_slot).
  // Each query row's memory from its mailbox (UpdatedMemory::rows).
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

  // The memory update of `mem` [R, d] over `mails` [R, k, mail_dim] whose
  // slots are `mask` [R, k], `dt` [R, k] before the query.
  torch::Tensor AttendMailbox(const torch::Tensor& mem,
                              const torch::Tensor& mails,
                              const torch::Tensor& dt,
                              const torch::Tensor& mask);

 private:
  torch::nn::Linear time_w_{nullptr};
  torch::nn::Linear w_q_{nullptr}, w_k_{nullptr}, w_v_{nullptr};
  torch::nn::LayerNorm update_norm_{nullptr};
  torch::nn::Linear mlp_{nullptr};
  torch::nn::LayerNorm embed_norm_{nullptr};
  torch::nn::Linear pred1_{nullptr}, pred2_{nullptr};
};

}  // namespace mnemo::model

#endif  // MNEMO_TRAINER_MODEL_APAN_H_
