// Memory-based temporal graph models (TGN, JODIE) as LibTorch modules.
//
// The model is split the way TGN/TGL compute it:
//   1. memory update: pending messages ("mail") of the nodes a batch needs
//      are applied by the memory updater (GRU for TGN, RNN for JODIE);
//   2. embedding: temporal graph attention over the most recent neighbours
//      (TGN) or the time projection m * (1 + W dt) (JODIE);
//   3. link prediction: an MLP over the (source, destination) embeddings.
// The node state itself (memory, mail, times) lives outside the module, in
// NodeState below, so the runtime can move it (checkpoints, later: pull/push
// over gRPC). Batch index tensors are prepared by the runtime.
#ifndef MNEMO_TRAINER_MODEL_TEMPORAL_MODEL_H_
#define MNEMO_TRAINER_MODEL_TEMPORAL_MODEL_H_

#include <torch/torch.h>

#include <string>

namespace mnemo::model {

enum class ModelKind { kTgn, kJodie };

struct TemporalModelOptions {
  ModelKind kind = ModelKind::kTgn;
  int64_t memory_dim = 100;     // node memory width
  int64_t time_dim = 100;       // time encoding width
  int64_t embedding_dim = 100;  // output embedding width (TGN)
  int64_t edge_dim = 0;         // edge feature width (0: none)
  int64_t heads = 2;            // attention heads (TGN)
  double dropout = 0.2;         // attention dropout (TGN)
  // DepBloom intra-batch memory refinement: the memory updater applied to a
  // node's message from an earlier micro-batch (REFINE) and a learned gate
  // between the refined and the plain update (COMB), Eq. 3.
  bool refine = false;
};

// The per-node state the model carries between batches (DESIGN.md "Node
// state"): memory, the time of the last memory update, and the last pending
// raw message (mail: [memory_self, memory_other, edge features]) with its
// time. Times are kept in double precision on the CPU side.
struct NodeState {
  torch::Tensor memory;             // [N, memory_dim] float
  torch::Tensor mail;               // [N, 2*memory_dim + edge_dim] float
  std::vector<double> last_update;  // [N]
  std::vector<double> mail_time;    // [N]
  std::vector<uint8_t> has_mail;    // [N]
  // Index (in the event log) of the latest event applied to the node: the
  // event its mail comes from; -1 before any. Strictly increasing in the
  // order events are applied, so it versions the state (DESIGN.md).
  std::vector<int64_t> last_event;  // [N]

  void Reset(int64_t num_nodes, int64_t memory_dim, int64_t mail_dim);
  NodeState Clone() const;
  int64_t num_nodes() const { return memory.size(0); }
};

// Index tensors of one batch of B positive events with B negatives.
// Targets are [sources; destinations; negatives] (3B rows). `unique` holds
// the distinct nodes the batch reads; every other index refers to a slot in
// `unique`.
struct BatchTensors {
  int64_t batch_size = 0;      // B
  torch::Tensor unique_nodes;  // [U] int64 node ids
  torch::Tensor target_slot;   // [3B] int64
  // Pending messages to apply before the batch (memory update).
  torch::Tensor mail_slot;  // [Mu] int64 slots with mail
  torch::Tensor mail_node;  // [Mu] int64 their node ids
  torch::Tensor mail_dt;    // [Mu] float: mail time - last update
  // TGN: k neighbour slots per target (padding: slot 0 and mask false).
  int64_t k = 0;
  torch::Tensor nbr_slot;       // [3B*k] int64
  torch::Tensor nbr_dt;         // [3B*k] float: target time - edge time
  torch::Tensor nbr_mask;       // [3B, k] bool
  torch::Tensor nbr_edge_feat;  // [3B*k, edge_dim] float (when edge_dim > 0)
  // JODIE: normalized time since each target's last memory update.
  torch::Tensor target_dt;  // [3B] float
  // DepBloom intra-batch memory refinement (Eq. 3): R replicas of nodes read
  // in a later micro-batch than one of their events. Replica r refines the
  // memory of slot replica_self[r] with the message of that earlier event
  // (with slot replica_other[r] as the other endpoint); it is slot U + r of
  // the batch's memory, and target/neighbour slots may point to it.
  torch::Tensor replica_self;       // [R] int64
  torch::Tensor replica_other;      // [R] int64
  torch::Tensor replica_dt;         // [R] float: event time - memory time
  torch::Tensor replica_edge_feat;  // [R, edge_dim] (edge_dim > 0)
};

class TemporalModelImpl : public torch::nn::Module {
 public:
  explicit TemporalModelImpl(const TemporalModelOptions& options);

