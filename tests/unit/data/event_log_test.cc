#include "trainer/data/event_log.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "util/status_matchers.h"

namespace mnemo::data {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

class EventLogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) /
           ("event_log_test." + std::to_string(::getpid()) + "." +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string Write(const std::string& name, const std::string& content) {
    const std::string p = (dir_ / name).string();
    std::ofstream(p, std::ios::binary) << content;
    return p;
  }
  std::string WriteGz(const std::string& name, const std::string& content) {
    const std::string p = (dir_ / name).string();
    gzFile f = gzopen(p.c_str(), "wb");
    gzwrite(f, content.data(), content.size());
    gzclose(f);
    return p;
  }
  static LoadOptions Opts(Format f = Format::kAuto) {
    LoadOptions o;
    o.format = f;
    return o;
  }

  std::filesystem::path dir_;
};

TEST_F(EventLogTest, FormatNamesRoundTrip) {
  for (Format f :
       {Format::kAuto, Format::kSnap, Format::kTgnEdges, Format::kTgnCsv,
        Format::kJodieCsv, Format::kKonect, Format::kTuvw}) {
    auto parsed = ParseFormat(FormatName(f));
    ASSERT_THAT(parsed, IsOk());
    EXPECT_EQ(*parsed, f);
  }
  EXPECT_THAT(ParseFormat("csv"),
              StatusIs(absl::StatusCode::kInvalidArgument, "known: auto"));
}

TEST_F(EventLogTest, SnapUnsortedIsSortedStablyAndRenumbered) {
  const std::string content =
      "10 20 105\n"
      "30 10 100\n"
      "20 30 105\n"
      "10 30 103\n";
  for (bool gz : {false, true}) {
    const std::string p =
        gz ? WriteGz("s.txt.gz", content) : Write("s.txt", content);
    LoadReport report;
    auto log = LoadEventLog(p, Opts(), &report);
    ASSERT_THAT(log, IsOk());
    EXPECT_EQ(report.detected_format, Format::kSnap);
    EXPECT_FALSE(report.was_sorted);
    EXPECT_EQ(log->name, "s");
    EXPECT_EQ(log->time_offset, 100);
    EXPECT_THAT(log->t, ElementsAre(0, 3, 5, 5));
    // Sorted: (30,10,100) (10,30,103) (10,20,105) (20,30,105).
    EXPECT_THAT(log->original_ids, ElementsAre(30, 10, 20));
    EXPECT_THAT(log->src, ElementsAre(0, 1, 1, 2));
    EXPECT_THAT(log->dst, ElementsAre(1, 0, 2, 0));
    EXPECT_EQ(log->num_nodes, 3);
    EXPECT_FALSE(log->bipartite);
    EXPECT_EQ(log->edge_feature_dim, 0);
    EXPECT_TRUE(log->node_is_item.empty());
  }
}

TEST_F(EventLogTest, TgnEdgesIsSnapParserAndBipartite) {
  const std::string p = Write("w.txt", "1 3 0\n2 4 36.5\n1 4 77\n");
  auto log = LoadEventLog(p, Opts(Format::kTgnEdges));
  ASSERT_THAT(log, IsOk());
  EXPECT_EQ(log->format, Format::kTgnEdges);
  EXPECT_TRUE(log->bipartite);
  EXPECT_THAT(log->t, ElementsAre(0, 36.5, 77));
  LoadReport report;
  ASSERT_THAT(LoadEventLog(p, Opts(), &report), IsOk());
  EXPECT_EQ(report.detected_format, Format::kSnap);
}

TEST_F(EventLogTest, TgnCsv) {
  const std::string p = Write("ml_x.csv",
                              ",u,i,ts,label,idx\n"
                              "0,1,3,0.0,0.0,1\n"
                              "1,2,3,36.0,1.0,2\n");
  LoadReport report;
  auto log = LoadEventLog(p, Opts(), &report);
  ASSERT_THAT(log, IsOk());
  EXPECT_EQ(report.detected_format, Format::kTgnCsv);
  EXPECT_THAT(log->labels, ElementsAre(0.0f, 1.0f));
  EXPECT_THAT(log->original_ids, ElementsAre(1, 3, 2));
  EXPECT_TRUE(log->node_is_item.empty());
  EXPECT_TRUE(log->bipartite);
}

