// The columnar event file (trainer/data/event_file.h): what `mnemo data
// --convert` writes reads back as the same log, mapped; damaged files are
// refused with the file and the part named.
#include "trainer/data/event_file.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "trainer/data/event_log.h"
#include "trainer/data/split.h"
#include "util/crc32c.h"
#include "util/status_matchers.h"

namespace mnemo::data {
namespace {

using ::testing::HasSubstr;

// JODIE's CSV: two id spaces (user 1 and item 1 are different nodes), edge
// features, labels, and one line out of time order.
constexpr char kJodie[] =
    "user_id,item_id,timestamp,state_label,f1,f2\n"
    "1,1,10,0,0.5,1.5\n"
    "2,1,30,1,2.5,3.5\n"
    "1,2,20,0,4.5,5.5\n"
    "3,2,40,0,6.5,7.5\n";

class EventFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) /
           ("event_file_test." + std::to_string(::getpid()) + "." +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string Path(const std::string& name) const {
    return (dir_ / name).string();
  }
  std::string Write(const std::string& name, const std::string& content) {
    std::ofstream(Path(name), std::ios::binary) << content;
    return Path(name);
  }
  static std::string Read(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  // The JODIE log, converted; returns the columnar file's path.
  std::string Converted(EventLog* text_log) {
    auto log = LoadEventLog(Write("jodie.csv", kJodie), {});
    EXPECT_THAT(log, IsOk());
    *text_log = *log;
    EXPECT_THAT(WriteEventFile(*log, Path("jodie.mnev")), IsOk());
    return Path("jodie.mnev");
  }

  std::filesystem::path dir_;
};

void ExpectSameLog(const EventLog& a, const EventLog& b) {
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(a.format, b.format);
  EXPECT_EQ(a.src, b.src);
  EXPECT_EQ(a.dst, b.dst);
  EXPECT_EQ(a.t, b.t);
  EXPECT_EQ(a.time_offset, b.time_offset);
  EXPECT_EQ(a.edge_feature_dim, b.edge_feature_dim);
  EXPECT_EQ(a.edge_features, b.edge_features);
  EXPECT_EQ(a.labels, b.labels);
  EXPECT_EQ(a.num_nodes, b.num_nodes);
  EXPECT_EQ(a.original_ids, b.original_ids);
  EXPECT_EQ(a.node_is_item, b.node_is_item);
  EXPECT_EQ(a.bipartite, b.bipartite);
}

TEST_F(EventFileTest, RoundTripIsTheSameLogMapped) {
  EventLog text;
  const std::string path = Converted(&text);
  EXPECT_TRUE(IsEventFile(path));
  EXPECT_FALSE(IsEventFile(Path("jodie.csv")));
  LoadReport report;
  auto mapped = LoadEventLog(path, {}, &report);
  ASSERT_THAT(mapped, IsOk());
  ExpectSameLog(text, *mapped);
  EXPECT_EQ(mapped->source_path, path);
  EXPECT_EQ(report.detected_format, Format::kJodieCsv);
  // The event columns view the mapping; the text log owns its columns.
  EXPECT_TRUE(mapped->src.viewed() && mapped->dst.viewed() &&
              mapped->t.viewed() && mapped->edge_features.viewed() &&
              mapped->labels.viewed());
  EXPECT_NE(mapped->mapping, nullptr);
  EXPECT_FALSE(text.src.viewed());
  EXPECT_EQ(text.mapping, nullptr);
  // What the trainer derives from it is the same too.
  const Split a = MakeSplit(text, SplitOptions{});
  const Split b = MakeSplit(*mapped, SplitOptions{});
  EXPECT_EQ(a.train, b.train);
  EXPECT_EQ(a.test, b.test);
}

TEST_F(EventFileTest, MaxEventsKeepsTheFirstEventsAndTheirNodes) {
  EventLog text;
  const std::string path = Converted(&text);
  LoadOptions o;
  o.max_events = 2;
  auto from_text = LoadEventLog(Path("jodie.csv"), o);
  auto from_file = LoadEventLog(path, o);
  ASSERT_THAT(from_text, IsOk());
  ASSERT_THAT(from_file, IsOk());
  ExpectSameLog(*from_text, *from_file);
  EXPECT_EQ(from_file->num_nodes, 3);  // user 1, item 1, item 2
}

TEST_F(EventFileTest, CopiesAreCopyOnWrite) {
  EventLog text;
  auto mapped = LoadEventLog(Converted(&text), {});
  ASSERT_THAT(mapped, IsOk());
  EventLog copy = *mapped;
  EXPECT_TRUE(copy.t.viewed());
  EXPECT_EQ(copy.t.data(), mapped->t.data());  // shared, not copied
  copy.t.set(0, 99.0);  // the copy takes its own values first
  EXPECT_FALSE(copy.t.viewed());
  EXPECT_EQ(copy.t[0], 99.0);
  EXPECT_EQ(mapped->t[0], text.t[0]);
  // The mapping outlives the log it came from while a copy reads it.
  EventLog keep = *mapped;
  *mapped = EventLog();
  EXPECT_EQ(keep.src, text.src);
}

TEST_F(EventFileTest, DamagedFilesAreRefusedByName) {
  EventLog text;
  const std::string path = Converted(&text);
  const std::string good = Read(path);
  auto load = [&](const std::string& name, const std::string& bytes) {
    return LoadEventLog(Write(name, bytes), {});
  };
  // Truncated: a column runs past the end.
  EXPECT_THAT(load("truncated.mnev", good.substr(0, good.size() - 100)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "truncated.mnev: not a valid columnar event file: "
                       "column"));
  EXPECT_THAT(load("header-only.mnev", good.substr(0, 100)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "shorter (100 bytes) than its 4096-byte header"));
  // A flipped bit in the times.
  std::string flipped = good;
  flipped[3 * 4096] ^= 0x10;  // header, src, dst, then t
  EXPECT_THAT(load("flipped.mnev", flipped),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "column t checksum mismatch"));
  // A flipped bit in the header.
  std::string header = good;
  header[20] ^= 0x01;
  EXPECT_THAT(
      load("header.mnev", header),
      StatusIs(absl::StatusCode::kInvalidArgument, "header checksum mismatch"));
  // A later version (with a valid header checksum).
  std::string later = good;
  const uint32_t version = 2;
  std::memcpy(later.data() + 8, &version, 4);
  size_t crc_at = 0;  // the header's checksum follows its fixed part
  for (size_t i = 4; i + 4 <= 4096; ++i) {
    uint32_t stored;
    std::memcpy(&stored, good.data() + i, 4);
    if (stored == Crc32cExtend(0, good.data(), i)) {
      crc_at = i;
      break;
    }
  }
  ASSERT_GT(crc_at, 0u);
  const uint32_t crc = Crc32cExtend(0, later.data(), crc_at);
  std::memcpy(later.data() + crc_at, &crc, 4);
  EXPECT_THAT(load("later.mnev", later),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "version 2, this build reads version 1"));
  // A text format named for a columnar file.
  LoadOptions snap;
  snap.format = Format::kSnap;
  EXPECT_THAT(
      LoadEventLog(path, snap),
      StatusIs(absl::StatusCode::kInvalidArgument, "leave the format at auto"));
  // The good file still loads (nothing above touched it).
  EXPECT_THAT(LoadEventLog(path, {}), IsOk());
}

