// Temporal neighbour sampling throughput: queries/s and neighbour slots/s
// for k = 10, recent and uniform, on Wikipedia and MathOverflow. The queries
// are those of a TGN training pass: (src, t) and (dst, t) for every event in
// time order, in batches of 200 events.
//
// Usage: bench_sampler [DATA_DIR] [OUT_JSON]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "bench/bench_util.h"
#include "trainer/data/event_log.h"
#include "trainer/data/neighbor_sampler.h"
#include "util/proc.h"

namespace {

using mnemo::bench::Now;

}  // namespace

int main(int argc, char** argv) {
  using namespace mnemo::data;
  const auto [data_dir, out_path] =
      mnemo::bench::ParseDataArgs(argc, argv, MNEMO_REPO_ROOT, "sampler.json");
  std::vector<std::string> cmd(argv, argv + argc);

  constexpr int kK = 10;
  constexpr int kBatch = 200;
  constexpr int kReps = 3;
  std::vector<std::string> rows;
  int failures = 0;
  for (const char* file : {"wikipedia.txt.gz", "sx-mathoverflow.txt.gz"}) {
    auto log = LoadEventLog(data_dir + "/" + file, {});
    if (!log.ok()) {
      std::fprintf(stderr, "%s\n", log.status().ToString().c_str());
      ++failures;
      continue;
    }
    double t0 = Now();
    TemporalGraph graph(*log);
    const double build_s = Now() - t0;
    const int64_t n = log->num_events();
    std::vector<int32_t> nodes(2 * n);
    std::vector<double> times(2 * n);
    // Batch layout as in TGN: the batch's sources, then its destinations.
    for (int64_t b = 0; b < n; b += kBatch) {
      const int64_t m = std::min<int64_t>(kBatch, n - b);
      for (int64_t i = 0; i < m; ++i) {
        nodes[2 * b + i] = log->src[b + i];
        nodes[2 * b + m + i] = log->dst[b + i];
        times[2 * b + i] = times[2 * b + m + i] = log->t[b + i];
      }
    }
    for (NeighborStrategy strategy :
         {NeighborStrategy::kRecent, NeighborStrategy::kUniform}) {
      NeighborSampler sampler(&graph, kK, strategy, 1);
      NeighborBlock block;
      double best = 1e300;
      int64_t filled = 0;
      for (int r = 0; r < kReps; ++r) {
        filled = 0;
        t0 = Now();
        for (int64_t b = 0; b < n; b += kBatch) {
          const int64_t m = std::min<int64_t>(kBatch, n - b);
          sampler.Sample(nodes.data() + 2 * b, times.data() + 2 * b, 2 * m,
                         &block);
          for (int64_t i = 0; i < 2 * m; ++i) filled += block.count[i];
        }
        best = std::min(best, Now() - t0);
      }
      const char* sname =
          strategy == NeighborStrategy::kRecent ? "recent" : "uniform";
      const double qps = 2.0 * n / best;
      std::printf(
          "%-24s %-8s k=%d queries=%lld  %.3g queries/s  %.3g slots/s  "
          "(%.3g filled slots/s)  build %.3f s\n",
          file, sname, kK, static_cast<long long>(2 * n), qps, qps * kK,
          filled / best, build_s);
      rows.push_back(absl::StrFormat(
          "    {\"file\": \"%s\", \"strategy\": \"%s\", \"k\": %d, "
          "\"events\": %d, \"queries\": %d, \"batch_events\": %d, "
          "\"seconds\": %.6f, \"queries_per_s\": %.0f, "
          "\"slots_per_s\": %.0f, \"filled_slots_per_s\": %.0f, "
          "\"graph_build_s\": %.6f}",
          file, sname, kK, n, 2 * n, kBatch, best, qps, qps * kK, filled / best,
          build_s));
    }
  }
  std::vector<std::string> quoted;
  for (const std::string& a : cmd)
    quoted.push_back(absl::StrCat("\"", a, "\""));
  const std::string json = absl::StrCat(
      "{\n  \"benchmark\": \"sampler\",\n  \"command\": [",
      absl::StrJoin(quoted, ", "), "],\n  \"date\": \"", mnemo::NowIso8601(),
      "\",\n  \"hostname\": \"", mnemo::HostName(),
      "\",\n  \"nproc\": ", std::thread::hardware_concurrency(),
      ",\n  \"data_dir\": \"", data_dir, "\",\n  \"repetitions\": ", kReps,
      ", \"timing\": \"best of repetitions, wall clock, one thread\",\n"
      "  \"results\": [\n",
      absl::StrJoin(rows, ",\n"), "\n  ]\n}\n");
  std::filesystem::create_directories(
      std::filesystem::path(out_path).parent_path());
  FILE* f = std::fopen(out_path.c_str(), "w");
  if (!f) {
    std::fprintf(stderr, "cannot write %s\n", out_path.c_str());
    return 1;
  }
  std::fputs(json.c_str(), f);
  std::fclose(f);
  std::printf("wrote %s\n", out_path.c_str());
  return failures ? 1 : 0;
}
