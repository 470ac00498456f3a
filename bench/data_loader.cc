// Loader throughput on the shared datasets: events/s including gzip
// decompression, and on the same content as plain text.
//
// Usage: bench_loader [DATA_DIR] [OUT_JSON]
//   DATA_DIR defaults to $MNEMO_SHARED_DATA, else <repo>/../shared/data.
//   OUT_JSON defaults to <repo>/bench/results/loader.json.
#include <unistd.h>

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
#include "trainer/data/event_log.h"
#include "util/proc.h"

namespace {

double Now() {
  return std::chrono::duration<double>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Best-of-`reps` seconds of `fn`.
template <typename F>
double Best(int reps, F fn) {
  double best = 1e300;
  for (int r = 0; r < reps; ++r) {
    const double t0 = Now();
    fn();
    best = std::min(best, Now() - t0);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  using mnemo::data::LoadEventLog;
  const char* env = std::getenv("MNEMO_SHARED_DATA");
  const std::string data_dir =
      argc > 1 ? argv[1]
               : (env ? env : std::string(MNEMO_REPO_ROOT) + "/../shared/data");
  const std::string out_path =
      argc > 2 ? argv[2]
               : std::string(MNEMO_REPO_ROOT) + "/bench/results/loader.json";
  std::vector<std::string> cmd(argv, argv + argc);

  const char* files[] = {"wikipedia.txt.gz", "sx-mathoverflow.txt.gz",
                         "CollegeMsg.txt.gz", "soc-sign-bitcoinalpha.konect.gz",
                         "USLegis.txt.gz"};
  constexpr int kReps = 5;
  std::vector<std::string> rows;
  int failures = 0;
  std::printf("%-32s %9s %8s %12s %12s %12s %10s\n", "file", "events", "nodes",
              "gz ev/s", "plain ev/s", "gunzip MB/s", "plain MB/s");
  for (const char* file : files) {
    const std::string path = data_dir + "/" + file;
    auto content = mnemo::data::ReadMaybeGzip(path);
    if (!content.ok()) {
      std::fprintf(stderr, "%s\n", content.status().ToString().c_str());
      ++failures;
      continue;
    }
    const double mb = content->size() / 1e6;
    // The same content as a plain file, to separate parsing from gunzip.
    const std::string plain =
        absl::StrCat(std::filesystem::temp_directory_path().string(),
                     "/bench_loader.", ::getpid(), ".", file, ".txt");
    {
      FILE* f = std::fopen(plain.c_str(), "wb");
      std::fwrite(content->data(), 1, content->size(), f);
      std::fclose(f);
    }
    int64_t events = 0, nodes = 0;
    bool ok = true;
    auto load = [&](const std::string& p) {
      auto log = LoadEventLog(p, {});
      if (!log.ok()) {
        std::fprintf(stderr, "%s\n", log.status().ToString().c_str());
        ok = false;
        return;
      }
      events = log->num_events();
      nodes = log->num_nodes;
    };
    const double t_gz = Best(kReps, [&] { load(path); });
    const double t_plain = Best(kReps, [&] { load(plain); });
    const double t_gunzip =
        Best(kReps, [&] { (void)mnemo::data::ReadMaybeGzip(path); });
    std::remove(plain.c_str());
    if (!ok) {
      ++failures;
      continue;
    }
    std::printf("%-32s %9lld %8lld %12.3g %12.3g %12.1f %10.1f\n", file,
                static_cast<long long>(events), static_cast<long long>(nodes),
                events / t_gz, events / t_plain, mb / t_gunzip, mb / t_plain);
    rows.push_back(absl::StrFormat(
        "    {\"file\": \"%s\", \"events\": %d, \"nodes\": %d, "
        "\"text_mb\": %.3f, \"load_gz_s\": %.6f, \"events_per_s_gz\": %.0f, "
        "\"load_plain_s\": %.6f, \"events_per_s_plain\": %.0f, "
        "\"plain_mb_per_s\": %.1f, \"gunzip_only_s\": %.6f}",
        file, events, nodes, mb, t_gz, events / t_gz, t_plain, events / t_plain,
        mb / t_plain, t_gunzip));
  }
  std::vector<std::string> quoted;
  for (const std::string& a : cmd)
    quoted.push_back(absl::StrCat("\"", a, "\""));
  const std::string json = absl::StrCat(
      "{\n  \"benchmark\": \"loader\",\n  \"command\": [",
      absl::StrJoin(quoted, ", "), "],\n  \"date\": \"", mnemo::NowIso8601(),
      "\",\n  \"hostname\": \"", mnemo::HostName(),
      "\",\n  \"nproc\": ", std::thread::hardware_concurrency(),
      ",\n  \"data_dir\": \"", data_dir, "\",\n  \"repetitions\": ", kReps,
      ", \"timing\": \"best of repetitions, wall clock, one thread\",\n"
      "  \"datasets\": [\n",
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
