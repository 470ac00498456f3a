#include "trainer/batch/builder.h"

#include <algorithm>
#include <cstring>

#include "trainer/batch/staging.h"
#include "trainer/platform/cuda_transfer.h"

namespace mnemo::batch {
namespace {
torch::Tensor ToTensor(const std::vector<int64_t>& v) {
  return torch::from_blob(const_cast<int64_t*>(v.data()),
                          {static_cast<int64_t>(v.size())}, torch::kInt64)
      .clone();
}
// The rows of `nodes` in `state` (the ids themselves when it holds every
// node). A node the state does not hold is a caller's error.
torch::Tensor RowTensor(const memory::NodeMemory& state,
                        const std::vector<int64_t>& nodes) {
  if (!state.holds_subset()) return ToTensor(nodes);
  torch::Tensor rows =
      torch::empty({static_cast<int64_t>(nodes.size())}, torch::kInt64);
  int64_t* r = rows.data_ptr<int64_t>();
  for (size_t i = 0; i < nodes.size(); ++i) {
    r[i] = state.Row(nodes[i]);
    TORCH_CHECK(r[i] >= 0, "batch reads node ", nodes[i],
                ", which this node memory does not hold");
  }
  return rows;
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
// Every tensor of a batch and its update, for staging.
template <typename F>
void ForEachTensor(batch::BatchTensors* b, PositiveUpdate* u, F f) {
  for (torch::Tensor* t : {&b->unique_rows,    &b->target_slot,
                           &b->mail_slot,      &b->mail_node,
                           &b->mail_dt,        &b->nbr_slot,
                           &b->nbr_dt,         &b->nbr_mask,
                           &b->nbr_edge_feat,  &b->nbr2_dt,
                           &b->nbr2_mask,      &b->nbr2_edge_feat,
                           &b->snap_nodes,     &b->snap_target,
                           &b->snap_node,      &b->snap_mask,
                           &b->snap_edge_feat, &b->snap2_node,
                           &b->snap2_mask,     &b->snap2_edge_feat,
                           &b->query_slot,     &b->mailbox_dt,
                           &b->mailbox_mask,   &b->target_dt,
                           &b->replica_self,   &b->replica_other,
                           &b->replica_dt,     &b->replica_edge_feat,
                           &u->rows,           &u->self_slot,
                           &u->other_slot,     &u->edge_feat,
                           &u->memory_row,     &u->self_row,
                           &u->other_row}) {
    if (t->defined()) f(t);
  }
}
}  // namespace

void BatchBuilder::Stage(batch::BatchTensors* batch,
                         PositiveUpdate* update) const {
  if (device_.is_cpu()) return;
  std::vector<torch::Tensor*> tensors;
  ForEachTensor(batch, update, [&](torch::Tensor* t) { tensors.push_back(t); });
  const torch::Device device = device_;
  StagePacked(tensors, /*pinned=*/true, [device](const torch::Tensor& host) {
    return platform::CopyToDeviceOnCopyStream(host, device);
  });
}

BatchBuilder::BatchBuilder(const data::EventLog* log, int64_t num_nodes)
    : log_(log), slots_(num_nodes) {}

void BatchBuilder::Prepare(const int64_t* events, const int32_t* negatives,
                           int64_t n, const int64_t* positives, int64_t n_pos,
                           data::NeighborSampler* sampler, int chunks) {
  slots_.Clear();
  SetTargets(events, negatives, n);
  SetPositives(positives != nullptr ? positives : events,
               positives != nullptr ? n_pos : n, positives != nullptr);
  pending_ = batch::BatchTensors();
  chunks_ = positives == nullptr && n > 0 ? std::max(1, chunks) : 1;
  // The sampler's draws in this order: the positives' endpoints, then the
  // targets (per snapshot, or one hop and then the second).
  std::vector<int64_t> nbr_slot;
  if (sampler != nullptr && needs_.mail_to_neighbors) {
    SamplePositiveNeighbors(sampler);
  }
  if (sampler != nullptr && needs_.neighbors && needs_.snapshots > 0) {
    SampleSnapshots(sampler);
  } else if (sampler != nullptr && needs_.neighbors) {
    SampleNeighbors(sampler, &nbr_slot);
  }
  BuildReplicas(chunks_, &nbr_slot);
  if (sampler != nullptr && needs_.neighbors && needs_.snapshots == 0) {
    pending_.nbr_slot = ToTensor(nbr_slot);
  }
}

void BatchBuilder::SetTargets(const int64_t* events, const int32_t* negatives,
                              int64_t n) {
  const data::EventLog& log = *log_;
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
  for (int64_t i = 0; i < 3 * n; ++i)
    target_slot_[i] = slots_.Insert(targets_[i]);
}

void BatchBuilder::SetPositives(const int64_t* positives, int64_t n_pos,
                                bool replay) {
  const data::EventLog& log = *log_;
  replay_ = replay;
  positives_.assign(positives, positives + n_pos);
  for (int64_t e : positives_) {
    slots_.Insert(log.src[e]);
    slots_.Insert(log.dst[e]);
  }
}

void BatchBuilder::SamplePositiveNeighbors(data::NeighborSampler* sampler) {
  const data::EventLog& log = *log_;
  // Both endpoints of each positive event, at its time.
  std::vector<int32_t> nodes(2 * positives_.size());
  std::vector<double> times(2 * positives_.size());
  for (size_t i = 0; i < positives_.size(); ++i) {
    const int64_t e = positives_[i];
    nodes[2 * i] = log.src[e];
    nodes[2 * i + 1] = log.dst[e];
    times[2 * i] = times[2 * i + 1] = log.t[e];
  }
  sampler->Sample(nodes.data(), times.data(), nodes.size(), &block_pos_);
}

void BatchBuilder::SampleNeighbors(data::NeighborSampler* sampler,
                                   std::vector<int64_t>* nbr_slot) {
  const data::EventLog& log = *log_;
  const int64_t n = n_;
  const int k = sampler->k();
  sampler->Sample(targets_.data(), target_time_.data(), 3 * n, &block_);
  nbr_slot->assign(3 * n * k, 0);
  int64_t* const slot = nbr_slot->data();
  std::vector<float> nbr_dt(3 * n * k, 0.0f);
  torch::Tensor mask = torch::zeros({3 * n, k}, torch::kBool);
  bool* m = mask.data_ptr<bool>();
  for (int64_t i = 0; i < 3 * n; ++i) {
    for (int j = 0; j < block_.count[i]; ++j) {
      const int64_t s = i * k + j;
      slot[s] = slots_.Insert(block_.nbr[s]);
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
  if (needs_.neighbor_hops >= 2) SampleSecondHop(sampler);
}

void BatchBuilder::SampleSecondHop(data::NeighborSampler* sampler) {
  const data::EventLog& log = *log_;
  const int k = sampler->k();
  // Padding slots (neighbour -1) have no neighbours of their own.
  const int64_t m = 3 * n_ * k;
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

void BatchBuilder::SampleSnapshots(data::NeighborSampler* sampler) {
  const data::EventLog& log = *log_;
  const int64_t h_count = needs_.snapshots;
  const double span = needs_.snapshot_span;
  const int64_t q = 3 * n_;
  const int64_t k = sampler->k();
  const bool two_hops = needs_.neighbor_hops >= 2;
  const int64_t m = q * k;  // hop-1 slots per snapshot
  torch::Tensor node = torch::zeros({h_count, m}, torch::kInt64);
  torch::Tensor mask = torch::zeros({h_count, q, k}, torch::kBool);
  torch::Tensor node2, mask2;
  if (two_hops) {
    node2 = torch::zeros({h_count, m * k}, torch::kInt64);
    mask2 = torch::zeros({h_count, m, k}, torch::kBool);
  }
  std::vector<torch::Tensor> feat, feat2;
  std::vector<double> from(q), to(q), from2, to2;
  // Rows of the distinct nodes read, targets first.
  snap_rows_.Reserve(log.num_nodes);
  auto row = [&](int32_t v) -> int64_t { return snap_rows_.Insert(v); };
  std::vector<int64_t> target_row(q);
  for (int64_t i = 0; i < q; ++i) target_row[i] = row(targets_[i]);
  for (int64_t h = 0; h < h_count; ++h) {
    // Snapshot h of H covers [t - (H - h) span, t - (H - h - 1) span).
    for (int64_t i = 0; i < q; ++i) {
      to[i] = target_time_[i] - static_cast<double>(h_count - h - 1) * span;
      from[i] = to[i] - span;
    }
    sampler->SampleBetween(targets_.data(), from.data(), to.data(), q, &block_);
    int64_t* nd = node[h].data_ptr<int64_t>();
    bool* mk = mask[h].data_ptr<bool>();
    for (int64_t s = 0; s < m; ++s) {
      if (block_.nbr[s] >= 0) {
        nd[s] = row(block_.nbr[s]);
        mk[s] = true;
      }
    }
    if (log.edge_feature_dim > 0) {
      feat.push_back(GatherEdgeFeatures(log, block_.eid));
    }
    if (!two_hops) continue;
    // Each slot's window is its target's (padding slots, node -1, have
    // no neighbours).
    from2.resize(m);
    to2.resize(m);
    for (int64_t s = 0; s < m; ++s) {
      from2[s] = from[s / k];
      to2[s] = to[s / k];
    }
    sampler->SampleBetween(block_.nbr.data(), from2.data(), to2.data(), m,
                           &block2_);
    int64_t* nd2 = node2[h].data_ptr<int64_t>();
    bool* mk2 = mask2[h].data_ptr<bool>();
    for (int64_t s = 0; s < m * k; ++s) {
      if (block2_.nbr[s] >= 0) {
        nd2[s] = row(block2_.nbr[s]);
        mk2[s] = true;
      }
    }
    if (log.edge_feature_dim > 0) {
      feat2.push_back(GatherEdgeFeatures(log, block2_.eid));
    }
  }
  pending_.k = k;
  pending_.snap_nodes = ToTensor(snap_rows_.ids());
  snap_rows_.Clear();
  pending_.snap_target = ToTensor(target_row);
  pending_.snap_node = node;
  pending_.snap_mask = mask;
  pending_.snap2_node = node2;
  pending_.snap2_mask = mask2;
  if (!feat.empty()) pending_.snap_edge_feat = torch::stack(feat);
  if (!feat2.empty()) pending_.snap2_edge_feat = torch::stack(feat2);
}

int64_t BatchBuilder::ReadSlot(int32_t node, int chunk) const {
  if (chunks_ > 1) {
    auto it = replica_of_.find(static_cast<int64_t>(node) * chunks_ + chunk);
    if (it != replica_of_.end()) {
      return slots_.size() + it->second;
    }
  }
  return slots_.Find(node);
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
  if (static_cast<int64_t>(last_event_pos_.size()) < slots_.universe()) {
    last_event_pos_.assign(slots_.universe(), -1);
  }
  const int k =
      nbr_slot->empty() ? 0 : static_cast<int>(nbr_slot->size() / (3 * n));
  // A read of `node` in micro-batch c goes through a replica when the node
  // had an event in an earlier micro-batch (its latest such event).
  auto read = [&](int32_t node, int c) -> int64_t {
    const int64_t pos = last_event_pos_[node];
    if (pos < 0) return slots_.Find(node);
    const int64_t key = static_cast<int64_t>(node) * chunks + c;
    auto [it, fresh] = replica_of_.try_emplace(
        key, static_cast<int32_t>(replica_self_.size()));
    if (fresh) {
      const int64_t e = positives_[pos];
      const int32_t other = log.src[e] == node ? log.dst[e] : log.src[e];
      replica_self_.push_back(slots_.Find(node));
      replica_other_.push_back(slots_.Find(other));
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
  const int64_t u = slots_.size();
  for (int64_t& s : target_slot_) {
    if (s < 0) s = u + (-1 - s);
  }
  for (int64_t& s : *nbr_slot) {
    if (s < 0) s = u + (-1 - s);
  }
}

std::vector<int64_t> BatchBuilder::StateNodes() const {
  std::vector<int64_t> nodes = slots_.ids();
  if (block_pos_.count.size() != 2 * positives_.size()) return nodes;
  const size_t unique = nodes.size();
  for (size_t q = 0; q < block_pos_.count.size(); ++q) {
    for (int j = 0; j < block_pos_.count[q]; ++j) {
      const int32_t v = block_pos_.nbr[q * block_pos_.k + j];
      if (slots_.Find(v) < 0) nodes.push_back(v);
    }
  }
  std::sort(nodes.begin() + unique, nodes.end());
  nodes.erase(std::unique(nodes.begin() + unique, nodes.end()), nodes.end());
  return nodes;
}

void BatchBuilder::Finish(const memory::NodeMemory& state,
                          const batch::TimeGapStats* time_gaps,
                          batch::BatchTensors* batch, PositiveUpdate* update) {
  *batch = std::move(pending_);
  pending_ = batch::BatchTensors();
  batch->batch_size = n_;
  // First: a node the memory does not hold stops the batch before any read.
  batch->unique_rows = RowTensor(state, slots_.ids());
  if (state.layout().mailbox_slots > 1) {
    FinishMailbox(state, batch, update);
    Stage(batch, update);
    return;
  }
  FinishMail(state, batch);
  if (time_gaps != nullptr) FinishTargetGaps(state, *time_gaps, batch);
  batch->target_slot = ToTensor(target_slot_);
  if (!replica_self_.empty()) FinishReplicas(state, batch);
  FinishPositives(state, update);
  Stage(batch, update);
}

void BatchBuilder::FinishMail(const memory::NodeMemory& state,
                              batch::BatchTensors* batch) const {
  std::vector<int64_t> mail_slot, mail_node;
  std::vector<float> mail_dt;
  for (int64_t s = 0; s < slots_.size(); ++s) {
    const int64_t u = slots_.ids()[s];
    const int64_t row = state.Row(u);
    if (state.has_mail()[row]) {
      mail_slot.push_back(static_cast<int64_t>(s));
      mail_node.push_back(row);
      mail_dt.push_back(static_cast<float>(state.mail_time()[row] -
                                           state.last_update()[row]));
    }
  }
  batch->mail_slot = ToTensor(mail_slot);
  batch->mail_node = ToTensor(mail_node);
  batch->mail_dt = ToTensor(mail_dt);
}

void BatchBuilder::FinishTargetGaps(const memory::NodeMemory& state,
                                    const batch::TimeGapStats& g,
                                    batch::BatchTensors* batch) const {
  const data::EventLog& log = *log_;
  const int64_t n = n_;
  std::vector<float> dt(3 * n);
  const int64_t unique = slots_.size();
  for (int64_t i = 0; i < 3 * n; ++i) {
    const int64_t u = state.Row(targets_[i]);
    // A target that reads a refined replica (IMR) reads its memory as of
    // its event in an earlier micro-batch: the time since is from there.
    const int64_t slot = target_slot_[i];
    const double last = slot >= unique ? log.t[replica_event_[slot - unique]]
                        : state.has_mail()[u] ? state.mail_time()[u]
                                              : state.last_update()[u];
    const bool src = i < n;
    dt[i] = static_cast<float>(
        (target_time_[i] - last - (src ? g.src_mean : g.dst_mean)) /
        (src ? g.src_std : g.dst_std));
  }
  batch->target_dt = ToTensor(dt);
}

void BatchBuilder::FinishReplicas(const memory::NodeMemory& state,
                                  batch::BatchTensors* batch) const {
  const data::EventLog& log = *log_;
  std::vector<float> dt(replica_event_.size());
  for (size_t r = 0; r < replica_event_.size(); ++r) {
    const int64_t u = state.Row(slots_.ids()[replica_self_[r]]);
    const double mem_time =
        state.has_mail()[u] ? state.mail_time()[u] : state.last_update()[u];
    dt[r] = static_cast<float>(log.t[replica_event_[r]] - mem_time);
  }
  batch->replica_self = ToTensor(replica_self_);
  batch->replica_other = ToTensor(replica_other_);
  batch->replica_dt = ToTensor(dt);
  if (log.edge_feature_dim > 0) {
    batch->replica_edge_feat = GatherEdgeFeatures(log, replica_event_);
  }
}

void BatchBuilder::FinishPositives(const memory::NodeMemory& state,
                                   PositiveUpdate* update) const {
  const data::EventLog& log = *log_;
  // For each node its latest positive event in the batch. Walk backwards:
  // the first time a node is seen is its latest event.
  std::vector<int64_t> pos_nodes, self_slot, other_slot, pos_event;
  update->node_ids.clear();
  update->event_time.clear();
  update->event_index.clear();
  std::vector<uint8_t> done(slots_.size(), 0);
  for (int64_t i = static_cast<int64_t>(positives_.size()) - 1; i >= 0; --i) {
    const int64_t e = positives_[i];
    const int32_t ends[2] = {log.src[e], log.dst[e]};
    // IMR: the state after the batch is the latest replica's.
    const int chunk = chunks_ > 1 ? static_cast<int>(i / chunk_size_) : 0;
    for (int r = 0; r < 2; ++r) {
      const int32_t u = ends[r];
      const int32_t s = slots_.Find(u);
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
  update->rows = RowTensor(state, pos_nodes);
  update->self_slot = ToTensor(self_slot);
  update->other_slot = ToTensor(other_slot);
  update->edge_feat = torch::Tensor();
  if (log.edge_feature_dim > 0) {
    update->edge_feat = GatherEdgeFeatures(log, pos_event);
  }
}

int64_t BatchBuilder::MailboxQueryRow(int64_t i, int r) const {
  return replay_ ? 3 * n_ + 2 * i + r : r * n_ + i;
}

void BatchBuilder::FinishMailbox(const memory::NodeMemory& state,
                                 batch::BatchTensors* batch,
                                 PositiveUpdate* update) {
  FinishMailboxQueries(state, batch);
  FinishMailboxMemory(state, update);
  FinishMailboxMails(update);
}

void BatchBuilder::FinishMailboxQueries(const memory::NodeMemory& state,
                                        batch::BatchTensors* batch) const {
  const data::EventLog& log = *log_;
  const int64_t n = n_;
  const int64_t k = state.layout().mailbox_slots;
  const int64_t p = static_cast<int64_t>(positives_.size());
  const int64_t rows = 3 * n + (replay_ ? 2 * p : 0);
  std::vector<int64_t> query_slot(target_slot_.begin(), target_slot_.end());
  std::vector<double> query_time(target_time_.begin(), target_time_.end());
  std::vector<int32_t> query_node(targets_.begin(), targets_.end());
  query_slot.resize(rows);
  query_time.resize(rows);
  query_node.resize(rows);
  for (int64_t i = 0; replay_ && i < p; ++i) {
    const int64_t e = positives_[i];
    for (int r = 0; r < 2; ++r) {
      const int32_t u = r == 0 ? log.src[e] : log.dst[e];
      query_slot[MailboxQueryRow(i, r)] = slots_.Find(u);
      query_time[MailboxQueryRow(i, r)] = log.t[e];
      query_node[MailboxQueryRow(i, r)] = u;
    }
  }
  std::vector<float> dt(rows * k, 0.0f);
  torch::Tensor mask = torch::zeros({rows, k}, torch::kBool);
  bool* m = mask.data_ptr<bool>();
  for (int64_t q = 0; q < rows; ++q) {
    const int64_t u = state.Row(query_node[q]);
    // TGL attends over every slot, an empty one at time 0.
    const int64_t filled =
        needs_.tgl_mailbox ? k
                           : std::min<int64_t>(state.mails_received()[u], k);
    for (int64_t j = 0; j < filled; ++j) {
      dt[q * k + j] =
          static_cast<float>(query_time[q] - state.slot_time()[u * k + j]);
      m[q * k + j] = true;
    }
  }
  batch->target_slot = ToTensor(target_slot_);
  batch->query_slot = ToTensor(query_slot);
  batch->mailbox_dt = ToTensor(dt).view({rows, k});
  batch->mailbox_mask = mask;
}

void BatchBuilder::FinishMailboxMemory(const memory::NodeMemory& state,
                                       PositiveUpdate* update) const {
  const data::EventLog& log = *log_;
  std::vector<int64_t> nodes, memory_row;
  update->memory_time.clear();
  std::vector<uint8_t> done(slots_.size(), 0);
  auto take = [&](int64_t i, int r) {
    const int64_t e = positives_[i];
    const int32_t u = r == 0 ? log.src[e] : log.dst[e];
    const int32_t s = slots_.Find(u);
    if (done[s]) return;
    done[s] = 1;
    nodes.push_back(u);
    memory_row.push_back(MailboxQueryRow(i, r));
    update->memory_time.push_back(log.t[e]);
  };
  // From the end, the first taken wins: the latest event (its destination
  // before its source), or TGL's last listed (every destination, from the
  // last, then every source).
  const int64_t p = static_cast<int64_t>(positives_.size());
  if (needs_.tgl_mailbox) {
    for (int r = 1; r >= 0; --r) {
      for (int64_t i = p - 1; i >= 0; --i) take(i, r);
    }
  } else {
    for (int64_t i = p - 1; i >= 0; --i) {
      take(i, 1);
      take(i, 0);
    }
  }
  update->rows = RowTensor(state, nodes);
  update->memory_nodes = nodes;
  update->memory_row = ToTensor(memory_row);
}

void BatchBuilder::FinishMailboxMails(PositiveUpdate* update) {
  const data::EventLog& log = *log_;
  const int64_t p = static_cast<int64_t>(positives_.size());
  receivers_.Reserve(log.num_nodes);
  update->node_ids.clear();
  update->event_time.clear();
  update->event_index.clear();
  std::vector<int64_t> self_row, other_row, event_pos;
  const bool tgl = needs_.tgl_mailbox;
  auto deliver = [&](int32_t v, int64_t i, int64_t self, int64_t other) {
    const int64_t before = receivers_.size();
    const int32_t at = receivers_.Insert(v);
    if (at == before) {  // a new receiver
      update->node_ids.push_back(v);
      self_row.push_back(0);
      other_row.push_back(0);
      event_pos.push_back(0);
    } else if (!tgl && event_pos[at] >= i) {
      return;  // as late or later: kept (TGL: the last listed wins)
    }
    self_row[at] = self;
    other_row[at] = other;
    event_pos[at] = i;
  };
  const bool neighbours = block_pos_.count.size() == static_cast<size_t>(2 * p);
  // Event i's endpoint r (0 source, 1 destination) mails itself, or with
  // `to_neighbours` its sampled neighbours.
  auto send = [&](int64_t i, int r, bool to_neighbours) {
    const int64_t e = positives_[i];
    const int64_t self = MailboxQueryRow(i, r),
                  other = MailboxQueryRow(i, 1 - r);
    if (!to_neighbours) {
      deliver(r == 0 ? log.src[e] : log.dst[e], i, self, other);
      return;
    }
    const int64_t qi = 2 * i + r;
    for (int j = 0; j < block_pos_.count[qi]; ++j) {
      deliver(block_pos_.nbr[qi * block_pos_.k + j], i, self, other);
    }
  };
  if (tgl) {  // TGL's list: every source's mail, every destination's, then
              // the neighbours' of each source and of each destination
    for (int r = 0; r < 2; ++r) {
      for (int64_t i = 0; i < p; ++i) send(i, r, false);
    }
    for (int r = 0; neighbours && r < 2; ++r) {
      for (int64_t i = 0; i < p; ++i) send(i, r, true);
    }
  } else {
    for (int64_t i = 0; i < p; ++i) {
      send(i, 0, false);
      send(i, 1, false);
      if (neighbours) {
        send(i, 0, true);
        send(i, 1, true);
      }
    }
  }
  std::vector<int64_t> events(event_pos.size());
  for (size_t a = 0; a < event_pos.size(); ++a) {
    events[a] = positives_[event_pos[a]];
    update->event_time.push_back(log.t[events[a]]);
    update->event_index.push_back(events[a]);
  }
  receivers_.Clear();
  update->self_row = ToTensor(self_row);
  update->other_row = ToTensor(other_row);
  update->edge_feat = torch::Tensor();
  if (log.edge_feature_dim > 0) {
    update->edge_feat = GatherEdgeFeatures(log, events);
  }
}

}  // namespace mnemo::batch
