// How a training process sets up the CPU before its first tensor: the
// allocator tuned for training (allocator.h) and, for bf16, oneDNN's ISA
// cap on AMX CPUs (cpu_isa.h), with warnings where bf16 will be slow.
#ifndef MNEMO_TRAINER_PLATFORM_CPU_SETUP_H_
#define MNEMO_TRAINER_PLATFORM_CPU_SETUP_H_

#include <functional>
#include <string>

#include "absl/status/statusor.h"

namespace mnemo::platform {

struct CpuSetup {
  std::string malloc;          // SummaryInfo::malloc
  std::string onednn_isa_cap;  // SummaryInfo::onednn_isa_cap
};

// Call once, before any tensor is allocated or oneDNN kernel runs.
absl::StatusOr<CpuSetup> SetUpCpu(
    bool bf16, bool allow_amx,
    const std::function<void(const std::string&)>& log);

}  // namespace mnemo::platform

#endif  // MNEMO_TRAINER_PLATFORM_CPU_SETUP_H_
