// The look-ahead loop training and evaluation share: the order of each
// batch's calls for each look-ahead, and a failing call ending it.
#include "trainer/batch/lookahead.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace mnemo::batch {
namespace {

struct Slot {
  int64_t batch = -1;  // the batch the slot's prepare ran for
};

// The calls' order as text: "p0" is prepare(0), and so on.
std::vector<std::string> Order(int64_t n, Ahead ahead, int64_t fail_at = -1) {
  std::vector<std::string> seen;
  Slot slots[2];
  LookaheadCalls<Slot> c;
  c.begin = [&](int64_t i, Slot*) { seen.push_back(absl::StrCat("b", i)); };
  c.prepare = [&](int64_t i, Slot* s) {
    seen.push_back(absl::StrCat("p", i));
    s->batch = i;
    return absl::OkStatus();
  };
  c.finish = [&](int64_t i, Slot* s) {
    seen.push_back(absl::StrCat("f", i));
    // A slot holds its own batch from its prepare to its completion.
    EXPECT_EQ(s->batch, i);
    return absl::OkStatus();
  };
  c.run = [&](int64_t i, Slot*) {
    seen.push_back(absl::StrCat("r", i));
    if (i == fail_at) return absl::InternalError("run failed");
    return absl::OkStatus();
  };
  c.complete = [&](int64_t i, Slot* s) {
    seen.push_back(absl::StrCat("c", i));
    EXPECT_EQ(s->batch, i);
    return absl::OkStatus();
  };
  const absl::Status status = RunLookahead(n, ahead, slots, c);
  EXPECT_EQ(status.ok(), fail_at < 0) << status;
  return seen;
}

using ::testing::ElementsAre;

TEST(LookaheadTest, InOrderWithoutLookahead) {
  EXPECT_THAT(
      Order(2, Ahead::kNone),
      ElementsAre("b0", "p0", "f0", "r0", "c0", "b1", "p1", "f1", "r1", "c1"));
}

TEST(LookaheadTest, PreparesTheNextBatchWhileOneComputes) {
  EXPECT_THAT(Order(3, Ahead::kPrepare),
              ElementsAre("b0", "p0", "f0", "r0", "p1", "c0",  //
                          "b1", "f1", "r1", "p2", "c1",        //
                          "b2", "f2", "r2", "c2"));
}

TEST(LookaheadTest, FinishesTheNextBatchWhileOneComputes) {
  EXPECT_THAT(Order(3, Ahead::kFinish),
              ElementsAre("b0", "p0", "f0", "r0", "p1", "f1", "c0",  //
                          "b1", "r1", "p2", "f2", "c1",              //
                          "b2", "r2", "c2"));
}

TEST(LookaheadTest, AFailingCallEndsTheLoop) {
  EXPECT_THAT(
      Order(3, Ahead::kFinish, /*fail_at=*/1),
      ElementsAre("b0", "p0", "f0", "r0", "p1", "f1", "c0", "b1", "r1"));
}

TEST(LookaheadTest, NoBatches) {
  EXPECT_TRUE(Order(0, Ahead::kFinish).empty());
}

}  // namespace
}  // namespace mnemo::batch
