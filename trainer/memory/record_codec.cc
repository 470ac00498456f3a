#include "trainer/memory/record_codec.h"

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
                std::vector<float>* records,
                std::vector<uint64_t>* out_versions,
                std::vector<double>* times) {
  const int64_t m = state.layout().memory_dim;
  const int64_t mail = state.layout().MailboxFloats();
  const int64_t k = state.layout().mailbox_slots;
  const int64_t dim = state.layout().RecordFloats();
  records->resize(nodes.size() * dim);
  out_versions->resize(nodes.size());
  times->resize(nodes.size());
  const float* mem = state.memory.data_ptr<float>();
  const float* mb = state.mail.data_ptr<float>();
  for (size_t i = 0; i < nodes.size(); ++i) {
    const int64_t u = state.Row(nodes[i]);
    float* r = records->data() + i * dim;
    std::memcpy(r, mem + u * m, m * sizeof(float));
    std::memcpy(r + m, mb + u * mail, mail * sizeof(float));
    r[m + mail] = state.has_mail[u] ? 1.0f : 0.0f;
    SplitTime(state.last_update[u], r + m + mail + 1);
    if (k > 1) {
      float* slots = r + m + mail + 3;
      for (int64_t j = 0; j < k; ++j)
        SplitTime(state.slot_time[u * k + j], slots + 2 * j);
      slots[2 * k] = static_cast<float>(state.mails_received[u]);
    }
    (*out_versions)[i] = versions.Of(state.last_event[u], owned(nodes[i]));
    (*times)[i] = state.mail_time[u];
  }
}

void UnpackStates(const memstore::PulledStates& pulled,
                  const std::vector<int64_t>& nodes,
                  const StateVersions& versions, NodeMemory* state) {
  const int64_t m = state->layout().memory_dim;
  const int64_t mail = state->layout().MailboxFloats();
  const int64_t k = state->layout().mailbox_slots;
  const int64_t dim = state->layout().RecordFloats();
  float* mem = state->memory.data_ptr<float>();
  float* mb = state->mail.data_ptr<float>();
  for (size_t i = 0; i < nodes.size(); ++i) {
    const int64_t u = state->Row(nodes[i]);
    const int64_t last_event = versions.LastEvent(pulled.version[i]);
    if (last_event < 0) {
      std::memset(mem + u * m, 0, m * sizeof(float));
      std::memset(mb + u * mail, 0, mail * sizeof(float));
      state->has_mail[u] = 0;
      state->last_update[u] = 0;
      state->mail_time[u] = 0;
      state->last_event[u] = -1;
      if (k > 1) {
        std::fill_n(state->slot_time.begin() + u * k, k, 0.0);
        state->mails_received[u] = 0;
      }
      continue;
    }
    const float* r = pulled.states.data() + i * dim;
    std::memcpy(mem + u * m, r, m * sizeof(float));
    std::memcpy(mb + u * mail, r + m, mail * sizeof(float));
    state->has_mail[u] = r[m + mail] > 0.5f;
    state->last_update[u] = JoinTime(r + m + mail + 1);
    state->mail_time[u] = pulled.time[i];
    state->last_event[u] = last_event;
    if (k > 1) {
      const float* slots = r + m + mail + 3;
      for (int64_t j = 0; j < k; ++j) {
        state->slot_time[u * k + j] = JoinTime(slots + 2 * j);
      }
      state->mails_received[u] = static_cast<int64_t>(slots[2 * k]);
    }
  }
}

}  // namespace mnemo::memory
