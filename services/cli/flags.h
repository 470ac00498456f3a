// Command-line flags for the mnemo subcommands.
//
// Our own small parser rather than absl flags: mnemo's documented flag names
// use dashes (--batch-size), which absl flags cannot spell, and each
// subcommand has its own flag set and --help. A YAML --config file (flat
// "name: value" lines) sets the same flags; the command line overrides it.
#ifndef MNEMO_SERVICES_CLI_FLAGS_H_
#define MNEMO_SERVICES_CLI_FLAGS_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace mnemo {

class FlagSet {
 public:
  FlagSet(std::string command, std::string summary)
      : command_(std::move(command)), summary_(std::move(summary)) {}

  void String(const std::string& name, std::string* value,
              const std::string& help);
  void Int(const std::string& name, int* value, const std::string& help);
  void Int64(const std::string& name, int64_t* value, const std::string& help);
  // An integer whose default the help shows as `default_text` (a default
  // resolved later, e.g. "derived").
  void Int64(const std::string& name, int64_t* value, const std::string& help,
             const std::string& default_text);
  void Uint64(const std::string& name, uint64_t* value,
              const std::string& help);
  void Double(const std::string& name, double* value, const std::string& help);
  void Bool(const std::string& name, bool* value, const std::string& help);
  // A network address "host:port" ("[v6addr]:port", ":port" or "port" for
  // 127.0.0.1:port) whose port is an integer in [min_port, 65535]: a port
  // that would wrap (70001) is a usage error naming the flag and the value
  // (CheckHostPort). Empty is accepted (the flag's "off" or default).
  void HostPort(const std::string& name, std::string* value,
                const std::string& help, int min_port = 0);
  // A comma-separated list of such addresses, each with a port >= 1.
  void HostPortList(const std::string& name, std::string* value,
                    const std::string& help);
  // A repeatable string flag: every occurrence appends.
  void StringList(const std::string& name, std::vector<std::string>* value,
                  const std::string& help);
  // A flag whose text `parse` turns into a value (an enum, say) as it is
  // read, from the command line or a --config file: an error `parse`
  // returns is a usage error, prefixed with where the text came from (and
  // with "--name: " unless the message starts with "--name " already).
  // Help() shows `default_text` (none when empty).
  void Custom(const std::string& name, const std::string& default_text,
              std::function<absl::Status(const std::string&)> parse,
              const std::string& help);
  // A choice among names: `parse` maps the text to a value of `*value`'s
  // type (a StatusOr, INVALID_ARGUMENT naming the flag and the accepted
  // names otherwise: "--protocol must be tgn-reference or mnemo, got 'x'"),
  // `name_of` maps the default back to its name for Help().
  template <typename T, typename ParseFn, typename NameFn>
  void Choice(const std::string& name, T* value, ParseFn parse, NameFn name_of,
              const std::string& help) {
    Custom(
        name, std::string(name_of(*value)),
        [value, parse](const std::string& s) -> absl::Status {
          auto parsed = parse(s);
          if (!parsed.ok()) return parsed.status();
          *value = *parsed;
          return absl::OkStatus();
        },
        help);
  }

  // Parses argv[first..argc). "--name=value", "--name value", "--flag" /
  // "--no-flag" for booleans, "--" ends flags. Non-flag arguments go to
  // `positional`. Sets `*help` on --help/-h. If a --config FILE flag is
  // registered and given, its values are applied first.
  absl::Status Parse(int argc, char** argv, int first,
                     std::vector<std::string>* positional, bool* help);

  // Parse() for a subcommand's main(): on --help prints Help() and returns
  // 0; on a usage error (or more than `max_positional` non-flag arguments)
  // prints "mnemo COMMAND: what" to stderr and returns 2; otherwise returns
  // nullopt and the command goes on.
  std::optional<int> ParseOrExitCode(int argc, char** argv, int first,
                                     std::vector<std::string>* positional,
                                     size_t max_positional = 0);

  // Sets one flag from text; `origin` names where it came from for errors.
  absl::Status Set(const std::string& name, const std::string& value,
                   const std::string& origin);
  bool WasSet(const std::string& name) const;
  std::string Help() const;

  // The arguments argv[first..argc) minus the flags named in `drop`, in
  // every form ("--name value", "--name=value", "--no-name"): what a child
  // command without those flags gets from a parent that parsed them.
  // Everything else, a --config FILE included, is kept as given; a "--"
  // with nothing after it goes (the caller may append flags).
  std::vector<std::string> Forward(int argc, char** argv, int first,
                                   const std::vector<std::string>& drop) const;

  // Keys a --config file may carry for another command (one file for
  // `mnemo train --workers N` and its trainers): skipped when read here.
  void IgnoreInConfig(const std::vector<std::string>& keys);

 private:
  struct Flag {
    std::string name, help, type, default_text;
    bool is_bool = false;
    bool set = false;
    std::function<absl::Status(const std::string&)> parse;
  };
  Flag* Find(const std::string& name);
  const Flag* Find(const std::string& name) const;
  void Add(Flag flag);

  std::string command_, summary_;
  std::vector<Flag> flags_;
  std::vector<std::string> ignored_in_config_;
};

// OK when `address` is "host:port", "[v6addr]:port", ":port" or "port"
// with a decimal port in [min_port, 65535] (a scheme such as "dns:///" or
// "ipv4:" is skipped; "unix:" addresses have no port and pass);
// INVALID_ARGUMENT naming the address otherwise. gRPC and the kernel
// would take the port modulo 65536 (70001 listens on 4465).
absl::Status CheckHostPort(const std::string& address, int min_port = 0);

// OK when `seconds` (the value of `flag`, e.g. "--timeout") is in (0,
// kMaxSeconds]; INVALID_ARGUMENT naming the flag and the range otherwise.
// Far larger values overflow gRPC's deadlines into "Deadline Exceeded".
inline constexpr double kMaxSeconds = 86400;  // a day
absl::Status CheckSeconds(const std::string& flag, double seconds);

// An integer from the environment (RANK, WORLD_SIZE, MASTER_PORT...):
// `fallback` when unset or empty; INVALID_ARGUMENT naming the variable and
// its value when it is not an integer in [min, max].
absl::StatusOr<int64_t> IntFromEnv(const char* name, int64_t fallback,
                                   int64_t min, int64_t max);

}  // namespace mnemo

#endif  // MNEMO_SERVICES_CLI_FLAGS_H_
