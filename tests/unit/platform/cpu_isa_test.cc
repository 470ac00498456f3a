#include "trainer/platform/cpu_isa.h"

#include <gtest/gtest.h>

namespace mnemo::runtime {
namespace {

TEST(CpuIsaTest, OnlyBf16OnAmxWithoutOptInIsCapped) {
  platform::CpuFeatures amx;
  amx.amx_bf16 = amx.amx_tile = amx.os_amx = true;
  EXPECT_EQ(platform::ChooseOneDnnIsaCap(true, amx, false), "avx512_core_bf16");
  EXPECT_EQ(platform::ChooseOneDnnIsaCap(true, amx, true), "");
  EXPECT_EQ(platform::ChooseOneDnnIsaCap(false, amx, false), "");
  platform::CpuFeatures no_os = amx;
  no_os.os_amx = false;  // the kernel does not save tile state
  EXPECT_EQ(platform::ChooseOneDnnIsaCap(true, no_os, false), "");
  EXPECT_EQ(platform::ChooseOneDnnIsaCap(true, platform::CpuFeatures{}, false),
            "");
}

TEST(CpuIsaTest, DetectionIsConsistent) {
  const platform::CpuFeatures f = platform::DetectCpuFeatures();
  // AMX-BF16 without the tile architecture does not exist.
  if (f.amx_bf16) {
    EXPECT_TRUE(f.amx_tile);
  }
  std::printf("avx512_bf16 %d amx_bf16 %d amx_tile %d os_amx %d\n",
              f.avx512_bf16, f.amx_bf16, f.amx_tile, f.os_amx);
}

TEST(CpuIsaTest, UnknownIsaIsRejected) {
  EXPECT_EQ(platform::CapOneDnnIsa("avx9000").code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace mnemo::runtime
