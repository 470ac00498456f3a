// Shared by the tests that run the real `mnemo` binary as users do
// (cli_test.cc, cli_resume_test.cc): the command, its exit code and output.
#ifndef MNEMO_TESTS_UNIT_SERVICES_CLI_TEST_UTIL_H_
#define MNEMO_TESTS_UNIT_SERVICES_CLI_TEST_UTIL_H_

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace mnemo::cli_testing {

struct Result {
  int code = -1;  // the exit code (-1: killed by a signal)
  std::string output;
};

// Runs the shell command line `cmd` with stderr into the output.
inline Result Shell(const std::string& cmd) {
  Result r;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0)
    r.output.append(buf.data(), n);
  int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// Runs `mnemo ARGS` ($MNEMO_BIN) with stderr into the output. `env`:
// VAR=value assignments for the command's environment.
inline Result Mnemo(const std::string& args, const std::string& env = "") {
  const char* bin = std::getenv("MNEMO_BIN");
  return Shell(env + " " + std::string(bin ? bin : "mnemo") + " " + args);
}

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

inline std::string SharedData() {
  const char* shared = std::getenv("MNEMO_SHARED_DATA");
  return shared ? shared : "../shared/data";
}

class CliTest : public testing::Test {
 protected:
  // One quick epoch of CollegeMsg's first 2,000 events.
  static std::string SmallTrain() {
    return "train --data collegemsg --data-dir " + SharedData() +
           " --max-events 2000 --epochs 1 --threads 1 --progress none "
           "--memory-dim 16 --time-dim 16 --embedding-dim 16";
  }
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("mnemo_cli_" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override {
    // A tmpfs a failed test left mounted (the full-disk tests).
    std::system(
        ("umount " + (dir_ / "disk").string() + " 2>/dev/null").c_str());
    std::filesystem::remove_all(dir_);
  }
  std::string Write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name) << text;
    return (dir_ / name).string();
  }
  std::filesystem::path dir_;
};

}  // namespace mnemo::cli_testing

#endif  // MNEMO_TESTS_UNIT_SERVICES_CLI_TEST_UTIL_H_
