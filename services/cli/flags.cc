#include "services/cli/flags.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "util/yaml.h"

namespace mnemo {

void FlagSet::Add(Flag flag) { flags_.push_back(std::move(flag)); }

namespace {

// A flag's name as registered: config keys may use '_' for '-'.
std::string FlagName(std::string name) {
  for (char& c : name) {
    if (c == '_') c = '-';
  }
  return name;
}

}  // namespace

FlagSet::Flag* FlagSet::Find(const std::string& name) {
  return const_cast<Flag*>(std::as_const(*this).Find(name));
}

const FlagSet::Flag* FlagSet::Find(const std::string& name) const {
  const std::string n = FlagName(name);
  for (const Flag& f : flags_) {
    if (f.name == n) return &f;
  }
  return nullptr;
}

bool FlagSet::WasSet(const std::string& name) const {
  for (const Flag& f : flags_) {
    if (f.name == name) return f.set;
  }
  return false;
}

void FlagSet::String(const std::string& name, std::string* v,
                     const std::string& help) {
  Add({name, help, "string", *v, false, false, [v](const std::string& s) {
         *v = s;
         return absl::OkStatus();
       }});
}

void FlagSet::Custom(const std::string& name, const std::string& default_text,
                     std::function<absl::Status(const std::string&)> parse,
                     const std::string& help) {
  Add({name, help, "string", default_text, false, false, std::move(parse)});
}

void FlagSet::StringList(const std::string& name, std::vector<std::string>* v,
                         const std::string& help) {
  Add({name, help, "string, repeatable", "", false, false,
       [v](const std::string& s) {
         v->push_back(s);
         return absl::OkStatus();
       }});
}

absl::Status CheckSeconds(const std::string& flag, double seconds) {
  if (seconds > 0 && seconds <= kMaxSeconds) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      flag, " must be in (0, ", kMaxSeconds, "] seconds, got ", seconds));
}

absl::Status CheckHostPort(const std::string& address, int min_port) {
  std::string a = address;
  if (absl::StartsWith(a, "unix:") || absl::StartsWith(a, "unix-abstract:")) {
    return absl::OkStatus();
  }
  for (const char* scheme : {"dns:///", "dns:", "ipv4:", "ipv6:"}) {
    if (absl::StartsWith(a, scheme)) {
      a = a.substr(std::strlen(scheme));
      break;
    }
  }
  const std::string quoted = absl::StrCat("'", absl::CHexEscape(address), "'");
  std::string port;
  if (!a.empty() && a[0] == '[') {
    const size_t close = a.find(']');
    if (close == std::string::npos || close + 1 >= a.size() ||
        a[close + 1] != ':') {
      return absl::InvalidArgumentError(
          absl::StrCat(quoted, " is not [address]:port"));
    }
    port = a.substr(close + 2);
  } else if (a.find(':') == std::string::npos) {
    // "port" alone is 127.0.0.1:port (NormalizeAddress); a host alone has
    // no port.
    if (a.empty() || !std::all_of(a.begin(), a.end(), absl::ascii_isdigit)) {
      return absl::InvalidArgumentError(
          absl::StrCat(quoted, " is not host:port (no port)"));
    }
    port = a;
  } else if (a.find(':') != a.rfind(':')) {
    return absl::InvalidArgumentError(absl::StrCat(
        quoted, " is not host:port (write an IPv6 address as [address]:port)"));
  } else {
    port = a.substr(a.find(':') + 1);
  }
  int64_t p = -1;
  if (port.empty() || port.size() > 10 ||
      !std::all_of(port.begin(), port.end(), absl::ascii_isdigit) ||
      !absl::SimpleAtoi(port, &p)) {
    return absl::InvalidArgumentError(
        absl::StrCat("the port of ", quoted, " is not a number"));
  }
  if (p < min_port || p > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "port ", port, " of ", quoted, " is not in [", min_port, ", 65535]"));
  }
  return absl::OkStatus();
}

void FlagSet::HostPort(const std::string& name, std::string* v,
                       const std::string& help, int min_port) {
  Add({name, help, "host:port", *v, false, false,
       [v, min_port](const std::string& s) {
         if (!s.empty()) {
           if (absl::Status st = CheckHostPort(s, min_port); !st.ok()) {
             return st;
           }
         }
         *v = s;
         return absl::OkStatus();
       }});
}

