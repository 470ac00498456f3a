#include "trainer/runtime/batch_builder.h"

#include <algorithm>
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
                           data::NeighborSampler* sampler, int chunks) {
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
  chunks_ = positives == nullptr && n > 0 ? std::max(1, chunks) : 1;
  std::vector<int64_t> nbr_slot;
  if (sampler != nullptr) {
    const int k = sampler->k();
    sampler->Sample(targets_.data(), target_time_.data(), 3 * n, &block_);
    nbr_slot.assign(3 * n * k, 0);
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
    pending_.nbr_dt = ToTensor(nbr_dt);
    pending_.nbr_mask = mask;
    if (log.edge_feature_dim > 0) {
      pending_.nbr_edge_feat = GatherEdgeFeatures(log, block_.eid);
    }
    if (hops_ >= 2) {
      // Padding slots (neighbour -1) have no neighbours of their own.
      const int64_t m = 3 * n * k;
      sampler->Sample(block_.nbr.data(), block_.t.data(), m, &block2_);
      std::vector<float> dt2(m * k, 0.0f);
      torch::Tensor mask2 = torch::zeros({m, k}, torch::kBool);
      bool* m2 = mask2.data_ptr<bool>();
      for (int64_t i = 0; i < m; ++i) {
        for (int j = 0; j < block2_.count[i]; ++j) {
          const int64_t s = i * k + j;
          dt2[s] = static_cast<float>(block_.t[i] - block2_.t[s]);
          m2[s] = true;
        }
      }
      pending_.nbr2_dt = ToTensor(dt2);
      pending_.nbr2_mask = mask2;
      if (log.edge_feature_dim > 0) {
        pending_.nbr2_edge_feat = GatherEdgeFeatures(log, block2_.eid);
      }
    }
  }
  BuildReplicas(chunks_, &nbr_slot);
  if (sampler != nullptr) pending_.nbr_slot = ToTensor(nbr_slot);
}

int64_t BatchBuilder::ReadSlot(int32_t node, int chunk) const {
  if (chunks_ > 1) {
    auto it = replica_of_.find(static_cast<int64_t>(node) * chunks_ + chunk);
    if (it != replica_of_.end()) {
      return static_cast<int64_t>(unique_.size()) + it->second;
    }
  }
  return slot_of_[node];
}

void BatchBuilder::BuildReplicas(int chunks, std::vector<int64_t>* nbr_slot) {
  replica_of_.clear();
  replica_self_.clear();
  replica_other_.clear();
  replica_event_.clear();
  if (chunks <= 1) return;
  const data::EventLog& log = *log_;
  const int64_t n = n_;
  chunk_size_ = (n + chunks - 1) / chunks;
  if (last_event_pos_.size() < slot_of_.size()) {
    last_event_pos_.assign(slot_of_.size(), -1);
  }
  const int k =
      nbr_slot->empty() ? 0 : static_cast<int>(nbr_slot->size() / (3 * n));
  // A read of `node` in micro-batch c goes through a replica when the node
  // had an event in an earlier micro-batch (its latest such event).
  auto read = [&](int32_t node, int c) -> int64_t {
    const int64_t pos = last_event_pos_[node];
    if (pos < 0) return slot_of_[node];
    const int64_t key = static_cast<int64_t>(node) * chunks + c;
    auto [it, fresh] = replica_of_.try_emplace(
        key, static_cast<int32_t>(replica_self_.size()));
    if (fresh) {
      const int64_t e = positives_[pos];
      const int32_t other = log.src[e] == node ? log.dst[e] : log.src[e];
      replica_self_.push_back(slot_of_[node]);
      replica_other_.push_back(slot_of_[other]);
      replica_event_.push_back(e);
    }
    return -1 - it->second;  // resolved to U + r below
  };
  for (int c = 0; c < chunks; ++c) {
    const int64_t begin = c * chunk_size_;
    const int64_t end = std::min(n, begin + chunk_size_);
    for (int64_t i = begin; i < end; ++i) {
      for (int64_t t : {i, n + i, 2 * n + i}) {
        target_slot_[t] = read(targets_[t], c);
        for (int j = 0; j < k; ++j) {
          const int64_t s = t * k + j;
          if (j < block_.count[t]) (*nbr_slot)[s] = read(block_.nbr[s], c);
        }
      }
    }
    for (int64_t i = begin; i < end; ++i) {
      const int64_t e = positives_[i];
      last_event_pos_[log.src[e]] = i;
      last_event_pos_[log.dst[e]] = i;
    }
  }
  for (int64_t e : positives_) {
    last_event_pos_[log.src[e]] = last_event_pos_[log.dst[e]] = -1;
  }
  const int64_t u = static_cast<int64_t>(unique_.size());
  for (int64_t& s : target_slot_) {
    if (s < 0) s = u + (-1 - s);
  }
  for (int64_t& s : *nbr_slot) {
    if (s < 0) s = u + (-1 - s);
  }
}

void BatchBuilder::Finish(const memory::NodeMemory& state,
                          const model::TimeGapStats* time_gaps,
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
    const int64_t row = state.Row(u);
    if (state.has_mail[row]) {
      mail_slot.push_back(static_cast<int64_t>(s));
      mail_node.push_back(row);
      mail_dt.push_back(
          static_cast<float>(state.mail_time[row] - state.last_update[row]));
    }
  }
  batch->mail_slot = ToTensor(mail_slot);
  batch->mail_node = ToTensor(mail_node);
  batch->mail_dt = ToTensor(mail_dt);

  if (time_gaps != nullptr) {
    const model::TimeGapStats& g = *time_gaps;
    std::vector<float> dt(3 * n);
    for (int64_t i = 0; i < 3 * n; ++i) {
      const int64_t u = state.Row(targets_[i]);
      const double last =
          state.has_mail[u] ? state.mail_time[u] : state.last_update[u];
      const bool src = i < n;
      dt[i] = static_cast<float>(
          (target_time_[i] - last - (src ? g.src_mean : g.dst_mean)) /
          (src ? g.src_std : g.dst_std));
    }
    batch->target_dt = ToTensor(dt);
  }
  batch->unique_nodes = ToTensor(unique_);
  batch->target_slot = ToTensor(target_slot_);
  if (!replica_self_.empty()) {
    std::vector<float> dt(replica_event_.size());
    for (size_t r = 0; r < replica_event_.size(); ++r) {
      const int64_t u = state.Row(unique_[replica_self_[r]]);
      const double mem_time =
          state.has_mail[u] ? state.mail_time[u] : state.last_update[u];
      dt[r] = static_cast<float>(log.t[replica_event_[r]] - mem_time);
    }
    batch->replica_self = ToTensor(replica_self_);
    batch->replica_other = ToTensor(replica_other_);
    batch->replica_dt = ToTensor(dt);
    if (log.edge_feature_dim > 0) {
      batch->replica_edge_feat = GatherEdgeFeatures(log, replica_event_);
    }
  }

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
    // IMR: the state after the batch is the latest replica's.
    const int chunk = chunks_ > 1 ? static_cast<int>(i / chunk_size_) : 0;
    for (int r = 0; r < 2; ++r) {
      const int32_t u = ends[r];
      const int32_t s = slot_of_[u];
      if (done[s]) continue;
      done[s] = 1;
      pos_nodes.push_back(u);
      self_slot.push_back(ReadSlot(u, chunk));
      other_slot.push_back(ReadSlot(ends[1 - r], chunk));
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

}  // namespace mnemo::runtime