TEST_F(EventLogTest, JodieCsvSeparateIdSpacesAndFeatures) {
  const std::string content =
      "user_id,item_id,timestamp,state_label,comma_separated_list_of_features\n"
      "0,0,0.0,0,0.5,-1.0,2\n"
      "1,0,36.0,1,1,2,3\n"
      "0,1,77.0,0,4,5,6\n";
  const std::string p = WriteGz("j.csv.gz", content);
  LoadReport report;
  auto log = LoadEventLog(p, Opts(), &report);
  ASSERT_THAT(log, IsOk());
  EXPECT_EQ(report.detected_format, Format::kJodieCsv);
  EXPECT_EQ(log->name, "j");
  EXPECT_EQ(log->edge_feature_dim, 3);
  EXPECT_THAT(log->edge_features,
              ElementsAre(0.5f, -1.0f, 2, 1, 2, 3, 4, 5, 6));
  EXPECT_THAT(log->labels, ElementsAre(0, 1, 0));
  // user 0, item 0, user 1, item 1: original id 0 is both a user and an item.
  EXPECT_EQ(log->num_nodes, 4);
  EXPECT_THAT(log->original_ids, ElementsAre(0, 0, 1, 1));
  EXPECT_THAT(log->node_is_item, ElementsAre(0, 1, 0, 1));
  EXPECT_TRUE(log->bipartite);

  const std::string map = (dir_ / "ids.csv").string();
  ASSERT_THAT(SaveIdMap(*log, map), IsOk());
  std::stringstream ss;
  ss << std::ifstream(map).rdbuf();
  EXPECT_EQ(ss.str(),
            "dense_id,original_id,kind\n0,0,user\n1,0,item\n2,1,user\n"
            "3,1,item\n");
}

TEST_F(EventLogTest, JodieRowsMustMatchFeatureCount) {
  const std::string p = Write("j.csv",
                              "user_id,item_id,timestamp,state_label,f\n"
                              "0,0,0.0,0,0.5,1\n"
                              "1,0,36.0,1,1\n");
  EXPECT_THAT(LoadEventLog(p, Opts()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "j.csv:3: expected 6 fields"));
}

TEST_F(EventLogTest, KonectWeightIsFeatureAndSortFeaturesAlong) {
  const std::string p = Write("out.k",
                              "% asym signed\n"
                              "1\t2\t10\t1407470400\n"
                              "3 2 -5 1376539200\n"
                              "% inline comment\n"
                              "2\t3\t1\t1376539200\n");
  LoadReport report;
  auto log = LoadEventLog(p, Opts(), &report);
  ASSERT_THAT(log, IsOk());
  EXPECT_EQ(report.detected_format, Format::kKonect);
  EXPECT_FALSE(report.was_sorted);
  EXPECT_EQ(log->edge_feature_dim, 1);
  EXPECT_THAT(log->edge_features, ElementsAre(-5, 1, 10));
  EXPECT_THAT(log->original_ids, ElementsAre(3, 2, 1));
  EXPECT_EQ(log->time_offset, 1376539200);
}

TEST_F(EventLogTest, KonectWithoutTimestampsIsRejected) {
  const std::string p = Write("out.k", "% sym\n1 2 1\n");
  EXPECT_THAT(LoadEventLog(p, Opts()),
              StatusIs(absl::StatusCode::kInvalidArgument, "out.k:2: KONECT"));
}

TEST_F(EventLogTest, Tuvw) {
  const std::string p = Write("us.txt", "0,5,6,53\n0,5,7,87\n1,6,5,2.5\n");
  LoadReport report;
  auto log = LoadEventLog(p, Opts(), &report);
  ASSERT_THAT(log, IsOk());
  EXPECT_EQ(report.detected_format, Format::kTuvw);
  EXPECT_THAT(log->t, ElementsAre(0, 0, 1));
  EXPECT_THAT(log->edge_features, ElementsAre(53, 87, 2.5f));
  EXPECT_THAT(log->original_ids, ElementsAre(5, 6, 7));
}

TEST_F(EventLogTest, DetectionOfFourWhitespaceColumnsIsKonect) {
  const std::string p = Write("k.txt", "1 2 3 4\n");
  LoadReport report;
  ASSERT_THAT(LoadEventLog(p, Opts(), &report), IsOk());
  EXPECT_EQ(report.detected_format, Format::kKonect);
}

TEST_F(EventLogTest, HugeIdsUseTheHashMap) {
  const std::string p = Write("s.txt",
                              "9000000000000000000 7 1\n"
                              "7 9223372036854775807 2\n");
  auto log = LoadEventLog(p, Opts());
  ASSERT_THAT(log, IsOk());
  EXPECT_THAT(log->original_ids,
              ElementsAre(9000000000000000000, 7, 9223372036854775807));
  EXPECT_THAT(log->src, ElementsAre(0, 1));
  EXPECT_THAT(log->dst, ElementsAre(1, 2));
}

