// Small helpers shared by the C++ benchmarks.
#ifndef MNEMO_BENCH_BENCH_UTIL_H_
#define MNEMO_BENCH_BENCH_UTIL_H_

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "util/proc.h"

namespace mnemo::bench {

// The median of `v` (the mean of the middle two for an even count; 0 when
// empty).
inline double Median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 == 1 ? v[m] : (v[m - 1] + v[m]) / 2;
}

// Seconds on a monotonic clock.
inline double Now() {
  return std::chrono::duration<double>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// A data benchmark's arguments, [DATA_DIR] [OUT_JSON]: the data directory
// (else $MNEMO_SHARED_DATA, else the shared data beside the repository) and
// the result file (else bench/results/`default_out` in the repository).
struct DataArgs {
  std::string data_dir, out_path;
};
inline DataArgs ParseDataArgs(int argc, char** argv, const char* repo_root,
                              const char* default_out) {
  const char* env = std::getenv("MNEMO_SHARED_DATA");
  DataArgs a;
  a.data_dir =
      argc > 1 ? argv[1]
               : (env != nullptr ? std::string(env)
                                 : std::string(repo_root) + "/../shared/data");
  a.out_path = argc > 2
                   ? argv[2]
                   : std::string(repo_root) + "/bench/results/" + default_out;
  return a;
}

// Writes {"command": ..., "cpu": ..., FIELDS, "rows": [ROWS]} to `path`
// (FIELDS: JSON members, comma-separated, no trailing comma; ROWS: JSON
// objects) and says where. False (with a message) when it cannot.
inline bool WriteRowsJson(const std::string& path, int argc, char** argv,
                          const std::string& fields,
                          const std::vector<std::string>& rows) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) {
    std::fprintf(stderr, "cannot write %s\n", path.c_str());
    return false;
  }
  const std::vector<std::string> cmd(argv, argv + argc);
  std::fprintf(
      f, "{\"command\": \"%s\", \"cpu\": \"%s\", %s, \"rows\": [\n  %s\n]}\n",
      absl::StrJoin(cmd, " ").c_str(), CpuModel().c_str(), fields.c_str(),
      absl::StrJoin(rows, ",\n  ").c_str());
  std::fclose(f);
  std::printf("wrote %s\n", path.c_str());
  return true;
}

}  // namespace mnemo::bench

#endif  // MNEMO_BENCH_BENCH_UTIL_H_
