// The NCCL process group behind Collectives' CUDA backend (defined in
// cuda_device.cc, the one file that sees CUDA's headers). Internal to
// trainer/runtime.
#ifndef MNEMO_TRAINER_PLATFORM_NCCL_BACKEND_H_
#define MNEMO_TRAINER_PLATFORM_NCCL_BACKEND_H_

#include <chrono>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

namespace mnemo::platform {

// A ProcessGroupNCCL of `world_size` ranks over `store`, bound to the current
// CUDA device (SetCudaDevice), its communicator created before it returns
// (every rank must call this together). A collective that outlives
// `timeout` is ended by the group's watchdog, not by a blocking wait.
// Throws (c10d's way) when it cannot be formed or this build has no NCCL.
c10::intrusive_ptr<c10d::Backend> MakeNcclBackend(
    const c10::intrusive_ptr<c10d::Store>& store, int rank, int world_size,
    std::chrono::milliseconds timeout);

}  // namespace mnemo::platform

#endif  // MNEMO_TRAINER_PLATFORM_NCCL_BACKEND_H_