  struct Output {
    // [U (+ R replicas), memory_dim]: updated memory of the unique nodes
    // (then the refined replicas).
    torch::Tensor memory;
    torch::Tensor pos_logits;  // [B]
    torch::Tensor neg_logits;  // [B]
  };

  // Runs memory update, embedding and link prediction for one batch, reading
  // (not changing) `state`.
  Output Forward(const NodeState& state, const BatchTensors& batch);

  // BCE-with-logits on positives (label 1) and negatives (label 0), as the
  // TGN reference: mean over positives + mean over negatives.
  static torch::Tensor Loss(const Output& out);

  const TemporalModelOptions& options() const { return options_; }
  int64_t mail_dim() const {
    return 2 * options_.memory_dim + options_.edge_dim;
  }
  // Width of the node embeddings fed to the link predictor (TGN:
  // embedding_dim; JODIE: memory_dim).
  int64_t embedding_width() const;

 private:
  torch::Tensor TimeEncode(const torch::Tensor& dt);  // [n] -> [n, time_dim]
  torch::Tensor UpdateMemory(const NodeState& state, const BatchTensors& b);
  // The memory updater (TGN: GRU, JODIE: RNN) on rows of msg and prev.
  torch::Tensor MemoryCell(const torch::Tensor& msg, const torch::Tensor& prev);
  torch::Tensor EmbedTgn(const torch::Tensor& mem, const BatchTensors& b);
  torch::Tensor EmbedJodie(const torch::Tensor& mem, const BatchTensors& b);

  TemporalModelOptions options_;
  // Time encoder cos(w * dt + b) (TGN Sec. 3.1; w initialized to
  // 10^-linspace(0,9)).
  torch::nn::Linear time_w_{nullptr};
  // Memory updater.
  torch::nn::GRUCell gru_{nullptr};
  torch::nn::RNNCell rnn_{nullptr};
  // TGN graph attention: query from [memory, time(0)], keys/values from
  // [neighbour memory, edge features, time(dt)], projections split by input
  // part so the memory part is projected once per unique node.
  torch::nn::Linear q_mem_{nullptr}, q_time_{nullptr};
  torch::nn::Linear k_mem_{nullptr}, k_time_{nullptr}, k_edge_{nullptr};
  torch::nn::Linear v_mem_{nullptr}, v_time_{nullptr}, v_edge_{nullptr};
  torch::nn::Linear out_proj_{nullptr};
  torch::nn::Linear merge1_{nullptr}, merge2_{nullptr};
  // JODIE time projection.
  torch::nn::Linear jodie_time_{nullptr};
  // DepBloom refinement (options.refine).
  torch::nn::Linear refine_gate_{nullptr};
  // The batch's memory with the refined replicas appended.
  torch::Tensor Refine(const torch::Tensor& mem, const BatchTensors& b);
  // Link predictor MLP.
  torch::nn::Linear pred1_{nullptr}, pred2_{nullptr};
};
TORCH_MODULE(TemporalModel);

// Parameter checksum (sum of all parameters, double precision).
double ParameterChecksum(torch::nn::Module& module);

}  // namespace mnemo::model

#endif  // MNEMO_TRAINER_MODEL_TEMPORAL_MODEL_H_
