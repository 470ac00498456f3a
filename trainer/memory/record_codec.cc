#include "trainer/memory/record_codec.h"

#include <torch/torch.h>

#include <algorithm>
#include <cstring>

namespace mnemo::memory {
namespace {
// A time as two floats, hi = float(t) and lo = float(t - hi): exact enough
// to survive float32 records.
void SplitTime(double t, float* out) {
  const float hi = static_cast<float>(t);
  out[0] = hi;
  out[1] = static_cast<float>(t - static_cast<double>(hi));
}
double JoinTime(const float* in) {
  return static_cast<double>(in[0]) + static_cast<double>(in[1]);
}
}  // namespace

void PackStates(const NodeMemory& state, const std::vector<int64_t>& nodes,
                const StateVersions& versions,
                const std::function<bool(int64_t)>& owned,
                const std::function<bool(int64_t)>& trained,
                std::vector<float>* records,
                std::vector<uint64_t>* out_versions, std::vector<double>* times,
                torch::Tensor* rows) {
  const int64_t m = state.layout().memory_dim;
  const int64_t mail = state.layout().MailboxFloats();
  const int64_t k = state.layout().mailbox_slots;
  const int64_t dim = state.layout().RecordFloats();
  records->resize(nodes.size() * dim);
  out_versions->resize(nodes.size());
  times->resize(nodes.size());
  // Memory on a GPU, or rows asked for: the rows' memory and mail are
  // gathered on the memory's device side by side into one [n, m + mail]
  // tensor (the mirror of UnpackStates); row i of it is nodes[i]'s. Without
  // `rows`, a GPU's is copied into one pinned host buffer in one transfer,
  // which the host waits for: the records are written next.
  const bool device = !state.memory().device().is_cpu();
  const int64_t n = static_cast<int64_t>(nodes.size());
  const float* mem = nullptr;
  const float* mb = nullptr;
  int64_t mem_stride = m, mail_stride = mail;
  torch::Tensor both;
  if (device || rows != nullptr) {
    torch::NoGradGuard guard;
    torch::Tensor index = torch::empty(
        {n}, torch::TensorOptions(torch::kInt64).pinned_memory(device));
    int64_t* row_of = index.data_ptr<int64_t>();
    for (int64_t i = 0; i < n; ++i) {
      row_of[i] = state.Row(nodes[i]);
      TORCH_CHECK(row_of[i] >= 0, "PackStates: node ", nodes[i],
                  " is not held");
    }
    if (device)
      index = index.to(state.memory().device(), /*non_blocking=*/true);
    both = torch::cat({state.memory().index_select(0, index),
                       state.mail().index_select(0, index)},
                      1);
  }
  torch::Tensor host;
  if (rows != nullptr) {
    *rows = both;
  } else if (device) {
    host = torch::empty(
        {n, m + mail}, torch::TensorOptions(torch::kFloat).pinned_memory(true));
    host.copy_(both);  // synchronous: the records are read next
    mem = host.data_ptr<float>();
    mb = mem + m;
    mem_stride = mail_stride = m + mail;
  } else {
    mem = state.memory().data_ptr<float>();
    mb = state.mail().data_ptr<float>();
  }
  for (size_t i = 0; i < nodes.size(); ++i) {
    const int64_t u = state.Row(nodes[i]);
    TORCH_CHECK(u >= 0, "PackStates: node ", nodes[i], " is not held");
    float* r = records->data() + i * dim;
    if (rows == nullptr) {
      const int64_t at = device ? static_cast<int64_t>(i) : u;
      std::memcpy(r, mem + at * mem_stride, m * sizeof(float));
      std::memcpy(r + m, mb + at * mail_stride, mail * sizeof(float));
    }
    r[m + mail] = state.has_mail()[u] ? 1.0f : 0.0f;
    SplitTime(state.last_update()[u], r + m + mail + 1);
    if (k > 1) {
      float* slots = r + m + mail + 3;
      for (int64_t j = 0; j < k; ++j)
        SplitTime(state.slot_time()[u * k + j], slots + 2 * j);
      slots[2 * k] = static_cast<float>(state.mails_received()[u]);
    }
    const int64_t e = state.last_event()[u];
    (*out_versions)[i] = versions.Of(e, trained && trained(e), owned(nodes[i]));
    (*times)[i] = state.mail_time()[u];
  }
}

void FillRecordRows(const RecordLayout& layout, const torch::Tensor& rows,
                    float* records) {
  const int64_t width = layout.memory_dim + layout.MailboxFloats();
  const int64_t dim = layout.RecordFloats();
  TORCH_CHECK(rows.device().is_cpu() && rows.scalar_type() == torch::kFloat &&
                  rows.dim() == 2 && rows.size(1) == width,
              "FillRecordRows: rows must be a host float tensor of width ",
              width, ", not ", rows.sizes(), " on ", rows.device());
  const torch::Tensor r = rows.contiguous();
  const float* from = r.data_ptr<float>();
  for (int64_t i = 0; i < r.size(0); ++i) {
    // Memory and mail open every record, side by side as in `rows`.
    std::memcpy(records + i * dim, from + i * width, width * sizeof(float));
  }
}

void UnpackStates(const memstore::PulledStates& pulled,
                  const std::vector<int64_t>& nodes,
                  const StateVersions& versions, NodeMemory* state) {
  const int64_t m = state->layout().memory_dim;
  const int64_t mail = state->layout().MailboxFloats();
  const int64_t k = state->layout().mailbox_slots;
  const int64_t dim = state->layout().RecordFloats();
  // Memory on a GPU: the rows' memory and mail are written side by side
  // into one pinned host buffer, copied over in one asynchronous transfer
  // (with the rows' indices, pinned too) and scattered there; the host
  // does not wait for the copy.
  const bool device = !state->memory_.device().is_cpu();
  const int64_t n = static_cast<int64_t>(nodes.size());
  torch::Tensor host, rows;
  float* mem;
  float* mb;
  int64_t mem_stride = m, mail_stride = mail;
  int64_t* row_of = nullptr;
  if (device) {
    host = torch::empty(
        {n, m + mail}, torch::TensorOptions(torch::kFloat).pinned_memory(true));
    rows = torch::empty(
        {n}, torch::TensorOptions(torch::kInt64).pinned_memory(true));
    row_of = rows.data_ptr<int64_t>();
    mem = host.data_ptr<float>();
    mb = mem + m;
    mem_stride = mail_stride = m + mail;
  } else {
    mem = state->memory_.data_ptr<float>();
    mb = state->mail_.data_ptr<float>();
  }
  for (size_t i = 0; i < nodes.size(); ++i) {
    const int64_t u = state->Row(nodes[i]);
    TORCH_CHECK(u >= 0, "UnpackStates: node ", nodes[i], " is not held");
    if (device) row_of[i] = u;
    const int64_t at = device ? static_cast<int64_t>(i) : u;
    const int64_t last_event = versions.LastEvent(pulled.version[i]);
    if (last_event < 0) {
      std::memset(mem + at * mem_stride, 0, m * sizeof(float));
      std::memset(mb + at * mail_stride, 0, mail * sizeof(float));
      state->has_mail_[u] = 0;
      state->last_update_[u] = 0;
      state->mail_time_[u] = 0;
      state->last_event_[u] = -1;
      if (k > 1) {
        std::fill_n(state->slot_time_.begin() + u * k, k, 0.0);
        state->mails_received_[u] = 0;
      }
      continue;
    }
    const float* r = pulled.states.data() + i * dim;
    std::memcpy(mem + at * mem_stride, r, m * sizeof(float));
    std::memcpy(mb + at * mail_stride, r + m, mail * sizeof(float));
    state->has_mail_[u] = r[m + mail] > 0.5f;
    state->last_update_[u] = JoinTime(r + m + mail + 1);
    state->mail_time_[u] = pulled.time[i];
    state->last_event_[u] = last_event;
    if (k > 1) {
      const float* slots = r + m + mail + 3;
      for (int64_t j = 0; j < k; ++j) {
        state->slot_time_[u * k + j] = JoinTime(slots + 2 * j);
      }
      state->mails_received_[u] = static_cast<int64_t>(slots[2 * k]);
    }
  }
  if (device && n > 0) {
    torch::NoGradGuard guard;
    const torch::Device to = state->memory_.device();
    const torch::Tensor index = rows.to(to, /*non_blocking=*/true);
    const torch::Tensor both = host.to(to, /*non_blocking=*/true);
    state->memory_.index_copy_(0, index, both.narrow(1, 0, m));
    state->mail_.index_copy_(0, index, both.narrow(1, m, mail));
  }
}

}  // namespace mnemo::memory