TEST_F(EventLogTest, DirectoryIsAnError) {
  EXPECT_THAT(LoadEventLog(dir_.string(), Opts()),
              StatusIs(absl::StatusCode::kInvalidArgument, "directory"));
}

TEST_F(EventLogTest, MaxEventsAfterSorting) {
  const std::string p = Write("s.txt", "1 2 30\n3 4 10\n5 6 20\n");
  LoadOptions o;
  o.max_events = 2;
  auto log = LoadEventLog(p, o);
  ASSERT_THAT(log, IsOk());
  EXPECT_EQ(log->num_events(), 2);
  EXPECT_THAT(log->original_ids, ElementsAre(3, 4, 5, 6));
  EXPECT_THAT(log->t, ElementsAre(0, 10));
}

TEST_F(EventLogTest, CrLfAndBlankLines) {
  const std::string p = Write("s.txt", "1 2 3\r\n\r\n4 5 6\r\n");
  auto log = LoadEventLog(p, Opts());
  ASSERT_THAT(log, IsOk());
  EXPECT_EQ(log->num_events(), 2);
}

// A UTF-8 byte-order mark (Excel's "CSV UTF-8", Notepad) before the first
// line is skipped in every format, auto-detected or named, plain or
// gzipped; it was read as part of the first field ("cannot detect the
// format", "expected the header line", a malformed first event).
TEST_F(EventLogTest, Utf8ByteOrderMarkIsSkipped) {
  const std::string bom = "\xEF\xBB\xBF";
  struct Case {
    std::string name, content;
    Format format, detected;
  };
  for (const Case& c : std::vector<Case>{
           {"s.txt", "1 2 3\n4 5 6\n", Format::kAuto, Format::kSnap},
           {"s2.txt", "1 2 3\n4 5 6\n", Format::kSnap, Format::kSnap},
           {"ml_x.csv", ",u,i,ts,label,idx\n0,1,3,0.0,0.0,1\n1,2,3,36,1,2\n",
            Format::kAuto, Format::kTgnCsv},
           {"j.csv",
            "user_id,item_id,timestamp,state_label,f1\n1,2,0,0,0.5\n"
            "2,2,10,1,0.25\n",
            Format::kAuto, Format::kJodieCsv},
           {"t.csv", "0,1,2,1.5\n10,2,3,2.5\n", Format::kAuto, Format::kTuvw},
           {"k.tsv", "% sym\n1 2 1 5\n2 3 1 6\n", Format::kAuto,
            Format::kKonect}}) {
    LoadReport report;
    auto log =
        LoadEventLog(Write(c.name, bom + c.content), Opts(c.format), &report);
    ASSERT_THAT(log, IsOk()) << c.name;
    EXPECT_EQ(report.detected_format, c.detected) << c.name;
    EXPECT_EQ(log->num_events(), 2) << c.name;
    auto plain =
        LoadEventLog(Write("plain_" + c.name, c.content), Opts(c.format));
    ASSERT_THAT(plain, IsOk()) << c.name;
    EXPECT_EQ(log->original_ids, plain->original_ids) << c.name;
    EXPECT_EQ(log->t, plain->t) << c.name;
  }
  auto gz = LoadEventLog(WriteGz("s.txt.gz", bom + "1 2 3\n4 5 6\n"), Opts());
  ASSERT_THAT(gz, IsOk());
  EXPECT_EQ(gz->num_events(), 2);
  // UTF-16 is named, not reported as a malformed line.
  EXPECT_THAT(LoadEventLog(Write("u16.txt", std::string("\xFF\xFE"
                                                        "1\0 \0"
                                                        "2\0",
                                                        8)),
                           Opts()),
              StatusIs(absl::StatusCode::kInvalidArgument, "UTF-16"));
}

