// How a shared evaluation splits a pass over ranks (eval/eval_share.h).
#include "trainer/runtime/eval/eval_share.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace mnemo::runtime {
namespace {

// Ranges cover the pass in order; no rank costs more than the largest cost
// a nearby split would give.
void ExpectValidSplit(int64_t batches, int64_t side, int world, double c) {
  const std::vector<int64_t> b = SharePass(batches, side, world, c);
  ASSERT_EQ(b.size(), static_cast<size_t>(world + 1));
  EXPECT_EQ(b.front(), 0);
  EXPECT_EQ(b.back(), batches);
  EXPECT_TRUE(std::is_sorted(b.begin(), b.end()));
  double worst = 0;
  for (int r = 0; r < world; ++r)
    worst = std::max(worst, ShareCost(b, side, r, c));
  // No split does better than an even share of the total work, which has
  // at least the side pass and every scored batch once.
  const double lower = std::max<double>(side, (side + batches) / double(world));
  EXPECT_GE(worst + 1e-9, lower);
  // Within two batches of the continuous optimum's bound.
  EXPECT_LE(worst, std::max<double>(
                       side, (side + batches) / double(world) + c * batches) +
                       2);
}

TEST(EvalShareTest, SplitsCoverThePassInOrder) {
  for (int world : {1, 2, 3, 4}) {
    for (double c : {0.0, 0.3, 0.7, 1.0}) {
      for (auto [batches, side] : {std::pair<int64_t, int64_t>{0, 0},
                                   {1, 0},
                                   {1, 1},
                                   {5, 3},
                                   {119, 61},
                                   {380, 251},
                                   {15000, 6300},
                                   {10, 40}}) {
        ExpectValidSplit(batches, side, world, c);
      }
    }
  }
}

// Wikipedia's validation (119 batches of 200, 61 of new nodes) at TGN's
// replay cost: rank 0 takes the new-node pass and a few batches, rank 1
// replays those and scores the rest; both cost about 0.53 of the whole.
TEST(EvalShareTest, TwoRanksBalanceTheSidePassAgainstTheReplay) {
  const std::vector<int64_t> b = SharePass(119, 61, 2, 0.3);
  EXPECT_EQ(b, (std::vector<int64_t>{0, b[1], 119}));
  EXPECT_GT(b[1], 20);
  EXPECT_LT(b[1], 50);
  const double c0 = ShareCost(b, 61, 0, 0.3), c1 = ShareCost(b, 61, 1, 0.3);
  EXPECT_NEAR(c0, c1, 1.5);
  EXPECT_LT(std::max(c0, c1), 0.56 * (119 + 61));  // at least 1.78x
}

// A replay as costly as scoring leaves only the side pass to share; a free
// replay splits the main pass evenly past the side pass.
TEST(EvalShareTest, ReplayCostMovesTheSplit) {
  const std::vector<int64_t> dear = SharePass(100, 20, 2, 1.0);
  EXPECT_NEAR(ShareCost(dear, 20, 1, 1.0), 100, 1);  // the main pass's cost
  const std::vector<int64_t> free = SharePass(100, 20, 2, 0.0);
  EXPECT_EQ(free[1], 40);  // 20 + 40 = 60 = 100 - 40
  // The last rank always holds the end: it scores the last batches.
  for (double c : {0.0, 0.5, 1.0}) {
    const std::vector<int64_t> b = SharePass(100, 20, 3, c);
    EXPECT_LT(b[2], 100) << c;
  }
}

TEST(EvalShareTest, DefaultReplayCostsByModel) {
  EXPECT_LT(DefaultReplayCost("tgn"), DefaultReplayCost("jodie"));
  EXPECT_LE(DefaultReplayCost("jodie"), DefaultReplayCost("apan"));
  EXPECT_LT(DefaultReplayCost("tgat"), DefaultReplayCost("tgn"));
}

}  // namespace
}  // namespace mnemo::runtime
