#include "util/proc.h"

#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <fstream>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace mnemo {
namespace {
int64_t StatusField(const std::string& name) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(name, 0) == 0) {
      return std::stoll(line.substr(name.size())) * 1024;  // kB
    }
  }
  return 0;
}
}  // namespace

int64_t PeakRssBytes() {
  int64_t hwm = StatusField("VmHWM:");
  if (hwm > 0) return hwm;
  struct rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;
}

int64_t CurrentRssBytes() { return StatusField("VmRSS:"); }

std::string HostName() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "unknown";
  return buf;
}

std::string CpuModel() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) break;
    return std::string(absl::StripAsciiWhitespace(line.substr(colon + 1)));
  }
  return "unknown";
}

bool IsLoopbackHost(const std::string& host) {
  return host == "localhost" || host == "::1" || host == "[::1]" ||
         host.rfind("127.", 0) == 0;
}

std::string NowIso8601() {
  std::time_t now = std::time(nullptr);
  std::tm tm;
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace mnemo

namespace mnemo {

std::vector<int> UsableCpus() {
  std::vector<int> cpus;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    for (int c = 0; c < CPU_SETSIZE; ++c) {
      if (CPU_ISSET(c, &set)) cpus.push_back(c);
    }
  }
  if (cpus.empty()) {
    const long n = sysconf(_SC_NPROCESSORS_ONLN);
    for (long c = 0; c < std::max(1L, n); ++c) cpus.push_back(c);
  }
  return cpus;
}

int UsableCpuCount() { return static_cast<int>(UsableCpus().size()); }

absl::StatusOr<std::vector<int>> ParseCpuList(const std::string& text) {
  std::vector<int> cpus;
  auto bad = [&](absl::string_view part) {
    return absl::InvalidArgumentError(
        absl::StrCat("CPU list '", text, "': '", part,
                     "' is not a CPU number or range (e.g. 0, 2-3, 0,4-5)"));
  };
  if (text.empty()) return bad(text);
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    std::vector<absl::string_view> ends = absl::StrSplit(part, '-');
    int lo = 0, hi = 0;
    if (ends.size() == 1) {
      if (!absl::SimpleAtoi(ends[0], &lo)) return bad(part);
      hi = lo;
    } else if (ends.size() == 2) {
      if (!absl::SimpleAtoi(ends[0], &lo) || !absl::SimpleAtoi(ends[1], &hi)) {
        return bad(part);
      }
    } else {
      return bad(part);
    }
    if (lo < 0 || hi < lo || hi >= CPU_SETSIZE) return bad(part);
    for (int c = lo; c <= hi; ++c) cpus.push_back(c);
  }
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  return cpus;
}

absl::Status PinToCpus(const std::vector<int>& cpus) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cpus) CPU_SET(c, &set);
  if (sched_setaffinity(0, sizeof(set), &set) != 0) {
    std::string list;
    for (int c : cpus) absl::StrAppend(&list, list.empty() ? "" : ",", c);
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot pin to CPUs ", list, ": ", std::strerror(errno),
        " (this process may use CPUs ",
        [] {
          std::string usable;
          for (int c : UsableCpus()) {
            absl::StrAppend(&usable, usable.empty() ? "" : ",", c);
          }
          return usable;
        }(),
        ")"));
  }
  return absl::OkStatus();
}

}  // namespace mnemo