// Every malformed case: INVALID_ARGUMENT naming file and line.
TEST_F(EventLogTest, BadLinesNameFileAndLine) {
  struct Case {
    std::string content, want;
  };
  const Case cases[] = {
      {"1 2 3\n1 2\n", "bad.txt:2: expected 3 fields"},
      {"1 2 3\n1 2 3 4\n", "bad.txt:2: expected 3 fields"},
      {"1 2 3\n1 x 3\n", "bad.txt:2: invalid id: '1 x 3'"},
      {"1 2 3\n1 2 3abc\n", "bad.txt:2: invalid timestamp"},
      {"1 2 3\n1 2 nan\n", "bad.txt:2: NaN or infinite timestamp"},
      {"1 2 3\n1 2 inf\n", "bad.txt:2: NaN or infinite timestamp"},
      {"1 2 3\n1 2 -5\n", "bad.txt:2: negative timestamp"},
      {"1 2 3\n-1 2 5\n", "bad.txt:2: negative id"},
      {"1 2 3\n99999999999999999999 2 5\n", "bad.txt:2: id out of int64"},
      {"1 2 3\n1 2 1e999\n", "bad.txt:2: number out of range"},
      {"0,1,2,3\n0,1,2,x\n", "bad.txt:2: invalid number (weight)"},
      // Finite in double but not in the model's float32.
      {"1 2 3\n1 2 1e40\n", "bad.txt:2: timestamp above 3.4e38"},
      {"0,1,2,3\n0,1,2,1e39\n", "bad.txt:2: number outside the float32"},
  };
  for (const Case& c : cases) {
    const std::string p = Write("bad.txt", c.content);
    EXPECT_THAT(LoadEventLog(p, Opts()),
                StatusIs(absl::StatusCode::kInvalidArgument, c.want))
        << c.content;
  }
}

TEST_F(EventLogTest, LongOffendingLineIsTruncated) {
  const std::string p = Write("bad.txt", "1 2 3\n1 2 " + std::string(500, 'z'));
  auto log = LoadEventLog(p, Opts());
  ASSERT_FALSE(log.ok());
  EXPECT_LT(log.status().message().size(), 200u);
  EXPECT_THAT(std::string(log.status().message()), HasSubstr("...'"));
}

TEST_F(EventLogTest, SkipBadLinesCountsAndKeepsFirstError) {
  const std::string p = Write("bad.txt", "1 2 3\nfoo\n4 5 6\n7 8\n9 9 9\n");
  LoadOptions o;
  o.skip_bad_lines = true;
  LoadReport report;
  auto log = LoadEventLog(p, o, &report);
  ASSERT_THAT(log, IsOk());
  EXPECT_EQ(log->num_events(), 3);
  EXPECT_EQ(report.bad_lines_skipped, 2);
  EXPECT_EQ(report.lines_read, 5);
  EXPECT_THAT(report.first_bad_line_error, HasSubstr("bad.txt:2:"));
}

TEST_F(EventLogTest, EmptyHeaderOnlyAndMissing) {
  EXPECT_THAT(LoadEventLog(Write("e.txt", ""), Opts()),
              StatusIs(absl::StatusCode::kInvalidArgument, "no events"));
  EXPECT_THAT(LoadEventLog(WriteGz("e.txt.gz", ""), Opts()),
              StatusIs(absl::StatusCode::kInvalidArgument, "no events"));
  EXPECT_THAT(LoadEventLog(Write("c.txt", "% only a comment\n"), Opts()),
              StatusIs(absl::StatusCode::kInvalidArgument, "no events"));
  EXPECT_THAT(
      LoadEventLog(Write("h.csv", "user_id,item_id,timestamp,state_label\n"),
                   Opts()),
      StatusIs(absl::StatusCode::kInvalidArgument, "only a header"));
  EXPECT_THAT(LoadEventLog(Write("h2.csv", ",u,i,ts,label,idx\n"), Opts()),
              StatusIs(absl::StatusCode::kInvalidArgument, "only a header"));
  const std::string missing = (dir_ / "nope.txt").string();
  EXPECT_THAT(LoadEventLog(missing, Opts()),
              StatusIs(absl::StatusCode::kNotFound, missing));
}

TEST_F(EventLogTest, AllLinesBadWithSkipIsAnError) {
  LoadOptions o;
  o.skip_bad_lines = true;
  EXPECT_THAT(LoadEventLog(Write("b.txt", "1 2 x\n3 4 y\n"), o),
              StatusIs(absl::StatusCode::kInvalidArgument, "no events"));
}

