#include "trainer/runtime/eval/metrics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace mnemo::runtime {
namespace {

// Expected values computed with sklearn.metrics (average_precision_score,
// roc_auc_score).
TEST(MetricsTest, MatchesSklearnOnSmallExample) {
  std::vector<float> s = {0.1f, 0.4f, 0.35f, 0.8f};
  std::vector<uint8_t> l = {0, 0, 1, 1};
  EXPECT_NEAR(AveragePrecision(s, l), 0.8333333333, 1e-9);
  EXPECT_NEAR(RocAuc(s, l), 0.75, 1e-12);
}

TEST(MetricsTest, TiesAreOneThreshold) {
  std::vector<float> s = {0.5f, 0.5f, 0.5f, 0.5f};
  std::vector<uint8_t> l = {1, 0, 1, 0};
  EXPECT_NEAR(AveragePrecision(s, l), 0.5, 1e-12);
  EXPECT_NEAR(RocAuc(s, l), 0.5, 1e-12);
  // sklearn: average_precision_score([1,0,1,1,0],[.9,.8,.8,.3,.3]) = 0.8055...
  std::vector<float> s2 = {0.9f, 0.8f, 0.8f, 0.3f, 0.3f};
  std::vector<uint8_t> l2 = {1, 0, 1, 1, 0};
  EXPECT_NEAR(AveragePrecision(s2, l2),
              1.0 / 3 * 1 + 1.0 / 3 * (2.0 / 3) + 1.0 / 3 * (3.0 / 5), 1e-9);
  // roc_auc_score: pairs (pos, neg) = 6; wins: .9>.8,.9>.3, .8=.8 half,
  // .8>.3, .3<.8, .3=.3 half -> (1+1+.5+1+0+.5)/6
  EXPECT_NEAR(RocAuc(s2, l2), 4.0 / 6, 1e-12);
}

TEST(MetricsTest, PerfectAndInverted) {
  std::vector<float> s = {3, 2, 1, 0};
  EXPECT_DOUBLE_EQ(AveragePrecision(s, {1, 1, 0, 0}), 1.0);
  EXPECT_DOUBLE_EQ(RocAuc(s, {1, 1, 0, 0}), 1.0);
  EXPECT_DOUBLE_EQ(RocAuc(s, {0, 0, 1, 1}), 0.0);
  EXPECT_TRUE(std::isnan(AveragePrecision(s, {0, 0, 0, 0})));
  EXPECT_TRUE(std::isnan(RocAuc(s, {1, 1, 1, 1})));
}

TEST(MetricsTest, BatchMeanAndOverall) {
  LinkMetrics m;
  float pos1[] = {0.9f, 0.8f}, neg1[] = {0.1f, 0.2f};  // perfect batch
  float pos2[] = {0.1f, 0.2f}, neg2[] = {0.9f, 0.8f};  // inverted batch
  ASSERT_TRUE(m.AddBatch(pos1, neg1, 2));
  ASSERT_TRUE(m.AddBatch(pos2, neg2, 2));
  EXPECT_EQ(m.events(), 4);
  EXPECT_DOUBLE_EQ(m.auc_batch_mean(), 0.5);
  EXPECT_NEAR(
      m.ap_batch_mean(),
      (1.0 + AveragePrecision({0.1f, 0.2f, 0.9f, 0.8f}, {1, 1, 0, 0})) / 2,
      1e-12);
  EXPECT_NEAR(m.auc(), 0.5, 1e-12);
}

// A NaN score used to spin the tie loop of RocAuc forever (NaN != NaN) and
// to reach std::sort with an inconsistent order.
TEST(MetricsTest, NonFiniteScoresGiveNaNAndAreNotAdded) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_TRUE(std::isnan(RocAuc({nan, nan, 0.3f, nan}, {1, 0, 1, 0})));
  EXPECT_TRUE(std::isnan(AveragePrecision({nan, 0.5f, nan}, {1, 0, 1})));
  EXPECT_TRUE(std::isnan(RocAuc({inf, 0.5f}, {1, 0})));
  LinkMetrics m;
  float pos[] = {0.9f, nan}, neg[] = {0.1f, 0.2f};
  EXPECT_FALSE(m.AddBatch(pos, neg, 2));
  EXPECT_EQ(m.events(), 0);
}

// TGB's rank: 1 + (higher + at least as high) / 2, ties counting half.
TEST(RankingMetricsTest, TgbTieRule) {
  const float negs[] = {0.7f, 0.5f, 0.2f};
  EXPECT_DOUBLE_EQ(RankingMetrics::Rank(0.5f, negs, 3), 2.5);  // 1 + (1+2)/2
  EXPECT_DOUBLE_EQ(RankingMetrics::Rank(0.9f, negs, 3), 1.0);
  EXPECT_DOUBLE_EQ(RankingMetrics::Rank(0.1f, negs, 3), 4.0);
  const float same[] = {0.3f, 0.3f, 0.3f, 0.3f};
  EXPECT_DOUBLE_EQ(RankingMetrics::Rank(0.3f, same, 4), 3.0);  // 1 + 4/2
  RankingMetrics m;
  EXPECT_TRUE(std::isnan(m.mrr()));
  ASSERT_TRUE(m.Add(0.5f, negs, 3));  // rank 2.5
  ASSERT_TRUE(m.Add(0.9f, negs, 3));  // rank 1
  std::vector<float> many(20, 1.0f);
  ASSERT_TRUE(m.Add(0.0f, many.data(), 20));  // rank 21: no hit
  EXPECT_DOUBLE_EQ(m.mrr(), (1 / 2.5 + 1.0 + 1 / 21.0) / 3);
  EXPECT_DOUBLE_EQ(m.hits_at_10(), 2.0 / 3);
  const float bad[] = {0.1f, std::numeric_limits<float>::infinity()};
  EXPECT_FALSE(m.Add(0.5f, bad, 2));
  EXPECT_FALSE(m.Add(std::numeric_limits<float>::quiet_NaN(), negs, 3));
  EXPECT_EQ(m.positives(), 3);
}

}  // namespace
}  // namespace mnemo::runtime