void FlagSet::HostPortList(const std::string& name, std::string* v,
                           const std::string& help) {
  Add({name, help, "host:port,...", *v, false, false,
       [v](const std::string& s) {
         for (absl::string_view a : absl::StrSplit(s, ',', absl::SkipEmpty())) {
           if (absl::Status st = CheckHostPort(std::string(a), 1); !st.ok()) {
             return st;
           }
         }
         *v = s;
         return absl::OkStatus();
       }});
}

void FlagSet::Int(const std::string& name, int* v, const std::string& help) {
  Add({name, help, "int", absl::StrCat(*v), false, false,
       [v](const std::string& s) {
         if (!absl::SimpleAtoi(s, v)) {
           return absl::InvalidArgumentError(
               absl::StrCat("expected an integer, got '", s, "'"));
         }
         return absl::OkStatus();
       }});
}

void FlagSet::Int64(const std::string& name, int64_t* v,
                    const std::string& help) {
  Int64(name, v, help, absl::StrCat(*v));
}

void FlagSet::Int64(const std::string& name, int64_t* v,
                    const std::string& help, const std::string& default_text) {
  Add({name, help, "int", default_text, false, false,
       [v](const std::string& s) {
         if (!absl::SimpleAtoi(s, v)) {
           return absl::InvalidArgumentError(
               absl::StrCat("expected an integer, got '", s, "'"));
         }
         return absl::OkStatus();
       }});
}

void FlagSet::Uint64(const std::string& name, uint64_t* v,
                     const std::string& help) {
  Add({name, help, "uint", absl::StrCat(*v), false, false,
       [v](const std::string& s) {
         if (!absl::SimpleAtoi(s, v)) {
           return absl::InvalidArgumentError(
               absl::StrCat("expected a non-negative integer, got '", s, "'"));
         }
         return absl::OkStatus();
       }});
}

void FlagSet::Double(const std::string& name, double* v,
                     const std::string& help) {
  Add({name, help, "float", absl::StrFormat("%g", *v), false, false,
       [v](const std::string& s) {
         if (!absl::SimpleAtod(s, v) || !std::isfinite(*v)) {
           return absl::InvalidArgumentError(
               absl::StrCat("expected a number, got '", s, "'"));
         }
         return absl::OkStatus();
       }});
}

void FlagSet::Bool(const std::string& name, bool* v, const std::string& help) {
  Add({name, help, "bool", *v ? "true" : "false", true, false,
       [v](const std::string& s) {
         if (!absl::SimpleAtob(s, v)) {
           return absl::InvalidArgumentError(
               absl::StrCat("expected true or false, got '", s, "'"));
         }
         return absl::OkStatus();
       }});
}

absl::Status FlagSet::Set(const std::string& name, const std::string& value,
                          const std::string& origin) {
  Flag* f = Find(name);
  if (f == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(origin, ": unknown flag --", name, " for 'mnemo ",
                     command_, "' (see mnemo ", command_, " --help)"));
  }
  absl::Status s = f->parse(value);
  if (!s.ok()) {
    // "--model must be ...": the flag is not named twice.
    const std::string flag = absl::StrCat("--", f->name);
    if (absl::StartsWith(s.message(), absl::StrCat(flag, " "))) {
      return absl::InvalidArgumentError(
          absl::StrCat(origin, ": ", s.message()));
    }
    return absl::InvalidArgumentError(
        absl::StrCat(origin, ": ", flag, ": ", s.message()));
  }
  f->set = true;
  return absl::OkStatus();
}

