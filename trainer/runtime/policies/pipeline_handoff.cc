#include "trainer/runtime/policies/pipeline_handoff.h"

#include <torch/torch.h>

#include <algorithm>
#include <cstring>

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

// A message's header: states, floats per record, ids appended.
constexpr int kHeader = 3;

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
  rest_ids_.clear();
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

absl::Status PipelineHandoff::Receive(const BatchContext& b,
                                      const std::vector<int64_t>& reads) {
  const Slot slot = SlotOf(b);
  received_at_ = -1;
  if (slot.index == 0) return absl::OkStatus();  // the window's first batch
  std::vector<int64_t> ids;
  {
    ScopedTimer wait(&env_.comm->pipeline.state_wait_seconds);
    ScopedTimer bubble(&env_.comm->pipeline.bubble_seconds);
    RETURN_IF_ERROR(ReceiveStates(kFirst, b.versions, &ids));
  }
  ++env_.comm->pipeline.handoffs_received;
  rest_ids_ = std::move(ids);
  rest_pending_ = !rest_ids_.empty();
  if (rest_pending_) {
    // The batch reads one of the states that come second: it waits.
    for (int64_t u : rest_ids_) mark_[u] = 1;
    bool late = false;
    for (int64_t u : reads) late = late || mark_[u];
    for (int64_t u : rest_ids_) mark_[u] = 0;
    if (late) {
      ++env_.comm->pipeline.late_rest;
      ScopedTimer wait(&env_.comm->pipeline.state_wait_seconds);
      ScopedTimer bubble(&env_.comm->pipeline.bubble_seconds);
      RETURN_IF_ERROR(ReceiveStates(kRest, b.versions, nullptr));
      rest_pending_ = false;
    }
  }
  received_at_ = MonotonicSeconds();
  return Delivered(/*parameters=*/false);
}

absl::Status PipelineHandoff::Send(const BatchContext& b,
                                   const std::vector<int32_t>& advanced) {
  const Slot slot = SlotOf(b);
  if (rest_pending_) {
    // The states sent second: this batch did not read them, but the next
    // ones may, and they travel on.
    ScopedTimer wait(&env_.comm->pipeline.state_wait_seconds);
    RETURN_IF_ERROR(ReceiveStates(kRest, b.versions, nullptr));
    rest_pending_ = false;
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
      for (int64_t u : KnownReads(next_chain)) mark_[u] = 1;
      for (int64_t u : recent_) (mark_[u] ? first : rest).push_back(u);
      for (int64_t u : KnownReads(next_chain)) mark_[u] = 0;
    } else {
      first = recent_;
    }
    std::sort(first.begin(), first.end());
    std::sort(rest.begin(), rest.end());
    const int64_t bytes0 = env_.pipeline->bytes_sent();
    RETURN_IF_ERROR(SendStates(first, rest, kFirst, b.versions));
    if (critical_path_) {
      env_.comm->pipeline.urgent_states_sent += first.size();
      env_.comm->pipeline.urgent_bytes_sent +=
          env_.pipeline->bytes_sent() - bytes0;
    }
    if (received_at_ >= 0) {
      env_.comm->pipeline.critical_seconds += MonotonicSeconds() - received_at_;
    }
    if (!rest.empty()) {
      RETURN_IF_ERROR(SendStates(rest, {}, kRest, b.versions));
    }
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

absl::Status PipelineHandoff::SendStates(
    const std::vector<int64_t>& nodes, const std::vector<int64_t>& ids,
    int kind, const memory::StateVersions& versions) {
  absl::Status packed;
  memory::PackedStates p = env_.exchange->Pack(nodes, versions, &packed);
  RETURN_IF_ERROR(packed);
  const size_t n = nodes.size();
  const size_t dim = n == 0 ? 0 : p.records.size() / n;
  std::vector<int64_t> writers(n);
  for (size_t i = 0; i < n; ++i) writers[i] = writer_[nodes[i]];
  torch::Tensor header =
      torch::tensor({static_cast<int64_t>(n), static_cast<int64_t>(dim),
                     static_cast<int64_t>(ids.size())},
                    torch::kInt64);
  const size_t bytes =
      n * (4 * sizeof(int64_t) + dim * sizeof(float)) + ids.size() * 8;
  torch::Tensor payload =
      torch::empty({static_cast<int64_t>(bytes)}, torch::kUInt8);
  uint8_t* out = payload.data_ptr<uint8_t>();
  Append(nodes.data(), n, &out);
  Append(p.versions.data(), n, &out);
  Append(p.times.data(), n, &out);
  Append(writers.data(), n, &out);
  Append(p.records.data(), p.records.size(), &out);
  Append(ids.data(), ids.size(), &out);
  RETURN_IF_ERROR(
      env_.pipeline->StartSend(header, downstream(), HeaderTag(kind)));
  RETURN_IF_ERROR(
      env_.pipeline->StartSend(payload, downstream(), PayloadTag(kind)));
  in_flight_.push_back({2, false, false});
  return absl::OkStatus();
}

absl::Status PipelineHandoff::ReceiveStates(
    int kind, const memory::StateVersions& versions,
    std::vector<int64_t>* ids) {
  torch::Tensor header = torch::empty({kHeader}, torch::kInt64);
  RETURN_IF_ERROR(env_.pipeline->Recv(header, upstream(), HeaderTag(kind)));
  const int64_t* h = header.data_ptr<int64_t>();
  const size_t n = h[0], dim = h[1], nids = h[2];
  const size_t bytes =
      n * (4 * sizeof(int64_t) + dim * sizeof(float)) + nids * sizeof(int64_t);
  torch::Tensor payload =
      torch::empty({static_cast<int64_t>(bytes)}, torch::kUInt8);
  RETURN_IF_ERROR(env_.pipeline->Recv(payload, upstream(), PayloadTag(kind)));
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
  std::vector<torch::Tensor> flat;
  for (const torch::Tensor& p : env_.parameters) flat.push_back(p.reshape(-1));
  torch::Tensor buffer = torch::empty_like(torch::cat(flat));
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
  return Delivered(/*parameters=*/true);
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
  torch::Tensor buffer = torch::cat(flat);
  RETURN_IF_ERROR(
      env_.pipeline->StartSend(buffer, downstream(), kParameterTag));
  in_flight_.push_back({1, true, false});
  ++env_.comm->pipeline.parameter_passes;
  env_.comm->pipeline.parameter_bytes += buffer.numel() * sizeof(float);
  return absl::OkStatus();
}

void PipelineHandoff::Remember(int64_t u) {
  if (in_recent_[u]) return;
  in_recent_[u] = 1;
  recent_.push_back(u);
}

absl::Status PipelineHandoff::Delivered(bool parameters) {
  for (InFlight& f : in_flight_) {
    if (f.parameters == parameters) f.delivered = true;
  }
  while (!in_flight_.empty() && in_flight_.front().delivered) {
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

absl::Status PipelineHandoff::EndEpoch() {
  RETURN_IF_ERROR(WaitWriteBack());
  RETURN_IF_ERROR(env_.pipeline->WaitSends());
  in_flight_.clear();
  if (!pass_parameters_) return absl::OkStatus();
  // The last batch's parameters (position depth - 1 runs the last slot).
  return env_.pipeline->Broadcast(env_.parameters, ranks_.back());
}

}  // namespace mnemo::runtime
