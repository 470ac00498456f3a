// How the binaries link LibTorch 2.11 (cmake/libtorch.cmake): the GPU path
// is linked (libtorch_cuda, NCCL) yet a machine without an NVIDIA driver
// runs the CPU path; libstdc++'s functions are libstdc++'s, not the copies
// libtorch.so exports; one OpenMP runtime.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "trainer/platform/build_info.h"

namespace mnemo::runtime {
namespace {

// The file names of the shared objects mapped into this process.
std::set<std::string> LoadedLibraries() {
  std::set<std::string> out;
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    const size_t slash = line.rfind('/');
    if (slash != std::string::npos) out.insert(line.substr(slash + 1));
  }
  return out;
}

bool DriverPresent() {
  void* h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (h != nullptr) dlclose(h);
  return h != nullptr;
}

TEST(LibTorchLinkTest, GpuPathIsLinked) {
  const std::set<std::string> libs = LoadedLibraries();
  for (const char* lib : {"libtorch_cpu.so", "libtorch_cuda.so",
                          "libc10_cuda.so", "libnccl.so.2"}) {
    EXPECT_EQ(libs.count(lib), 1u) << lib << " is not loaded";
  }
  const platform::BuildInfo info = platform::GetBuildInfo();
  EXPECT_EQ(info.torch_version, "2.11.0");
  EXPECT_TRUE(info.torch_cuda);
  EXPECT_EQ(info.cuda_runtime / 1000, 13) << info.cuda_runtime;
  EXPECT_EQ(info.nccl, 22809);
  std::printf("%s\n", platform::DescribeBuild(info).c_str());
}

TEST(LibTorchLinkTest, WithoutADriverTheCpuPathRuns) {
  if (DriverPresent()) {
    GTEST_SKIP() << "an NVIDIA driver is present (the GPU tests cover it)";
  }
  // Nothing loaded the driver at start-up, and asking CUDA is an answer,
  // not a crash.
  EXPECT_EQ(LoadedLibraries().count("libcuda.so.1"), 0u);
  const platform::BuildInfo info = platform::GetBuildInfo();
  EXPECT_EQ(info.cuda_driver, 0);
  EXPECT_EQ(info.gpus, 0);
  EXPECT_NE(info.cuda_error.find("libcuda.so.1"), std::string::npos)
      << info.cuda_error;
  EXPECT_FALSE(torch::cuda::is_available());
  EXPECT_EQ(torch::cuda::device_count(), 0u);
  // A CPU step: forward, backward, optimizer.
  torch::manual_seed(0);
  torch::nn::Linear lin(4, 1);
  torch::optim::Adam opt(lin->parameters(), torch::optim::AdamOptions(0.1));
  torch::Tensor x = torch::randn({8, 4}), y = torch::randn({8, 1});
  const float before = torch::mse_loss(lin(x), y).item<float>();
  for (int i = 0; i < 20; ++i) {
    opt.zero_grad();
    torch::mse_loss(lin(x), y).backward();
    opt.step();
  }
  EXPECT_LT(torch::mse_loss(lin(x), y).item<float>(), before);
}

// libtorch.so exports copies of libstdc++'s std::filesystem functions
// (pytorch/pytorch#133437); cmake/libtorch.cmake links libstdc++ first so
// that calls bind to libstdc++'s own. Before that, remove_all crashed.
TEST(LibTorchLinkTest, LibstdcxxFunctionsAreLibstdcxxs) {
  using RemoveAll = std::uintmax_t (*)(const std::filesystem::path&);
  Dl_info where{};
  ASSERT_NE(dladdr(reinterpret_cast<void*>(
                       static_cast<RemoveAll>(&std::filesystem::remove_all)),
                   &where),
            0);
  ASSERT_NE(where.dli_fname, nullptr);
  EXPECT_NE(std::string(where.dli_fname).find("libstdc++"), std::string::npos)
      << "std::filesystem::remove_all binds to " << where.dli_fname;
  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                    ("mnemo_link_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir / "a" / "b");
  std::ofstream(dir / "a" / "b" / "f") << "x";
  EXPECT_EQ(std::filesystem::remove_all(dir), 4u);
}

// One OpenMP runtime in the process: the wheel's libgomp, which LibTorch's
// kernels and mnemo's at::parallel_for loops share.
TEST(LibTorchLinkTest, OneOpenMpRuntime) {
  int gomp = 0, others = 0;
  for (const std::string& lib : LoadedLibraries()) {
    if (lib.rfind("libgomp", 0) == 0) ++gomp;
    if (lib.rfind("libomp", 0) == 0 || lib.rfind("libiomp", 0) == 0) ++others;
  }
  EXPECT_EQ(gomp, 1);
  EXPECT_EQ(others, 0);
  Dl_info where{};
  void* sym = dlsym(RTLD_DEFAULT, "omp_get_max_threads");
  ASSERT_NE(sym, nullptr);
  ASSERT_NE(dladdr(sym, &where), 0);
  EXPECT_NE(std::string(where.dli_fname).find("torch/lib/libgomp"),
            std::string::npos)
      << where.dli_fname;
}

}  // namespace
}  // namespace mnemo::runtime
