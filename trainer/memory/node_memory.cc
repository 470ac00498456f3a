#include "trainer/memory/node_memory.h"

#include <torch/torch.h>

#include <algorithm>

#include "absl/strings/str_format.h"
#include "trainer/platform/doubles.h"

namespace mnemo::memory {

using platform::DoublesToTensor;
using platform::TensorToDoubles;
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
    last_update_[r] = mail_time_[r] = 0.0;
    has_mail_[r] = 0;
    last_event_[r] = -1;
    if (k > 1) {
      std::fill_n(slot_time_.begin() + r * k, k, 0.0);
      mails_received_[r] = 0;
    }
  }
  torch::NoGradGuard guard;
  const torch::Tensor index = IndexOn(rows, memory_.device());
  if (memory_.size(1) > 0) memory_.index_fill_(0, index, 0.0);
  if (mail_.size(1) > 0) mail_.index_fill_(0, index, 0.0);
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
  memory_ = torch::Tensor();
  mail_ = torch::Tensor();
  memory_ = torch::zeros({rows, layout.memory_dim}, options);
  mail_ = torch::zeros({rows, layout.MailboxFloats()}, options);
  last_update_.assign(rows, 0.0);
  mail_time_.assign(rows, 0.0);
  has_mail_.assign(rows, 0);
  last_event_.assign(rows, -1);
  if (layout.mailbox_slots > 1) {
    slot_time_.assign(rows * layout.mailbox_slots, 0.0);
    mails_received_.assign(rows, 0);
  } else {
    slot_time_.clear();
    mails_received_.clear();
  }
}

void NodeMemory::Grow(int64_t num_nodes) {
  const int64_t rows = num_rows();
  if (num_nodes <= rows) return;
  const int64_t more = num_nodes - rows;
  const auto options = memory_.options();
  memory_ =
      torch::cat({memory_, torch::zeros({more, memory_.size(1)}, options)});
  mail_ = torch::cat({mail_, torch::zeros({more, mail_.size(1)}, options)});
  last_update_.resize(num_nodes, 0.0);
  mail_time_.resize(num_nodes, 0.0);
  has_mail_.resize(num_nodes, 0);
  last_event_.resize(num_nodes, -1);
  if (layout_.mailbox_slots > 1) {
    slot_time_.resize(num_nodes * layout_.mailbox_slots, 0.0);
    mails_received_.resize(num_nodes, 0);
  }
}

NodeMemory NodeMemory::Clone() const {
  NodeMemory s;
  s.layout_ = layout_;
  s.device_ = device_;
  s.memory_ = memory_.clone();
  s.mail_ = mail_.clone();
  s.last_update_ = last_update_;
  s.mail_time_ = mail_time_;
  s.has_mail_ = has_mail_;
  s.last_event_ = last_event_;
  s.slot_time_ = slot_time_;
  s.mails_received_ = mails_received_;
  s.row_of_ = row_of_;
  s.held_ = held_;
  s.free_ = free_;
  return s;
}

void NodeMemory::Apply(const batch::PositiveUpdate& update,
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
    memory_.index_copy_(0, update.rows, self);
    std::vector<torch::Tensor> parts = {self,
                                        mem.index_select(0, update.other_slot)};
    if (update.edge_feat.defined()) parts.push_back(update.edge_feat);
    mail_.index_copy_(0, update.rows, torch::cat(parts, 1));
  }
  for (size_t i = 0; i < update.node_ids.size(); ++i) {
    const int64_t u = Row(update.node_ids[i]);
    if (has_mail_[u]) last_update_[u] = mail_time_[u];
    mail_time_[u] = update.event_time[i];
    has_mail_[u] = 1;
    last_event_[u] = update.event_index[i];
  }
}

void NodeMemory::ApplyMailbox(const batch::PositiveUpdate& update,
                              const torch::Tensor& rows) {
  torch::Tensor h = rows.detach().to(torch::kFloat);
  if (update.rows.numel() > 0) {
    memory_.index_copy_(0, update.rows, h.index_select(0, update.memory_row));
    for (size_t i = 0; i < update.memory_time.size(); ++i) {
      last_update_[Row(update.memory_nodes[i])] = update.memory_time[i];
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
    const int64_t slot = mails_received_[u] % k;
    target[i] = u * k + slot;
    slot_time_[u * k + slot] = update.event_time[i];
    ++mails_received_[u];
    mail_time_[u] = update.event_time[i];
    has_mail_[u] = 1;
    last_event_[u] = std::max(last_event_[u], update.event_index[i]);
  }
  mail_.view({-1, layout_.mail_dim})
      .index_copy_(0, IndexOn(target, mail_.device()), mails);
}

// The archive's entries: memory, mail, last_update, mail_time, has_mail,
// last_event and, for a mailbox, slot_time and mails_received (float64
// columns; files from before last_event was saved read as -1 there).
absl::Status NodeMemory::Save(torch::serialize::OutputArchive* archive) const {
  if (holds_subset()) {
    return absl::FailedPreconditionError(
        "checkpoint: the node memory holds a subset of the nodes; "
        "checkpoints store memories of every node");
  }
  archive->write("memory", memory_);
  archive->write("mail", mail_);
  archive->write("last_update", DoublesToTensor(last_update_));
  archive->write("mail_time", DoublesToTensor(mail_time_));
  archive->write("has_mail", DoublesToTensor(has_mail_));
  archive->write("last_event", DoublesToTensor(last_event_));
  if (!mails_received_.empty()) {  // a mailbox (APAN)
    archive->write("slot_time", DoublesToTensor(slot_time_));
    archive->write("mails_received", DoublesToTensor(mails_received_));
  }
  return absl::OkStatus();
}

absl::Status NodeMemory::Load(torch::serialize::InputArchive& archive,
                              const RecordLayout& layout, int64_t num_nodes,
                              torch::Device device) {
  NodeMemory m;
  torch::Tensor t;
  archive.read("memory", m.memory_);
  archive.read("mail", m.mail_);
  archive.read("last_update", t);
  m.last_update_ = TensorToDoubles(t);
  archive.read("mail_time", t);
  m.mail_time_ = TensorToDoubles(t);
  archive.read("has_mail", t);
  m.has_mail_ = TensorToDoubles<uint8_t>(t);
  m.last_event_.assign(m.has_mail_.size(), -1);
  if (archive.try_read("last_event", t))
    m.last_event_ = TensorToDoubles<int64_t>(t);
  if (layout.mailbox_slots > 1) {
    if (!archive.try_read("slot_time", t)) {
      return absl::InvalidArgumentError(
          "the checkpoint holds no mailbox (another --model?)");
    }
    m.slot_time_ = TensorToDoubles(t);
    archive.read("mails_received", t);
    m.mails_received_ = TensorToDoubles<int64_t>(t);
  }
  if ((m.memory_.size(0) != num_nodes && m.memory_.size(0) != 0) ||
      m.memory_.size(1) != layout.memory_dim ||
      m.mail_.size(1) != layout.MailboxFloats()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "checkpoint holds %d nodes x %d memory (mail %d), this run has %d x "
        "%d (mail %d) (different data, --model or --memory-dim?)",
        m.memory_.size(0), m.memory_.size(1), m.mail_.size(1), num_nodes,
        layout.memory_dim, layout.MailboxFloats()));
  }
  m.layout_ = layout;
  m.device_ = device;
  *this = std::move(m);
  return absl::OkStatus();
}

}  // namespace mnemo::memory
