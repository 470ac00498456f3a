#include "trainer/data/tgb_negatives.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "util/status_matchers.h"

namespace mnemo::data {
namespace {

using ::testing::ElementsAre;
using ::testing::UnorderedElementsAre;

// Sources 0-2, destinations 3-9. Training: 0 reached 3, 4, 5; 1 reached 6.
// The split: (0 -> 4, t 10), (0 -> 7, t 10) (same source and time),
// (1 -> 8, t 11), (2 -> 9, t 12).
EventLog TinyLog() {
  EventLog log;
  log.name = "tiny";
  log.num_nodes = 10;
  const std::vector<std::tuple<int, int, double>> events = {
      {0, 3, 1},  {0, 4, 2},  {0, 5, 3},  {1, 6, 4},
      {0, 4, 10}, {0, 7, 10}, {1, 8, 11}, {2, 9, 12}};
  for (const auto& [s, d, t] : events) {
    log.src.push_back(s);
    log.dst.push_back(d);
    log.t.push_back(t);
  }
  for (int64_t u = 0; u < 10; ++u) log.original_ids.push_back(100 + u);
  return log;
}
const std::vector<int64_t> kHistory = {0, 1, 2, 3};
const std::vector<int64_t> kPositives = {4, 5, 6, 7};
const std::vector<int32_t> kDestinations = {3, 4, 5, 6, 7, 8, 9};

TEST(TgbNegativesTest, EveryOtherDestinationButTheTrueOnes) {
  const EventLog log = TinyLog();
  TgbNegativeOptions o;
  o.strategy = TgbStrategy::kEveryOther;
  const RankingNegatives n =
      MakeTgbNegatives(log, kPositives, kDestinations, kHistory, o);
  ASSERT_EQ(n.positives(), 4);
  std::vector<int32_t> got;
  // 0 reaches 4 and 7 at time 10: neither is a negative of either event.
  n.Get(0, &got);
  EXPECT_THAT(got, ElementsAre(3, 5, 6, 8, 9));
  n.Get(1, &got);
  EXPECT_THAT(got, ElementsAre(3, 5, 6, 8, 9));
  n.Get(2, &got);
  EXPECT_THAT(got, ElementsAre(3, 4, 5, 6, 7, 9));
  n.Get(3, &got);
  EXPECT_THAT(got, ElementsAre(3, 4, 5, 6, 7, 8));
}

TEST(TgbNegativesTest, HistoricalThenRandom) {
  const EventLog log = TinyLog();
  TgbNegativeOptions o;
  o.per_positive = 4;
  o.seed = 7;
  const RankingNegatives n =
      MakeTgbNegatives(log, kPositives, kDestinations, kHistory, o);
  std::vector<int32_t> got;
  for (int64_t i = 0; i < 2; ++i) {
    n.Get(i, &got);
    ASSERT_EQ(got.size(), 4u);
    // Source 0: historical 3, 4, 5 less 4 (true at t 10): both of 3 and 5
    // (2 = half of 4), then 2 random among 6, 8, 9 (not historical, not
    // true at t).
    EXPECT_THAT(std::vector<int32_t>(got.begin(), got.begin() + 2),
                UnorderedElementsAre(3, 5));
    for (size_t j = 2; j < 4; ++j) {
      EXPECT_TRUE(got[j] == 6 || got[j] == 8 || got[j] == 9) << got[j];
    }
    EXPECT_NE(got[2], got[3]);
  }
  // Source 2 has no history: 4 random, distinct, never its true 9.
  n.Get(3, &got);
  ASSERT_EQ(got.size(), 4u);
  EXPECT_EQ(std::set<int32_t>(got.begin(), got.end()).size(), 4u);
  EXPECT_EQ(std::count(got.begin(), got.end(), 9), 0);
  // The same seed draws the same; another seed draws otherwise.
  const RankingNegatives again =
      MakeTgbNegatives(log, kPositives, kDestinations, kHistory, o);
  o.seed = 8;
  const RankingNegatives other =
      MakeTgbNegatives(log, kPositives, kDestinations, kHistory, o);
  bool differs = false;
  for (int64_t i = 0; i < 4; ++i) {
    std::vector<int32_t> a, b, c;
    n.Get(i, &a);
    again.Get(i, &b);
    other.Get(i, &c);
    EXPECT_EQ(a, b);
    differs |= a != c;
  }
  EXPECT_TRUE(differs);
}

// Too few candidates: the random part repeats some rather than fall short.
TEST(TgbNegativesTest, FewCandidatesRepeat) {
  const EventLog log = TinyLog();
  TgbNegativeOptions o;
  o.per_positive = 20;
  const RankingNegatives n =
      MakeTgbNegatives(log, kPositives, kDestinations, kHistory, o);
  std::vector<int32_t> got;
  n.Get(2, &got);  // source 1: historical {6}; random from 3,4,5,7,9
  ASSERT_EQ(got.size(), 20u);
  EXPECT_EQ(got[0], 6);
  for (size_t j = 1; j < got.size(); ++j) {
    EXPECT_TRUE(got[j] != 6 && got[j] != 8) << got[j];
  }
}

TEST(TgbNegativesTest, FilesRoundTripAndForeignFilesAreRefused) {
  const EventLog log = TinyLog();
  TgbNegativeOptions o;
  o.per_positive = 3;
  const RankingNegatives n =
      MakeTgbNegatives(log, kPositives, kDestinations, kHistory, o);
  const std::string dir =
      ::testing::TempDir() + "/tgb_" + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/tiny_val.ns";
  ASSERT_THAT(WriteTgbNegatives(path, log, kPositives, n, "test"), IsOk());
  std::ifstream in(path);
  std::string header, first;
  std::getline(in, header);
  std::getline(in, first);
  EXPECT_EQ(header, "# mnemo tgb negatives: test");
  // Keyed by (src, dst, t) in original ids.
  EXPECT_THAT(first, ::testing::StartsWith("100 104 10 "));
  auto back = ReadTgbNegatives(path, log, kPositives);
  ASSERT_THAT(back, IsOk());
  for (int64_t i = 0; i < 4; ++i) {
    std::vector<int32_t> a, b;
    n.Get(i, &a);
    back->Get(i, &b);
    EXPECT_EQ(a, b) << i;
  }
  // Another split's positives: refused, naming the file and line.
  const std::vector<int64_t> others = {4, 6, 5, 7};
  EXPECT_THAT(ReadTgbNegatives(path, log, others),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       path + ":3: holds the negatives of"));
  const std::vector<int64_t> fewer = {4, 5};
  EXPECT_THAT(ReadTgbNegatives(path, log, fewer),
              StatusIs(absl::StatusCode::kInvalidArgument, "more lines"));
  std::ofstream(path, std::ios::app) << "100 104 x 103\n";
  EXPECT_THAT(ReadTgbNegatives(path, log, kPositives),
              StatusIs(absl::StatusCode::kInvalidArgument, ":6:"));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace mnemo::data
