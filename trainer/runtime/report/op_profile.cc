#include "trainer/runtime/report/op_profile.h"

#include <kineto/ActivityType.h>
#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/csrc/autograd/profiler_legacy.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <numeric>
#include <ostream>
#include <sstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "util/proc.h"

namespace mnemo::runtime {
namespace prof = torch::autograd::profiler;

struct OpProfile::State {
  bool recording = false;
  int64_t recorded = 0;  // batches
  double forward_s = 0, backward_s = 0, optimizer_s = 0;
  prof::thread_event_lists events;
  // On a GPU: the device's activity, and the host's seconds from the
  // first recorded batch's start to the last one's end.
  std::unique_ptr<prof::ProfilerResult> device_events;
  double start_s = 0, wall_s = 0;
};

double CoveredSeconds(std::vector<std::pair<uint64_t, uint64_t>> intervals) {
  std::sort(intervals.begin(), intervals.end());
  uint64_t covered = 0, begin = 0, end = 0;
  bool open = false;
  for (const auto& [b, e] : intervals) {
    if (e <= b) continue;
    if (open && b <= end) {
      end = std::max(end, e);
      continue;
    }
    if (open) covered += end - begin;
    begin = b;
    end = e;
    open = true;
  }
  if (open) covered += end - begin;
  return covered * 1e-9;
}

OpProfile::OpProfile(std::string path, int64_t first_batch, int64_t batches,
                     bool cuda)
    : path_(std::move(path)),
      first_(first_batch),
      count_(batches),
      cuda_(cuda),
      state_(std::make_unique<State>()) {}

OpProfile::~OpProfile() {
  if (!state_->recording) return;
  if (cuda_) {
    prof::disableProfiler();
  } else {
    prof::disableProfilerLegacy();
  }
}

void OpProfile::BeginBatch(int64_t batch) {
  if (batch != first_ || state_->recording || count_ <= 0) return;
  if (cuda_) {
    // The device's activity only: no CPU operator callbacks, whose cost
    // would lengthen the host's part of the batches being measured.
    prof::enableProfiler(torch::profiler::impl::ProfilerConfig(
                             torch::profiler::impl::ProfilerState::KINETO),
                         {torch::profiler::impl::ActivityType::CUDA});
    state_->start_s = MonotonicSeconds();
  } else {
    prof::enableProfilerLegacy(torch::profiler::impl::ProfilerConfig(
        torch::profiler::impl::ProfilerState::CPU,
        /*report_input_shapes=*/true));
  }
  state_->recording = true;
}

void OpProfile::EndBatch(int64_t batch, double forward_s, double backward_s,
                         double optimizer_s) {
  if (!state_->recording) return;
  ++state_->recorded;
  state_->forward_s += forward_s;
  state_->backward_s += backward_s;
  state_->optimizer_s += optimizer_s;
  // On a GPU the batch's work is done: EndBatch follows its wait for the
  // loss.
  if (batch + 1 >= first_ + count_) StopRecording();
}

void OpProfile::StopRecording() {
  if (!state_->recording) return;
  if (cuda_) {
    state_->wall_s = MonotonicSeconds() - state_->start_s;
    state_->device_events = prof::disableProfiler();
  } else {
    state_->events = prof::disableProfilerLegacy();
  }
  state_->recording = false;
}

namespace {
struct OpStats {
  int64_t calls = 0;
  double self_us = 0, total_us = 0;
  // Self time by input shapes.
  std::map<std::string, std::pair<int64_t, double>> by_shape;
};

std::string Shapes(const std::vector<std::vector<int64_t>>& shapes) {
  std::vector<std::string> parts;
  for (const auto& s : shapes) {
    if (s.empty()) continue;
    parts.push_back(absl::StrCat("[", absl::StrJoin(s, ","), "]"));
  }
  return parts.empty() ? "-" : absl::StrJoin(parts, " ");
}

// Each operator's calls and self and total time over `events`, by name:
// the ranges of each thread's list nest, and an operator's self time is
// its range's time less its children's.
std::map<std::string, OpStats> AggregateOps(
    const prof::thread_event_lists& events) {
  std::map<std::string, OpStats> ops;
  for (const auto& list : events) {
    struct Open {
      const prof::LegacyEvent* push;
      double child_us = 0;
    };
    std::vector<Open> stack;
    for (const auto& e : list) {
      if (e.kind() == prof::EventKind::PushRange) {
        stack.push_back({&e});
      } else if (e.kind() == prof::EventKind::PopRange && !stack.empty()) {
        Open open = stack.back();
        stack.pop_back();
        const double total = open.push->cpuElapsedUs(e);
        const double self = std::max(0.0, total - open.child_us);
        OpStats& s = ops[open.push->name()];
        ++s.calls;
        s.total_us += total;
        s.self_us += self;
        auto& shape = s.by_shape[Shapes(open.push->shapes())];
        ++shape.first;
        shape.second += self;
        if (!stack.empty()) stack.back().child_us += total;
      }
    }
  }
  return ops;
}

// The report's table row of operator `name` over `n` batches (`self_sum`:
// every operator's self time), with its three costliest input shapes.
std::string OpRow(const std::string& name, const OpStats& s, double n,
                  double self_sum) {
  std::vector<std::pair<std::string, std::pair<int64_t, double>>> shapes(
      s.by_shape.begin(), s.by_shape.end());
  std::sort(shapes.begin(), shapes.end(), [](const auto& a, const auto& b) {
    return a.second.second > b.second.second;
  });
  std::vector<std::string> top;
  for (size_t i = 0; i < shapes.size() && i < 3; ++i) {
    top.push_back(absl::StrFormat("%s (%.1f, %.3f)", shapes[i].first,
                                  shapes[i].second.first / n,
                                  1e-3 * shapes[i].second.second / n));
  }
  return absl::StrFormat("| %s | %.1f | %.3f | %.1f | %.3f | %s |\n", name,
                         s.calls / n, 1e-3 * s.self_us / n,
                         100.0 * s.self_us / std::max(self_sum, 1e-9),
                         1e-3 * s.total_us / n, absl::StrJoin(top, "; "));
}
}  // namespace

absl::Status OpProfile::Finish() {
  StopRecording();  // fewer batches than asked for: what there was
  if (state_->recorded == 0) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "--profile: no batch was recorded (the first epoch has fewer than %d "
        "batches)",
        first_ + 1));
  }
  std::ostringstream report;
  if (cuda_) {
    WriteCudaReport(report);
  } else {
    WriteCpuReport(report);
  }
  std::ofstream out(path_);
  if (!out) {
    return absl::PermissionDeniedError(
        absl::StrCat("--profile: cannot write ", path_));
  }
  out << report.str();
  out.close();
  if (!out) {
    return absl::DataLossError(
        absl::StrCat("--profile: writing ", path_, " failed"));
  }
  return absl::OkStatus();
}