// A mapped file cut short in place (`cp` over it, `truncate`) turns the
// next read of a page past its new end into SIGBUS: the process ends with
// a message naming the file and exit 1, not a bare signal.
TEST_F(EventFileTest, FileCutWhileMappedEndsWithAMessage) {
  EventLog text;
  const std::string path = Converted(&text);
  auto mapped = LoadEventLog(path, {});
  ASSERT_THAT(mapped, IsOk());
  ASSERT_EQ(::truncate(path.c_str(), 4096), 0);  // header only: no columns
  const EventLog& log = *mapped;
  EXPECT_EXIT(
      {
        volatile double t = log.t[log.num_events() - 1];
        (void)t;
        std::_Exit(0);
      },
      ::testing::ExitedWithCode(1),
      "jodie.mnev: the columnar event file changed on disk while this "
      "process read it");
  // Another fault than a mapped event file's stays a plain SIGBUS.
  EXPECT_EXIT(std::raise(SIGBUS), ::testing::KilledBySignal(SIGBUS), "");
}

// A mapped file rewritten in place (same path, same inode) is found by its
// size and modification time; one replaced by a rename, as --convert
// writes, leaves the mapped file as it was.
TEST_F(EventFileTest, FileRewrittenInPlaceIsFound) {
  EventLog text;
  const std::string path = Converted(&text);
  auto mapped = LoadEventLog(path, {});
  ASSERT_THAT(mapped, IsOk());
  EXPECT_THAT(CheckEventFileUnchanged(*mapped), IsOk());
  EXPECT_THAT(CheckEventFileUnchanged(text), IsOk());  // owns its columns
  // Replaced by a rename: the mapping still reads the file it mapped.
  ASSERT_THAT(WriteEventFile(text, path), IsOk());
  EXPECT_THAT(CheckEventFileUnchanged(*mapped), IsOk());
  auto again = LoadEventLog(path, {});
  ASSERT_THAT(again, IsOk());
  // Rewritten in place: one byte of the times, a minute later.
  {
    const int fd = ::open(path.c_str(), O_WRONLY);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::pwrite(fd, "x", 1, 3 * 4096), 1);
    const timespec later[2] = {{0, UTIME_OMIT}, {::time(nullptr) + 60, 0}};
    ASSERT_EQ(::futimens(fd, later), 0);
    ::close(fd);
  }
  EventLog copy = *again;  // copies share the mapping and its check
  for (const EventLog* log : {&*again, &copy}) {
    absl::Status s = CheckEventFileUnchanged(*log);
    EXPECT_FALSE(s.ok());
    EXPECT_THAT(s.message(), HasSubstr(path));
    EXPECT_THAT(s.message(), HasSubstr("changed on disk"));
    EXPECT_THAT(s.message(), HasSubstr("must not be rewritten in place"));
  }
}

TEST_F(EventFileTest, RealDatasetRoundTrips) {
  const char* d = std::getenv("MNEMO_SHARED_DATA");
  const std::string source =
      std::string(d ? d : "../shared/data") + "/CollegeMsg.txt.gz";
  auto text = LoadEventLog(source, {});
  ASSERT_THAT(text, IsOk());
  ASSERT_THAT(WriteEventFile(*text, Path("collegemsg.mnev")), IsOk());
  auto mapped = LoadEventLog(Path("collegemsg.mnev"), {});
  ASSERT_THAT(mapped, IsOk());
  ExpectSameLog(*text, *mapped);
  EXPECT_EQ(mapped->num_events(), 59835);
  const Split a = MakeSplit(*text, SplitOptions{});
  const Split b = MakeSplit(*mapped, SplitOptions{});
  EXPECT_EQ(a.train, b.train);
  EXPECT_EQ(a.new_node_test, b.new_node_test);
}

}  // namespace
}  // namespace mnemo::data
