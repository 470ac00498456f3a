// Expected values printed by CPython 3.11 (/usr/bin/python3), e.g.
//   random.seed(2020); [random.getrandbits(32) for _ in range(3)]
#include "trainer/data/python_random.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <numeric>

namespace mnemo::data::py {
namespace {
using ::testing::ElementsAre;

TEST(PythonRandomTest, SeedAndGetRandBits) {
  Random r(2020);
  EXPECT_EQ(r.GetRandBits(32), 2661459254u);
  EXPECT_EQ(r.GetRandBits(32), 2660693840u);
  EXPECT_EQ(r.GetRandBits(32), 749574286u);
  Random big((1ull << 40) + 5);  // two 32-bit key chunks
  EXPECT_EQ(big.GetRandBits(32), 2166296868u);
  EXPECT_EQ(big.GetRandBits(32), 2220160828u);
}

std::vector<int64_t> Range(int64_t n) {
  std::vector<int64_t> v(n);
  std::iota(v.begin(), v.end(), 0);
  return v;
}

TEST(PythonRandomTest, SampleUsesThePoolOrTheSetAlgorithm) {
  Random small(2020);  // n <= setsize: pool
  EXPECT_THAT(small.Sample(Range(100), 5), ElementsAre(79, 22, 85, 98, 59));
  Random large(7);  // n > setsize: rejection with a set
  EXPECT_THAT(large.Sample(Range(10000), 8),
              ElementsAre(5305, 2471, 6468, 791, 1186, 8779, 1542, 5991));
}

TEST(PythonRandomTest, SetIterationOrder) {
  IntSet s;  // collisions, linear probes and resizes
  for (int64_t x : {70000, 5, 3, 131077, 65541, 9, 262150, 1, 40}) s.Add(x);
  EXPECT_THAT(s.Keys(),
              ElementsAre(1, 3, 65541, 131077, 5, 262150, 9, 40, 70000));
  IntSet a, b;
  for (int64_t x = 0; x < 300; x += 7) a.Add(x);
  for (int64_t x = 1000; x > 20; x -= 13) b.Add(x);
  IntSet u;  // a.union(b)
  u.Merge(a);
  u.Merge(b);
  EXPECT_EQ(u.size(), 116);
  std::vector<int64_t> keys = u.Keys();
  keys.resize(25);
  EXPECT_THAT(keys, ElementsAre(0, 259, 7, 519, 266, 779, 14, 272, 273, 532, 21,
                                280, 792, 25, 28, 285, 287, 545, 35, 805, 294,
                                38, 42, 298, 558));
}

}  // namespace
}  // namespace mnemo::data::py
