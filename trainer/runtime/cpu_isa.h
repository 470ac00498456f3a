// CPU features that decide which oneDNN kernels bf16 training may use.
//
// Debian 12's LibTorch runs bf16 matrix products through oneDNN 2.6, whose
// AMX (Sapphire Rapids) brgemm matmul dies with SIGILL at a `tileloadd` for
// some shapes mid-run (seen here; similar reports: oneDNN issue 1661,
// PyTorch issue 99509; no other library in the process contains AMX code).
// mnemo therefore caps oneDNN at AVX512_CORE_BF16 (the fastest kernels
// without AMX, 1.6x fp32 on such a machine) unless the user opts in with
// --allow-amx. Torch-free.
#ifndef MNEMO_TRAINER_RUNTIME_CPU_ISA_H_
#define MNEMO_TRAINER_RUNTIME_CPU_ISA_H_

#include <string>

#include "absl/status/status.h"

namespace mnemo::runtime {

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

// Sets oneDNN's ISA ceiling (dnnl_set_max_cpu_isa, and ONEDNN_MAX_CPU_ISA
// for oneDNN instances loaded later). FAILED_PRECONDITION when oneDNN has
// already fixed its ISA in this process (it does at its first kernel), or
// has no such call; INVALID_ARGUMENT for an unknown ISA name.
absl::Status CapOneDnnIsa(const std::string& isa);

}  // namespace mnemo::runtime

#endif  // MNEMO_TRAINER_RUNTIME_CPU_ISA_H_
