// How glibc's malloc serves the trainer's tensors.
//
// LibTorch's CPU allocator is plain posix_memalign/free. glibc serves
// blocks above its mmap threshold (128 KiB, adapting up to 32 MiB) with a
// fresh mmap and returns them with munmap, so every large activation of
// every step faults its pages in again: measured here (AMD EPYC, CollegeMsg,
// TGN, one thread), 23% of a 600-event-batch epoch and 40% of a
// 2,400-event-batch epoch were kernel page-fault time. Trainers therefore
// keep freed memory in the heap (M_MMAP_MAX 0, trim threshold 1 GiB): the
// epoch took 0.5x the time at batch 2,400 and 0.8x at 600, for a higher
// peak RSS (1.0 vs 0.7 GiB at batch 2,400). Torch-free.
#ifndef MNEMO_TRAINER_PLATFORM_ALLOCATOR_H_
#define MNEMO_TRAINER_PLATFORM_ALLOCATOR_H_

#include <string>

namespace mnemo::platform {

// Applies the trainer's malloc settings unless the user chose otherwise:
// MNEMO_MALLOC=system, or any of glibc's MALLOC_MMAP_MAX_,
// MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_, MALLOC_TOP_PAD_ in the
// environment, or GLIBC_TUNABLES naming glibc.malloc. Returns what applies,
// for summary.json: "heap (no mmap, no trim)", "system", "environment: ...".
// Idempotent; call before the first training step.
std::string TuneAllocatorForTraining();

}  // namespace mnemo::platform

#endif  // MNEMO_TRAINER_PLATFORM_ALLOCATOR_H_
