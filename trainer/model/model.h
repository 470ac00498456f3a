// The model interface: what the engine, evaluator, checkpoints, policies and
// launcher know of a temporal graph model, whichever runs.
//
// A model reads one batch (BatchTensors: index tensors prepared by the
// runtime's batch builder) and the node memory (trainer/memory/), and
// returns the batch's updated memory rows and its link logits; the runtime
// applies the update. It declares what it keeps per node (layout()) and what
// its batches must carry (needs()). Implementations: memory_models.h (TGN,
// JODIE), apan.h (APAN), tgat.h (TGAT), dysat.h (DySAT).
#ifndef MNEMO_TRAINER_MODEL_MODEL_H_
#define MNEMO_TRAINER_MODEL_MODEL_H_

#include <torch/torch.h>

#include <memory>

#include "trainer/batch/batch.h"
#include "trainer/memory/node_memory.h"
#include "trainer/model/model_spec.h"

namespace mnemo::model {

// What a batch's memory update computes (the step's update stage; the
// runtime writes it into node memory, NodeMemory::Apply).
struct UpdatedMemory {
  // [U (+ R replicas), memory_dim]: updated memory of the unique nodes
  // (then the refined replicas).
  torch::Tensor memory;
  // A mailbox model's updated memory of each query row [R, memory_dim]
  // (BatchTensors::query_slot); NodeMemory::Apply reads it.
  torch::Tensor rows;
};

// A batch's link scores (the step's embed stage).
struct LinkScores {
  torch::Tensor pos_logits;  // [B]
  torch::Tensor neg_logits;  // [B]
};

// Both stages' results.
struct ModelOutput : UpdatedMemory, LinkScores {};

class ModelImpl : public torch::nn::Module {
 public:
  const ModelOptions& options() const { return options_; }
  ModelKind kind() const { return options_.kind; }
  // What this model keeps per node.
  memory::RecordLayout layout() const { return LayoutOf(options_); }
  virtual batch::BatchNeeds needs() const = 0;

  // The memory update of the batch's nodes, reading (not changing)
  // `state`: the pending mails applied by the memory updater (TGN, JODIE),
  // the mailbox attended over (APAN), nothing (TGAT, DySAT: an empty
  // [U, 0] memory).
  virtual UpdatedMemory UpdateMemory(const memory::NodeMemory& state,
                                     const batch::BatchTensors& batch) = 0;
  // The targets' embeddings [3B, d] from the updated memory: the sources',
  // the destinations' and the negatives' (what Embed scores; `mnemo serve`
  // answers them for nodes).
  virtual torch::Tensor TargetEmbeddings(const batch::BatchTensors& batch,
                                         const UpdatedMemory& updated) = 0;
  // The targets' embeddings and their link scores.
  virtual LinkScores Embed(const batch::BatchTensors& batch,
                           const UpdatedMemory& updated) = 0;
  // The link logits [P] of the pairs (emb[src[i]], emb[dst[i]]): `emb`
  // [N, d] embeddings (TargetEmbeddings' rows), `src` and `dst` [P] int64
  // rows of it. What Embed scores, for any pairs of embedded nodes.
  virtual torch::Tensor PairLogits(const torch::Tensor& emb,
                                   const torch::Tensor& src,
                                   const torch::Tensor& dst) = 0;
  // Both, in order.
  ModelOutput Forward(const memory::NodeMemory& state,
                      const batch::BatchTensors& batch) {
    ModelOutput out;
    static_cast<UpdatedMemory&>(out) = UpdateMemory(state, batch);
    static_cast<LinkScores&>(out) = Embed(batch, out);
    return out;
  }

 protected:
  explicit ModelImpl(const ModelOptions& options) : options_(options) {}
  ModelOptions options_;
};

using Model = std::shared_ptr<ModelImpl>;

// The model `options.kind` names (its defaults resolved), initialized from
// torch's generator.
inline Model MakeModel(const ModelOptions& options) {
  return SpecOf(options.kind).make(WithDefaults(options));
}

// A time encoder cos(w dt + b) (TGN Sec. 3.1) as TGN initializes it:
// w = 10^-linspace(0, 9, time_dim), b = 0. Apply as cos(encoder(dt)).
torch::nn::Linear MakeTimeEncoder(int64_t time_dim);

// The link predictor: `emb` [3B, d] holds the sources', destinations' and
// negatives' embeddings; `pred1` (Linear(2d, d), its weight the [source |
// destination] parts) and `pred2` (Linear(d, 1)) score (source,
// destination) and (source, negative): pos_logits, neg_logits [B].
LinkScores PredictLinks(const torch::Tensor& emb, int64_t batch_size,
                        torch::nn::Linear& pred1, torch::nn::Linear& pred2);

// PredictLinks for any pairs: the logits [P] of (emb[src[i]], emb[dst[i]])
// (`src`, `dst` [P] int64 rows of `emb` [N, d]); each node's halves of
// pred1 computed once.
torch::Tensor ScorePairs(const torch::Tensor& emb, const torch::Tensor& src,
                         const torch::Tensor& dst, torch::nn::Linear& pred1,
                         torch::nn::Linear& pred2);

// The memory update of a model that keeps no node memory (TGAT, DySAT): an
// empty [U, 0] float memory on the batch's device.
UpdatedMemory NoMemory(const batch::BatchTensors& b);

// Attention of n queries over k slots each, as TGL's attention layers and
// APAN's memory updater compute it: per head, scores LeakyReLU_0.2(q . k),
// softmax over the slots `mask` [n, k] marks valid (a query with none
// aggregates nothing), dropout on the weights, the weighted sum of values.
// `q` [n, heads, dh], `key` and `value` [n, k, heads, dh]; returns
// [n, heads * dh].
torch::Tensor SlotAttention(const torch::Tensor& q, const torch::Tensor& key,
                            const torch::Tensor& value,
                            const torch::Tensor& mask, double dropout,
                            bool training);

// BCE-with-logits on positives (label 1) and negatives (label 0), as the
// TGN reference: mean over positives + mean over negatives.
torch::Tensor Loss(const LinkScores& scores);

// Parameter checksum (sum of all parameters, double precision).
double ParameterChecksum(torch::nn::Module& module);

}  // namespace mnemo::model

#endif  // MNEMO_TRAINER_MODEL_MODEL_H_
