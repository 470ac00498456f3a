#include "trainer/memory/node_memory.h"

#include <torch/torch.h>

#include <algorithm>

namespace mnemo::memory {
namespace {

// `values` as an index tensor on `device`. On a GPU through pinned memory
// with an asynchronous copy, queued on the current stream: a copy from
// pageable memory would make the host wait for all the work queued
// before it (the batch's kernels).
torch::Tensor IndexOn(const std::vector<int64_t>& values,
                      torch::Device device) {
  torch::Tensor host = torch::tensor(values, torch::kInt64);
  if (device.is_cpu()) return host;
  return host.pin_memory().to(device, /*non_blocking=*/true);
}

}  // namespace

void NodeMemory::Reset(const RecordLayout& layout, int64_t num_nodes,
                       torch::Device device) {
  row_of_.clear();
  held_.clear();
  free_.clear();
  ResetRows(layout, num_nodes, device);
}

void NodeMemory::ResetHeld(const RecordLayout& layout, int64_t num_nodes,
                           std::vector<int64_t> held, torch::Device device) {
  row_of_.assign(num_nodes, -1);
  for (size_t r = 0; r < held.size(); ++r) {
    const int64_t u = held[r];
    TORCH_CHECK(u >= 0 && u < num_nodes, "NodeMemory: held node ", u,
                " outside [0, ", num_nodes, ")");
    TORCH_CHECK(row_of_[u] < 0, "NodeMemory: node ", u, " held twice");
    row_of_[u] = static_cast<int32_t>(r);
  }
  held_ = std::move(held);
  free_.clear();
  ResetRows(layout, static_cast<int64_t>(held_.size()), device);
}

void NodeMemory::ResetCache(const RecordLayout& layout, int64_t num_nodes,
                            int64_t capacity, torch::Device device) {
  TORCH_CHECK(capacity >= 0 && capacity <= num_nodes,
              "NodeMemory: cache capacity ", capacity, " outside [0, ",
              num_nodes, "]");
  row_of_.assign(num_nodes, -1);
  held_.assign(capacity, -1);
  free_.resize(capacity);
  // Lowest rows first (Admit takes from the back).
  for (int64_t r = 0; r < capacity; ++r) free_[r] = capacity - 1 - r;
  ResetRows(layout, capacity, device);
}

void NodeMemory::Admit(const std::vector<int64_t>& nodes) {
  if (nodes.empty()) return;
  TORCH_CHECK(static_cast<int64_t>(nodes.size()) <= free_rows(),
              "NodeMemory: admitting ", nodes.size(), " nodes with ",
              free_rows(), " free rows");
  std::vector<int64_t> rows(nodes.size());
  const int64_t k = layout_.mailbox_slots;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const int64_t u = nodes[i];
    TORCH_CHECK(
        u >= 0 && u < static_cast<int64_t>(row_of_.size()) && row_of_[u] < 0,
        "NodeMemory: admitting node ", u, " that is held or unknown");
    const int64_t r = free_.back();
    free_.pop_back();
    row_of_[u] = static_cast<int32_t>(r);
    held_[r] = u;
    rows[i] = r;
    last_update[r] = mail_time[r] = 0.0;
    has_mail[r] = 0;
    last_event[r] = -1;
    if (k > 1) {
      std::fill_n(slot_time.begin() + r * k, k, 0.0);
      mails_received[r] = 0;
    }
  }
  torch::NoGradGuard guard;
  const torch::Tensor index = IndexOn(rows, memory.device());
  if (memory.size(1) > 0) memory.index_fill_(0, index, 0.0);
  if (mail.size(1) > 0) mail.index_fill_(0, index, 0.0);
}

void NodeMemory::Release(const std::vector<int64_t>& nodes) {
  for (const int64_t u : nodes) {
    const int64_t r = Row(u);
    TORCH_CHECK(!row_of_.empty() && r >= 0, "NodeMemory: releasing node ", u,
                " that is not held");
    row_of_[u] = -1;
    held_[r] = -1;
    free_.push_back(r);
  }
}

