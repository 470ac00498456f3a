#include "trainer/runtime/state_sync.h"

#include "util/proc.h"
#include "util/status_macros.h"

namespace mnemo::runtime {

absl::Status StateSync::Pull(const std::vector<int64_t>& nodes,
                             const StateVersions& versions, bool keep_newer) {
  if (nodes.empty()) return absl::OkStatus();
  const double t0 = MonotonicSeconds();
  memstore::PulledStates pulled;
  RETURN_IF_ERROR(store_->Pull(nodes, &pulled));
  if (keep_newer) {
    std::vector<int64_t> take;
    memstore::PulledStates newer;
    const size_t dim = nodes.empty() ? 0 : pulled.states.size() / nodes.size();
    for (size_t i = 0; i < nodes.size(); ++i) {
      if (versions.LastEvent(pulled.version[i]) <
          state_->last_event[state_->Row(nodes[i])]) {
        continue;
      }
      take.push_back(nodes[i]);
      newer.states.insert(newer.states.end(), pulled.states.begin() + i * dim,
                          pulled.states.begin() + (i + 1) * dim);
      newer.version.push_back(pulled.version[i]);
      newer.time.push_back(pulled.time[i]);
    }
    memory::UnpackStates(newer, take, versions, state_);
  } else {
    memory::UnpackStates(pulled, nodes, versions, state_);
  }
  comm_->seconds += MonotonicSeconds() - t0;
  ++comm_->rpcs;
  comm_->states_pulled += nodes.size();
  comm_->bytes_pulled += pulled.states.size() * sizeof(float);
  return absl::OkStatus();
}

absl::Status StateSync::Push(const std::vector<int64_t>& nodes,
                             const StateVersions& versions) {
  if (nodes.empty()) return absl::OkStatus();
  const double t0 = MonotonicSeconds();
  PackedStates packed = Pack(nodes, versions);
  comm_->seconds += MonotonicSeconds() - t0;
  return PushPacked(packed);
}

PackedStates StateSync::Pack(std::vector<int64_t> nodes,
                             const StateVersions& versions) const {
  PackedStates p;
  p.nodes = std::move(nodes);
  memory::PackStates(
      *state_, p.nodes, versions, owned_,
      [this](int64_t e) { return trained(e); }, &p.records, &p.versions,
      &p.times);
  return p;
}

void StateSync::MarkTrained(const std::vector<int64_t>& events,
                            const std::vector<uint8_t>& target) {
  for (size_t i = 0; i < events.size(); ++i) {
    if (!target[i]) continue;
    const int64_t e = events[i];
    if (e >= static_cast<int64_t>(trained_.size())) {
      trained_.resize(std::max<size_t>(e + 1, 2 * trained_.size()), 0);
    }
    trained_[e] = 1;
  }
}

absl::Status StateSync::PushPacked(const PackedStates& p, CommStats* comm) {
  if (comm == nullptr) comm = comm_;
  if (p.nodes.empty()) return absl::OkStatus();
  const double t0 = MonotonicSeconds();
  RETURN_IF_ERROR(store_->Push(p.nodes, p.records, p.versions, p.times, rank_));
  comm->seconds += MonotonicSeconds() - t0;
  ++comm->rpcs;
  comm->states_pushed += p.nodes.size();
  comm->bytes_pushed += p.records.size() * sizeof(float);
  return absl::OkStatus();
}

}  // namespace mnemo::runtime
