// Small helpers of the training engine and its policies (torch code).
#ifndef MNEMO_TRAINER_RUNTIME_ENGINE_UTIL_H_
#define MNEMO_TRAINER_RUNTIME_ENGINE_UTIL_H_

#include <ATen/autocast_mode.h>
#include <torch/torch.h>

#include <cstdint>
#include <exception>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "trainer/runtime/adam_kernel.h"
#include "trainer/runtime/cuda_device.h"
#include "util/proc.h"

namespace mnemo::runtime {

// An exception's message without LibTorch's C++ stack trace (c10::Error's
// what() carries one).
inline std::string ExceptionMessage(const std::exception& e) {
  if (const auto* c = dynamic_cast<const c10::Error*>(&e))
    return c->what_without_backtrace();
  return e.what();
}

// Seeds derived from the run seed, so that each epoch's randomness depends
// only on (seed, epoch): a resumed run draws exactly what an uninterrupted
// run draws. Evaluation negatives use fixed seeds (TGN protocol: 0..3).
inline uint64_t EpochSeed(uint64_t seed, int epoch, uint64_t stream) {
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + epoch * 0xBF58476D1CE4E5B9ull +
               stream * 0x94D049BB133111EBull;
  x ^= x >> 31;
  x *= 0xD6E8FEB86659FD93ull;
  x ^= x >> 32;
  return x;
}
constexpr uint64_t kValSeed = 0, kNewNodeValSeed = 1, kTestSeed = 2,
                   kNewNodeTestSeed = 3;

// Time accumulator for the summary's time breakdown.
struct Timers {
  double load = 0, prepare = 0, forward = 0, backward = 0, memory = 0,
         evaluation = 0;
};

// Gives every parameter without a gradient a zero one. Parameters outside a
// batch's graph (the memory updater before any mail exists) would otherwise
// be skipped by Adam; with zeros, single-process, resumed and all-reduced
// runs step every parameter alike (zero_grad() in LibTorch 1.13 leaves
// defined zeros after the first step, as PyTorch 1.13 does).
inline void DefineZeroGrads(const std::vector<torch::Tensor>& params) {
  for (auto p : params) {
    if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
  }
}

// The L2 norm of the gradients on a GPU, as a 0-dim double tensor there:
// the norms in one multi-tensor kernel, summed there; nothing waits for it.
inline torch::Tensor GradNormOnDevice(
    const std::vector<torch::Tensor>& params) {
  std::vector<torch::Tensor> grads;
  for (const auto& p : params) grads.push_back(p.grad());
  return torch::stack(at::_foreach_norm(grads, 2))
      .to(torch::kDouble)
      .pow(2)
      .sum()
      .sqrt();
}

// L2 norm of all gradients together: one pass over each contiguous
// float32 gradient, summed in double (on a GPU: GradNormOnDevice).
inline double GradNorm(const std::vector<torch::Tensor>& params) {
  double sq = 0;
  for (const auto& p : params) {
    const torch::Tensor& g = p.grad();
    if (g.scalar_type() != torch::kFloat || !g.is_contiguous() ||
        !g.device().is_cpu()) {
      sq += g.pow(2).sum().item<double>();
      continue;
    }
    sq += SumOfSquares(g.data_ptr<float>(), g.numel());
  }
  return std::sqrt(sq);
}

// Forgets every gradient, so that the next backward pass hands its
// gradients over instead of adding them to zeros (LibTorch 1.13's
// zero_grad() fills each with zeros, and backward then adds: two passes
// per parameter per step). DefineZeroGrads gives the untouched ones zeros.
inline void ForgetGrads(const std::vector<torch::Tensor>& params) {
  for (auto p : params) p.mutable_grad() = torch::Tensor();
}

class ScopedTimer {
 public:
  explicit ScopedTimer(double* acc) : acc_(acc), start_(MonotonicSeconds()) {}
  ~ScopedTimer() { *acc_ += MonotonicSeconds() - start_; }

 private:
  double* acc_;
  double start_;
};

// Times one phase of a training batch into each of `into`: its wall time
// on the CPU (no clock), its device time on a GPU (`clock`: a pair of
// events on the compute stream, added at the clock's Collect(), where the
// batch waits for the device once), so that timing a phase never makes
// the host wait for the GPU.
class PhaseTimer {
 public:
  PhaseTimer(CudaPhaseClock* clock, std::initializer_list<double*> into)
      : clock_(clock), into_(into), start_(clock ? 0 : MonotonicSeconds()) {
    if (clock_) clock_->Begin();
  }
  ~PhaseTimer() {
    if (clock_) {
      clock_->End(std::move(into_));
      return;
    }
    const double seconds = MonotonicSeconds() - start_;
    for (double* acc : into_) *acc += seconds;
  }
  PhaseTimer(const PhaseTimer&) = delete;
  PhaseTimer& operator=(const PhaseTimer&) = delete;

 private:
  CudaPhaseClock* clock_;
  std::vector<double*> into_;
  double start_;
};

// While alive (when `on`): a CUDA call inside the span that makes the host
// wait for the device throws, naming it (SetCudaSyncCheck). Release() ends
// the span early (where the batch waits on purpose).
class DeviceSyncCheck {
 public:
  explicit DeviceSyncCheck(bool on) : on_(on) {
    if (on_) SetCudaSyncCheck(true);
  }
  ~DeviceSyncCheck() { Release(); }
  void Release() {
    if (on_) SetCudaSyncCheck(false);
    on_ = false;
  }
  DeviceSyncCheck(const DeviceSyncCheck&) = delete;
  DeviceSyncCheck& operator=(const DeviceSyncCheck&) = delete;

 private:
  bool on_;
};

// bf16 autocast on `device` (fp32 master weights), enabled while alive.
class AutocastScope {
 public:
  explicit AutocastScope(bool enabled, at::DeviceType device = at::kCPU)
      : enabled_(enabled), device_(device) {
    if (!enabled_) return;
    at::autocast::set_autocast_dtype(device_, at::kBFloat16);
    at::autocast::set_autocast_enabled(device_, true);
  }
  ~AutocastScope() {
    if (!enabled_) return;
    at::autocast::set_autocast_enabled(device_, false);
    at::autocast::clear_cache();
  }
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  bool enabled_;
  at::DeviceType device_;
};

}  // namespace mnemo::runtime

#endif  // MNEMO_TRAINER_RUNTIME_ENGINE_UTIL_H_
