// The GPU queries and settings the engine needs. Only cuda_device.cc sees
// CUDA's headers; everything else uses LibTorch's device-generic API. Every
// function is safe to call on a machine without an NVIDIA driver (CI's):
// libcuda.so.1 is loaded by LibTorch on first use, not at start-up.
// Torch-free.
#ifndef MNEMO_TRAINER_PLATFORM_CUDA_DEVICE_H_
#define MNEMO_TRAINER_PLATFORM_CUDA_DEVICE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace mnemo::platform {

// Visible CUDA devices (after CUDA_VISIBLE_DEVICES); 0 without a driver.
int CudaDeviceCount();
// Why no device is visible, for an error message ("" when some are).
std::string CudaUnavailableReason();
// The device's name ("NVIDIA H200"); requires index < CudaDeviceCount().
std::string CudaDeviceName(int index);
// Makes `index` this thread's current device (NCCL's and the streams').
void SetCudaDevice(int index);
// Peak bytes LibTorch's caching allocator held for tensors on the device
// since the start or the last reset.
int64_t CudaPeakAllocatedBytes(int index);
// Waits for all work queued on the current device.
void SynchronizeCuda();

// fp32 arithmetic on CUDA devices, process-wide. On: cuBLAS products and
// cuDNN's convolutions and RNNs take TF32 tensor cores (inputs rounded to
// a 10-bit mantissa, sums in fp32; about 8x the fp32 rate on an H100/H200).
// Off: full fp32 products (LibTorch's default for products). Host settings
// only: safe without a driver, no effect on the CPU's arithmetic.
void SetCudaTf32(bool on);
// Whether fp32 products on CUDA devices use TF32 now.
bool CudaTf32();

// While on, a CUDA call that makes the host wait for the device (a read of
// a device value, a copy from pageable memory, a stream synchronization)
// throws, naming it (LibTorch's sync debug mode, process-wide).
void SetCudaSyncCheck(bool on);

// Times phases of the work a thread queues on a GPU without waiting for
// it: each phase is a pair of timing events recorded on the device's
// current stream, and Collect(), called where the host waits for the
// device anyway, adds each phase's device time (start event to end event)
// to its accumulators. Phases run one after another on the stream; the
// time between them (the host still launching, another stream's work) is
// no phase's. Use on the thread that queues the work, with the device
// current.
class CudaPhaseClock {
 public:
  explicit CudaPhaseClock(int device_index);
  ~CudaPhaseClock();
  CudaPhaseClock(const CudaPhaseClock&) = delete;
  CudaPhaseClock& operator=(const CudaPhaseClock&) = delete;

  // Records the start of a phase.
  void Begin();
  // Records its end; its seconds go to each of `into` at Collect().
  void End(std::vector<double*> into);
  // Waits for the last phase's end and adds every phase's seconds since
  // the last Collect() to its accumulators.
  void Collect();
  // Forgets the phases since the last Collect() (a batch that failed).
  void Discard();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mnemo::platform

#endif  // MNEMO_TRAINER_PLATFORM_CUDA_DEVICE_H_
