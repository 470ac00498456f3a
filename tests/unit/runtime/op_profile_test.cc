// The GPU profile's busy time: the union of device intervals, each
// nanosecond counted once however many streams ran in it.
#include "trainer/runtime/report/op_profile.h"

#include <gtest/gtest.h>

namespace mnemo::runtime {
namespace {

TEST(OpProfileTest, CoveredSecondsCountsOverlapsOnce) {
  EXPECT_EQ(CoveredSeconds({}), 0);
  EXPECT_DOUBLE_EQ(CoveredSeconds({{100, 200}}), 100e-9);
  // Two streams overlapping, one interval inside another, one apart, one
  // touching the last, one empty, out of order.
  EXPECT_DOUBLE_EQ(CoveredSeconds({{1000, 1500},
                                   {0, 300},
                                   {200, 400},
                                   {250, 260},
                                   {1500, 1600},
                                   {700, 700}}),
                   (400 + 600) * 1e-9);
}

}  // namespace
}  // namespace mnemo::runtime