absl::Status FlagSet::Parse(int argc, char** argv, int first,
                            std::vector<std::string>* positional, bool* help) {
  *help = false;
  // A --config file first, so that the command line overrides it.
  if (Find("config") != nullptr) {
    for (int i = first; i < argc; ++i) {
      std::string a = argv[i];
      if (a == "--") break;
      std::string path;
      if (a.rfind("--config=", 0) == 0) {
        path = a.substr(9);
      } else if (a == "--config" && i + 1 < argc) {
        path = argv[i + 1];
      } else {
        continue;
      }
      auto entries = ReadFlatYamlFile(path);
      if (!entries.ok()) return entries.status();
      for (const auto& [key, value] : *entries) {
        if (std::find(ignored_in_config_.begin(), ignored_in_config_.end(),
                      FlagName(key)) != ignored_in_config_.end()) {
          continue;
        }
        if (key == "config") {
          return absl::InvalidArgumentError(
              absl::StrCat(path, ": a config file cannot name another config"));
        }
        absl::Status s = Set(key, value, path);
        if (!s.ok()) return s;
      }
    }
  }
  for (int i = first; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--help" || a == "-h" || a == "-help") {
      *help = true;
      return absl::OkStatus();
    }
    if (a == "--") {
      for (++i; i < argc; ++i) positional->push_back(argv[i]);
      break;
    }
    if (a.size() < 3 || a.rfind("--", 0) != 0) {
      positional->push_back(a);
      continue;
    }
    std::string name = a.substr(2), value;
    bool has_value = false;
    if (size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    Flag* f = Find(name);
    if (f == nullptr && !has_value && name.rfind("no-", 0) == 0) {
      Flag* neg = Find(name.substr(3));
      if (neg != nullptr && neg->is_bool) {
        absl::Status s = Set(neg->name, "false", "command line");
        if (!s.ok()) return s;
        continue;
      }
    }
    if (f == nullptr) return Set(name, value, "command line");
    if (!has_value) {
      if (f->is_bool) {
        value = "true";
      } else if (i + 1 < argc) {
        value = argv[++i];
      } else {
        return absl::InvalidArgumentError(
            absl::StrCat("command line: --", f->name, " needs a value"));
      }
    }
    absl::Status s = Set(f->name, value, "command line");
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

std::vector<std::string> FlagSet::Forward(
    int argc, char** argv, int first,
    const std::vector<std::string>& drop) const {
  std::vector<std::string> out;
  for (int i = first; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--") {  // kept only with arguments after it
      if (i + 1 < argc) out.insert(out.end(), argv + i, argv + argc);
      break;
    }
    if (a.size() < 3 || a.rfind("--", 0) != 0) {
      out.push_back(a);
      continue;
    }
    std::string name = a.substr(2);
    const bool has_value = name.find('=') != std::string::npos;
    if (has_value) name = name.substr(0, name.find('='));
    const Flag* f = Find(name);
    bool negated = false;
    if (f == nullptr && !has_value && name.rfind("no-", 0) == 0) {
      const Flag* neg = Find(name.substr(3));
      if (neg != nullptr && neg->is_bool) {
        f = neg;
        negated = true;
      }
    }
    // Its value, when it is the next argument.
    const bool takes_next =
        f != nullptr && !has_value && !f->is_bool && !negated && i + 1 < argc;
    if (f != nullptr &&
        std::find(drop.begin(), drop.end(), f->name) != drop.end()) {
      if (takes_next) ++i;
      continue;
    }
    out.push_back(a);
    if (takes_next) out.push_back(argv[++i]);
  }
  return out;
}

void FlagSet::IgnoreInConfig(const std::vector<std::string>& keys) {
  for (const std::string& k : keys) ignored_in_config_.push_back(FlagName(k));
}

std::optional<int> FlagSet::ParseOrExitCode(
    int argc, char** argv, int first, std::vector<std::string>* positional,
    size_t max_positional) {
  bool help = false;
  absl::Status s = Parse(argc, argv, first, positional, &help);
  if (help) {
    std::printf("%s", Help().c_str());
    return 0;
  }
  if (s.ok() && positional->size() > max_positional) {
    s = absl::InvalidArgumentError(absl::StrCat(
        "unexpected argument '", (*positional)[max_positional], "'"));
  }
  if (!s.ok()) {
    std::fprintf(stderr, "mnemo %s: %s\n", command_.c_str(),
                 std::string(s.message()).c_str());
    return 2;
  }
  return std::nullopt;
}

std::string FlagSet::Help() const {
  std::string out = absl::StrCat(summary_, "\n\nFlags:\n");
  for (const Flag& f : flags_) {
    std::string head = absl::StrCat(
        "  --", f.name, f.is_bool ? "" : absl::StrCat(" <", f.type, ">"));
    absl::StrAppend(&out, head, "\n      ", f.help);
    if (!f.default_text.empty()) {
      absl::StrAppend(&out, " (default: ", f.default_text,
                      f.is_bool && f.default_text == "true"
                          ? absl::StrCat("; --no-", f.name, " turns it off")
                          : "",
                      ")");
    }
    absl::StrAppend(&out, "\n");
  }
  return out;
}

absl::StatusOr<int64_t> IntFromEnv(const char* name, int64_t fallback,
                                   int64_t min, int64_t max) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  int64_t x = 0;
  if (!absl::SimpleAtoi(v, &x) || x < min || x > max) {
    return absl::InvalidArgumentError(
        absl::StrCat("environment ", name, "='", absl::CHexEscape(v),
                     "' must be an integer in [", min, ", ", max, "]"));
  }
  return x;
}

}  // namespace mnemo
