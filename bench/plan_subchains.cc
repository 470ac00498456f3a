// DepBloom's sub-chains on real data, without training: for each dataset,
// window size, partitioner, chain assignment and node pieces, the broken
// dependencies
// (WindowStats::cross_ratio, the metric of DepBloom Fig. 5), the events
// whose endpoints lie in two parts, the load imbalance, the steps per epoch
// and the partitioning time, over the training events of `mnemo train`'s
// default split (TGN reference protocol), 2 workers.
//
// The windows are those of bench/depbloom.sh: 10,000 events over the whole
// training stream (its 1 Gbit/s rows) and 2,500 over the first 30,000
// events (its 20 Mbit/s rows); batches of 2,400 per worker (depbloom's
// default).
//
// Usage: bench_subchains [DATA_DIR] [OUT_JSON]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "bench/bench_util.h"
#include "trainer/data/event_log.h"
#include "trainer/data/split.h"
#include "trainer/plan/batch_plan.h"
#include "trainer/plan/subchain_plan.h"

namespace {

using mnemo::bench::Now;
using mnemo::plan::ChainAssignment;
using mnemo::plan::Partitioner;

}  // namespace

int main(int argc, char** argv) {
  namespace data = mnemo::data;
  namespace plan = mnemo::plan;
  const auto [data_dir, out_path] = mnemo::bench::ParseDataArgs(
      argc, argv, MNEMO_REPO_ROOT, "plan_subchains.json");

  struct Setting {
    const char* name;
    int64_t max_events;  // 0: all
    int64_t window_events;
  };
  const Setting settings[] = {
      {"full stream, windows of 10000", 0, 10000},
      {"first 30000 events, windows of 2500", 30000, 2500}};
  struct Variant {
    Partitioner partitioner;
    ChainAssignment assignment;
    int64_t piece_events = 0;
  };
  // DepBloom's own choice (METIS, source, whole nodes) and the time
  // partitioner, then the chain assignments and node pieces.
  const Variant variants[] = {
      {Partitioner::kTime, ChainAssignment::kSource},
      {Partitioner::kMetis, ChainAssignment::kSource},
      {Partitioner::kMetis, ChainAssignment::kHeavier},
      {Partitioner::kMetis, ChainAssignment::kFollow},
      {Partitioner::kMetis, ChainAssignment::kSource, 1},
      {Partitioner::kMetis, ChainAssignment::kFollow, 16},
      {Partitioner::kMetis, ChainAssignment::kFollow, 4},
      {Partitioner::kMetis, ChainAssignment::kFollow, 2},
      {Partitioner::kMetis, ChainAssignment::kFollow, 1},
      {Partitioner::kGreedy, ChainAssignment::kSource},
      {Partitioner::kGreedy, ChainAssignment::kFollow}};

  std::vector<std::string> rows;
  int failures = 0;
  std::printf("%-16s %-36s %-8s %-8s %6s %7s %7s %7s %6s %8s\n", "data",
              "setting", "part", "assign", "pieces", "cross", "cut", "shared",
              "imbal", "part s");
  for (const char* file :
       {"wikipedia.txt.gz", "sx-mathoverflow.txt.gz", "CollegeMsg.txt.gz",
        "soc-sign-bitcoinalpha.konect.gz"}) {
    for (const Setting& setting : settings) {
      data::LoadOptions lo;
      lo.max_events = setting.max_events;
      auto log = data::LoadEventLog(data_dir + "/" + file, lo);
      if (!log.ok()) {
        std::fprintf(stderr, "%s\n", log.status().ToString().c_str());
        ++failures;
        break;
      }
      const data::Split split = data::MakeSplit(*log, data::SplitOptions{});
      for (const Variant& variant : variants) {
        plan::PlanOptions o;
        o.kind = plan::PlanKind::kSubChains;
        o.world_size = 2;
        o.batch_size = 2400;
        o.window_events = setting.window_events;
        o.partitioner = variant.partitioner;
        o.chain_assignment = variant.assignment;
        o.piece_events = variant.piece_events;
        const double t0 = Now();
        const plan::SubChainPartition p =
            plan::PartitionSubChains(*log, split.train, o);
        const double seconds = Now() - t0;
        int64_t events = 0, cross = 0, cut = 0, shared = 0, steps = 0;
        double imbalance = 0;
        for (const plan::WindowStats& w : p.stats) {
          events += w.events;
          cross += w.cross_events;
          cut += w.cut_events;
          shared += w.shared_events;
          steps += w.steps;
          imbalance = std::max(imbalance, w.imbalance);
        }
        auto ratio = [events](int64_t x) {
          return events > 0 ? static_cast<double>(x) / events : 0.0;
        };
        // Events whose endpoints lie in two parts (kTime: no node parts).
        const bool time = variant.partitioner == Partitioner::kTime;
        std::printf(
            "%-16s %-36s %-8s %-8s %6s %7.4f %7s %7.4f %6.3f %8.2f\n", file,
            setting.name,
            std::string(plan::PartitionerName(variant.partitioner)).c_str(),
            time ? "-"
                 : std::string(plan::ChainAssignmentName(variant.assignment))
                       .c_str(),
            variant.piece_events > 0
                ? absl::StrCat(variant.piece_events).c_str()
                : "-",
            ratio(cross),
            time ? "-" : absl::StrFormat("%.4f", ratio(cut)).c_str(),
            ratio(shared), imbalance, seconds);
        std::fflush(stdout);
        rows.push_back(absl::StrFormat(
            "{\"data\": \"%s\", \"max_events\": %d, \"window_events\": %d, "
            "\"partitioner\": \"%s\", \"chain_assignment\": %s, "
            "\"piece_events\": %d, "
            "\"train_events\": %d, \"windows\": %d, \"cross_ratio\": %.6f, "
            "\"cut_ratio\": %s, \"shared_ratio\": %.6f, "
            "\"max_imbalance\": %.4f, \"steps\": %d, \"seconds\": %.3f}",
            file, setting.max_events, setting.window_events,
            plan::PartitionerName(variant.partitioner),
            time ? std::string("null")
                 : absl::StrCat("\"",
                                std::string(plan::ChainAssignmentName(
                                    variant.assignment)),
                                "\""),
            variant.piece_events, events, p.num_windows(), ratio(cross),
            time ? "null" : absl::StrFormat("%.6f", ratio(cut)), ratio(shared),
            imbalance, steps, seconds));
      }
    }
  }
  if (!mnemo::bench::WriteRowsJson(
          out_path, argc, argv, "\"workers\": 2, \"batch_size\": 2400", rows)) {
    return 1;
  }
  return failures == 0 ? 0 : 1;
}
