#include "util/proc.h"

#include <sys/resource.h>
#include <unistd.h>

#include <ctime>
#include <fstream>
#include <string>

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

std::string NowIso8601() {
  std::time_t now = std::time(nullptr);
  std::tm tm;
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace mnemo
