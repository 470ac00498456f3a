#include "trainer/data/registry.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "util/status_matchers.h"

namespace mnemo::data {
namespace {

class RegistryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) /
           ("registry_test." + std::to_string(::getpid()) + "." +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_ / "a");
    std::filesystem::create_directories(dir_ / "b");
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
};

TEST_F(RegistryTest, KnownDatasets) {
  for (const char* name :
       {"wikipedia", "mathoverflow", "collegemsg", "bitcoin-alpha", "uslegis",
        "reddit", "mooc", "lastfm", "askubuntu"}) {
    const DatasetInfo* info = FindDataset(name);
    ASSERT_NE(info, nullptr) << name;
    EXPECT_FALSE(info->file_names.empty());
  }
  EXPECT_EQ(FindDataset("nope"), nullptr);
}

TEST_F(RegistryTest, ExistingPathIsReturnedAsIs) {
  const std::string p = (dir_ / "x.txt").string();
  std::ofstream(p) << "1 2 3\n";
  Format f = Format::kSnap;
  auto got = ResolveDataset(p, {}, &f);
  ASSERT_THAT(got, IsOk());
  EXPECT_EQ(*got, p);
  EXPECT_EQ(f, Format::kAuto);
}

TEST_F(RegistryTest, NameFoundInSecondSearchDir) {
  const std::string p = (dir_ / "b" / "CollegeMsg.txt.gz").string();
  std::ofstream(p) << "1 2 3\n";
  ResolveOptions o;
  o.search_dirs = {(dir_ / "a").string(), (dir_ / "b").string()};
  o.allow_download = false;
  Format f = Format::kAuto;
  auto got = ResolveDataset("collegemsg", o, &f);
  ASSERT_THAT(got, IsOk());
  EXPECT_EQ(*got, p);
  EXPECT_EQ(f, Format::kSnap);
}

TEST_F(RegistryTest, DownloadNameIsFoundWithAutoFormat) {
  const std::string p = (dir_ / "a" / "wikipedia.csv").string();
  std::ofstream(p) << "user_id,item_id,timestamp,state_label,f\n0,0,0,0,1\n";
  ResolveOptions o;
  o.search_dirs = {(dir_ / "a").string()};
  o.allow_download = false;
  Format f = Format::kSnap;
  auto got = ResolveDataset("wikipedia", o, &f);
  ASSERT_THAT(got, IsOk());
  EXPECT_EQ(*got, p);
  EXPECT_EQ(f, Format::kAuto);
}

TEST_F(RegistryTest, UnknownNameListsKnownNames) {
  ResolveOptions o;
  o.search_dirs = {(dir_ / "a").string()};
  EXPECT_THAT(ResolveDataset("no-such-thing", o, nullptr),
              StatusIs(absl::StatusCode::kNotFound,
                       "known datasets: wikipedia, mathoverflow"));
}

TEST_F(RegistryTest, MissingFileWithDownloadDisabledExplainsTheFix) {
  ResolveOptions o;
  o.search_dirs = {(dir_ / "a").string(), (dir_ / "b").string()};
  o.allow_download = false;
  auto got = ResolveDataset("mathoverflow", o, nullptr);
  EXPECT_THAT(got,
              StatusIs(absl::StatusCode::kNotFound,
                       (dir_ / "a").string() + ", " + (dir_ / "b").string()));
  const std::string msg(got.status().message());
  EXPECT_THAT(msg, ::testing::HasSubstr("downloads are disabled"));
  EXPECT_THAT(msg, ::testing::HasSubstr("--data DIR"));
  EXPECT_THAT(msg, ::testing::HasSubstr("MNEMO_DATA_DIR"));
  EXPECT_THAT(msg,
              ::testing::HasSubstr(
                  "https://snap.stanford.edu/data/sx-mathoverflow.txt.gz"));
}

TEST_F(RegistryTest, NoUrlMeansManualPlacement) {
  ResolveOptions o;
  o.search_dirs = {(dir_ / "a").string()};
  EXPECT_THAT(
      ResolveDataset("uslegis", o, nullptr),
      StatusIs(absl::StatusCode::kNotFound, "place USLegis.txt.gz by hand"));
}