void OpProfile::WriteCpuReport(std::ostream& out) const {
  const std::map<std::string, OpStats> ops = AggregateOps(state_->events);
  std::vector<std::pair<std::string, OpStats>> rows(ops.begin(), ops.end());
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) {
    return a.second.self_us > b.second.self_us;
  });
  double self_sum = 0;
  for (const auto& [name, s] : rows) self_sum += s.self_us;
  const double n = static_cast<double>(state_->recorded);
  out << absl::StrFormat(
      "# mnemo operator profile: %d training batches (first epoch, batches "
      "%d-%d)\n\n",
      state_->recorded, first_ + 1, first_ + state_->recorded);
  out << absl::StrFormat(
      "Per batch, wall time with the profiler on: forward %.2f ms, backward "
      "%.2f ms, optimizer (gradient norm and Adam) %.2f ms. Operator self "
      "time: %.2f ms per batch (the profiler's own overhead included).\n\n",
      1e3 * state_->forward_s / n, 1e3 * state_->backward_s / n,
      1e3 * state_->optimizer_s / n, 1e-3 * self_sum / n);
  out << "| operator | calls/batch | self ms/batch | self % | total "
         "ms/batch | costliest input shapes (calls, self ms/batch) |\n"
         "|---|---|---|---|---|---|\n";
  for (const auto& [name, s] : rows) out << OpRow(name, s, n, self_sum);
}