TEST_F(EventLogTest, CorruptGzipIsAnErrorNotACrash) {
  std::string gz;
  {
    const std::string p = WriteGz("t.gz", std::string(10000, '1'));
    std::stringstream ss;
    ss << std::ifstream(p, std::ios::binary).rdbuf();
    gz = ss.str();
  }
  const std::string p = Write("trunc.gz", gz.substr(0, gz.size() / 2));
  auto log = LoadEventLog(p, Opts());
  EXPECT_FALSE(log.ok());
  EXPECT_EQ(log.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(EventLogTest, ReadMaybeGzipReturnsWholeContent) {
  const std::string content(3 << 20, 'a');
  auto plain = ReadMaybeGzip(Write("a", content));
  auto gz = ReadMaybeGzip(WriteGz("a.gz", content));
  ASSERT_THAT(plain, IsOk());
  ASSERT_THAT(gz, IsOk());
  EXPECT_EQ(*plain, content);
  EXPECT_EQ(*gz, content);
}

// Bytes after the gzip stream that are not another gzip member (a file
// with something appended, or two files run together) are refused, naming
// the file; zlib itself would stop at the end of the stream and drop them
// without a word. Concatenated members (`cat a.gz b.gz`) are one stream.
TEST_F(EventLogTest, GzipWithTrailingGarbageIsRefused) {
  const std::string lines = "1 2 10\n2 3 20\n3 1 30\n";
  std::string gz;
  {
    std::stringstream ss;
    ss << std::ifstream(WriteGz("t.gz", lines), std::ios::binary).rdbuf();
    gz = ss.str();
  }
  const std::string bad = Write("garbage.gz", gz + "4 5 40\nnot gzip at all");
  auto log = LoadEventLog(bad, Opts());
  ASSERT_FALSE(log.ok());
  EXPECT_EQ(log.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(log.status().message(), HasSubstr(bad));
  EXPECT_THAT(log.status().message(), HasSubstr("trailing"));
  EXPECT_THAT(log.status().message(),
              HasSubstr(std::to_string(gz.size())));  // where they start
  auto two = LoadEventLog(Write("two.gz", gz + gz), Opts());
  ASSERT_THAT(two, IsOk());
  EXPECT_EQ(two->num_events(), 6);
  // A stream cut short is still an error, and so is an empty file.
  EXPECT_FALSE(
      LoadEventLog(Write("cut.gz", gz.substr(0, gz.size() - 4)), Opts()).ok());
}

// The real datasets in $MNEMO_SHARED_DATA.
class SharedDataTest : public ::testing::Test {
 protected:
  static std::string Path(const std::string& file) {
    const char* d = std::getenv("MNEMO_SHARED_DATA");
    return std::string(d ? d : "../shared/data") + "/" + file;
  }
};

TEST_F(SharedDataTest, Wikipedia) {
  LoadReport report;
  auto log = LoadEventLog(Path("wikipedia.txt.gz"), {}, &report);
  ASSERT_THAT(log, IsOk());
  EXPECT_EQ(log->num_events(), 157474);
  EXPECT_EQ(log->num_nodes, 9227);
  EXPECT_TRUE(log->bipartite);
  EXPECT_TRUE(report.was_sorted);
}

TEST_F(SharedDataTest, MathOverflowIsSortedByTheLoader) {
  LoadReport report;
  auto log = LoadEventLog(Path("sx-mathoverflow.txt.gz"), {}, &report);
  ASSERT_THAT(log, IsOk());
  EXPECT_EQ(log->num_events(), 506550);
  EXPECT_EQ(log->num_nodes, 24818);
  EXPECT_FALSE(report.was_sorted);
  EXPECT_TRUE(std::is_sorted(log->t.begin(), log->t.end()));
  EXPECT_EQ(log->t.front(), 0);
  EXPECT_EQ(report.detected_format, Format::kSnap);
}

TEST_F(SharedDataTest, CollegeMsg) {
  auto log = LoadEventLog(Path("CollegeMsg.txt.gz"), {});
  ASSERT_THAT(log, IsOk());
  EXPECT_EQ(log->num_events(), 59835);
  EXPECT_EQ(log->num_nodes, 1899);
}

TEST_F(SharedDataTest, BitcoinAlpha) {
  LoadReport report;
  auto log = LoadEventLog(Path("soc-sign-bitcoinalpha.konect.gz"), {}, &report);
  ASSERT_THAT(log, IsOk());
  EXPECT_EQ(report.detected_format, Format::kKonect);
  EXPECT_EQ(log->num_events(), 24186);
  EXPECT_EQ(log->num_nodes, 3783);
  EXPECT_EQ(log->edge_feature_dim, 1);
  EXPECT_EQ(log->edge_features.size(), 24186u);
  EXPECT_TRUE(std::is_sorted(log->t.begin(), log->t.end()));
  for (float w : log->edge_features) {
    EXPECT_GE(w, -10);
    EXPECT_LE(w, 10);
  }
}

TEST_F(SharedDataTest, USLegis) {
  LoadReport report;
  auto log = LoadEventLog(Path("USLegis.txt.gz"), {}, &report);
  ASSERT_THAT(log, IsOk());
  EXPECT_EQ(report.detected_format, Format::kTuvw);
  EXPECT_EQ(log->num_events(), 60396);
  EXPECT_EQ(log->num_nodes, 225);
  EXPECT_EQ(log->edge_feature_dim, 1);
  EXPECT_EQ(log->t.back(), 11);
}

}  // namespace
}  // namespace mnemo::data
