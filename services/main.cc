// mnemo: one binary, one subcommand per role.
#include <cstdio>
#include <cstring>
#include <string>

#include "services/commands.h"
#include "trainer/runtime/summary.h"

namespace {
constexpr char kUsage[] =
    "usage: mnemo <command> [flags]\n\n"
    "Commands:\n"
    "  train     train TGN or JODIE on an event stream (all roles in one "
    "process)\n"
    "  data      inspect a dataset or event file\n"
    "  version   print the version\n\n"
    "Run 'mnemo <command> --help' for a command's flags.\n";
}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") ||
      !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "help")) {
    std::printf("%s", kUsage);
    return argc < 2 ? 2 : 0;
  }
  const std::string cmd = argv[1];
  if (cmd == "train") return mnemo::TrainMain(argc, argv, 2);
  if (cmd == "data") return mnemo::DataMain(argc, argv, 2);
  if (cmd == "version" || cmd == "--version") {
    std::printf("mnemo %s\n", mnemo::runtime::kVersion);
    return 0;
  }
  std::fprintf(stderr, "mnemo: unknown command '%s'\n\n%s", cmd.c_str(),
               kUsage);
  return 2;
}
