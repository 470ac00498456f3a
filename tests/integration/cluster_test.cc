// A real cluster on loopback: coordinator, memory-store shards and trainers
// as separate `mnemo` processes, with real gRPC and gloo between them.
#include <dlfcn.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "services/memstore_client.h"
#include "services/metrics.h"
#include "tests/unit/services/certificates.h"

namespace mnemo {
namespace {
namespace fs = std::filesystem;

std::string Bin() {
  const char* b = std::getenv("MNEMO_BIN");
  return b && *b ? b : "mnemo";
}
std::string SharedData() {
  const char* d = std::getenv("MNEMO_SHARED_DATA");
  return d && *d ? d : "../shared/data";
}
std::string ReadFile(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}
double Now() {
  return std::chrono::duration<double>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// One child process running `mnemo args...`, output to a log file; killed
// when the handle goes (and if the test process dies).
class Proc {
 public:
  // `env`: NAME=VALUE settings added to the child's environment.
  Proc(const std::vector<std::string>& args, fs::path log,
       const std::vector<std::string>& env = {})
      : log_(log) {
    std::vector<std::string> argv = {Bin()};
    argv.insert(argv.end(), args.begin(), args.end());
    const pid_t parent = getpid();
    pid_ = fork();
    if (pid_ == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(127);
      FILE* f = std::fopen(log.c_str(), "w");
      dup2(fileno(f), 1);
      dup2(fileno(f), 2);
      for (const std::string& e : env) {
        const size_t eq = e.find('=');
        setenv(e.substr(0, eq).c_str(), e.substr(eq + 1).c_str(), 1);
      }
      std::vector<char*> c;
      for (auto& a : argv) c.push_back(a.data());
      c.push_back(nullptr);
      execv(c[0], c.data());
      _exit(127);
    }
  }
  ~Proc() {
    if (running()) {
      ::kill(pid_, SIGKILL);
      waitpid(pid_, &status_, 0);
    }
  }
  bool running() {
    if (exited_) return false;
    if (waitpid(pid_, &status_, WNOHANG) == pid_) exited_ = true;
    return !exited_;
  }
  // Waits up to `seconds`; true when it exited.
  bool WaitExit(double seconds) {
    const double end = Now() + seconds;
    while (Now() < end) {
      if (!running()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return !running();
  }
  void Signal(int sig) { ::kill(pid_, sig); }
  pid_t pid() const { return pid_; }
  void Kill9() {
    ::kill(pid_, SIGKILL);
    waitpid(pid_, &status_, 0);
    exited_ = true;
  }
  int exit_code() const {
    return WIFEXITED(status_) ? WEXITSTATUS(status_) : 128 + WTERMSIG(status_);
  }
  std::string log() const { return ReadFile(log_); }
  bool WaitForLog(const std::string& text, double seconds) {
    const double end = Now() + seconds;
    while (Now() < end) {
      if (log().find(text) != std::string::npos) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }

 private:
  pid_t pid_ = -1;
  int status_ = 0;
  bool exited_ = false;
  fs::path log_;
};

// The value of "key": NUMBER after the first occurrence of `section`.
double JsonNumber(const std::string& json, const std::string& section,
                  const std::string& key) {
  size_t at = json.find(section);
  if (at == std::string::npos) return -1;
  at = json.find("\"" + key + "\":", at);
  if (at == std::string::npos) return -1;
  return std::atof(json.c_str() + at + key.size() + 3);
}

const std::vector<std::string> kSmallModel = {"--data",
                                              "collegemsg",
                                              "--memory-dim",
                                              "32",
                                              "--time-dim",
                                              "32",
                                              "--embedding-dim",
                                              "32",
                                              "--batch-size",
                                              "200",
                                              "--lr",
                                              "1e-3",
                                              "--threads",
                                              "1",
                                              "--seed",
                                              "7",
                                              "--patience",
                                              "0",
                                              "--progress",
                                              "lines"};

class ClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           absl::StrCat(
               "mnemo_cluster_", getpid(), "_",
               ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::vector<std::string> Model(std::vector<std::string> extra) {
    std::vector<std::string> a = kSmallModel;
    a.insert(a.end(), {"--data-dir", SharedData()});
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  }

  // Starts 2 memstores, a coordinator and 2 trainers by hand, as a real
  // deployment would. `server_flags` go to the memstores and the
  // coordinator, `coordinator_flags` to it alone, `client_flags` to the
  // trainers (`rank1_flags` to rank 1 alone); `probe` is how this test
  // checks the memstores' health.
  void StartCluster(int epochs, std::vector<std::string> server_flags = {},
                    std::vector<std::string> coordinator_flags = {},
                    std::vector<std::string> client_flags = {},
                    services::ClientSecurity probe = {},
                    std::vector<std::string> rank1_flags = {}) {
    const int dim = 3 * 32 + 3;  // memory + mail (2 memory) + 3
    for (int i = 0; i < 2; ++i) {
      shard_addrs_.push_back(
          absl::StrCat("127.0.0.1:", services::FreeTcpPort()));
      std::vector<std::string> args = {"memstore",
                                       "--listen",
                                       shard_addrs_[i],
                                       "--data-dir",
                                       (dir_ / absl::StrCat("ms", i)).string(),
                                       "--dim",
                                       std::to_string(dim),
                                       "--shard-id",
                                       std::to_string(i),
                                       "--num-shards",
                                       "2",
                                       "--write-policy",
                                       "write-back",
                                       "--max-message-bytes",
                                       std::to_string(64 << 20)};
      args.insert(args.end(), server_flags.begin(), server_flags.end());
      memstores_.push_back(std::make_unique<Proc>(
          args, dir_ / absl::StrCat("memstore", i, ".log")));
    }
    for (auto& a : shard_addrs_) {
      bool up = false;
      for (int t = 0; t < 300 && !up; ++t) {
        auto h = services::CheckHealth(a, 0.5, "", probe);
        up = h.ok() && *h;
        if (!up) std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
      ASSERT_TRUE(up) << a;
    }
    const std::string coord =
        absl::StrCat("127.0.0.1:", services::FreeTcpPort());
    std::vector<std::string> cargs = {"coordinator",
                                      "--listen",
                                      coord,
                                      "--world-size",
                                      "2",
                                      "--memstores",
                                      absl::StrJoin(shard_addrs_, ","),
                                      "--heartbeat-timeout",
                                      "5"};
    cargs.insert(cargs.end(), server_flags.begin(), server_flags.end());
    cargs.insert(cargs.end(), coordinator_flags.begin(),
                 coordinator_flags.end());
    coordinator_ = std::make_unique<Proc>(cargs, dir_ / "coordinator.log");
    for (int r = 0; r < 2; ++r) {
      std::vector<std::string> args = {"trainer"};
      auto m = Model({"--epochs", std::to_string(epochs), "--rank",
                      std::to_string(r), "--world-size", "2", "--coordinator",
                      coord, "--timeout", "10"});
      args.insert(args.end(), m.begin(), m.end());
      args.insert(args.end(), client_flags.begin(), client_flags.end());
      if (r == 1)
        args.insert(args.end(), rank1_flags.begin(), rank1_flags.end());
      trainers_.push_back(std::make_unique<Proc>(
          args, dir_ / absl::StrCat("trainer", r, ".log")));
    }
  }

  fs::path dir_;
  std::vector<std::string> shard_addrs_;
  std::vector<std::unique_ptr<Proc>> memstores_, trainers_;
  std::unique_ptr<Proc> coordinator_;
};

TEST_F(ClusterTest, TwoWorkersTrainLikeOneAndAgreeOnParameters) {
  Proc single(
      [&] {
        std::vector<std::string> a = {"train"};
        auto m = Model({"--epochs", "1", "--out", (dir_ / "single").string()});
        a.insert(a.end(), m.begin(), m.end());
        return a;
      }(),
      dir_ / "single.log");
  ASSERT_TRUE(single.WaitExit(300));
  ASSERT_EQ(single.exit_code(), 0) << single.log();

  Proc cluster(
      [&] {
        std::vector<std::string> a = {"train", "--workers", "2"};
        auto m = Model({"--epochs", "1", "--check-parameters", "--out",
                        (dir_ / "cluster").string()});
        a.insert(a.end(), m.begin(), m.end());
        return a;
      }(),
      dir_ / "cluster.log");
  ASSERT_TRUE(cluster.WaitExit(300));
  ASSERT_EQ(cluster.exit_code(), 0) << cluster.log();
  EXPECT_THAT(cluster.log(), ::testing::HasSubstr("[coordinator]"));
  EXPECT_THAT(cluster.log(), ::testing::HasSubstr("[memstore 1]"));
  EXPECT_THAT(cluster.log(), ::testing::HasSubstr("[trainer 1]"));

  const std::string w0 = ReadFile(dir_ / "cluster" / "worker-0.json");
  const std::string w1 = ReadFile(dir_ / "cluster" / "worker-1.json");
  const double c0 = JsonNumber(w0, "{", "parameter_checksum");
  const double c1 = JsonNumber(w1, "{", "parameter_checksum");
  ASSERT_NE(w0, "");
  EXPECT_EQ(c0, c1) << w0 << w1;

  const std::string s1 = ReadFile(dir_ / "single" / "summary.json");
  const std::string s2 = ReadFile(dir_ / "cluster" / "summary.json");
  const double ap1 = JsonNumber(s1, "\"test\":", "ap");
  const double ap2 = JsonNumber(s2, "\"test\":", "ap");
  EXPECT_GT(ap1, 0.6);
  // Two workers are not one process bit for bit: the batch's halves merge
  // their memory updates in the memory store, and rounding differs. After
  // one epoch on CollegeMsg the cluster's test AP was 0.027 below to 0.065
  // above the single process's on an AMD EPYC (seeds 1, 2, 3, 7; two
  // builds) and 0.051 below on an Intel Xeon (seed 7): one seed's epoch
  // says only that the cluster learns, as the single process must
  // (bench/converge.sh compares them over seeds).
  EXPECT_GT(ap2, 0.6) << s2;
  EXPECT_GT(ap2, ap1 - 0.1) << s2;
  EXPECT_THAT(s2, ::testing::HasSubstr("\"policy\": \"vanilla\""));
  EXPECT_THAT(s2, ::testing::HasSubstr("\"workers\": 2"));
  EXPECT_GT(JsonNumber(s2, "\"comm\":", "states_pulled"), 0);
  EXPECT_GT(JsonNumber(s2, "\"comm\":", "sync_count"), 0);
}

// A bounded working set through real processes: trainers holding a few
// hundred node states each (the rest in the memstores and in their own
// RocksDB spill stores) end with the parameters, loss and test AP of
// unbounded ones, for a memory model with one mail (TGN, full-cache) and
// with a mailbox (APAN, DepBloom).
TEST_F(ClusterTest, BoundedWorkingSetTrainsWhatUnboundedDoes) {
  struct Case {
    std::string model, policy, cache_bytes;
  };
  for (const Case& c : {Case{"tgn", "full-cache", "170000"},
                        Case{"apan", "depbloom", "1000000"}}) {
    auto run = [&](const std::string& name, std::vector<std::string> extra) {
      std::vector<std::string> a = {"train",    "--workers", "2",
                                    "--policy", c.policy,    "--window-events",
                                    "1500"};
      a.insert(a.end(), extra.begin(), extra.end());
      auto m = Model({"--model", c.model, "--max-events", "6000", "--epochs",
                      "1", "--out", (dir_ / name).string()});
      a.insert(a.end(), m.begin(), m.end());
      Proc p(a, dir_ / (name + ".log"));
      EXPECT_TRUE(p.WaitExit(300)) << name;
      EXPECT_EQ(p.exit_code(), 0) << p.log();
      return ReadFile(dir_ / name / "summary.json");
    };
    const std::string plain = run(c.model + "-unbounded", {});
    const std::string spill = (dir_ / (c.model + "-spill")).string();
    const std::string bounded = run(
        c.model + "-bounded",
        {"--memory-cache-bytes", c.cache_bytes, "--memory-spill-dir", spill});
    ASSERT_NE(plain, "");
    ASSERT_NE(bounded, "");
    for (const char* key : {"ap", "new_node_ap"}) {
      EXPECT_EQ(JsonNumber(bounded, "\"test\":", key),
                JsonNumber(plain, "\"test\":", key))
          << c.model << " " << key;
    }
    EXPECT_EQ(JsonNumber(bounded, "{", "parameter_checksum"),
              JsonNumber(plain, "{", "parameter_checksum"))
        << c.model;
    const double spills = JsonNumber(bounded, "\"working_set\":", "spills");
    const double restores = JsonNumber(bounded, "\"working_set\":", "restores");
    std::printf("%s %s bounded: %g spills, %g restores\n", c.model.c_str(),
                c.policy.c_str(), spills, restores);
    EXPECT_GT(spills, 0) << bounded;
    EXPECT_GT(restores, 0) << bounded;
    EXPECT_EQ(JsonNumber(plain, "\"working_set\":", "spills"), 0);
    // Each worker's spill store is a RocksDB directory of its own.
    EXPECT_TRUE(fs::exists(fs::path(spill) / "rank-1" / "db" / "CURRENT"));
  }
}

// Non-leader workers wait while rank 0 evaluates (about 3 s here)
// and while it tests: with a 2 s timeout for silent peers the job must still
// finish. Each trainer gets its share of the CPUs (one thread each, pinned).
// DepTGL and DepBloom through real processes: DepTGL with far fewer state
// syncs and bytes pulled than vanilla on the same data and seed; both with a
// mean test AP over two seeds no more than 0.02 below vanilla's.
TEST_F(ClusterTest, DepTglAndDepBloomLearnAsWellWithLessTraffic) {
  auto run = [&](const std::string& name, std::vector<std::string> extra) {
    std::vector<std::string> a = {"train"};
    auto m = Model({"--epochs", "1", "--out", (dir_ / name).string()});
    a.insert(a.end(), m.begin(), m.end());
    // After the model's flags: a later flag wins (--seed).
    a.insert(a.end(), extra.begin(), extra.end());
    Proc p(a, dir_ / (name + ".log"));
    EXPECT_TRUE(p.WaitExit(600));
    EXPECT_EQ(p.exit_code(), 0) << p.log();
    return ReadFile(dir_ / name / "summary.json");
  };
  const std::string single = run("single", {});
  const std::string vanilla =
      run("vanilla", {"--workers", "2", "--policy", "vanilla"});
  // Without load-aware pruning: Eq. 9 reacts to measured compute times, so
  // which events a loaded machine prunes (and the AP) would vary from run
  // to run (a CI run pruned its way to 0.033 below vanilla).
  const std::string deptgl =
      run("deptgl", {"--workers", "2", "--policy", "deptgl", "--tau-load",
                     "1e9", "--check-parameters"});
  ASSERT_NE(deptgl, "");
  const double v_syncs = JsonNumber(vanilla, "\"comm\":", "sync_count");
  const double d_syncs = JsonNumber(deptgl, "\"comm\":", "sync_count");
  const double v_bytes = JsonNumber(vanilla, "\"comm\":", "bytes_pulled");
  const double d_bytes = JsonNumber(deptgl, "\"comm\":", "bytes_pulled");
  const double ap = JsonNumber(single, "\"test\":", "ap");
  const double v_ap = JsonNumber(vanilla, "\"test\":", "ap");
  const double d_ap = JsonNumber(deptgl, "\"test\":", "ap");
  std::printf(
      "syncs vanilla %.0f deptgl %.0f; bytes pulled %.0f / %.0f; "
      "test AP single %.4f vanilla %.4f deptgl %.4f\n",
      v_syncs, d_syncs, v_bytes, d_bytes, ap, v_ap, d_ap);
  EXPECT_GE(v_syncs, 5 * d_syncs);
  EXPECT_GE(v_bytes, 3 * d_bytes);
  // Against the strict baseline, vanilla with the same two workers: loses
  // no more than 0.02 in the mean of two seeds (7 and 1) of this small run.
  // Every run here is reproducible (DepBloom's partition too: a METIS
  // partition that followed other threads' rand() calls once moved its AP
  // by 0.01 between runs), but a change of rounding moves one seed's AP by
  // about 0.01: over seeds 1, 2, 3, 7, one epoch, DepTGL scored -0.017 to
  // +0.009 and DepBloom -0.018 to -0.012 against vanilla (one seed later
  // -0.026 after a kernel changed its rounding); one process scored -0.027
  // to +0.028 against it.
  const std::string vanilla1 =
      run("vanilla-seed1",
          {"--workers", "2", "--policy", "vanilla", "--seed", "1"});
  const std::string deptgl1 =
      run("deptgl-seed1", {"--workers", "2", "--policy", "deptgl", "--tau-load",
                           "1e9", "--seed", "1"});
  ASSERT_NE(vanilla1, "");
  ASSERT_NE(deptgl1, "");
  const double v_ap2 = (v_ap + JsonNumber(vanilla1, "\"test\":", "ap")) / 2;
  const double d_ap2 = (d_ap + JsonNumber(deptgl1, "\"test\":", "ap")) / 2;
  std::printf("mean of seeds 7 and 1: vanilla %.4f deptgl %.4f\n", v_ap2,
              d_ap2);
  EXPECT_GE(d_ap2, v_ap2 - 0.02);
  EXPECT_THAT(deptgl, ::testing::HasSubstr("\"policy\": \"deptgl\""));
  EXPECT_GT(JsonNumber(deptgl, "\"plan\":", "auxiliaries"), 0);
  EXPECT_GT(JsonNumber(deptgl, "\"plan\":", "boundaries"), 0);

  // DepBloom: METIS sub-chains in windows of 5,000 events, IMR(4), the
  // critical path; the same model and batch size.
  const std::string depbloom =
      run("depbloom", {"--workers", "2", "--policy", "depbloom",
                       "--window-events", "5000", "--check-parameters"});
  ASSERT_NE(depbloom, "");
  const std::string depbloom1 =
      run("depbloom-seed1", {"--workers", "2", "--policy", "depbloom",
                             "--window-events", "5000", "--seed", "1"});
  ASSERT_NE(depbloom1, "");
  const double b_ap = JsonNumber(depbloom, "\"test\":", "ap");
  const double b_ap2 = (b_ap + JsonNumber(depbloom1, "\"test\":", "ap")) / 2;
  std::printf(
      "depbloom: test AP %.4f, syncs %.0f, urgent %.0f / non-urgent "
      "%.0f states, cross ratio %.3f\n",
      b_ap, JsonNumber(depbloom, "\"comm\":", "sync_count"),
      JsonNumber(depbloom, "\"plan\":", "urgent_states"),
      JsonNumber(depbloom, "\"plan\":", "nonurgent_states"),
      JsonNumber(depbloom, "\"plan\":", "cross_ratio"));
  std::printf("mean of seeds 7 and 1: depbloom %.4f\n", b_ap2);
  EXPECT_GE(b_ap2, v_ap2 - 0.02);
  EXPECT_GT(JsonNumber(depbloom, "\"plan\":", "urgent_states"), 0);
  EXPECT_GT(JsonNumber(depbloom, "\"plan\":", "nonurgent_states"), 0);
  EXPECT_GT(JsonNumber(depbloom, "\"plan\":", "boundaries"), 5);
}

// The pipelines through real processes (their handoffs point to point
// between the trainers): PipeTGL's global pipeline with DepBloom's
// critical-path split, and DepBloom's sub-chain run by a group of 2; each
// hands states on every batch and learns. A depth that does not divide the
// workers is refused, naming the flag.
TEST_F(ClusterTest, PipelinesHandStatesOnBetweenTrainers) {
  auto run = [&](const std::string& name, std::vector<std::string> extra,
                 int* exit_code = nullptr) {
    std::vector<std::string> a = {"train", "--workers", "2"};
    a.insert(a.end(), extra.begin(), extra.end());
    auto m = Model({"--epochs", "1", "--out", (dir_ / name).string()});
    a.insert(a.end(), m.begin(), m.end());
    Proc p(a, dir_ / (name + ".log"));
    EXPECT_TRUE(p.WaitExit(600));
    if (exit_code != nullptr) {
      *exit_code = p.exit_code();
      return p.log();
    }
    EXPECT_EQ(p.exit_code(), 0) << p.log();
    return ReadFile(dir_ / name / "summary.json");
  };
  const std::string pipetgl =
      run("pipetgl", {"--policy", "pipetgl", "--critical-path"});
  const std::string grouped =
      run("depbloom-g2", {"--policy", "depbloom", "--pipeline-depth", "2",
                          "--window-events", "5000"});
  for (const std::string* s : {&pipetgl, &grouped}) {
    ASSERT_NE(*s, "");
    const double ap = JsonNumber(*s, "\"test\":", "ap");
    const double handoffs = JsonNumber(*s, "\"pipeline\":", "handoffs_sent");
    std::printf("test AP %.4f, %g handoffs, bubble share %.3f\n", ap, handoffs,
                JsonNumber(*s, "\"pipeline\":", "bubble_share"));
    EXPECT_GT(ap, 0.6);
    EXPECT_GT(handoffs, 0);
    EXPECT_GT(JsonNumber(*s, "\"pipeline\":", "urgent_states_sent"), 0);
  }
  EXPECT_THAT(pipetgl, ::testing::HasSubstr("\"policy\": \"pipetgl\""));
  EXPECT_GT(JsonNumber(pipetgl, "\"pipeline\":", "parameter_passes"), 0);
  EXPECT_EQ(JsonNumber(grouped, "\"pipeline\":", "parameter_passes"), 0);
  int code = 0;
  const std::string bad = run(
      "bad-depth", {"--policy", "depbloom", "--pipeline-depth", "3"}, &code);
  EXPECT_NE(code, 0);
  EXPECT_THAT(bad, ::testing::HasSubstr("--pipeline-depth 3"));
}

// The new models under DepTGL and DepBloom through real processes: TGAT
// (no node memory, two-hop attention: records of times only), APAN (a
// mailbox of 10 mails per node, mails delivered to neighbours) and DySAT
// (snapshots, node embeddings all-reduced with the gradients) run to the
// end and score better than chance. (10,000 CollegeMsg events, 2 epochs,
// seed 7: TGAT 0.66 / 0.68, APAN 0.61 / 0.55, DySAT 0.81 / 0.80 under deptgl
// / depbloom; one process, APAN 0.60. Accuracy at scale:
// bench/results/models_*.md.)
class NewModelTest : public ClusterTest,
                     public ::testing::WithParamInterface<std::string> {};

TEST_P(NewModelTest, RunsUnderDepTglAndDepBloom) {
  const std::string model = GetParam();
  for (const std::string policy : {"deptgl", "depbloom"}) {
    std::vector<std::string> a = {"train", "--workers", "2", "--policy",
                                  policy};
    if (policy == "depbloom") a.insert(a.end(), {"--window-events", "1500"});
    auto m = Model({"--model", model, "--max-events", "10000", "--epochs", "2",
                    "--out", (dir_ / policy).string()});
    a.insert(a.end(), m.begin(), m.end());
    Proc p(a, dir_ / (policy + ".log"));
    ASSERT_TRUE(p.WaitExit(600)) << policy;
    ASSERT_EQ(p.exit_code(), 0) << p.log();
    const std::string s = ReadFile(dir_ / policy / "summary.json");
    EXPECT_THAT(s, ::testing::HasSubstr("\"model\": \"" + model + "\""));
    EXPECT_THAT(s, ::testing::HasSubstr("\"policy\": \"" + policy + "\""));
    const double ap = JsonNumber(s, "\"test\":", "ap");
    std::printf("%s %s: test AP %.4f\n", model.c_str(), policy.c_str(), ap);
    EXPECT_GT(ap, 0.5) << s;
  }
}

INSTANTIATE_TEST_SUITE_P(Models, NewModelTest,
                         ::testing::Values("tgat", "apan", "dysat"));

TEST_F(ClusterTest, ShortTimeoutOutlastsRankZeroEvaluation) {
  // The launcher's own settings from a config file, which the trainers
  // read too (without them).
  const fs::path config = dir_ / "cluster.yaml";
  std::ofstream(config) << "workers: 2\npin: true\nepochs: 1\n";
  Proc cluster({"train", "--config", config.string(), "--data", "collegemsg",
                "--data-dir", SharedData(), "--timeout", "2",
                // The reference's widths: validation takes about 3 s here.
                "--memory-dim", "172", "--time-dim", "172", "--embedding-dim",
                "172", "--progress", "lines", "--out", (dir_ / "out").string()},
               dir_ / "timeout.log");
  ASSERT_TRUE(cluster.WaitExit(600));
  ASSERT_EQ(cluster.exit_code(), 0) << cluster.log();
  EXPECT_THAT(cluster.log(), ::testing::HasSubstr("2 workers finished"));
  const std::string s = ReadFile(dir_ / "out" / "summary.json");
  EXPECT_GT(JsonNumber(s, "\"test\":", "ap"), 0.5) << s;
  EXPECT_THAT(s, ::testing::HasSubstr(config.string()));  // config_file
  // 2 workers share this machine's CPUs.
  const int cores = std::max(1u, std::thread::hardware_concurrency());
  EXPECT_EQ(JsonNumber(s, "\"config\":", "threads"), std::max(1, cores / 2))
      << s;
}

// Processes whose command line mentions `text` (other than this one).
std::vector<pid_t> ProcessesMentioning(const std::string& text) {
  std::vector<pid_t> pids;
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string cmd = ReadFile(e.path() / "cmdline");
    std::replace(cmd.begin(), cmd.end(), '\0', ' ');
    const pid_t pid = std::stoi(name);
    if (pid != getpid() && cmd.find(text) != std::string::npos) {
      pids.push_back(pid);
    }
  }
  return pids;
}

// The launcher's children die with it, even when it is killed with SIGKILL
// (no chance to stop them): nothing is left holding ports or RocksDB locks.
TEST_F(ClusterTest, ChildrenDieWithAKilledLauncher) {
  const std::string out = (dir_ / "orphans").string();
  Proc launcher(
      {"train", "--workers", "2", "--data", "collegemsg", "--data-dir",
       SharedData(), "--epochs", "50", "--progress", "lines", "--out", out},
      dir_ / "orphans.log");
  ASSERT_TRUE(launcher.WaitForLog("epoch 1/50", 120)) << launcher.log();
  // Trainers carry --out, shards their data dirs under it.
  EXPECT_GE(ProcessesMentioning(out).size(), 4u);
  launcher.Kill9();
  const double end = Now() + 15;
  while (Now() < end && !ProcessesMentioning(out).empty()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_THAT(ProcessesMentioning(out), ::testing::IsEmpty());
}

TEST_F(ClusterTest, LauncherStopsEverythingWhenATrainerFails) {
  // Without an NVIDIA driver every trainer fails at set-up (the launcher
  // cannot know: the trainers may see GPUs it does not).
  if (void* driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL)) {
    dlclose(driver);
    GTEST_SKIP() << "this machine has an NVIDIA driver";
  }
  Proc cluster(
      [&] {
        std::vector<std::string> a = {"train", "--workers", "2"};
        auto m = Model({"--epochs", "1", "--device", "cuda"});
        a.insert(a.end(), m.begin(), m.end());
        return a;
      }(),
      dir_ / "launcher.log");
  ASSERT_TRUE(cluster.WaitExit(60)) << cluster.log();
  EXPECT_EQ(cluster.exit_code(), 1);
  EXPECT_THAT(cluster.log(), ::testing::HasSubstr("no CUDA GPU"));
  EXPECT_THAT(cluster.log(), ::testing::HasSubstr("stopping every process"));
}

TEST_F(ClusterTest, KilledTrainerEndsTheJobEverywhere) {
  StartCluster(/*epochs=*/20);
  ASSERT_TRUE(trainers_[0]->WaitForLog("epoch 1/20", 120))
      << trainers_[0]->log();
  trainers_[1]->Kill9();
  const double killed = Now();
  EXPECT_TRUE(trainers_[0]->WaitExit(30)) << trainers_[0]->log();
  EXPECT_TRUE(coordinator_->WaitExit(30)) << coordinator_->log();
  EXPECT_LT(Now() - killed, 30);
  EXPECT_EQ(trainers_[0]->exit_code(), 3)
      << trainers_[0]->log();  // failed elsewhere
  EXPECT_EQ(coordinator_->exit_code(), 3);
  EXPECT_THAT(coordinator_->log(), ::testing::HasSubstr("worker 1"));
  EXPECT_THAT(trainers_[0]->log(),
              ::testing::HasSubstr("mnemo trainer [rank 0]"));
  std::printf("coordinator said:\n%s\nsurviving trainer said (tail):\n%s\n",
              coordinator_->log().c_str(),
              trainers_[0]
                  ->log()
                  .substr(trainers_[0]->log().size() > 600
                              ? trainers_[0]->log().size() - 600
                              : 0)
                  .c_str());
}

TEST_F(ClusterTest, KilledMemstoreEndsTheJobEverywhere) {
  StartCluster(/*epochs=*/20);
  ASSERT_TRUE(trainers_[0]->WaitForLog("epoch 1/20", 120))
      << trainers_[0]->log();
  memstores_[1]->Kill9();
  const double killed = Now();
  for (auto& t : trainers_) EXPECT_TRUE(t->WaitExit(30)) << t->log();
  EXPECT_TRUE(coordinator_->WaitExit(30)) << coordinator_->log();
  EXPECT_LT(Now() - killed, 30);
  for (auto& t : trainers_) {
    EXPECT_NE(t->exit_code(), 0);
  }
  EXPECT_EQ(coordinator_->exit_code(), 3);
  const std::string all = trainers_[0]->log() + trainers_[1]->log();
  EXPECT_THAT(all, ::testing::HasSubstr(shard_addrs_[1]));
  std::printf("coordinator said:\n%s\n", coordinator_->log().c_str());
}

// TLS and a bearer token on every connection of a separate-process job:
// the memory stores, the coordinator (and its probes of the stores), the
// trainers' calls and their rendezvous. A client without the token is
// refused.
TEST_F(ClusterTest, TlsAndTokenOnEveryConnection) {
  test_support::Certificates pki(dir_ / "pki");
  ASSERT_TRUE(pki.ok()) << "openssl could not make the certificates";
  services::ClientSecurity probe;
  probe.ca_file = pki("ca.pem");
  StartCluster(/*epochs=*/1,
               {"--tls-cert", pki("server.pem"), "--tls-key", pki("server.key"),
                "--auth-token-file", pki("token")},
               {"--memstore-tls-ca", pki("ca.pem")},
               {"--tls-ca", pki("ca.pem"), "--auth-token-file", pki("token")},
               probe);
  for (auto& t : trainers_) {
    ASSERT_TRUE(t->WaitExit(300)) << t->log();
    EXPECT_EQ(t->exit_code(), 0) << t->log();
  }
  ASSERT_TRUE(coordinator_->WaitExit(30)) << coordinator_->log();
  EXPECT_EQ(coordinator_->exit_code(), 0) << coordinator_->log();
  Proc no_token({"query", "--memstore", absl::StrJoin(shard_addrs_, ","),
                 "--stats", "--tls-ca", pki("ca.pem")},
                dir_ / "query.log");
  ASSERT_TRUE(no_token.WaitExit(30));
  EXPECT_EQ(no_token.exit_code(), 1) << no_token.log();
  EXPECT_THAT(no_token.log(), ::testing::HasSubstr("bearer token"));
  Proc with_token(
      {"query", "--memstore", absl::StrJoin(shard_addrs_, ","), "--stats",
       "--tls-ca", pki("ca.pem"), "--auth-token-file", pki("token")},
      dir_ / "query2.log");
  ASSERT_TRUE(with_token.WaitExit(30));
  EXPECT_EQ(with_token.exit_code(), 0) << with_token.log();
}

// A frozen process (SIGSTOP: its sockets stay open, it answers nothing)
// ends the job everywhere within 30 s, whichever role it has: keepalive
// pings, the coordinator's health probes of the shards and the workers'
// heartbeats notice it; the trainers' watchdog stops those waiting in a
// collective.
class FrozenProcessTest : public ClusterTest,
                          public ::testing::WithParamInterface<std::string> {};

TEST_P(FrozenProcessTest, EndsTheJobWithin30s) {
  StartCluster(/*epochs=*/20);
  ASSERT_TRUE(trainers_[0]->WaitForLog("epoch 1/20", 120))
      << trainers_[0]->log();
  Proc* frozen = GetParam() == "memstore"      ? memstores_[1].get()
                 : GetParam() == "coordinator" ? coordinator_.get()
                                               : trainers_[1].get();
  frozen->Signal(SIGSTOP);
  const double t0 = Now();
  std::vector<Proc*> others;
  for (auto& t : trainers_) others.push_back(t.get());
  others.push_back(coordinator_.get());
  std::string logs;
  for (Proc* p : others) {
    if (p == frozen) continue;
    EXPECT_TRUE(p->WaitExit(std::max(1.0, 30 - (Now() - t0)))) << p->log();
    EXPECT_NE(p->exit_code(), 0) << p->log();
    logs += p->log();
  }
  const double took = Now() - t0;
  EXPECT_LT(took, 30);
  std::printf("frozen %s: the job ended in %.1f s\n", GetParam().c_str(), took);
  frozen->Signal(SIGCONT);
  if (GetParam() == "memstore") {
    EXPECT_THAT(logs, ::testing::HasSubstr(shard_addrs_[1]));
  } else if (GetParam() == "trainer") {
    EXPECT_THAT(coordinator_->log(), ::testing::HasSubstr("worker 1"));
  }
}

// The processes `parent` started (pid, command line).
std::vector<std::pair<pid_t, std::string>> ChildrenOf(pid_t parent) {
  std::vector<std::pair<pid_t, std::string>> children;
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    // /proc/PID/stat: "pid (comm) state ppid ..."; comm may hold spaces.
    const std::string stat = ReadFile(e.path() / "stat");
    const size_t close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(stat.substr(close + 1));
    std::string state;
    pid_t ppid = -1;
    rest >> state >> ppid;
    if (ppid != parent) continue;
    std::string cmd = ReadFile(e.path() / "cmdline");
    std::replace(cmd.begin(), cmd.end(), '\0', ' ');
    children.emplace_back(std::stoi(name), cmd);
  }
  return children;
}

// Whole-job checkpoints: a 2-worker job that loses a random one of its
// processes (a memstore, the coordinator or a trainer: SIGKILL, after the
// epoch-1 checkpoint is complete) fails; `--resume` restarts it from its
// last complete checkpoint and it ends exactly where an uninterrupted run
// ends: the same per-epoch figures, test figures and parameter checksum
// (summary.json's 10 significant digits; vanilla with one thread per
// trainer is deterministic, and the checkpoint restores every bit of state
// that crosses an epoch boundary).
TEST_F(ClusterTest, KilledJobResumesToTheUninterruptedResult) {
  auto job = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = {"train", "--workers", "2"};
    auto m = Model(extra);
    a.insert(a.end(), m.begin(), m.end());
    return a;
  };
  const fs::path a_dir = dir_ / "uninterrupted", b_dir = dir_ / "killed";
  const double t0 = Now();
  Proc a(job({"--epochs", "3", "--out", a_dir.string()}), dir_ / "a.log");
  ASSERT_TRUE(a.WaitExit(300)) << a.log();
  ASSERT_EQ(a.exit_code(), 0) << a.log();
  const double uninterrupted_seconds = Now() - t0;

  Proc b(job({"--epochs", "3", "--out", b_dir.string()}), dir_ / "b.log");
  const fs::path manifest =
      b_dir / "checkpoints" / "epoch-0001" / "manifest.yaml";
  const double end = Now() + 120;
  while (Now() < end && !fs::exists(manifest) && b.running()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(fs::exists(manifest)) << b.log();
  EXPECT_THAT(ReadFile(manifest), ::testing::HasSubstr("workers: 2"));
  auto children = ChildrenOf(b.pid());
  ASSERT_EQ(children.size(), 5u)
      << b.log();  // 2 memstores, coordinator, 2 trainers
  // MNEMO_TEST_VICTIM=memstore|coordinator|trainer picks the role (to
  // reproduce a failure); by default any of the five.
  const char* role = std::getenv("MNEMO_TEST_VICTIM");
  if (role != nullptr && *role) {
    std::erase_if(children, [&](const auto& c) {
      return c.second.find(absl::StrCat(" ", role, " ")) == std::string::npos;
    });
    ASSERT_FALSE(children.empty()) << role;
  }
  std::random_device rd;
  const auto& [victim, victim_cmd] = children[rd() % children.size()];
  ::kill(victim, SIGKILL);
  std::printf("killed %d: %s\n", victim, victim_cmd.c_str());
  ASSERT_TRUE(b.WaitExit(90)) << b.log();
  EXPECT_NE(b.exit_code(), 0) << b.log();
  EXPECT_FALSE(fs::exists(b_dir / "summary.json"));

  Proc resumed(job({"--epochs", "3", "--resume", b_dir.string()}),
               dir_ / "resumed.log");
  ASSERT_TRUE(resumed.WaitExit(300)) << resumed.log();
  ASSERT_EQ(resumed.exit_code(), 0) << resumed.log();
  EXPECT_THAT(resumed.log(),
              ::testing::HasSubstr("mnemo train: resuming from"));
  EXPECT_THAT(resumed.log(), ::testing::HasSubstr("rank 1 resumed from"));

  const std::string sa = ReadFile(a_dir / "summary.json");
  const std::string sb = ReadFile(b_dir / "summary.json");
  ASSERT_NE(sb, "") << resumed.log();
  for (int e = 1; e <= 3; ++e) {
    const std::string section = absl::StrCat("\"epoch\": ", e, ",");
    for (const char* key : {"train_loss", "val_loss", "val_ap", "val_auc",
                            "val_new_node_ap", "grad_norm_mean"}) {
      EXPECT_EQ(JsonNumber(sb, section, key), JsonNumber(sa, section, key))
          << "epoch " << e << " " << key;
    }
  }
  EXPECT_EQ(JsonNumber(sb, "{", "best_epoch"),
            JsonNumber(sa, "{", "best_epoch"));
  for (const char* key : {"ap", "auc", "new_node_ap", "new_node_auc"}) {
    EXPECT_EQ(JsonNumber(sb, "\"test\":", key),
              JsonNumber(sa, "\"test\":", key))
        << key;
  }
  EXPECT_GT(JsonNumber(sb, "\"test\":", "ap"), 0.6) << sb;
  EXPECT_EQ(JsonNumber(sb, "{", "parameter_checksum"),
            JsonNumber(sa, "{", "parameter_checksum"));
  for (int r = 0; r < 2; ++r) {
    const std::string w = absl::StrCat("worker-", r, ".json");
    EXPECT_EQ(JsonNumber(ReadFile(b_dir / w), "{", "parameter_checksum"),
              JsonNumber(ReadFile(a_dir / w), "{", "parameter_checksum"))
        << w;
  }
  // One process continuing the cluster's checkpoint is allowed, and says
  // the run now differs from an uninterrupted one.
  Proc alone(
      [&] {
        std::vector<std::string> a = {"train"};
        auto m = Model({"--epochs", "4", "--resume", b_dir.string()});
        a.insert(a.end(), m.begin(), m.end());
        return a;
      }(),
      dir_ / "alone.log");
  ASSERT_TRUE(alone.WaitExit(300)) << alone.log();
  EXPECT_EQ(alone.exit_code(), 0) << alone.log();
  EXPECT_THAT(alone.log(),
              ::testing::HasSubstr("(1 worker now, 2 then: the run will "
                                   "differ from an uninterrupted one)"));
  std::printf("uninterrupted run %.1f s, test in all %.1f s\n",
              uninterrupted_seconds, Now() - t0);
}

// --resume of a cluster is checked before anything starts: without a
// complete checkpoint (here a set whose manifest was never written) the
// launcher and a rank-0 trainer exit 2 saying what the directory holds.
TEST_F(ClusterTest, ResumeWithoutACompleteCheckpointStartsNothing) {
  const fs::path out = dir_ / "partial";
  fs::create_directories(out / "checkpoints" / "epoch-0002");
  std::ofstream(out / "checkpoints" / "epoch-0002" / "rank-0.pt") << "x";
  Proc launcher(
      [&] {
        std::vector<std::string> a = {"train", "--workers", "2"};
        auto m = Model({"--epochs", "3", "--resume", out.string()});
        a.insert(a.end(), m.begin(), m.end());
        return a;
      }(),
      dir_ / "launcher.log");
  ASSERT_TRUE(launcher.WaitExit(30)) << launcher.log();
  EXPECT_EQ(launcher.exit_code(), 2) << launcher.log();
  EXPECT_THAT(launcher.log(), ::testing::HasSubstr("no manifest.yaml"));
  EXPECT_THAT(launcher.log(), ::testing::Not(::testing::HasSubstr("[")));
  Proc trainer(
      [&] {
        std::vector<std::string> a = {"trainer"};
        auto m = Model({"--resume", out.string(), "--rank", "0", "--world-size",
                        "2", "--coordinator", "127.0.0.1:1"});
        a.insert(a.end(), m.begin(), m.end());
        return a;
      }(),
      dir_ / "trainer.log");
  ASSERT_TRUE(trainer.WaitExit(30)) << trainer.log();
  EXPECT_EQ(trainer.exit_code(), 2) << trainer.log();
  EXPECT_THAT(trainer.log(), ::testing::HasSubstr("no checkpoint to resume"));
}

// Separate-process trainers started with different flags: the message
// names the flag, and the whole job fails at once (the worker that joined
// first does not wait for its timeout, nor is it blamed).
TEST_F(ClusterTest, WorkersWithOtherFlagsAreNamedAndFailAtOnce) {
  const double t0 = Now();
  StartCluster(/*epochs=*/1, {}, {}, {}, {}, {"--lr", "0.01"});
  for (auto& t : trainers_) ASSERT_TRUE(t->WaitExit(60)) << t->log();
  const double seconds = Now() - t0;
  int refused = 0;
  for (auto& t : trainers_) {
    EXPECT_THAT(t->log(), ::testing::ContainsRegex("--lr 0.001 -> 0.01|--lr "
                                                   "0.01 -> 0.001"))
        << t->log();
    EXPECT_THAT(t->log(),
                ::testing::HasSubstr("was started with other flags than the "
                                     "job's first worker"));
    if (t->exit_code() == 2) {
      ++refused;
    } else {
      EXPECT_EQ(t->exit_code(), 3) << t->log();  // failed elsewhere
    }
  }
  EXPECT_EQ(refused, 1);
  ASSERT_TRUE(coordinator_->WaitExit(30)) << coordinator_->log();
  EXPECT_NE(coordinator_->exit_code(), 0);
  // Well inside the trainers' 10 s --timeout after the data loads.
  EXPECT_LT(seconds, 25) << "the first worker waited for its timeout";
}

// Ctrl-C or SIGTERM while the job is still starting (loading the data,
// spawning, waiting for the shards) stops everything with 128 + the
// signal, as later on.
TEST_F(ClusterTest, SignalDuringStartUpExits128PlusSignal) {
  int round = 0;
  for (const double after : {0.1, 0.4, 0.8, 1.5}) {
    for (const int sig : {SIGINT, SIGTERM}) {
      const std::string out = (dir_ / absl::StrCat("run", round++)).string();
      Proc launcher(
          {"train", "--workers", "2", "--data", "collegemsg", "--data-dir",
           SharedData(), "--epochs", "50", "--progress", "lines", "--out", out},
          dir_ / absl::StrCat("launcher", round, ".log"));
      std::this_thread::sleep_for(std::chrono::duration<double>(after));
      launcher.Signal(sig);
      ASSERT_TRUE(launcher.WaitExit(30)) << launcher.log();
      EXPECT_EQ(launcher.exit_code(), 128 + sig)
          << "after " << after << " s: " << launcher.log();
      EXPECT_THAT(launcher.log(),
                  ::testing::Not(::testing::HasSubstr("did not come up")));
      const double end = Now() + 10;
      while (Now() < end && !ProcessesMentioning(out).empty()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
      EXPECT_THAT(ProcessesMentioning(out), ::testing::IsEmpty());
    }
  }
}

// The first child of `parent` whose command line holds every one of
// `words` (-1: none yet).
pid_t ChildWith(pid_t parent, const std::vector<std::string>& words) {
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string stat = ReadFile(e.path() / "stat");
    const size_t close = stat.rfind(')');
    if (close == std::string::npos) continue;
    int ppid = -1;
    if (std::sscanf(stat.c_str() + close + 2, "%*c %d", &ppid) != 1 ||
        ppid != parent) {
      continue;
    }
    std::string cmd = ReadFile(e.path() / "cmdline");
    std::replace(cmd.begin(), cmd.end(), '\0', ' ');
    bool all = true;
    for (const auto& w : words) all = all && cmd.find(w) != std::string::npos;
    if (all) return std::stoi(name);
  }
  return -1;
}

// A process that dies or hangs while the job is still starting ends the
// job within 30 s from the first second, naming that process, with
// nothing left running: a shard or the coordinator must answer its health
// check within 20 s of its start, and a trainer must join within 15 s of
// the first (else the coordinator names it; the healthy trainer is not
// left to time out in its rendezvous and be blamed).
TEST_F(ClusterTest, StartUpFaultsEndTheJobWithin30sNamingTheFaulty) {
  struct Case {
    std::vector<std::string> victim;
    int sig;
    std::string named;
  };
  int round = 0;
  for (const Case& c : std::vector<Case>{
           {{" memstore ", "--shard-id 1 "}, SIGSTOP, "memstore 1 ("},
           {{" memstore ", "--shard-id 1 "}, SIGKILL, "memstore 1 was killed"},
           {{" coordinator "}, SIGSTOP, "the coordinator ("},
           {{" trainer ", "--rank 1 "}, SIGSTOP, "worker 1 did not join"}}) {
    SCOPED_TRACE(absl::StrCat(c.victim[0], c.sig));
    const std::string out = (dir_ / absl::StrCat("run", round++)).string();
    Proc launcher(
        {"train", "--workers", "2", "--data", "collegemsg", "--data-dir",
         SharedData(), "--epochs", "50", "--progress", "lines", "--out", out},
        dir_ / absl::StrCat("launcher", round, ".log"));
    pid_t victim = -1;
    const double appear_by = Now() + 60;
    while (victim < 0 && Now() < appear_by) {
      victim = ChildWith(launcher.pid(), c.victim);
      if (victim < 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    ASSERT_GT(victim, 0) << launcher.log();
    ::kill(victim, c.sig);
    const double t0 = Now();
    ASSERT_TRUE(launcher.WaitExit(60)) << launcher.log();
    const double took = Now() - t0;
    ::kill(victim, SIGCONT);
    EXPECT_NE(launcher.exit_code(), 0) << launcher.log();
    EXPECT_LT(took, 30) << launcher.log();
    EXPECT_THAT(launcher.log(), ::testing::HasSubstr(c.named));
    const double end = Now() + 10;
    while (Now() < end &&
           (!ProcessesMentioning(out).empty() || ::kill(victim, 0) == 0)) {
      waitpid(-1, nullptr, WNOHANG);
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    EXPECT_THAT(ProcessesMentioning(out), ::testing::IsEmpty());
    std::printf("%s %s: the job ended in %.1f s\n", c.victim[0].c_str(),
                strsignal(c.sig), took);
  }
}

INSTANTIATE_TEST_SUITE_P(EachRole, FrozenProcessTest,
                         ::testing::Values("memstore", "coordinator",
                                           "trainer"));

// SIGTERM (or SIGINT, SIGHUP) stops a launched job everywhere; the launcher
// exits 128 + the signal's number (the exit-code scheme). A job with a
// bounded working set leaves no spill store behind in the temporary
// directory.
TEST_F(ClusterTest, TerminatedLauncherStopsEverythingAndExits143) {
  const std::string out = (dir_ / "terminated").string();
  const fs::path tmp = dir_ / "terminated-tmp";
  fs::create_directories(tmp);
  Proc launcher({"train", "--workers", "2", "--data", "collegemsg",
                 "--data-dir", SharedData(), "--epochs", "50", "--progress",
                 "lines", "--out", out, "--memory-cache-bytes", "4000000"},
                dir_ / "terminated.log", {"TMPDIR=" + tmp.string()});
  ASSERT_TRUE(launcher.WaitForLog("epoch 1/50", 120)) << launcher.log();
  // The trainers' spill stores exist while the job runs.
  std::vector<std::string> spills;
  for (const auto& e : fs::directory_iterator(tmp)) {
    spills.push_back(e.path().filename().string());
  }
  ASSERT_THAT(spills,
              ::testing::Contains(::testing::StartsWith("mnemo-spill-")))
      << launcher.log();
  launcher.Signal(SIGTERM);
  ASSERT_TRUE(launcher.WaitExit(30)) << launcher.log();
  EXPECT_EQ(launcher.exit_code(), 143) << launcher.log();
  EXPECT_THAT(ProcessesMentioning(out), ::testing::IsEmpty());
  EXPECT_TRUE(fs::is_empty(tmp)) << "left in " << tmp;
}

// A launcher killed outright (SIGKILL: no handler, no destructor runs)
// still leaves no spill store and no temporary job directory behind: its
// processes end with it (their parent-death signal) and the directories go
// when it does.
TEST_F(ClusterTest, KilledLauncherLeavesNoScratchBehind) {
  const fs::path tmp = dir_ / "killed-tmp";
  fs::create_directories(tmp);
  // No --out: the shards' directories are the job's temporary ones.
  Proc launcher({"train", "--workers", "2", "--data", "collegemsg",
                 "--data-dir", SharedData(), "--epochs", "50", "--progress",
                 "lines", "--memory-cache-bytes", "4000000"},
                dir_ / "killed.log", {"TMPDIR=" + tmp.string()});
  ASSERT_TRUE(launcher.WaitForLog("epoch 1/50", 120)) << launcher.log();
  std::vector<std::string> made;
  for (const auto& e : fs::directory_iterator(tmp)) {
    made.push_back(e.path().filename().string());
  }
  ASSERT_THAT(made, ::testing::Contains(::testing::StartsWith("mnemo-spill-")))
      << launcher.log();
  ASSERT_THAT(made, ::testing::Contains(::testing::StartsWith("mnemo-job-")))
      << launcher.log();
  launcher.Signal(SIGKILL);
  ASSERT_TRUE(launcher.WaitExit(30)) << launcher.log();
  const double end = Now() + 30;
  while (Now() < end && !fs::is_empty(tmp)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(tmp)) {
    left.push_back(e.path().filename().string());
  }
  EXPECT_THAT(left, ::testing::IsEmpty()) << "left in " << tmp;
}

// A short job's flags: 5000 events per epoch, more epochs than a test
// waits for.
std::vector<std::string> LongJob(const std::vector<std::string>& more) {
  std::vector<std::string> args = {"train",      "--workers",    "2",
                                   "--data",     "collegemsg",   "--data-dir",
                                   SharedData(), "--max-events", "5000",
                                   "--epochs",   "1000",         "--progress",
                                   "lines"};
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

// The launcher's verdict on a failed job: its line "mnemo train: WHAT;
// stopping every process" (empty: none).
std::string LauncherVerdict(const std::string& log) {
  const size_t end = log.find("; stopping every process");
  if (end == std::string::npos) return "";
  const size_t start = log.rfind("\nmnemo train: ", end);
  return start == std::string::npos ? "" : log.substr(start + 1, end - start);
}

// Issue 53 item 8: a trainer frozen mid-training (SIGSTOP) is the likely
// cause the launcher names, not the coordinator, which names the worker it
// lost and then shuts down (answering NOT_SERVING, then refusing
// connections: alive, not hung).
TEST_F(ClusterTest, AStoppedTrainerIsTheCauseTheLauncherNames) {
  const std::string out = (dir_ / "stopped").string();
  Proc launcher(LongJob({"--out", out}), dir_ / "stopped.log");
  ASSERT_TRUE(launcher.WaitForLog("epoch 1/1000", 120)) << launcher.log();
  const pid_t victim = ChildWith(launcher.pid(), {" trainer ", "--rank 1 "});
  ASSERT_GT(victim, 0) << launcher.log();
  ::kill(victim, SIGSTOP);
  const bool exited = launcher.WaitExit(60);
  ::kill(victim, SIGCONT);
  ASSERT_TRUE(exited) << launcher.log();
  EXPECT_NE(launcher.exit_code(), 0) << launcher.log();
  const std::string last = LauncherVerdict(launcher.log());
  EXPECT_THAT(last, ::testing::HasSubstr(
                        "likely cause: trainer 1 is stopped (SIGSTOP?)"))
      << launcher.log();
  EXPECT_THAT(last, ::testing::Not(::testing::HasSubstr("the coordinator (")))
      << launcher.log();
}

// Issue 53 item 9: a job without --out keeps its shards' directories in
// $TMPDIR/mnemo-job-PID; they go when the job is stopped by SIGTERM and
// when it fails (a shard killed), not only when it finishes.
TEST_F(ClusterTest, AJobWithoutOutLeavesNothingInTmpdirWhenItFailsOrIsStopped) {
  for (const bool terminate : {true, false}) {
    SCOPED_TRACE(terminate ? "SIGTERM" : "a shard killed");
    const fs::path tmp = dir_ / (terminate ? "tmp-term" : "tmp-fail");
    fs::create_directories(tmp);
    Proc launcher(LongJob({}), dir_ / (terminate ? "term.log" : "fail.log"),
                  {"TMPDIR=" + tmp.string()});
    ASSERT_TRUE(launcher.WaitForLog("epoch 1/1000", 120)) << launcher.log();
    ASSERT_TRUE(fs::exists(tmp / absl::StrCat("mnemo-job-", launcher.pid())))
        << launcher.log();
    if (terminate) {
      launcher.Signal(SIGTERM);
    } else {
      const pid_t shard =
          ChildWith(launcher.pid(), {" memstore ", "--shard-id 1 "});
      ASSERT_GT(shard, 0);
      ::kill(shard, SIGKILL);
    }
    ASSERT_TRUE(launcher.WaitExit(60)) << launcher.log();
    EXPECT_EQ(launcher.exit_code(), terminate ? 143 : 1) << launcher.log();
    std::vector<std::string> left;
    for (const auto& e : fs::directory_iterator(tmp)) {
      left.push_back(e.path().filename().string());
    }
    EXPECT_THAT(left, ::testing::IsEmpty()) << launcher.log();
  }
}

// Issue 53 item 9: checkpoint files being written when a job is stopped
// (*.pt.tmp, which a trainer killed mid-write leaves) are removed once
// every process has exited, saying so; complete checkpoints stay.
TEST_F(ClusterTest, AStoppedJobRemovesItsUnfinishedCheckpointFiles) {
  const fs::path out = dir_ / "unfinished";
  Proc launcher(LongJob({"--out", out.string()}), dir_ / "unfinished.log");
  ASSERT_TRUE(launcher.WaitForLog("epoch 2/1000", 120)) << launcher.log();
  const fs::path checkpoints = out / "checkpoints";
  ASSERT_TRUE(fs::is_directory(checkpoints)) << launcher.log();
  // What a trainer stopped in the middle of writing leaves.
  const fs::path unfinished = checkpoints / "epoch-0999.pt.tmp";
  std::ofstream(unfinished) << "half a checkpoint";
  launcher.Signal(SIGTERM);
  ASSERT_TRUE(launcher.WaitExit(60)) << launcher.log();
  EXPECT_EQ(launcher.exit_code(), 143) << launcher.log();
  EXPECT_FALSE(fs::exists(unfinished)) << launcher.log();
  EXPECT_THAT(launcher.log(),
              ::testing::HasSubstr("removed " + unfinished.string()));
  std::vector<std::string> kept;
  for (const auto& e : fs::recursive_directory_iterator(checkpoints)) {
    const std::string name = e.path().filename().string();
    EXPECT_FALSE(absl::EndsWith(name, ".pt.tmp")) << e.path();
    if (absl::EndsWith(name, ".pt")) kept.push_back(name);
  }
  EXPECT_THAT(kept, ::testing::Not(::testing::IsEmpty()));
}

}  // namespace
}  // namespace mnemo
