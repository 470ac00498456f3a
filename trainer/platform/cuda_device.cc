#include "trainer/platform/cuda_device.h"

#include <ATen/Context.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/core/Event.h>
#include <c10/core/StreamGuard.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <dlfcn.h>

#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "trainer/platform/build_info.h"
#include "trainer/platform/cuda_transfer.h"
#include "trainer/platform/nccl_backend.h"
#if MNEMO_HAVE_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

namespace mnemo::platform {

int CudaDeviceCount() {
  // c10's count is 0 (with a warning) when the driver is missing; it never
  // throws for that.
  return static_cast<int>(c10::cuda::device_count());
}

std::string CudaUnavailableReason() {
  if (CudaDeviceCount() > 0) return "";
  void* driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
  if (driver == nullptr) driver = dlopen("libcuda.so.1", RTLD_LAZY);
  if (driver == nullptr) {
    return "no NVIDIA driver on this machine (libcuda.so.1 cannot be "
           "loaded)";
  }
  if (absl::Status old = CheckDriver(GetBuildInfo()); !old.ok()) {
    return std::string(old.message());
  }
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  return visible != nullptr
             ? absl::StrCat("the driver sees no GPU (CUDA_VISIBLE_DEVICES='",
                            visible, "')")
             : "the driver sees no GPU";
}

std::string CudaDeviceName(int index) {
  return at::cuda::getDeviceProperties(static_cast<c10::DeviceIndex>(index))
      ->name;
}

void SetCudaDevice(int index) {
  c10::cuda::set_device(static_cast<c10::DeviceIndex>(index));
}

int64_t CudaPeakAllocatedBytes(int index) {
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(
      static_cast<c10::DeviceIndex>(index));
  return stats
      .allocated_bytes[static_cast<size_t>(
          c10::CachingAllocator::StatType::AGGREGATE)]
      .peak;
}

void SynchronizeCuda() { c10::cuda::device_synchronize(); }

void SetCudaTf32(bool on) {
  // LibTorch's setters keep its older and newer precision settings in step
  // (mixing the two APIs makes its getters throw).
  at::globalContext().setAllowTF32CuBLAS(on);
  at::globalContext().setAllowTF32CuDNN(on);
}

bool CudaTf32() { return at::globalContext().allowTF32CuBLAS(); }

void SetCudaSyncCheck(bool on) {
  c10::cuda::warning_state().set_sync_debug_mode(
      on ? c10::cuda::SyncDebugMode::L_ERROR
         : c10::cuda::SyncDebugMode::L_DISABLED);
}

struct CudaPhaseClock::Impl {
  c10::DeviceIndex device = 0;
  // Timing events, reused from batch to batch (recording one again
  // replaces its earlier record).
  std::vector<c10::Event> events;
  size_t used = 0;
  struct Phase {
    size_t begin = 0, end = 0;  // into `events`
    std::vector<double*> into;
  };
  std::vector<Phase> phases;
  bool open = false;  // Begin() without its End()

