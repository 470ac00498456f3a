#include "trainer/runtime/batch_builder.h"

#include <cstring>

namespace mnemo::runtime {
namespace {
torch::Tensor ToTensor(const std::vector<int64_t>& v) {
  return torch::from_blob(const_cast<int64_t*>(v.data()),
                          {static_cast<int64_t>(v.size())}, torch::kInt64)
      .clone();
}
torch::Tensor ToTensor(const std::vector<float>& v) {
  return torch::from_blob(const_cast<float*>(v.data()),
                          {static_cast<int64_t>(v.size())}, torch::kFloat)
      .clone();
}
torch::Tensor GatherEdgeFeatures(const data::EventLog& log,
                                 const std::vector<int64_t>& events) {
  const int64_t dim = log.edge_feature_dim;
  torch::Tensor out = torch::zeros({static_cast<int64_t>(events.size()), dim});
  float* dst = out.data_ptr<float>();
  for (size_t i = 0; i < events.size(); ++i) {
    if (events[i] >= 0) {
      std::memcpy(dst + i * dim, log.edge_feature(events[i]),
                  dim * sizeof(float));
    }
  }
  return out;
}
}  // namespace

BatchBuilder::BatchBuilder(const data::EventLog* log, int64_t num_nodes)
    : log_(log), slot_of_(num_nodes, -1) {}

int32_t BatchBuilder::SlotOf(int32_t node) {
  int32_t& s = slot_of_[node];
  if (s < 0) {
    s = static_cast<int32_t>(unique_.size());
    unique_.push_back(node);
  }
  return s;
}

void BatchBuilder::Prepare(const int64_t* events, const int32_t* negatives,
                           int64_t n, const int64_t* positives, int64_t n_pos,
                           data::NeighborSampler* sampler) {
  const data::EventLog& log = *log_;
  for (int64_t u : unique_) slot_of_[u] = -1;
  unique_.clear();
  n_ = n;
  targets_.resize(3 * n);
  target_time_.resize(3 * n);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t e = events[i];
    targets_[i] = log.src[e];
    targets_[n + i] = log.dst[e];
    targets_[2 * n + i] = negatives[i];
    target_time_[i] = target_time_[n + i] = target_time_[2 * n + i] = log.t[e];
  }
  target_slot_.resize(3 * n);
  for (int64_t i = 0; i < 3 * n; ++i) target_slot_[i] = SlotOf(targets_[i]);
  if (positives == nullptr) {
    positives_.assign(events, events + n);
  } else {
    positives_.assign(positives, positives + n_pos);
  }
  for (int64_t e : positives_) {
    SlotOf(log.src[e]);
    SlotOf(log.dst[e]);
  }

  pending_ = model::BatchTensors();
  if (sampler != nullptr) {
    const int k = sampler->k();
    sampler->Sample(targets_.data(), target_time_.data(), 3 * n, &block_);
    std::vector<int64_t> nbr_slot(3 * n * k, 0);
    std::vector<float> nbr_dt(3 * n * k, 0.0f);
    torch::Tensor mask = torch::zeros({3 * n, k}, torch::kBool);
    bool* m = mask.data_ptr<bool>();
    for (int64_t i = 0; i < 3 * n; ++i) {
      for (int j = 0; j < block_.count[i]; ++j) {
        const int64_t s = i * k + j;
        nbr_slot[s] = SlotOf(block_.nbr[s]);
        nbr_dt[s] = static_cast<float>(target_time_[i] - block_.t[s]);
        m[s] = true;
      }
    }
    pending_.k = k;
    pending_.nbr_slot = ToTensor(nbr_slot);
    pending_.nbr_dt = ToTensor(nbr_dt);
    pending_.nbr_mask = mask;
    if (log.edge_feature_dim > 0) {
      pending_.nbr_edge_feat = GatherEdgeFeatures(log, block_.eid);
    }
  }
}

