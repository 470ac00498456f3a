#include "trainer/platform/build_info.h"

#include <dlfcn.h>
#include <torch/version.h>

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace mnemo::platform {
namespace {

// The CUDA runtime and NCCL are loaded with libtorch_cuda (global scope):
// their calls are looked up by name, so that this file needs neither's
// headers and a build without them still compiles.
template <typename F>
F Lookup(const char* name) {
  return reinterpret_cast<F>(dlsym(RTLD_DEFAULT, name));
}

std::string Version(int v, bool nccl) {
  if (v <= 0) return "unknown";
  // CUDA: 1000 * major + 10 * minor; NCCL (2.9 and later): 10000 * major +
  // 100 * minor + patch.
  if (nccl)
    return absl::StrFormat("%d.%d.%d", v / 10000, v / 100 % 100, v % 100);
  return absl::StrFormat("%d.%d", v / 1000, v % 1000 / 10);
}

// The driver's version from NVML (libnvidia-ml.so.1, installed with every
// driver and mounted into containers by NVIDIA's toolkit), else from the
// kernel module's /proc file; "" when neither answers.
std::string DriverVersion() {
  if (void* nvml = dlopen("libnvidia-ml.so.1", RTLD_LAZY | RTLD_LOCAL)) {
    using InitFn = int (*)();
    using VersionFn = int (*)(char*, unsigned);
    auto init = reinterpret_cast<InitFn>(dlsym(nvml, "nvmlInit_v2"));
    auto version =
        reinterpret_cast<VersionFn>(dlsym(nvml, "nvmlSystemGetDriverVersion"));
    auto shutdown = reinterpret_cast<InitFn>(dlsym(nvml, "nvmlShutdown"));
    std::string v;
    if (init != nullptr && version != nullptr && init() == 0) {
      char buf[96] = {};
      if (version(buf, sizeof(buf)) == 0) v = buf;
      if (shutdown != nullptr) shutdown();
    }
    dlclose(nvml);
    if (!v.empty()) return v;
  }
  // "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.95.05  Thu ..."
  std::ifstream proc("/proc/driver/nvidia/version");
  std::string line;
  if (proc && std::getline(proc, line)) {
    const size_t at = line.find("Kernel Module");
    if (at != std::string::npos) {
      std::istringstream rest(line.substr(at + 13));
      std::string v;
      if (rest >> v) return v;
    }
  }
  return "";
}

}  // namespace

BuildInfo GetBuildInfo() {
  BuildInfo info;
  info.torch_version = TORCH_VERSION;
  using IntFn = int (*)(int*);
  auto runtime_version = Lookup<IntFn>("cudaRuntimeGetVersion");
  auto driver_version = Lookup<IntFn>("cudaDriverGetVersion");
  auto device_count = Lookup<IntFn>("cudaGetDeviceCount");
  auto error_string = Lookup<const char* (*)(int)>("cudaGetErrorString");
  info.torch_cuda = runtime_version != nullptr;
  if (runtime_version != nullptr) runtime_version(&info.cuda_runtime);
  if (auto nccl = Lookup<IntFn>("ncclGetVersion")) nccl(&info.nccl);
  if (driver_version != nullptr) driver_version(&info.cuda_driver);
  if (info.cuda_driver > 0) info.driver_version = DriverVersion();
  if (info.cuda_driver == 0) {
    void* h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
    info.cuda_error = h == nullptr ? "libcuda.so.1 not found"
                                   : "the NVIDIA driver did not answer";
    if (h != nullptr) dlclose(h);
    return info;
  }
  if (device_count != nullptr) {
    const int rc = device_count(&info.gpus);
    if (rc != 0) {
      info.gpus = 0;
      info.cuda_error = absl::StrCat(
          "CUDA: ", error_string != nullptr ? std::string(error_string(rc))
                                            : absl::StrCat("error ", rc));
    }
  }
  return info;
}

std::string DescribeBuild(const BuildInfo& info) {
  std::string s = absl::StrCat("LibTorch ", info.torch_version);
  if (info.torch_cuda) {
    absl::StrAppend(&s, " (CUDA ", Version(info.cuda_runtime, false), ", NCCL ",
                    Version(info.nccl, true), ")");
  } else {
    absl::StrAppend(&s, " (CPU only)");
  }
  absl::StrAppend(&s, "\nNVIDIA driver: ");
  if (info.cuda_driver > 0) {
    absl::StrAppend(
        &s,
        info.driver_version.empty() ? "version unknown" : info.driver_version,
        " (CUDA ", Version(info.cuda_driver, false), ")");
  } else {
    absl::StrAppend(&s, "none");
  }
  if (!info.cuda_error.empty()) absl::StrAppend(&s, " (", info.cuda_error, ")");
  absl::StrAppend(&s, "; GPUs: ", info.gpus);
  return s;
}

absl::Status CheckDriver(const BuildInfo& info) {
  if (!info.torch_cuda || info.cuda_driver <= 0 || info.cuda_runtime <= 0) {
    return absl::OkStatus();
  }
  const int needed = info.cuda_runtime / 1000 * 1000;  // 13000 for 13.x
  if (info.cuda_driver >= needed) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "NVIDIA driver ",
      info.driver_version.empty() ? "(version unknown)" : info.driver_version,
      " runs CUDA up to ", Version(info.cuda_driver, false),
      ", but this build of mnemo (LibTorch ", info.torch_version,
      ") needs CUDA ", needed / 1000,
      ".0 or later: no GPU can be used. Install NVIDIA driver ",
      needed >= 13000 ? "580" : "a driver of that CUDA version",
      needed >= 13000 ? " or newer" : "",
      ", or train on the CPU (--device cpu, which needs no driver)"));
}

}  // namespace mnemo::platform