void OpProfile::WriteCudaReport(std::ostream& out) const {
  struct KernelStats {
    int64_t launches = 0;
    double seconds = 0;
  };
  std::map<std::string, KernelStats> kernels;
  std::vector<std::pair<uint64_t, uint64_t>> intervals;
  double kernel_sum_s = 0;
  if (state_->device_events) {
    for (const auto& e : state_->device_events->events()) {
      const auto type = static_cast<libkineto::ActivityType>(e.activityType());
      if (e.deviceType() != c10::DeviceType::CUDA ||
          (type != libkineto::ActivityType::CONCURRENT_KERNEL &&
           type != libkineto::ActivityType::GPU_MEMCPY &&
           type != libkineto::ActivityType::GPU_MEMSET)) {
        continue;
      }
      KernelStats& k = kernels[e.name()];
      ++k.launches;
      k.seconds += e.durationNs() * 1e-9;
      kernel_sum_s += e.durationNs() * 1e-9;
      intervals.emplace_back(e.startNs(), e.endNs());
    }
  }
  const double n = static_cast<double>(state_->recorded);
  const double busy_s = CoveredSeconds(std::move(intervals));
  out << absl::StrFormat(
      "# mnemo GPU profile: %d training batches (first epoch, batches "
      "%d-%d)\n\n",
      state_->recorded, first_ + 1, first_ + state_->recorded);
  if (kernels.empty()) {
    out << "No GPU activity was recorded (CUPTI, which LibTorch's profiler "
           "reads the device's activity through, did not answer).\n";
  } else {
    out << absl::StrFormat(
        "Per batch: %.3f ms of wall time (the host's, from the first "
        "batch's start to the last one's end, the device's activity "
        "recorded), %.3f ms with the GPU busy (the union of kernel, copy "
        "and memset intervals over every stream), %.3f ms of kernel, copy "
        "and memset time in all, %.0f launches; forward %.2f ms, backward "
        "%.2f ms, optimizer %.2f ms (device time).\n\n"
        "GPU busy: %.1f%% of the batches' wall time\n\n",
        1e3 * state_->wall_s / n, 1e3 * busy_s / n, 1e3 * kernel_sum_s / n,
        static_cast<double>(std::accumulate(
            kernels.begin(), kernels.end(), int64_t{0},
            [](int64_t a, const auto& k) { return a + k.second.launches; })) /
            n,
        1e3 * state_->forward_s / n, 1e3 * state_->backward_s / n,
        1e3 * state_->optimizer_s / n,
        100.0 * busy_s / std::max(state_->wall_s, 1e-9));
    std::vector<std::pair<std::string, KernelStats>> rows(kernels.begin(),
                                                          kernels.end());
    std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) {
      return a.second.seconds > b.second.seconds;
    });
    out << "| kernel, copy or memset | launches/batch | ms/batch | % of "
           "device time |\n|---|---|---|---|\n";
    for (const auto& [name, k] : rows) {
      out << absl::StrFormat(
          "| %s | %.1f | %.4f | %.1f |\n",
          name.size() > 120 ? name.substr(0, 117) + "..." : name,
          k.launches / n, 1e3 * k.seconds / n,
          100.0 * k.seconds / std::max(kernel_sum_s, 1e-12));
    }
  }
}

}  // namespace mnemo::runtime
