#include "trainer/data/synthetic.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "trainer/data/event_log.h"
#include "util/status_matchers.h"

namespace mnemo::data {
namespace {

struct Event {
  int64_t src, dst, time;
  bool operator==(const Event&) const = default;
};

std::vector<Event> Generate(const SyntheticOptions& o) {
  std::vector<Event> out;
  EXPECT_THAT(GenerateSynthetic(o,
                                [&](int64_t u, int64_t v, int64_t t) {
                                  out.push_back({u, v, t});
                                }),
              IsOk());
  return out;
}

// Share of endpoint occurrences that fall on the `top` most active nodes.
double TopShare(const std::vector<Event>& events, int64_t nodes, int64_t top) {
  std::vector<int64_t> degree(nodes, 0);
  for (const Event& e : events) {
    ++degree[e.src];
    ++degree[e.dst];
  }
  std::sort(degree.rbegin(), degree.rend());
  int64_t sum = 0;
  for (int64_t i = 0; i < top; ++i) sum += degree[i];
  return static_cast<double>(sum) / (2.0 * events.size());
}

TEST(SyntheticTest, ShapeAndDeterminism) {
  SyntheticOptions o;
  o.nodes = 500;
  o.events = 5000;
  o.seed = 3;
  const std::vector<Event> a = Generate(o);
  ASSERT_EQ(a.size(), 5000u);
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_NE(a[i].src, a[i].dst) << i;
    ASSERT_TRUE(a[i].src >= 0 && a[i].src < 500 && a[i].dst >= 0 &&
                a[i].dst < 500);
    if (i > 0) {
      ASSERT_GE(a[i].time, a[i - 1].time);
    }
  }
  EXPECT_EQ(Generate(o), a);  // the same options, the same stream
  o.seed = 4;
  EXPECT_NE(Generate(o), a);
  // Mean gap 1 s: the stream spans about as many seconds as events.
  EXPECT_NEAR(static_cast<double>(a.back().time), 5000, 300);
}

// Exponent 2 concentrates activity on hubs (Zipf); 0 spreads it evenly.
TEST(SyntheticTest, PowerLawActivity) {
  SyntheticOptions o;
  o.nodes = 10000;
  o.events = 100000;
  const double zipf = TopShare(Generate(o), o.nodes, 100);
  o.degree_exponent = 0;
  const double uniform = TopShare(Generate(o), o.nodes, 100);
  // Zipf over 10,000 nodes: the top 1% hold H(100) / H(10000) = 53% of the
  // weight; uniform: about 1% (a little more from sampling noise).
  std::printf("top 1%% of nodes: %.3f of endpoints (Zipf), %.3f (uniform)\n",
              zipf, uniform);
  EXPECT_GT(zipf, 0.45);
  EXPECT_LT(uniform, 0.03);
}

// With mixing p and C communities, an event stays in its source's
// community with probability (1 - p) + p * (share of the weight there).
TEST(SyntheticTest, CommunitiesHoldMostEvents) {
  SyntheticOptions o;
  o.nodes = 2000;
  o.events = 50000;
  o.communities = 10;
  o.mixing = 0.2;
  o.degree_exponent = 0;  // equal communities: within one, 1/10 of weight
  int64_t inside = 0;
  for (const Event& e : Generate(o)) inside += e.src % 10 == e.dst % 10;
  std::printf("inside the community: %.4f\n",
              static_cast<double>(inside) / o.events);
  EXPECT_NEAR(static_cast<double>(inside) / o.events, 0.8 + 0.2 * 0.1, 0.01);
}

// Bursts: their events arrive burst_factor times faster, so the stream's
// span shrinks by what they save.
TEST(SyntheticTest, BurstsCompressTime) {
  SyntheticOptions o;
  o.nodes = 1000;
  o.events = 40000;
  o.bursts = 4;
  o.burst_events = 5000;
  o.burst_factor = 20;
  const std::vector<Event> a = Generate(o);
  // Bursts may overlap; at most 20,000 events are in bursts. Without
  // overlap the span is 20,000 + 20,000 / 20 = 21,000 s; with full overlap
  // 35,250 s.
  const double span = static_cast<double>(a.back().time);
  EXPECT_GT(span, 20000);
  EXPECT_LT(span, 36000);
  // Some second holds many events (a burst), none does without bursts.
  auto busiest = [](const std::vector<Event>& events) {
    int64_t best = 0, run = 0;
    for (size_t i = 0; i < events.size(); ++i) {
      run = i > 0 && events[i].time == events[i - 1].time ? run + 1 : 1;
      best = std::max(best, run);
    }
    return best;
  };
  const int64_t with = busiest(a);
  o.bursts = 0;
  const int64_t without = busiest(Generate(o));
  std::printf("span %.0f s; busiest second: %ld events (%ld without bursts)\n",
              span, static_cast<long>(with), static_cast<long>(without));
  EXPECT_GE(with, 25);
  EXPECT_LE(without, 12);
}

TEST(SyntheticTest, WritesAFileTheLoaderReads) {
  const std::string dir =
      ::testing::TempDir() + "/synthetic_" + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  SyntheticOptions o;
  o.nodes = 300;
  o.events = 2000;
  for (const std::string name : {"s.txt", "s.txt.gz"}) {
    const std::string path = dir + "/" + name;
    ASSERT_THAT(WriteSynthetic(o, path), IsOk());
    EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
    auto log = LoadEventLog(path, LoadOptions{});
    ASSERT_THAT(log, IsOk());
    EXPECT_EQ(log->num_events(), 2000);
    EXPECT_LE(log->num_nodes, 300);
    EXPECT_GT(log->num_nodes, 200);
  }
  std::filesystem::remove_all(dir);
}

TEST(SyntheticTest, BadOptionsNameTheFlag) {
  const std::vector<std::pair<SyntheticOptions, std::string>> cases = [] {
    std::vector<std::pair<SyntheticOptions, std::string>> c;
    SyntheticOptions o;
    o.nodes = 1;
    c.emplace_back(o, "--nodes");
    o = SyntheticOptions();
    o.events = 0;
    c.emplace_back(o, "--events");
    o = SyntheticOptions();
    o.degree_exponent = 0.5;
    c.emplace_back(o, "--degree-exponent");
    o = SyntheticOptions();
    o.communities = 0;
    c.emplace_back(o, "--communities");
    o = SyntheticOptions();
    o.mixing = 1.5;
    c.emplace_back(o, "--mixing");
    o = SyntheticOptions();
    o.burst_factor = 0.5;
    c.emplace_back(o, "--burst-factor");
    o = SyntheticOptions();
    o.mean_gap = 0;
    c.emplace_back(o, "--mean-gap");
    return c;
  }();
  for (const auto& [o, flag] : cases) {
    EXPECT_THAT(ValidateSyntheticOptions(o),
                StatusIs(absl::StatusCode::kInvalidArgument, flag));
    EXPECT_THAT(WriteSynthetic(o, ::testing::TempDir() + "/never.txt"),
                StatusIs(absl::StatusCode::kInvalidArgument, flag));
  }
}

}  // namespace
}  // namespace mnemo::data
