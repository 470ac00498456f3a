#include "services/cli/flags.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "util/status_matchers.h"
#include "util/yaml.h"

namespace mnemo {
namespace {

struct Args {
  explicit Args(std::vector<std::string> a) : storage(std::move(a)) {
    for (auto& s : storage) ptrs.push_back(s.data());
  }
  int argc() { return static_cast<int>(ptrs.size()); }
  char** argv() { return ptrs.data(); }
  std::vector<std::string> storage;
  std::vector<char*> ptrs;
};

struct Fixture {
  FlagSet flags{"train", "usage"};
  int epochs = 10;
  int64_t batch = 600;
  double lr = 1e-4;
  bool skip = false;
  std::string model = "tgn", config;
  Fixture() {
    flags.Int("epochs", &epochs, "epochs");
    flags.Int64("batch-size", &batch, "batch");
    flags.Double("lr", &lr, "lr");
    flags.Bool("skip-bad-lines", &skip, "skip");
    flags.String("model", &model, "model");
    flags.String("config", &config, "config");
  }
  absl::Status Parse(std::vector<std::string> a,
                     std::vector<std::string>* pos = nullptr) {
    a.insert(a.begin(), {"mnemo", "train"});
    Args args(a);
    std::vector<std::string> p;
    bool help;
    return flags.Parse(args.argc(), args.argv(), 2, pos ? pos : &p, &help);
  }
};

TEST(FlagsTest, ParsesForms) {
  Fixture f;
  std::vector<std::string> pos;
  ASSERT_THAT(f.Parse({"--epochs", "3", "--batch-size=200", "--lr", "0.01",
                       "--skip-bad-lines", "extra"},
                      &pos),
              IsOk());
  EXPECT_EQ(f.epochs, 3);
  EXPECT_EQ(f.batch, 200);
  EXPECT_DOUBLE_EQ(f.lr, 0.01);
  EXPECT_TRUE(f.skip);
  EXPECT_EQ(pos, std::vector<std::string>{"extra"});
  ASSERT_THAT(f.Parse({"--no-skip-bad-lines", "--batch_size", "5"}), IsOk());
  EXPECT_FALSE(f.skip);
  EXPECT_EQ(f.batch, 5);
}

TEST(FlagsTest, ErrorsNameTheFlag) {
  Fixture f;
  EXPECT_THAT(f.Parse({"--epochs", "three"}),
              StatusIs(absl::StatusCode::kInvalidArgument, "--epochs"));
  EXPECT_THAT(
      f.Parse({"--bogus", "1"}),
      StatusIs(absl::StatusCode::kInvalidArgument, "unknown flag --bogus"));
  EXPECT_THAT(f.Parse({"--model"}),
              StatusIs(absl::StatusCode::kInvalidArgument, "needs a value"));
}

enum class Color { kRed, kGreen };
absl::StatusOr<Color> ParseColor(std::string_view s) {
  if (s == "red") return Color::kRed;
  if (s == "green") return Color::kGreen;
  return absl::InvalidArgumentError(
      absl::StrCat("--color must be red or green, got '", std::string(s), "'"));
}
std::string_view ColorName(Color c) {
  return c == Color::kRed ? "red" : "green";
}

// A choice among names is parsed as it is read (command line or --config
// file): a bad one is an error naming the flag once, and where it came from.
TEST(FlagsTest, ChoicesAreParsedWhereTheTextEnters) {
  Fixture f;
  Color color = Color::kRed;
  f.flags.Choice("color", &color, ParseColor, ColorName, "color");
  EXPECT_THAT(f.flags.Help(), testing::HasSubstr("--color <string>"));
  EXPECT_THAT(f.flags.Help(), testing::HasSubstr("(default: red)"));
  ASSERT_THAT(f.Parse({"--color", "green"}), IsOk());
  EXPECT_EQ(color, Color::kGreen);
  EXPECT_THAT(f.Parse({"--color=blue"}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "command line: --color must be red or green, got "
                       "'blue'"));
  EXPECT_EQ(color, Color::kGreen);  // unchanged
  auto path = std::filesystem::temp_directory_path() /
              ("mnemo_choice_" + std::to_string(getpid()) + ".yaml");
  std::ofstream(path) << "color: red\n";
  ASSERT_THAT(f.Parse({"--config", path.string()}), IsOk());
  EXPECT_EQ(color, Color::kRed);
  std::ofstream(path) << "epochs: 2\ncolor: blue\n";
  EXPECT_THAT(
      f.Parse({"--config", path.string()}),
      StatusIs(absl::StatusCode::kInvalidArgument,
               path.string() + ": --color must be red or green, got 'blue'"));
  std::filesystem::remove(path);
  // A parser whose message does not name the flag gets it named.
  int odd = 1;
  f.flags.Custom(
      "odd", "1",
      [&odd](const std::string& s) -> absl::Status {
        if (s != "1" && s != "3") {
          return absl::InvalidArgumentError("must be 1 or 3");
        }
        odd = s == "1" ? 1 : 3;
        return absl::OkStatus();
      },
      "odd");
  EXPECT_THAT(f.Parse({"--odd", "2"}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "command line: --odd: must be 1 or 3"));
  ASSERT_THAT(f.Parse({"--odd", "3"}), IsOk());
  EXPECT_EQ(odd, 3);
}

TEST(FlagsTest, ConfigFileIsOverriddenByCommandLine) {
  auto path = std::filesystem::temp_directory_path() /
              ("mnemo_flags_" + std::to_string(getpid()) + ".yaml");
  {
    std::ofstream out(path);
    out << "# reference setting\n---\nepochs: 3\nbatch_size: 200  # TGN\n"
           "model: \"jodie\"\nlr: 0.5\n";
  }
  Fixture f;
  ASSERT_THAT(f.Parse({"--config", path.string(), "--lr", "0.25"}), IsOk());
  EXPECT_EQ(f.epochs, 3);
  EXPECT_EQ(f.batch, 200);
  EXPECT_EQ(f.model, "jodie");
  EXPECT_DOUBLE_EQ(f.lr, 0.25);
  {
    std::ofstream out(path);
    out << "epochs: 3\nbatchsize: 200\n";
  }
  Fixture g;
  EXPECT_THAT(g.Parse({"--config=" + path.string()}),
              StatusIs(absl::StatusCode::kInvalidArgument, "--batchsize"));
  std::filesystem::remove(path);
  Fixture h;
  EXPECT_THAT(h.Parse({"--config", "/nonexistent/x.yaml"}),
              StatusIs(absl::StatusCode::kNotFound, "/nonexistent/x.yaml"));
}

// What `mnemo train --workers N` hands its trainers: its own arguments
// minus the launcher's flags, in every form.
TEST(FlagsTest, ForwardDropsFlagsInEveryForm) {
  Fixture launcher;
  int workers = 1;
  bool pin = false;
  std::string metrics;
  launcher.flags.Int("workers", &workers, "workers");
  launcher.flags.Bool("pin", &pin, "pin");
  launcher.flags.String("metrics-listen", &metrics, "metrics");
  const std::vector<std::string> drop = {"workers", "pin", "metrics-listen"};
  Args args({"mnemo",       "train",
             "--workers",   "2",
             "--no-pin",    "--config",
             "c.yaml",      "--epochs",
             "5",           "--pin=true",
             "--model",     "tgn",
             "--workers=3", "--metrics_listen=:9100",
             "--pin",       "--metrics-listen",
             ":9100",       "--skip-bad-lines",
             "--",          "--pin"});
  EXPECT_THAT(
      launcher.flags.Forward(args.argc(), args.argv(), 2, drop),
      ::testing::ElementsAre("--config", "c.yaml", "--epochs", "5", "--model",
                             "tgn", "--skip-bad-lines", "--", "--pin"));
  // A "--" that ends the arguments goes: the launcher appends its own
  // flags, which must not become positional arguments.
  Args trailing({"mnemo", "train", "--epochs", "5", "--workers", "2", "--"});
  EXPECT_THAT(launcher.flags.Forward(trailing.argc(), trailing.argv(), 2, drop),
              ::testing::ElementsAre("--epochs", "5"));
}

// One config file for the launcher and its trainers: the trainers skip the
// launcher's keys, and only those.
TEST(FlagsTest, IgnoredConfigKeysAreSkipped) {
  auto path = std::filesystem::temp_directory_path() /
              ("mnemo_shared_" + std::to_string(getpid()) + ".yaml");
  {
    std::ofstream out(path);
    out << "workers: 2\npin: true\nbatch_size: 200\nmodel: jodie\n";
  }
  Fixture trainer;
  EXPECT_THAT(trainer.Parse({"--config", path.string()}),
              StatusIs(absl::StatusCode::kInvalidArgument, "--workers"));
  Fixture shared;
  shared.flags.IgnoreInConfig({"workers", "pin"});
  ASSERT_THAT(shared.Parse({"--config", path.string(), "--epochs", "5"}),
              IsOk());
  EXPECT_EQ(shared.batch, 200);
  EXPECT_EQ(shared.model, "jodie");
  EXPECT_EQ(shared.epochs, 5);
  // On the command line they are still unknown.
  Fixture strict;
  strict.flags.IgnoreInConfig({"workers"});
  EXPECT_THAT(strict.Parse({"--workers", "2"}),
              StatusIs(absl::StatusCode::kInvalidArgument, "--workers"));
  std::filesystem::remove(path);
}

TEST(YamlTest, RejectsWhatItCannotRead) {
  EXPECT_THAT(ParseFlatYaml("a: 1\n  b: 2\n", "c.yaml"),
              StatusIs(absl::StatusCode::kInvalidArgument, "c.yaml:2"));
  EXPECT_THAT(ParseFlatYaml("a: 1\n- x\n", "c.yaml"),
              StatusIs(absl::StatusCode::kInvalidArgument, "c.yaml:2"));
  EXPECT_THAT(ParseFlatYaml("a: 1\na: 2\n", "c.yaml"),
              StatusIs(absl::StatusCode::kInvalidArgument, "duplicate"));
  EXPECT_THAT(ParseFlatYaml("a:\n", "c.yaml"),
              StatusIs(absl::StatusCode::kInvalidArgument, "no value"));
  EXPECT_THAT(ParseFlatYaml("just text\n", "c.yaml"),
              StatusIs(absl::StatusCode::kInvalidArgument, "key: value"));
  auto ok = ParseFlatYaml("x: 'a # not a comment'\ny: 2 # comment\n", "c");
  ASSERT_THAT(ok, IsOk());
  EXPECT_EQ((*ok)[0].second, "a # not a comment");
  EXPECT_EQ((*ok)[1].second, "2");
}

// Ports above 65535 would wrap in gRPC and the kernel (70001 listens on
// 4465): a usage error naming the flag and the value.
TEST(FlagsTest, PortsOutsideTheirRangeAreRefused) {
  FlagSet flags("memstore", "usage");
  std::string listen, metrics, memstores;
  flags.HostPort("listen", &listen, "listen");
  flags.HostPort("metrics-listen", &metrics, "metrics");
  flags.HostPortList("memstores", &memstores, "memstores");
  auto parse = [&](std::vector<std::string> a) {
    a.insert(a.begin(), {"mnemo", "memstore"});
    Args args(a);
    std::vector<std::string> p;
    bool help;
    return flags.Parse(args.argc(), args.argv(), 2, &p, &help);
  };
  EXPECT_THAT(parse({"--listen", "127.0.0.1:70001"}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "--listen: port 70001 of '127.0.0.1:70001' is not in "
                       "[0, 65535]"));
  EXPECT_THAT(parse({"--listen=:65536"}),
              StatusIs(absl::StatusCode::kInvalidArgument, "65536"));
  EXPECT_THAT(parse({"--listen", "127.0.0.1:99999999999999999999"}),
              StatusIs(absl::StatusCode::kInvalidArgument, "not a number"));
  EXPECT_THAT(parse({"--listen", "127.0.0.1:-1"}),
              StatusIs(absl::StatusCode::kInvalidArgument, "not a number"));
  EXPECT_THAT(parse({"--listen", "127.0.0.1:http"}),
              StatusIs(absl::StatusCode::kInvalidArgument, "not a number"));
  EXPECT_THAT(parse({"--listen", "localhost"}),
              StatusIs(absl::StatusCode::kInvalidArgument, "no port"));
  EXPECT_THAT(parse({"--metrics-listen", "0.0.0.0:123456"}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "--metrics-listen: port 123456"));
  EXPECT_THAT(parse({"--memstores", "a:7000,b:70000"}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "--memstores: port 70000 of 'b:70000'"));
  // A client address needs a real port.
  EXPECT_THAT(parse({"--memstores", "a:0"}),
              StatusIs(absl::StatusCode::kInvalidArgument, "[1, 65535]"));
  // What the flags take.
  for (const char* ok :
       {"127.0.0.1:0", ":7000", "7000", "0.0.0.0:65535", "[::1]:50051",
        "dns:///memstore-0.memstore:7000", "unix:/tmp/socket", "*:9100"}) {
    EXPECT_THAT(parse({"--listen", ok}), IsOk()) << ok;
    EXPECT_EQ(listen, ok);
  }
  EXPECT_THAT(parse({"--memstores", "memstore-0:7000,memstore-1:7000"}),
              IsOk());
  EXPECT_THAT(parse({"--metrics-listen="}), IsOk());  // off
  EXPECT_TRUE(metrics.empty());
}

// A UTF-8 byte-order mark before the first key (Windows editors write one)
// is skipped: it made the first key unknown ("unknown flag
// --\xEF\xBB\xBFepochs").
TEST(YamlTest, Utf8ByteOrderMarkIsSkipped) {
  auto parsed = ParseFlatYaml(
      "\xEF\xBB\xBF"
      "epochs: 3\nlr: 0.5\n",
      "c.yaml");
  ASSERT_THAT(parsed, IsOk());
  ASSERT_EQ(parsed->size(), 2u);
  EXPECT_EQ((*parsed)[0].first, "epochs");
  EXPECT_EQ((*parsed)[0].second, "3");
  EXPECT_THAT(ParseFlatYaml(std::string("\xFF\xFE"
                                        "e\0",
                                        4),
                            "c.yaml"),
              StatusIs(absl::StatusCode::kInvalidArgument, "UTF-16"));
  // Through a --config file, as users hit it.
  auto path = std::filesystem::temp_directory_path() /
              ("mnemo_bom_" + std::to_string(getpid()) + ".yaml");
  std::ofstream(path, std::ios::binary) << "\xEF\xBB\xBF"
                                           "epochs: 4\r\nlr: 0.5\r\n";
  Fixture f;
  EXPECT_THAT(f.Parse({"--config", path.string()}), IsOk());
  EXPECT_EQ(f.epochs, 4);
  EXPECT_DOUBLE_EQ(f.lr, 0.5);
  std::filesystem::remove(path);
}

TEST(FlagsTest, HelpListsFlagsWithDefaults) {
  Fixture f;
  std::string h = f.flags.Help();
  EXPECT_THAT(h, testing::HasSubstr("--batch-size <int>"));
  EXPECT_THAT(h, testing::HasSubstr("(default: 600)"));
  EXPECT_THAT(h, testing::HasSubstr("(default: false)"));
  // A boolean on by default says how to turn it off.
  bool on = true;
  f.flags.Bool("mmap-reads", &on, "mmap");
  EXPECT_THAT(
      f.flags.Help(),
      testing::HasSubstr("(default: true; --no-mmap-reads turns it off)"));
}

}  // namespace
}  // namespace mnemo
