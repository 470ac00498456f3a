#include "trainer/platform/cpu_isa.h"

#include <cpuid.h>
#include <dlfcn.h>

#include <cstdint>
#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace mnemo::platform {
namespace {

uint64_t ReadXcr0() {
  uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<uint64_t>(hi) << 32) | lo;
}

// dnnl_cpu_isa_t values (dnnl_types.h, the same in oneDNN 2.x and 3.x).
constexpr int kDnnlAvx2 = 0x7;
constexpr int kDnnlAvx512Core = 0x27;
constexpr int kDnnlAvx512CoreBf16 = 0xe7;

}  // namespace

CpuFeatures DetectCpuFeatures() {
  CpuFeatures f;
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const bool osxsave = (c >> 27) & 1;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return f;
  f.amx_bf16 = (d >> 22) & 1;
  f.amx_tile = (d >> 24) & 1;
  const unsigned max_sub = a;
  if (max_sub >= 1 && __get_cpuid_count(7, 1, &a, &b, &c, &d)) {
    f.avx512_bf16 = (a >> 5) & 1;
  }
  if (osxsave) {
    const uint64_t xcr0 = ReadXcr0();
    f.os_amx = ((xcr0 >> 17) & 3) == 3;
  }
  return f;
}

std::string ChooseOneDnnIsaCap(bool bf16, const CpuFeatures& cpu,
                               bool allow_amx) {
  if (!bf16 || allow_amx || !cpu.amx()) return "";
  return "avx512_core_bf16";
}

absl::Status CapOneDnnIsa(const std::string& isa) {
  int value = 0;
  if (isa == "avx512_core_bf16") {
    value = kDnnlAvx512CoreBf16;
  } else if (isa == "avx512_core") {
    value = kDnnlAvx512Core;
  } else if (isa == "avx2") {
    value = kDnnlAvx2;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown oneDNN ISA '", isa, "'"));
  }
  // Read by oneDNN at its first kernel: LibTorch 2.11's (linked into
  // libtorch_cpu, its symbols hidden) and any loaded later.
  setenv("ONEDNN_MAX_CPU_ISA", isa.c_str(), /*overwrite=*/0);
  // A shared oneDNN (LibTorch builds against the system's) exports the
  // call: look it up by name (no development headers needed).
  using SetMaxIsa = int (*)(int);
  auto set =
      reinterpret_cast<SetMaxIsa>(dlsym(RTLD_DEFAULT, "dnnl_set_max_cpu_isa"));
  if (set == nullptr) return absl::OkStatus();
  if (const int rc = set(value); rc != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "oneDNN refused the ISA ceiling ", isa, " (status ", rc,
        "): it has already chosen its kernels in this process; set "
        "ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16 in the environment instead"));
  }
  return absl::OkStatus();
}

}  // namespace mnemo::platform
