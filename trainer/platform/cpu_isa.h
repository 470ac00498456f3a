// CPU features that decide which oneDNN kernels bf16 training may use.
//
// LibTorch runs bf16 matrix products through oneDNN. With LibTorch 1.13
// (Debian's, oneDNN 2.6) the AMX (Sapphire Rapids) brgemm matmul died with
// SIGILL at a `tileloadd` for some shapes mid-run (similar reports: oneDNN
// issue 1661, PyTorch issue 99509). LibTorch 2.11 links oneDNN 3.10 into
// libtorch_cpu; whether its AMX kernels still fail has not been checked on
// an AMX machine (none was at hand). Until it is, mnemo keeps oneDNN at
// AVX512_CORE_BF16 (the fastest kernels without AMX, 1.6x fp32 on such a
// machine) unless the user opts in with --allow-amx. Torch-free.
#ifndef MNEMO_TRAINER_PLATFORM_CPU_ISA_H_
#define MNEMO_TRAINER_PLATFORM_CPU_ISA_H_

#include <string>

#include "absl/status/status.h"

namespace mnemo::platform {

struct CpuFeatures {
  bool avx512_bf16 = false;  // CPUID.(7,1):EAX[5]
  bool amx_bf16 = false;     // CPUID.(7,0):EDX[22]
  bool amx_tile = false;     // CPUID.(7,0):EDX[24]
  bool os_amx = false;       // XCR0 bits 17-18: the OS saves tile state
  bool amx() const { return amx_bf16 && amx_tile && os_amx; }
};

CpuFeatures DetectCpuFeatures();

// The oneDNN ISA ceiling a run needs ("avx512_core_bf16"), or "" for none:
// only bf16 runs on AMX machines without `allow_amx` are capped.
std::string ChooseOneDnnIsaCap(bool bf16, const CpuFeatures& cpu,
                               bool allow_amx);

// Sets oneDNN's ISA ceiling: ONEDNN_MAX_CPU_ISA, which oneDNN reads when
// it runs its first kernel (LibTorch 2.11's oneDNN is linked into
// libtorch_cpu and exports no call for it), and dnnl_set_max_cpu_isa where
// a shared oneDNN in the process exports it. Call before any oneDNN kernel
// runs; a ceiling set later has no effect on a linked-in oneDNN, and a
// shared one refuses it: FAILED_PRECONDITION. INVALID_ARGUMENT for an
// unknown ISA name.
absl::Status CapOneDnnIsa(const std::string& isa);

}  // namespace mnemo::platform

#endif  // MNEMO_TRAINER_PLATFORM_CPU_ISA_H_