// Download enabled but the official address unreachable (no network here):
// NOT_FOUND that says why, and nothing left behind in the download dir.
TEST_F(RegistryTest, FailedDownloadIsNotFoundAndCleansUp) {
  ResolveOptions o;
  o.search_dirs = {(dir_ / "a").string()};
  o.download_dir = (dir_ / "dl").string();
  auto got = ResolveDataset("collegemsg", o, nullptr);
  if (got.ok()) GTEST_SKIP() << "network available; download succeeded";
  EXPECT_THAT(got, StatusIs(absl::StatusCode::kNotFound, "download"));
  for (const auto& entry : std::filesystem::directory_iterator(dir_ / "dl"))
    ADD_FAILURE() << "left behind: " << entry.path();
}

std::string SharedData(const std::string& file) {
  const char* d = std::getenv("MNEMO_SHARED_DATA");
  return std::string(d ? d : "../shared/data") + "/" + file;
}

int Sh(const std::string& cmd) { return std::system(cmd.c_str()); }

// The download path end to end, offline: curl fetches a file:// URL.
TEST_F(RegistryTest, FetchPlainFileChecksOk) {
  DatasetInfo info = *FindDataset("collegemsg");
  info.url = "file://" + SharedData("CollegeMsg.txt.gz");
  auto got = FetchDataset(info, (dir_ / "dl").string());
  ASSERT_THAT(got, IsOk());
  EXPECT_EQ(*got, (dir_ / "dl" / "CollegeMsg.txt.gz").string());
  auto log = LoadEventLog(*got, {});
  ASSERT_THAT(log, IsOk());
  EXPECT_EQ(log->num_events(), 59835);
}

TEST_F(RegistryTest, FetchChecksumMismatchIsDataLoss) {
  DatasetInfo info = *FindDataset("collegemsg");
  info.url = "file://" + SharedData("USLegis.txt.gz");
  EXPECT_THAT(FetchDataset(info, (dir_ / "dl").string()),
              StatusIs(absl::StatusCode::kDataLoss, "checksum mismatch"));
  for (const auto& entry : std::filesystem::directory_iterator(dir_ / "dl"))
    ADD_FAILURE() << "left behind: " << entry.path();
}

// KONECT ships a .tar.bz2; the member is extracted and gzipped.
TEST_F(RegistryTest, FetchKonectTarball) {
  const std::filesystem::path src = dir_ / "src" / "soc-sign-bitcoinalpha";
  std::filesystem::create_directories(src);
  const std::string tarball = (dir_ / "src" / "k.tar.bz2").string();
  ASSERT_EQ(Sh("gzip -dc '" + SharedData("soc-sign-bitcoinalpha.konect.gz") +
               "' > '" + (src / "out.soc-sign-bitcoinalpha").string() +
               "' && tar -cjf '" + tarball + "' -C '" +
               (dir_ / "src").string() + "' soc-sign-bitcoinalpha"),
            0);
  DatasetInfo info = *FindDataset("bitcoin-alpha");
  info.url = "file://" + tarball;
  auto got = FetchDataset(info, (dir_ / "dl").string());
  ASSERT_THAT(got, IsOk());
  EXPECT_EQ(*got, (dir_ / "dl" / "soc-sign-bitcoinalpha.konect.gz").string());
  auto log = LoadEventLog(*got, {});
  ASSERT_THAT(log, IsOk());
  EXPECT_EQ(log->num_events(), 24186);
}

TEST_F(RegistryTest, DefaultSearchDirsOrder) {
  setenv("MNEMO_DATA_DIR", "/env/dir", 1);
  const auto dirs = DefaultSearchDirs("/flag/dir");
  unsetenv("MNEMO_DATA_DIR");
  ASSERT_GE(dirs.size(), 3u);
  EXPECT_EQ(dirs[0], "/flag/dir");
  EXPECT_EQ(dirs[1], "/env/dir");
}

}  // namespace
}  // namespace mnemo::data
