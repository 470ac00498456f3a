// The GPU queries and settings the engine needs. Only cuda_device.cc sees
// CUDA's headers; everything else uses LibTorch's device-generic API. Every
// function is safe to call on a machine without an NVIDIA driver (CI's):
// libcuda.so.1 is loaded by LibTorch on first use, not at start-up.
// Torch-free.
#ifndef MNEMO_TRAINER_RUNTIME_CUDA_DEVICE_H_
#define MNEMO_TRAINER_RUNTIME_CUDA_DEVICE_H_

#include <cstdint>
#include <string>

namespace mnemo::runtime {

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

}  // namespace mnemo::runtime

#endif  // MNEMO_TRAINER_RUNTIME_CUDA_DEVICE_H_
