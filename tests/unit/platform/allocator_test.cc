#include "trainer/platform/allocator.h"

#include <malloc.h>

#include <cstdlib>
#include <iostream>

#include "gtest/gtest.h"

namespace mnemo::runtime {
namespace {

// Each case runs in a forked child: the choice is made once per process.
#define MNEMO_EXPECT_CHOICE(setup, regex)                                \
  EXPECT_EXIT(                                                           \
      {                                                                  \
        setup;                                                           \
        std::cerr << "[" << platform::TuneAllocatorForTraining() << "]"; \
        std::exit(0);                                                    \
      },                                                                 \
      ::testing::ExitedWithCode(0), regex)

TEST(AllocatorTest, UserChoicesWin) {
  MNEMO_EXPECT_CHOICE(setenv("MNEMO_MALLOC", "system", 1),
                      "\\[system \\(MNEMO_MALLOC\\)\\]");
  MNEMO_EXPECT_CHOICE(setenv("MALLOC_TRIM_THRESHOLD_", "100", 1),
                      "\\[environment: MALLOC_TRIM_THRESHOLD_=100\\]");
  MNEMO_EXPECT_CHOICE(
      setenv("GLIBC_TUNABLES", "glibc.malloc.mmap_max=4", 1),
      "\\[environment: GLIBC_TUNABLES=glibc.malloc.mmap_max=4\\]");
}

TEST(AllocatorTest, LargeBlocksStayInTheHeap) {
  EXPECT_EXIT(
      {
        for (const char* v :
             {"MNEMO_MALLOC", "MALLOC_MMAP_MAX_", "MALLOC_MMAP_THRESHOLD_",
              "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_", "GLIBC_TUNABLES"}) {
          unsetenv(v);
        }
        const std::string choice = platform::TuneAllocatorForTraining();
        // Sanitizer runtimes replace malloc and refuse mallopt.
        if (choice == "system (mallopt refused)") std::exit(0);
        if (choice != "heap (no mmap, no trim)") std::exit(2);
        if (platform::TuneAllocatorForTraining() != choice) std::exit(3);
        const size_t before = mallinfo2().hblks;
        void* volatile block = std::malloc(64 << 20);  // above any threshold
        const size_t during = mallinfo2().hblks;
        std::free(block);
        std::exit(during == before ? 0 : 4);
      },
      ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace mnemo::runtime