  size_t Record() {
    if (used == events.size()) {
      // BACKEND_DEFAULT: a CUDA event with timing (LibTorch's default
      // disables it).
      events.emplace_back(c10::DeviceType::CUDA,
                          c10::EventFlag::BACKEND_DEFAULT);
    }
    events[used].record(c10::cuda::getCurrentCUDAStream(device).unwrap());
    return used++;
  }
};

CudaPhaseClock::CudaPhaseClock(int device_index)
    : impl_(std::make_unique<Impl>()) {
  impl_->device = static_cast<c10::DeviceIndex>(device_index);
}

CudaPhaseClock::~CudaPhaseClock() = default;

void CudaPhaseClock::Begin() {
  TORCH_CHECK(!impl_->open, "CudaPhaseClock: Begin() twice without End()");
  impl_->phases.push_back({impl_->Record(), 0, {}});
  impl_->open = true;
}

void CudaPhaseClock::End(std::vector<double*> into) {
  TORCH_CHECK(impl_->open, "CudaPhaseClock: End() without Begin()");
  Impl::Phase& p = impl_->phases.back();
  p.end = impl_->Record();
  p.into = std::move(into);
  impl_->open = false;
}

void CudaPhaseClock::Collect() {
  TORCH_CHECK(!impl_->open, "CudaPhaseClock: Collect() inside a phase");
  if (!impl_->phases.empty()) {
    impl_->events[impl_->phases.back().end].synchronize();
    for (const Impl::Phase& p : impl_->phases) {
      // Milliseconds from the begin event to the end event.
      const double seconds =
          impl_->events[p.begin].elapsedTime(impl_->events[p.end]) / 1000.0;
      for (double* acc : p.into) *acc += seconds;
    }
  }
  Discard();
}

void CudaPhaseClock::Discard() {
  impl_->phases.clear();
  impl_->used = 0;
  impl_->open = false;
}

namespace {

// One copy stream per device for the life of the process: batches travel
// on it in the order they were staged.
c10::cuda::CUDAStream CopyStream(c10::DeviceIndex index) {
  static std::mutex mu;
  static std::vector<std::optional<c10::cuda::CUDAStream>> streams;
  std::lock_guard<std::mutex> lock(mu);
  if (static_cast<size_t>(index) >= streams.size()) {
    streams.resize(index + 1);
  }
  if (!streams[index]) {
    streams[index] =
        c10::cuda::getStreamFromPool(/*isHighPriority=*/false, index);
  }
  return *streams[index];
}

}  // namespace

torch::Tensor CopyToDeviceOnCopyStream(const torch::Tensor& host,
                                       torch::Device device) {
  TORCH_CHECK(device.is_cuda(), "CopyToDeviceOnCopyStream: ", device,
              " is not a CUDA device");
  const c10::DeviceIndex index =
      device.has_index() ? device.index() : c10::cuda::current_device();
  // c10's device-generic stream guard and event (calls into LibTorch's
  // CUDA library, not CUDA's runtime, which this binary does not link).
  const c10::Stream compute = c10::cuda::getCurrentCUDAStream(index).unwrap();
  const c10::Stream copy = CopyStream(index).unwrap();
  torch::Tensor out;
  {
    // Allocated and written on the copy stream. The pinned source is kept
    // from reuse until the copy is done: LibTorch's host allocator records
    // the copy's stream.
    c10::StreamGuard guard(copy);
    out = host.to(torch::Device(torch::kCUDA, index), /*non_blocking=*/true);
  }
  c10::Event copied(c10::DeviceType::CUDA);
  copied.record(copy);
  copied.block(compute);
  // Read on the compute stream: not reused before its kernels are done.
  c10::cuda::CUDACachingAllocator::recordStream(
      out.storage().data_ptr(),
      c10::cuda::CUDAStream(c10::cuda::CUDAStream::UNCHECKED, compute));
  return out;
}

std::function<torch::Tensor()> ReadToHostLater(const torch::Tensor& device) {
  TORCH_CHECK(device.is_cuda(), "ReadToHostLater: ", device.device(),
              " is not a CUDA device");
  torch::Tensor host = torch::empty(
      device.sizes(), device.options().device(torch::kCPU).pinned_memory(true));
  host.copy_(device, /*non_blocking=*/true);
  auto copied = std::make_shared<c10::Event>(c10::DeviceType::CUDA);
  copied->record(
      c10::cuda::getCurrentCUDAStream(device.device().index()).unwrap());
  return [host, copied] {
    copied->synchronize();
    return host;
  };
}

c10::intrusive_ptr<c10d::Backend> MakeNcclBackend(
    const c10::intrusive_ptr<c10d::Store>& store, int rank, int world_size,
    std::chrono::milliseconds timeout) {
#if MNEMO_HAVE_NCCL
  // No blocking wait (mnemo's main() leaves TORCH_NCCL_BLOCKING_WAIT unset):
  // Work::wait() only orders the compute stream after the collective and
  // the host never waits in it. A collective that outlives `timeout` (a
  // dead or frozen peer) is caught by ProcessGroupNCCL's watchdog thread,
  // which with TORCH_NCCL_ASYNC_ERROR_HANDLING=3 (main() sets it unless the
  // environment does) ends the process; a dead peer ends the job sooner,
  // through the coordinator's verdict and mnemo's own watchdog, as with gloo.
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = timeout;
  auto backend = c10::make_intrusive<c10d::ProcessGroupNCCL>(
      store, rank, world_size, options);
  // The communicator is created now, on this process's device, while every
  // rank is connecting (a failure surfaces here, not in the first step's
  // all-reduce), and the group is bound to that device.
  const at::Device device(at::kCUDA, c10::cuda::current_device());
  backend->setBoundDeviceId(device);
  backend->eagerConnectSingleDevice(device);
  return backend;
#else
  (void)store;
  (void)rank;
  (void)world_size;
  (void)timeout;
  throw std::runtime_error(
      "this build of mnemo has no NCCL (nccl.h was not found in the CUDA "
      "toolkit it was built against)");
#endif
}

}  // namespace mnemo::platform
