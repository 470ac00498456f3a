#include "trainer/runtime/policies/pipeline_handoff.h"

#include <torch/torch.h>

#include <algorithm>
#include <cstring>
#include <optional>

#include "absl/strings/str_cat.h"
#include "trainer/runtime/cluster/collectives.h"
#include "util/proc.h"
#include "util/status_macros.h"

namespace mnemo::runtime {
namespace {

// Message kinds and their tags in the pipeline group: states (all, or the
// urgent ones with the others' ids), the other states, parameters.
constexpr int kFirst = 0, kRest = 1;
constexpr int kParameterTag = 10;
int HeaderTag(int kind) { return 2 * kind + 1; }
int PayloadTag(int kind) { return 2 * kind + 2; }

// A message's header: states, floats per record, ids appended, and the
// payload bytes of the second message that follows (0: none).
constexpr int kHeader = 4;

// Nodes, versions, times, writers, records, ids.
size_t PayloadBytes(size_t n, size_t dim, size_t ids) {
  return n * (4 * sizeof(int64_t) + dim * sizeof(float)) +
         ids * sizeof(int64_t);
}

template <typename T>
void Append(const T* data, size_t n, uint8_t** out) {
  std::memcpy(*out, data, n * sizeof(T));
  *out += n * sizeof(T);
}
template <typename T>
void Take(const uint8_t** in, size_t n, std::vector<T>* out) {
  out->resize(n);
  std::memcpy(out->data(), *in, n * sizeof(T));
  *in += n * sizeof(T);
}

}  // namespace

PipelineHandoff::PipelineHandoff(const PolicyEnv& env, std::vector<int> ranks,
                                 int position, bool critical_path,
                                 bool pass_parameters, bool write_back)
    : env_(env),
      ranks_(std::move(ranks)),
      position_(position),
      critical_path_(critical_path),
      pass_parameters_(pass_parameters),
      write_back_enabled_(write_back),
      writer_(env.log->num_nodes, -1),
      in_recent_(env.log->num_nodes, 0),
      mark_(env.log->num_nodes, 0) {}

void PipelineHandoff::SetPlans(const plan::WorkerPlan* chain,
                               const plan::WorkerPlan* dealt, bool one_window) {
  chain_ = chain;
  dealt_ = dealt;
  one_window_ = one_window;
  // Endpoints, the targets' negatives (this epoch's, read when asked) and,
  // where the sampler takes the most recent ones, their temporal
  // neighbours.
  known_reads_ = plan::PlanReads(
      *chain_, *env_.log,
      [this](int64_t e) { return (*env_.negatives)[(*env_.train_pos)[e]]; },
      env_.neighbor_reads);
}

void PipelineHandoff::BeginEpoch() {
  std::fill(writer_.begin(), writer_.end(), -1);
  for (int64_t u : recent_) in_recent_[u] = 0;
  recent_.clear();
  rest_pending_ = false;
  received_at_ = -1;
}

PipelineHandoff::Slot PipelineHandoff::SlotOf(const BatchContext& b) const {
  Slot s;
  s.window = dealt_->window_of(b.epoch_batch);
  const int64_t first_step = dealt_->window_first_batch(s.window);
  s.index = (b.epoch_batch - first_step) * depth() + position_;
  s.count = dealt_->window_batches(s.window) * depth();
  s.first = first_step * depth();
  return s;
}

std::vector<int64_t> PipelineHandoff::KnownReads(int64_t c) const {
  std::vector<int64_t> reads;
  if (c < 0 || c >= chain_->num_batches()) return reads;
  known_reads_.reads(c, &reads);
  return reads;
}

absl::Status PipelineHandoff::Drain(const memory::StateVersions& versions) {
  if (!rest_pending_) return absl::OkStatus();
  ScopedTimer wait(&env_.comm->pipeline.state_wait_seconds);
  {
    ScopedTimer bubble(&env_.comm->pipeline.bubble_seconds);
    RETURN_IF_ERROR(env_.pipeline->WaitOldestRecv());
    RETURN_IF_ERROR(env_.pipeline->WaitOldestRecv());
  }
  rest_pending_ = false;
  return ApplyMessage(rest_header_, rest_payload_, versions, nullptr);
}

absl::Status PipelineHandoff::Receive(const BatchContext& b,
                                      const std::vector<int64_t>& reads) {
  const Slot slot = SlotOf(b);
  received_at_ = -1;
  // The second message of the handoff before (a group of 2 takes it here).
  RETURN_IF_ERROR(Drain(b.versions));
  if (slot.index == 0) return absl::OkStatus();  // the window's first batch
  std::vector<int64_t> ids;
  {
    ScopedTimer wait(&env_.comm->pipeline.state_wait_seconds);
    ScopedTimer bubble(&env_.comm->pipeline.bubble_seconds);
    RETURN_IF_ERROR(ReceiveFirst(b.versions, &ids));
  }
  ++env_.comm->pipeline.handoffs_received;
  if (rest_pending_) {
    // The batch reads one of the states that come second: it waits.
    for (int64_t u : ids) mark_[u] = 1;
    bool late = false;
    for (int64_t u : reads) late = late || mark_[u];
    for (int64_t u : ids) mark_[u] = 0;
    if (late) {
      ++env_.comm->pipeline.late_rest;
      RETURN_IF_ERROR(Drain(b.versions));
    }
  }
  received_at_ = MonotonicSeconds();
  return Delivered(kStatesClass);
}

absl::Status PipelineHandoff::Send(const BatchContext& b,
                                   const std::vector<int32_t>& advanced) {
  const Slot slot = SlotOf(b);
  if (rest_pending_ && depth() > 2) {
    // The states sent second: this batch did not read them, but some may
    // travel on in this handoff (those of slots s - depth + 2 .. s - 1).
    // In a group of 2 nothing this worker received travels on: it takes
    // them before its next batch instead (Receive).
    RETURN_IF_ERROR(Drain(b.versions));
  }
  const int64_t s = slot.global();
  for (int32_t u : advanced) {
    writer_[u] = s;
    Remember(u);
  }
  // What the next batch's worker missed: the states written in slots
  // s - depth + 2 .. s of this window (older ones it has).
  const int64_t oldest = std::max(slot.first, s - depth() + 2);
  std::erase_if(recent_, [&](int64_t u) {
    if (writer_[u] >= oldest) return false;
    in_recent_[u] = 0;
    return true;
  });
  if (slot.index + 1 < slot.count && depth() > 1) {
    std::vector<int64_t> first, rest;
    if (critical_path_) {
      const int64_t next_chain =
          (one_window_ ? 0 : chain_->window_first_batch(slot.window)) +
          slot.index + 1;
      const std::vector<int64_t> urgent = KnownReads(next_chain);
      for (int64_t u : urgent) mark_[u] = 1;
      for (int64_t u : recent_) (mark_[u] ? first : rest).push_back(u);
      for (int64_t u : urgent) mark_[u] = 0;
    } else {
      first = recent_;
    }
    std::sort(first.begin(), first.end());
    std::sort(rest.begin(), rest.end());
    const int64_t bytes0 = env_.pipeline->bytes_sent();
    std::optional<Message> second;
    if (!rest.empty()) {
      ASSIGN_OR_RETURN(second, PackMessage(rest, {}, b.versions));
    }
    ASSIGN_OR_RETURN(Message m, PackMessage(first, rest, b.versions));
    if (second) m.header[3] = second->payload.numel();
    RETURN_IF_ERROR(SendMessage(m, kFirst));
    if (critical_path_) {
      env_.comm->pipeline.urgent_states_sent += first.size();
      env_.comm->pipeline.urgent_bytes_sent +=
          env_.pipeline->bytes_sent() - bytes0;
    }
    if (received_at_ >= 0) {
      env_.comm->pipeline.critical_seconds += MonotonicSeconds() - received_at_;
    }
    if (second) RETURN_IF_ERROR(SendMessage(*second, kRest));
    ++env_.comm->pipeline.handoffs_sent;
    env_.comm->pipeline.states_sent += first.size() + rest.size();
    env_.comm->pipeline.bytes_sent += env_.pipeline->bytes_sent() - bytes0;
  }
  // The write-back, off the critical path: one at a time.
  RETURN_IF_ERROR(WaitWriteBack());
  if (!write_back_enabled_ || advanced.empty()) return absl::OkStatus();
  absl::Status packed;
  memory::PackedStates states = env_.exchange->Pack(
      std::vector<int64_t>(advanced.begin(), advanced.end()), b.versions,
      &packed, /*rows_later=*/true);
  RETURN_IF_ERROR(packed);
  write_back_ = env_.exchange->StartPush(std::move(states));
  return absl::OkStatus();
}

absl::StatusOr<PipelineHandoff::Message> PipelineHandoff::PackMessage(
    const std::vector<int64_t>& nodes, const std::vector<int64_t>& ids,
    const memory::StateVersions& versions) {
  absl::Status packed;
  memory::PackedStates p = env_.exchange->Pack(nodes, versions, &packed);
  RETURN_IF_ERROR(packed);
  const size_t n = nodes.size();
  const size_t dim = n == 0 ? 0 : p.records.size() / n;
  std::vector<int64_t> writers(n);
  for (size_t i = 0; i < n; ++i) writers[i] = writer_[nodes[i]];
  Message m;
  m.header = torch::tensor({static_cast<int64_t>(n), static_cast<int64_t>(dim),
                            static_cast<int64_t>(ids.size()), int64_t{0}},
                           torch::kInt64);
  m.payload = torch::empty(
      {static_cast<int64_t>(PayloadBytes(n, dim, ids.size()))}, torch::kUInt8);
  uint8_t* out = m.payload.data_ptr<uint8_t>();
  Append(nodes.data(), n, &out);
  Append(p.versions.data(), n, &out);
  Append(p.times.data(), n, &out);
  Append(writers.data(), n, &out);
  Append(p.records.data(), p.records.size(), &out);
  Append(ids.data(), ids.size(), &out);
  return m;
}

absl::Status PipelineHandoff::SendMessage(const Message& m, int kind) {
  RETURN_IF_ERROR(
      env_.pipeline->StartSend(m.header, downstream(), HeaderTag(kind)));
  RETURN_IF_ERROR(
      env_.pipeline->StartSend(m.payload, downstream(), PayloadTag(kind)));
  // The next worker takes the first message before its update, the second
  // after it (groups of more than 2) or before its next batch (2): the
  // receives after which it has them.
  const int proof = kind == kRest && depth() == 2 ? 2 : 1;
  in_flight_.push_back({2, kStatesClass, proof});
  return absl::OkStatus();
}

absl::Status PipelineHandoff::ReceiveFirst(
    const memory::StateVersions& versions, std::vector<int64_t>* ids) {
  torch::Tensor header = torch::empty({kHeader}, torch::kInt64);
  RETURN_IF_ERROR(env_.pipeline->Recv(header, upstream(), HeaderTag(kFirst)));
  const int64_t* h = header.data_ptr<int64_t>();
  torch::Tensor payload = torch::empty(
      {static_cast<int64_t>(PayloadBytes(h[0], h[1], h[2]))}, torch::kUInt8);
  RETURN_IF_ERROR(env_.pipeline->Recv(payload, upstream(), PayloadTag(kFirst)));
  if (h[3] > 0) {
    // The second message follows: its receive starts now, so that it
    // arrives while this worker computes.
    rest_header_ = torch::empty({kHeader}, torch::kInt64);
    rest_payload_ = torch::empty({h[3]}, torch::kUInt8);
    RETURN_IF_ERROR(
        env_.pipeline->StartRecv(rest_header_, upstream(), HeaderTag(kRest)));
    RETURN_IF_ERROR(
        env_.pipeline->StartRecv(rest_payload_, upstream(), PayloadTag(kRest)));
    rest_pending_ = true;
  }
  return ApplyMessage(header, payload, versions, ids);
}

absl::Status PipelineHandoff::ApplyMessage(
    const torch::Tensor& header, const torch::Tensor& payload,
    const memory::StateVersions& versions, std::vector<int64_t>* ids) {
  const int64_t* h = header.data_ptr<int64_t>();
  const size_t n = h[0], dim = h[1], nids = h[2];
  if (payload.numel() != static_cast<int64_t>(PayloadBytes(n, dim, nids))) {
    return absl::InternalError(absl::StrCat(
        "a pipeline handoff from rank ", upstream(), " holds ", payload.numel(),
        " bytes where its header says ", PayloadBytes(n, dim, nids)));
  }
  const uint8_t* in = payload.data_ptr<uint8_t>();
  std::vector<int64_t> nodes, writers;
  std::vector<uint64_t> state_versions;
  std::vector<double> times;
  std::vector<float> records;
  Take(&in, n, &nodes);
  Take(&in, n, &state_versions);
  Take(&in, n, &times);
  Take(&in, n, &writers);
  Take(&in, n * dim, &records);
  if (ids != nullptr) Take(&in, nids, ids);
  // Every state comes from a later slot than this worker's copy (it wrote
  // its own in an earlier round); one that does not is kept as it is.
  std::vector<uint8_t> keep(n, 1);
  size_t kept = 0;
  for (size_t i = 0; i < n; ++i) {
    const int64_t u = nodes[i];
    if (u < 0 || u >= static_cast<int64_t>(writer_.size())) {
      return absl::InternalError(absl::StrCat(
          "a pipeline handoff from rank ", upstream(), " names node ", u,
          ", outside this run's ", writer_.size(), " nodes"));
    }
    keep[i] = writers[i] > writer_[u];
    if (!keep[i]) continue;
    ++kept;
    writer_[u] = writers[i];
    Remember(u);
  }
  if (kept < n) {
    size_t at = 0;
    for (size_t i = 0; i < n; ++i) {
      if (!keep[i]) continue;
      nodes[at] = nodes[i];
      state_versions[at] = state_versions[i];
      times[at] = times[i];
      std::copy_n(records.begin() + i * dim, dim, records.begin() + at * dim);
      ++at;
    }
    nodes.resize(kept);
    state_versions.resize(kept);
    times.resize(kept);
    records.resize(kept * dim);
  }
  env_.exchange->Apply(nodes, std::move(records), std::move(state_versions),
                       std::move(times), versions);
  return absl::OkStatus();
}

absl::Status PipelineHandoff::ReceiveParameters(const BatchContext& b) {
  if (!pass_parameters_ || SlotOf(b).global() == 0) return absl::OkStatus();
  int64_t numel = 0;
  for (const torch::Tensor& p : env_.parameters) numel += p.numel();
  // On the host: the pipeline group is gloo (a GPU's parameters go through
  // the host, as the handoffs' states do).
  torch::Tensor buffer = torch::empty(
      {numel}, env_.parameters.front().options().device(torch::kCPU));
  {
    ScopedTimer wait(&env_.comm->pipeline.parameter_wait_seconds);
    ScopedTimer bubble(&env_.comm->pipeline.bubble_seconds);
    RETURN_IF_ERROR(env_.pipeline->Recv(buffer, upstream(), kParameterTag));
  }
  torch::NoGradGuard no_grad;
  int64_t offset = 0;
  for (const torch::Tensor& p : env_.parameters) {
    const int64_t n = p.numel();
    p.copy_(buffer.narrow(0, offset, n).view_as(p));
    offset += n;
  }
  return Delivered(kParametersClass);
}

absl::Status PipelineHandoff::PassParameters(const BatchContext& b) {
  if (!pass_parameters_) return absl::OkStatus();
  const Slot slot = SlotOf(b);
  if (slot.global() + 1 >= dealt_->num_batches() * depth()) {
    return absl::OkStatus();  // the epoch's last batch
  }
  std::vector<torch::Tensor> flat;
  for (const torch::Tensor& p : env_.parameters) {
    flat.push_back(p.detach().reshape(-1));
  }
  torch::Tensor buffer = torch::cat(flat).to(torch::kCPU);
  RETURN_IF_ERROR(
      env_.pipeline->StartSend(buffer, downstream(), kParameterTag));
  in_flight_.push_back({1, kParametersClass, 1});
  ++env_.comm->pipeline.parameter_passes;
  env_.comm->pipeline.parameter_bytes += buffer.numel() * sizeof(float);
  return absl::OkStatus();
}

void PipelineHandoff::Remember(int64_t u) {
  if (in_recent_[u]) return;
  in_recent_[u] = 1;
  recent_.push_back(u);
}

absl::Status PipelineHandoff::Delivered(int cls) {
  for (InFlight& f : in_flight_) {
    if (f.cls == cls && f.receives_left > 0) --f.receives_left;
  }
  while (!in_flight_.empty() && in_flight_.front().receives_left == 0) {
    RETURN_IF_ERROR(env_.pipeline->WaitOldestSends(in_flight_.front().works));
    in_flight_.pop_front();
  }
  return absl::OkStatus();
}

absl::Status PipelineHandoff::WaitWriteBack() {
  if (!write_back_.pending()) return absl::OkStatus();
  absl::Status s;
  {
    ScopedTimer wait(&env_.comm->store.seconds);
    s = write_back_.Wait();
  }
  const memory::StoreTraffic& pushed = write_back_.traffic();
  env_.comm->store.AddPushCounts(pushed);
  return s;
}

absl::Status PipelineHandoff::EndEpoch(const memory::StateVersions& versions) {
  // Every worker takes what is still coming before it waits for its own
  // sends (which the next worker takes here too).
  RETURN_IF_ERROR(Drain(versions));
  RETURN_IF_ERROR(WaitWriteBack());
  RETURN_IF_ERROR(env_.pipeline->WaitSends());
  in_flight_.clear();
  if (!pass_parameters_) return absl::OkStatus();
  // The last batch's parameters (position depth - 1 runs the last slot).
  return env_.pipeline->Broadcast(env_.parameters, ranks_.back());
}

}  // namespace mnemo::runtime
