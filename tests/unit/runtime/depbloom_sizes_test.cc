#include "trainer/runtime/depbloom_sizes.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

namespace mnemo::runtime {
namespace {

using testing::AllOf;
using testing::HasSubstr;

// Events of bitcoin-alpha's and CollegeMsg's training splits (the small
// data of issue 50) and of data of the paper's size.
constexpr int64_t kSmall[] = {4800, 13207, 34352, 110232};
constexpr int64_t kPaperSize[] = {640000, 1000000, 20000000};

TEST(DepBloomSizesTest, SmallDataGetsEnoughWindowsAndSteps) {
  for (int64_t n : kSmall) {
    for (int w : {1, 2, 3, 4, 8}) {
      const DepBloomSizes s = DeriveDepBloomSizes(n, w, 0, 0);
      SCOPED_TRACE(testing::Message() << n << " events, " << w << " workers");
      EXPECT_TRUE(s.window_derived && s.batch_derived);
      EXPECT_LE(s.window_events, kPaperWindowEvents);
      EXPECT_LT(s.window_events, n);
      EXPECT_GE(s.windows, kMinWindows);
      // No global batch below vanilla's, none above the paper's.
      EXPECT_GE(s.batch_size * w, kLrReferenceBatch);
      EXPECT_LE(s.batch_size, kPaperBatchPerWorker);
      EXPECT_GE(s.steps, kMinStepsPerEpoch);
      // Up to kBatchesPerWindow batches of each worker's share of a window
      // (fewer where vanilla's global batch is the floor; more where the
      // paper's batch is the cap).
      if (s.batch_size < kPaperBatchPerWorker) {
        EXPECT_LE((s.window_events + w - 1) / w,
                  kBatchesPerWindow * s.batch_size);
      }
      EXPECT_TRUE(DepBloomSizeWarnings(s, n, w).empty());
    }
  }
}

TEST(DepBloomSizesTest, ThePapersValuesStandOnDataOfThePapersSize) {
  for (int64_t n : kPaperSize) {
    for (int w : {1, 2, 4, 8}) {
      const DepBloomSizes s = DeriveDepBloomSizes(n, w, 0, 0);
      EXPECT_EQ(s.window_events, kPaperWindowEvents) << n << " " << w;
      EXPECT_EQ(s.batch_size, kPaperBatchPerWorker) << n << " " << w;
      EXPECT_TRUE(DepBloomSizeWarnings(s, n, w).empty());
    }
  }
}

// The sizes grow with the data, never shrink.
TEST(DepBloomSizesTest, GrowWithTheData) {
  for (int w : {1, 2, 4}) {
    DepBloomSizes last = DeriveDepBloomSizes(1, w, 0, 0);
    for (int64_t n = 1000; n <= 2000000; n += n / 3) {
      const DepBloomSizes s = DeriveDepBloomSizes(n, w, 0, 0);
      EXPECT_GE(s.window_events, last.window_events) << n;
      EXPECT_GE(s.batch_size, last.batch_size) << n;
      last = s;
    }
  }
}

TEST(DepBloomSizesTest, GivenValuesAreKept) {
  const DepBloomSizes s = DeriveDepBloomSizes(13207, 2, 5000, 700);
  EXPECT_EQ(s.window_events, 5000);
  EXPECT_EQ(s.batch_size, 700);
  EXPECT_FALSE(s.window_derived || s.batch_derived);
  EXPECT_EQ(s.windows, 3);  // 5000, 5000, 3207
  // Each worker's share of a full window is 2500 events (4 batches of at
  // most 700), of the last 1604 (3 batches).
  EXPECT_EQ(s.steps, 4 + 4 + 3);
  // One given, the other derived: the derived batch follows the given
  // window.
  const DepBloomSizes b = DeriveDepBloomSizes(13207, 2, 16000, 0);
  EXPECT_EQ(b.window_events, 16000);
  EXPECT_TRUE(b.batch_derived);
  EXPECT_EQ(b.batch_size, 16000 / (kBatchesPerWindow * 2));
}

// The paper's values set by hand on ~13,000 training events: the whole set
// is one window and each worker takes 3 steps an epoch. Both warned, naming
// the flag and the value.
TEST(DepBloomSizesTest, ValuesThatCannotWorkAreWarned) {
  const DepBloomSizes s =
      DeriveDepBloomSizes(13207, 2, kPaperWindowEvents, kPaperBatchPerWorker);
  EXPECT_EQ(s.windows, 1);
  EXPECT_EQ(s.steps, 3);
  const std::vector<std::string> warnings = DepBloomSizeWarnings(s, 13207, 2);
  ASSERT_EQ(warnings.size(), 2u);
  EXPECT_THAT(warnings[0], AllOf(HasSubstr("--window-events 80000"),
                                 HasSubstr("all 13207 training events"),
                                 HasSubstr("one window")));
  EXPECT_THAT(warnings[1],
              AllOf(HasSubstr("--window-events 80000 with batches of 2400 "
                              "events per worker leaves"),
                    HasSubstr("about 3 optimizer steps")));
  // A window of every event is harmless in one process.
  EXPECT_EQ(
      DepBloomSizeWarnings(DeriveDepBloomSizes(13207, 1, 80000, 600), 13207, 1)
          .size(),
      0u);
  // Only the window given, the batch derived from it (the paper's here):
  // the step warning names the window with that batch.
  const DepBloomSizes b = DeriveDepBloomSizes(13207, 2, 80000, 0);
  const std::vector<std::string> w = DepBloomSizeWarnings(b, 13207, 2);
  ASSERT_EQ(w.size(), 2u) << b.steps;
  EXPECT_THAT(w[1], AllOf(HasSubstr("--window-events 80000 with batches of " +
                                    std::to_string(b.batch_size)),
                          testing::Not(HasSubstr("--batch-size"))));
  // Only the batch given: the derived windows give it a step each, 8.
  EXPECT_TRUE(
      DepBloomSizeWarnings(DeriveDepBloomSizes(13207, 2, 0, 2400), 13207, 2)
          .empty());
  // Sensible values given by hand: no warning.
  EXPECT_TRUE(
      DepBloomSizeWarnings(DeriveDepBloomSizes(13207, 2, 2000, 300), 13207, 2)
          .empty());
}

TEST(DepBloomSizesTest, TheProgressLineStatesTheRuleAndTheValues) {
  const DepBloomSizes s = DeriveDepBloomSizes(13207, 2, 0, 0);
  const std::string line = DescribeDepBloomSizes(s, 13207, 2);
  EXPECT_THAT(line,
              AllOf(HasSubstr("13207 training events, 2 workers"),
                    HasSubstr("windows of " + std::to_string(s.window_events) +
                              " events (derived: min(80000"),
                    HasSubstr("batches of " + std::to_string(s.batch_size) +
                              " events per worker (derived")));
  const std::string given =
      DescribeDepBloomSizes(DeriveDepBloomSizes(13207, 2, 5000, 700), 13207, 2);
  EXPECT_THAT(given, AllOf(HasSubstr("(--window-events)"),
                           HasSubstr("(--batch-size)")));
}

}  // namespace
}  // namespace mnemo::runtime