void NodeMemory::ResetRows(const RecordLayout& layout, int64_t rows,
                           torch::Device device) {
  layout_ = layout;
  device_ = device;
  const auto options = torch::TensorOptions().device(device);
  // The old rows go before the new ones come: a working set's rows are
  // reset every epoch and evaluation pass, and allocating first would hold
  // both (a heap that keeps what it frees then stays at twice the budget).
  memory = torch::Tensor();
  mail = torch::Tensor();
  memory = torch::zeros({rows, layout.memory_dim}, options);
  mail = torch::zeros({rows, layout.MailboxFloats()}, options);
  last_update.assign(rows, 0.0);
  mail_time.assign(rows, 0.0);
  has_mail.assign(rows, 0);
  last_event.assign(rows, -1);
  if (layout.mailbox_slots > 1) {
    slot_time.assign(rows * layout.mailbox_slots, 0.0);
    mails_received.assign(rows, 0);
  } else {
    slot_time.clear();
    mails_received.clear();
  }
}

NodeMemory NodeMemory::Clone() const {
  NodeMemory s;
  s.layout_ = layout_;
  s.device_ = device_;
  s.memory = memory.clone();
  s.mail = mail.clone();
  s.last_update = last_update;
  s.mail_time = mail_time;
  s.has_mail = has_mail;
  s.last_event = last_event;
  s.slot_time = slot_time;
  s.mails_received = mails_received;
  s.row_of_ = row_of_;
  s.held_ = held_;
  s.free_ = free_;
  return s;
}

void NodeMemory::Apply(const PositiveUpdate& update,
                       const torch::Tensor& batch_memory,
                       const torch::Tensor& rows) {
  torch::NoGradGuard guard;
  if (layout_.mailbox_slots > 1) {
    ApplyMailbox(update, rows);
    return;
  }
  if (layout_.memory_dim > 0) {
    torch::Tensor mem = batch_memory.detach().to(torch::kFloat);
    torch::Tensor self = mem.index_select(0, update.self_slot);
    memory.index_copy_(0, update.rows, self);
    std::vector<torch::Tensor> parts = {self,
                                        mem.index_select(0, update.other_slot)};
    if (update.edge_feat.defined()) parts.push_back(update.edge_feat);
    mail.index_copy_(0, update.rows, torch::cat(parts, 1));
  }
  for (size_t i = 0; i < update.node_ids.size(); ++i) {
    const int64_t u = Row(update.node_ids[i]);
    if (has_mail[u]) last_update[u] = mail_time[u];
    mail_time[u] = update.event_time[i];
    has_mail[u] = 1;
    last_event[u] = update.event_index[i];
  }
}

void NodeMemory::ApplyMailbox(const PositiveUpdate& update,
                              const torch::Tensor& rows) {
  torch::Tensor h = rows.detach().to(torch::kFloat);
  if (update.rows.numel() > 0) {
    memory.index_copy_(0, update.rows, h.index_select(0, update.memory_row));
    for (size_t i = 0; i < update.memory_time.size(); ++i) {
      last_update[Row(update.memory_nodes[i])] = update.memory_time[i];
    }
  }
  const int64_t m = static_cast<int64_t>(update.node_ids.size());
  if (m == 0) return;
  std::vector<torch::Tensor> parts = {h.index_select(0, update.self_row),
                                      h.index_select(0, update.other_row)};
  if (update.edge_feat.defined()) parts.push_back(update.edge_feat);
  torch::Tensor mails = torch::cat(parts, 1);  // [M, mail_dim]
  const int64_t k = layout_.mailbox_slots;
  std::vector<int64_t> target(m);
  for (int64_t i = 0; i < m; ++i) {
    const int64_t u = Row(update.node_ids[i]);
    const int64_t slot = mails_received[u] % k;
    target[i] = u * k + slot;
    slot_time[u * k + slot] = update.event_time[i];
    ++mails_received[u];
    mail_time[u] = update.event_time[i];
    has_mail[u] = 1;
    last_event[u] = std::max(last_event[u], update.event_index[i]);
  }
  mail.view({-1, layout_.mail_dim})
      .index_copy_(0, IndexOn(target, mail.device()), mails);
}

}  // namespace mnemo::memory
