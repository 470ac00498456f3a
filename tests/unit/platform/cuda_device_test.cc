// What of the CUDA platform layer runs without a GPU: the fp32 precision
// setting, the reason given when no GPU is usable, and the driver check
// (`mnemo version`, --device cuda) on driver versions given by hand.
#include "trainer/platform/cuda_device.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "trainer/platform/build_info.h"

namespace mnemo::platform {
namespace {

// TF32 is a CUDA setting only: it turns on and off, and the CPU's fp32
// products stay bit for bit what they were.
TEST(CudaDeviceTest, Tf32IsACudaSettingOnly) {
  at::manual_seed(3);
  const at::Tensor a = at::randn({67, 129});
  const at::Tensor b = at::randn({129, 31});
  SetCudaTf32(false);
  EXPECT_FALSE(CudaTf32());
  const at::Tensor ieee = at::matmul(a, b);
  SetCudaTf32(true);
  EXPECT_TRUE(CudaTf32());
  EXPECT_TRUE(at::globalContext().allowTF32CuDNN());
  EXPECT_TRUE(at::equal(at::matmul(a, b), ieee));
  SetCudaTf32(false);
  EXPECT_FALSE(CudaTf32());
  EXPECT_FALSE(at::globalContext().allowTF32CuDNN());
}

TEST(CudaDeviceTest, SaysWhyNoGpuIsUsable) {
  if (CudaDeviceCount() > 0) GTEST_SKIP() << "this machine has a GPU";
  EXPECT_FALSE(CudaUnavailableReason().empty());
}

BuildInfo Cuda13Build(int driver_cuda, std::string driver_version) {
  BuildInfo info;
  info.torch_version = "2.11.0";
  info.torch_cuda = true;
  info.cuda_runtime = 13000;
  info.cuda_driver = driver_cuda;
  info.driver_version = std::move(driver_version);
  return info;
}

// No driver: fine (the CPU needs none). A driver of CUDA 13.0 or later:
// fine. An older one: refused, naming its version, what it runs and what
// this build needs.
TEST(BuildInfoTest, RefusesOnlyADriverTooOldForTheBuildsCuda) {
  EXPECT_TRUE(CheckDriver(Cuda13Build(0, "")).ok());
  EXPECT_TRUE(CheckDriver(Cuda13Build(13000, "580.65.06")).ok());
  EXPECT_TRUE(CheckDriver(Cuda13Build(13010, "590.10")).ok());
  const absl::Status old = CheckDriver(Cuda13Build(12040, "550.54.15"));
  EXPECT_EQ(old.code(), absl::StatusCode::kFailedPrecondition);
  const std::string m(old.message());
  EXPECT_NE(m.find("550.54.15"), std::string::npos) << m;
  EXPECT_NE(m.find("CUDA up to 12.4"), std::string::npos) << m;
  EXPECT_NE(m.find("needs CUDA 13.0"), std::string::npos) << m;
  EXPECT_NE(m.find("580"), std::string::npos) << m;
  EXPECT_NE(m.find("--device cpu"), std::string::npos) << m;
  BuildInfo cpu_only = Cuda13Build(12040, "550.54.15");
  cpu_only.torch_cuda = false;
  EXPECT_TRUE(CheckDriver(cpu_only).ok());
  EXPECT_NE(DescribeBuild(Cuda13Build(13000, "580.65.06"))
                .find("NVIDIA driver: 580.65.06 (CUDA 13.0)"),
            std::string::npos)
      << DescribeBuild(Cuda13Build(13000, "580.65.06"));
}

// This machine's own answer is consistent with the check.
TEST(BuildInfoTest, ThisMachinesDriverIsDescribed) {
  const BuildInfo info = GetBuildInfo();
  const std::string d = DescribeBuild(info);
  EXPECT_NE(d.find("NVIDIA driver: "), std::string::npos) << d;
  if (info.cuda_driver == 0) {
    EXPECT_NE(d.find("NVIDIA driver: none"), std::string::npos) << d;
    EXPECT_TRUE(CheckDriver(info).ok());
  }
}

}  // namespace
}  // namespace mnemo::platform
