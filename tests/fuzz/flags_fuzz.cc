// Fuzzes the command-line flag parser (services/cli/flags.h FlagSet) with one
// flag of each kind and a --config file.
//
// Input: argv tokens separated by '\n'; after the first NUL byte, the
// content of the config file. A token "@" or "--config=@" names that file;
// inputs naming any other config file are skipped (the parser would read
// whatever file they name). Every input must give a status.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "services/cli/flags.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

using mnemo::fuzz::Fail;

void WriteSeeds(const std::string& dir) {
  using namespace std::string_literals;  // NOLINT(build/namespaces)
  const std::string seeds[] = {
      "--name=x\n--count\n3\n--big=-9000000000\n--seed=18446744073709551615",
      "--rate=0.25\n--verbose\n--no-dry-run\n--tag=a\n--tag\nb\npos",
      "--dry_run=false\n--count=+7\n--\n--name\n-h",
      "--help",
      "--config=@\n--count=2\0count: 5\nname: 'from config'\nrate: 1e3\n"s,
      "--config\n@\n--verbose=true\0tag: a\ntag: b\n"s,
      "--config\n@\0config: other.yaml\n"s,
      "--count=99999999999\n--rate=nan\n--verbose=maybe\n--unknown=1",
      "--name\n--no-name\n--no-verbose=1\n--=\n---\n-",
  };
  int i = 0;
  for (const std::string& s : seeds) mnemo::fuzz::WriteSeed(dir, i++, s);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  mnemo::fuzz::MaybeWriteSeedsAndExit(WriteSeeds);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  std::string_view config;
  if (size_t nul = in.find('\0'); nul != std::string_view::npos) {
    config = in.substr(nul + 1);
    in = in.substr(0, nul);
  }
  static mnemo::fuzz::MemFile* config_file =
      new mnemo::fuzz::MemFile("config.yaml");
  const std::string& config_path = config_file->path();
  std::vector<std::string> tokens = {"mnemo", "fuzz"};
  for (size_t start = 0; start <= in.size();) {
    size_t end = in.find('\n', start);
    if (end == std::string_view::npos) end = in.size();
    std::string token(in.substr(start, end - start));
    if (tokens.back() == "--config" && token != "@") return 0;  // a file
    if (token.rfind("--config=", 0) == 0 && token != "--config=@") return 0;
    if (token == "@" || token == "--config=@") {
      token.replace(token.size() - 1, 1, config_path);
    }
    tokens.push_back(std::move(token));
    start = end + 1;
  }
  config_file->Write(config);

  std::string name = "default";
  int count = 1;
  int64_t big = -1;
  uint64_t seed = 0;
  double rate = 0.5;
  bool verbose = false, dry_run = true;
  std::vector<std::string> tags;
  std::string config_flag;
  mnemo::FlagSet flags("fuzz", "The fuzz target's flags.");
  flags.String("name", &name, "a string");
  flags.Int("count", &count, "an int");
  flags.Int64("big", &big, "an int64");
  flags.Uint64("seed", &seed, "a uint64");
  flags.Double("rate", &rate, "a double");
  flags.Bool("verbose", &verbose, "a bool");
  flags.Bool("dry-run", &dry_run, "a bool with a dash");
  flags.StringList("tag", &tags, "a repeatable string");
  flags.String("config", &config_flag, "a YAML file of flag values");

  std::vector<char*> argv;
  for (std::string& t : tokens) argv.push_back(t.data());
  argv.push_back(nullptr);
  std::vector<std::string> positional;
  bool help = false;
  absl::Status s = flags.Parse(static_cast<int>(tokens.size()), argv.data(), 2,
                               &positional, &help);
  if (!s.ok() && s.code() != absl::StatusCode::kInvalidArgument)
    Fail("unexpected error code: " + s.ToString());
  if (help && flags.Help().empty()) Fail("empty help");
  if (positional.size() > tokens.size()) Fail("more positionals than tokens");
  for (const char* f : {"name", "count", "big", "seed", "rate", "verbose",
                        "dry-run", "tag", "config"}) {
    (void)flags.WasSet(f);
  }
  return 0;
}