void BatchBuilder::Finish(const model::NodeState& state,
                          const JodieTimeStats* jodie,
                          model::BatchTensors* batch, PositiveUpdate* update) {
  const data::EventLog& log = *log_;
  const int64_t n = n_;
  *batch = std::move(pending_);
  pending_ = model::BatchTensors();
  batch->batch_size = n;

  // Pending mail of every node the batch reads.
  std::vector<int64_t> mail_slot, mail_node;
  std::vector<float> mail_dt;
  for (size_t s = 0; s < unique_.size(); ++s) {
    const int64_t u = unique_[s];
    if (state.has_mail[u]) {
      mail_slot.push_back(static_cast<int64_t>(s));
      mail_node.push_back(u);
      mail_dt.push_back(
          static_cast<float>(state.mail_time[u] - state.last_update[u]));
    }
  }
  batch->mail_slot = ToTensor(mail_slot);
  batch->mail_node = ToTensor(mail_node);
  batch->mail_dt = ToTensor(mail_dt);

  if (jodie != nullptr) {
    std::vector<float> dt(3 * n);
    for (int64_t i = 0; i < 3 * n; ++i) {
      const int32_t u = targets_[i];
      const double last =
          state.has_mail[u] ? state.mail_time[u] : state.last_update[u];
      const bool src = i < n;
      dt[i] = static_cast<float>(
          (target_time_[i] - last - (src ? jodie->src_mean : jodie->dst_mean)) /
          (src ? jodie->src_std : jodie->dst_std));
    }
    batch->target_dt = ToTensor(dt);
  }
  batch->unique_nodes = ToTensor(unique_);
  batch->target_slot = ToTensor(target_slot_);

  // Positives: for each node its latest positive event in the batch. Walk
  // backwards: the first time a node is seen is its latest event.
  std::vector<int64_t> pos_nodes, self_slot, other_slot, pos_event;
  update->node_ids.clear();
  update->event_time.clear();
  update->event_index.clear();
  std::vector<uint8_t> done(unique_.size(), 0);
  for (int64_t i = static_cast<int64_t>(positives_.size()) - 1; i >= 0; --i) {
    const int64_t e = positives_[i];
    const int32_t ends[2] = {log.src[e], log.dst[e]};
    for (int r = 0; r < 2; ++r) {
      const int32_t u = ends[r];
      const int32_t s = slot_of_[u];
      if (done[s]) continue;
      done[s] = 1;
      pos_nodes.push_back(u);
      self_slot.push_back(s);
      other_slot.push_back(slot_of_[ends[1 - r]]);
      pos_event.push_back(e);
      update->node_ids.push_back(u);
      update->event_time.push_back(log.t[e]);
      update->event_index.push_back(e);
    }
  }
  update->nodes = ToTensor(pos_nodes);
  update->self_slot = ToTensor(self_slot);
  update->other_slot = ToTensor(other_slot);
  update->edge_feat = torch::Tensor();
  if (log.edge_feature_dim > 0) {
    update->edge_feat = GatherEdgeFeatures(log, pos_event);
  }
}

void ApplyPositiveUpdate(const model::BatchTensors& batch,
                         const PositiveUpdate& update,
                         const torch::Tensor& memory, model::NodeState* state) {
  torch::NoGradGuard guard;
  torch::Tensor mem = memory.detach().to(torch::kFloat);
  torch::Tensor self = mem.index_select(0, update.self_slot);
  state->memory.index_copy_(0, update.nodes, self);
  std::vector<torch::Tensor> parts = {self,
                                      mem.index_select(0, update.other_slot)};
  if (update.edge_feat.defined()) parts.push_back(update.edge_feat);
  state->mail.index_copy_(0, update.nodes, torch::cat(parts, 1));
  for (size_t i = 0; i < update.node_ids.size(); ++i) {
    const int32_t u = update.node_ids[i];
    if (state->has_mail[u]) state->last_update[u] = state->mail_time[u];
    state->mail_time[u] = update.event_time[i];
    state->has_mail[u] = 1;
    state->last_event[u] = update.event_index[i];
  }
}

}  // namespace mnemo::runtime
