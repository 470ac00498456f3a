#include "trainer/memory/node_memory.h"

#include <torch/torch.h>

namespace mnemo::memory {

void NodeMemory::Reset(const RecordLayout& layout, int64_t num_nodes,
                       torch::Device device) {
  layout_ = layout;
  device_ = device;
  const auto options = torch::TensorOptions().device(device);
  memory = torch::zeros({num_nodes, layout.memory_dim}, options);
  mail = torch::zeros({num_nodes, layout.mail_dim}, options);
  last_update.assign(num_nodes, 0.0);
  mail_time.assign(num_nodes, 0.0);
  has_mail.assign(num_nodes, 0);
  last_event.assign(num_nodes, -1);
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
  return s;
}

void NodeMemory::Apply(const PositiveUpdate& update,
                       const torch::Tensor& batch_memory) {
  torch::NoGradGuard guard;
  if (layout_.memory_dim > 0) {
    torch::Tensor mem = batch_memory.detach().to(torch::kFloat);
    torch::Tensor self = mem.index_select(0, update.self_slot);
    memory.index_copy_(0, update.nodes, self);
    std::vector<torch::Tensor> parts = {self,
                                        mem.index_select(0, update.other_slot)};
    if (update.edge_feat.defined()) parts.push_back(update.edge_feat);
    mail.index_copy_(0, update.nodes, torch::cat(parts, 1));
  }
  for (size_t i = 0; i < update.node_ids.size(); ++i) {
    const int32_t u = update.node_ids[i];
    if (has_mail[u]) last_update[u] = mail_time[u];
    mail_time[u] = update.event_time[i];
    has_mail[u] = 1;
    last_event[u] = update.event_index[i];
  }
}

}  // namespace mnemo::memory
