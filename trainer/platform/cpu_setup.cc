#include "trainer/platform/cpu_setup.h"

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "trainer/platform/allocator.h"
#include "trainer/platform/cpu_isa.h"

namespace mnemo::platform {

absl::StatusOr<CpuSetup> SetUpCpu(
    bool bf16, bool allow_amx,
    const std::function<void(const std::string&)>& log) {
  CpuSetup setup;
  setup.malloc = TuneAllocatorForTraining();  // before the tensors
  if (!bf16) return setup;
  // Before any oneDNN kernel runs (cpu_isa.h: oneDNN 2.6's AMX kernels
  // crashed on some shapes; 3.10's are not yet checked).
  const char* env = std::getenv("ONEDNN_MAX_CPU_ISA");
  if (env == nullptr) env = std::getenv("DNNL_MAX_CPU_ISA");
  const CpuFeatures cpu = DetectCpuFeatures();
  if (env != nullptr) {
    setup.onednn_isa_cap = absl::StrCat("environment: ", env);
  } else if (std::string cap = ChooseOneDnnIsaCap(true, cpu, allow_amx);
             !cap.empty()) {
    if (absl::Status s = CapOneDnnIsa(cap); s.ok()) {
      setup.onednn_isa_cap = cap;
      log("bf16: this CPU has AMX; oneDNN is capped at AVX512_CORE_BF16 "
          "(oneDNN 2.6's AMX kernels crashed on some shapes; those of "
          "LibTorch 2.11's oneDNN 3.10 are not yet checked; --allow-amx "
          "opts in)");
    } else {
      return absl::FailedPreconditionError(absl::StrCat(
          "bf16 on an AMX CPU needs oneDNN capped at AVX512_CORE_BF16: ",
          s.message()));
    }
  } else if (cpu.amx()) {
    log("bf16: AMX kernels allowed (--allow-amx)");
  }
  if (!cpu.avx512_bf16 && !cpu.amx()) {
    log("warning: bf16 on a CPU without AVX512_BF16 or AMX: oneDNN "
        "emulates bf16 products, many times slower than fp32 (TGN on "
        "Wikipedia on an AMD EPYC with AVX2 only: 0.06x, "
        "bench/results/bf16_emulated.md); --precision fp32 is faster here");
  }
  return setup;
}

}  // namespace mnemo::platform
