// What this mnemo binary was built with and what it finds at run time:
// LibTorch, the CUDA runtime and NCCL it links (libtorch_cuda), the NVIDIA
// driver and GPUs if any. Torch-free header (`mnemo version` prints it).
#ifndef MNEMO_TRAINER_PLATFORM_BUILD_INFO_H_
#define MNEMO_TRAINER_PLATFORM_BUILD_INFO_H_

#include <string>

#include "absl/status/status.h"

namespace mnemo::platform {

struct BuildInfo {
  std::string torch_version;  // "2.11.0"
  bool torch_cuda = false;    // built with CUDA (libtorch_cuda linked)
  int cuda_runtime = 0;       // cudart's version, e.g. 13000; 0: unknown
  int nccl = 0;               // e.g. 22809; 0: libnccl not loaded
  // The driver: the newest CUDA version it runs (0: no driver: libcuda.so.1
  // absent or not usable), its own version ("580.95.05"; "" where neither
  // NVML nor /proc/driver/nvidia says) and the GPUs it shows this process
  // (CUDA_VISIBLE_DEVICES).
  int cuda_driver = 0;
  std::string driver_version;
  int gpus = 0;
  std::string cuda_error;  // why there are no GPUs, when there are none
};

// Asks the CUDA runtime about the driver and devices (starting CUDA where a
// driver exists; on a machine without one, cudart answers that at once).
// Never throws and never aborts.
BuildInfo GetBuildInfo();

// "LibTorch 2.11.0 (CUDA 13.0, NCCL 2.28.9)\nNVIDIA driver: none
// (libcuda.so.1 not found); GPUs: 0", or "...\nNVIDIA driver: 580.95.05
// (CUDA 13.0); GPUs: 1".
std::string DescribeBuild(const BuildInfo& info);

// OK without a driver (CPU training needs none) and with a driver that runs
// the CUDA major version this build's runtime is (13.x: any driver of CUDA
// 13.0 or later, NVIDIA's minor-version compatibility); FailedPrecondition,
// naming both versions and what to do, for an older driver, on which no
// CUDA call of this build can work.
absl::Status CheckDriver(const BuildInfo& info);

}  // namespace mnemo::platform

#endif  // MNEMO_TRAINER_PLATFORM_BUILD_INFO_H_
