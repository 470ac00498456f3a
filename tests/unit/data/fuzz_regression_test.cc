// Inputs the libFuzzer targets (tests/fuzz, scripts/fuzz) found to break the
// event-log loader, kept as regression tests.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include "trainer/data/event_log.h"
#include "util/status_matchers.h"

namespace mnemo::data {
namespace {

using ::testing::Each;
using ::testing::ElementsAre;
using ::testing::Ge;

class FuzzRegressionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) /
           ("fuzz_regression_test." + std::to_string(::getpid()) + "." +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string Write(const std::string& content) {
    const std::string p = (dir_ / "events.txt").string();
    std::ofstream(p, std::ios::binary) << content;
    return p;
  }

  static LoadOptions Opts(Format format, bool skip_bad_lines = false) {
    LoadOptions o;
    o.format = format;
    o.skip_bad_lines = skip_bad_lines;
    return o;
  }

  std::filesystem::path dir_;
};

// load_tuvw_fuzz: "+-46" passed the "negative id" check (it looks at the
// first character) and std::from_chars read -46 after the '+'. The id then
// indexed the renumbering table at -46 (UBSan, ASan), or became a negative
// original id. The input as found (line 4 has 5 fields, line 7 a NUL).
TEST_F(FuzzRegressionTest, PlusMinusIdFromLoadTuvwFuzz) {
  constexpr char kFound[] =
      "5,14659,14702,148\n5,14659,15700,144\n5,14659,14300,171\n"
      "5,15,14659,14702,140\n5,146,1465903,154\n5\x15,14659,15702,61\n"
      "5,14659\00047105,14\n5,+-46,14203,83\n5,14659,1359,143";
  const std::string found(kFound, sizeof(kFound) - 1);
  LoadReport report;
  auto log = LoadEventLog(Write(found), Opts(Format::kTuvw, true), &report);
  ASSERT_THAT(log, IsOk());
  EXPECT_EQ(log->num_events(), 5);
  EXPECT_EQ(report.bad_lines_skipped, 4);
  EXPECT_THAT(log->original_ids,
              ElementsAre(14659, 14702, 15700, 14300, 146, 1465903, 1359));
}

TEST_F(FuzzRegressionTest, PlusMinusIdIsInvalidInEveryFormat) {
  const struct {
    Format format;
    const char* content;
  } cases[] = {
      {Format::kSnap, "1 2 3\n+-5 2 3\n"},
      {Format::kTgnEdges, "1 2 3\n1 +-2 3\n"},
      {Format::kKonect, "% c\n1\t2\t1\t5\n+-1\t2\t1\t5\n"},
      {Format::kTuvw, "0,1,2,3\n0,+-1,2,3\n"},
      {Format::kJodieCsv,
       "user_id,item_id,timestamp,state_label\n"
       "1,2,3,0\n1,+-2,3,0\n"},
      {Format::kTgnCsv, ",u,i,ts,label,idx\n0,1,2,3,0,1\n1,+-1,2,3,0,2\n"},
      {Format::kTgnCsv, ",u,i,ts,label,idx\n0,1,2,3,0,+-1\n"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(FormatName(c.format));
    const std::string path = Write(c.content);
    EXPECT_THAT(LoadEventLog(path, Opts(c.format)),
                StatusIs(absl::StatusCode::kInvalidArgument, "invalid id"));
    EXPECT_THAT(LoadEventLog(path, Opts(c.format)),
                StatusIs(absl::StatusCode::kInvalidArgument, "+-"));
    LoadReport report;
    auto log = LoadEventLog(path, Opts(c.format, true), &report);
    if (log.ok()) {
      EXPECT_EQ(report.bad_lines_skipped, 1);
      EXPECT_THAT(log->original_ids, Each(Ge(0)));
    }
  }
  // A plain '+' stays accepted.
  auto log = LoadEventLog(Write("+1 +2 +3\n"), Opts(Format::kSnap));
  ASSERT_THAT(log, IsOk());
  EXPECT_THAT(log->original_ids, ElementsAre(1, 2));
}

// The same sign pair in a number was read as a negative number ("+-3" as a
// weight -3; as a time, "negative timestamp").
TEST_F(FuzzRegressionTest, PlusMinusNumberIsInvalid) {
  EXPECT_THAT(
      LoadEventLog(Write("1 2 +-3 5\n"), Opts(Format::kKonect)),
      StatusIs(absl::StatusCode::kInvalidArgument, "invalid number (weight)"));
  EXPECT_THAT(
      LoadEventLog(Write("1 2 +-3\n"), Opts(Format::kSnap)),
      StatusIs(absl::StatusCode::kInvalidArgument, "invalid timestamp"));
  auto log = LoadEventLog(Write("1 2 +3 +5.5\n"), Opts(Format::kKonect));
  ASSERT_THAT(log, IsOk());
  EXPECT_EQ(log->edge_features[0], 3.0f);
  EXPECT_EQ(log->time_offset, 5.5);
}

// Peak resident memory of this process, in bytes.
int64_t PeakRssBytes() {
  struct rusage u;
  getrusage(RUSAGE_SELF, &u);
  return int64_t{u.ru_maxrss} * 1024;
}

// load_*_fuzz (-malloc_limit_mb): a one-line file with an id just below
// 2^26 made the renumbering allocate a flat table of 2^26 int32 per id
// space: 256 MiB, 512 MiB for JODIE's users and items.
TEST_F(FuzzRegressionTest, ALargeIdInASmallFileNeedsLittleMemory) {
  const int64_t before = PeakRssBytes();
  auto jodie = LoadEventLog(Write("user_id,item_id,timestamp,state_label\n"
                                  "67108862,67108861,1,0\n"),
                            Opts(Format::kJodieCsv));
  ASSERT_THAT(jodie, IsOk());
  EXPECT_THAT(jodie->original_ids, ElementsAre(67108862, 67108861));
  EXPECT_THAT(jodie->node_is_item, ElementsAre(0, 1));
  auto snap =
      LoadEventLog(Write("0 67108862 1\n67108862 5 2\n"), Opts(Format::kSnap));
  ASSERT_THAT(snap, IsOk());
  EXPECT_THAT(snap->original_ids, ElementsAre(0, 67108862, 5));
  EXPECT_THAT(snap->src, ElementsAre(0, 1));
  EXPECT_THAT(snap->dst, ElementsAre(1, 2));
  EXPECT_LT(PeakRssBytes() - before, int64_t{64} << 20);
}

}  // namespace
}  // namespace mnemo::data
