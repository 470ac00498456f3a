// A trainer's bounded working set of node states, Belady over the plan
// against LRU at the same budget: for each dataset, policy plan and budget,
// the states rank 0 of 2 workers pulls for misses in one epoch, and the
// dirty states it pushes when it drops them (trainer/plan/working_set.h).
// Counts only: no training, so they hold on any machine.
//
// What a batch reads, per target event (src, dst, t), as TGN reads it:
// the memory of src, dst and one negative destination (drawn uniformly
// from the training destinations, seeded: drawn ahead of the epoch, as a
// plan-aware trainer would), and of the 10 most recent temporal neighbours
// of each of the three strictly before t. An auxiliary (replayed) event of
// DepTGL reads and advances its two endpoints. Every batch advances the
// endpoints of its events. Node owners: node mod 2.
//
// Plans: vanilla (each worker's own targets of 600-event global batches),
// deptgl (Algorithm 1, K = 6) and depbloom (METIS sub-chains of
// 10,000-event windows, 2,400-event batches per worker), as `mnemo train`
// makes them. Budgets: a share of the dataset's nodes (the working set a
// --memory-cache-bytes of that share of node memory holds).
//
// Usage: bench_working_set [DATA_DIR] [OUT_JSON]
#include "trainer/plan/working_set.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "bench/bench_util.h"
#include "trainer/data/event_log.h"
#include "trainer/data/neighbor_sampler.h"
#include "trainer/data/split.h"
#include "trainer/plan/batch_plan.h"

namespace {

namespace data = mnemo::data;
namespace plan = mnemo::plan;

constexpr int kWorkers = 2;
constexpr int kNeighbors = 10;

struct PlanCase {
  const char* name;
  plan::PlanKind kind;
  int64_t batch_size;
};

// Reads and writes of each batch of `p` (see the file comment).
void BatchSets(const data::EventLog& log, const data::TemporalGraph& graph,
               const plan::WorkerPlan& p,
               const std::vector<int32_t>& destinations, uint64_t seed,
               plan::BatchNodes* reads, plan::BatchNodes* writes) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<size_t> pick(0, destinations.size() - 1);
  absl::flat_hash_set<int64_t> r, w;
  std::vector<int64_t> out;
  for (int64_t b = 0; b < p.num_batches(); ++b) {
    r.clear();
    w.clear();
    const plan::BatchView v = p.batch(b);
    for (size_t i = 0; i < v.events.size(); ++i) {
      const int64_t e = v.events[i];
      const int32_t src = log.src[e], dst = log.dst[e];
      r.insert(src);
      r.insert(dst);
      w.insert(src);
      w.insert(dst);
      if (!v.target[i]) continue;
      const int32_t neg = destinations[pick(rng)];
      r.insert(neg);
      for (const int32_t u : {src, dst, neg}) {
        int64_t lo = 0, hi = 0;
        graph.Before(u, log.t[e], &lo, &hi);
        for (int64_t j = std::max(lo, hi - kNeighbors); j < hi; ++j) {
          r.insert(graph.neighbors()[j]);
        }
      }
    }
    out.assign(r.begin(), r.end());
    std::sort(out.begin(), out.end());
    reads->Add(out);
    out.assign(w.begin(), w.end());
    std::sort(out.begin(), out.end());
    writes->Add(out);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const auto [data_dir, out_path] = mnemo::bench::ParseDataArgs(
      argc, argv, MNEMO_REPO_ROOT, "working_set.json");
  const PlanCase cases[] = {{"vanilla", plan::PlanKind::kOwnTargets, 600},
                            {"deptgl", plan::PlanKind::kDependencyScan, 600},
                            {"depbloom", plan::PlanKind::kSubChains, 2400}};
  const double shares[] = {1.0 / 32, 1.0 / 16, 1.0 / 8, 1.0 / 4, 1.0 / 2};

  std::vector<std::string> rows;
  std::printf("%-24s %-9s %8s %9s %10s %10s %10s %8s %10s %10s\n", "data",
              "policy", "share", "states", "reads", "distinct", "belady", "lru",
              "lru/bel", "dirty b/l");
  for (const char* file : {"sx-mathoverflow.txt.gz", "wikipedia.txt.gz"}) {
    auto log = data::LoadEventLog(data_dir + "/" + file, {});
    if (!log.ok()) {
      std::fprintf(stderr, "%s\n", log.status().ToString().c_str());
      return 1;
    }
    const data::Split split = data::MakeSplit(*log, data::SplitOptions{});
    const data::TemporalGraph graph(*log, split.train);
    absl::flat_hash_set<int32_t> dset;
    for (const int64_t e : split.train) dset.insert(log->dst[e]);
    std::vector<int32_t> destinations(dset.begin(), dset.end());
    std::sort(destinations.begin(), destinations.end());
    for (const PlanCase& c : cases) {
      plan::PlanOptions o;
      o.kind = c.kind;
      o.world_size = kWorkers;
      o.batch_size = c.batch_size;
      o.sync_every = 6;
      o.window_events = 10000;
      const plan::WorkerPlan p = plan::MakeWorkerPlan(
          *log, split.train,
          [](int64_t u) { return static_cast<int>(u % kWorkers); }, 0, o);
      plan::BatchNodes reads, writes;
      BatchSets(*log, graph, p, destinations, 7, &reads, &writes);
      int64_t largest = 0;
      for (int64_t b = 0; b < reads.num_batches(); ++b) {
        largest = std::max<int64_t>(largest, reads.batch(b).size());
      }
      const absl::flat_hash_set<int64_t> distinct(reads.nodes.begin(),
                                                  reads.nodes.end());
      for (const double share : shares) {
        const int64_t capacity =
            static_cast<int64_t>(share * static_cast<double>(log->num_nodes));
        if (capacity < largest) {
          std::printf("%-24s %-9s %8.4f %9lld  (a batch reads %lld states)\n",
                      file, c.name, share, static_cast<long long>(capacity),
                      static_cast<long long>(largest));
          continue;
        }
        auto belady = plan::PlanWorkingSet(reads, writes, capacity,
                                           plan::Eviction::kBelady);
        auto lru =
            plan::PlanWorkingSet(reads, writes, capacity, plan::Eviction::kLru);
        if (!belady.ok() || !lru.ok()) {
          std::fprintf(stderr, "%s\n",
                       (belady.ok() ? lru.status() : belady.status())
                           .ToString()
                           .c_str());
          return 1;
        }
        const plan::WorkingSetStats& b = belady->stats;
        const plan::WorkingSetStats& l = lru->stats;
        const double ratio =
            static_cast<double>(l.misses) / static_cast<double>(b.misses);
        std::printf(
            "%-24s %-9s %8.4f %9lld %10lld %10zu %10lld %8lld %10.2f "
            "%5lld/%lld\n",
            file, c.name, share, static_cast<long long>(capacity),
            static_cast<long long>(b.reads), distinct.size(),
            static_cast<long long>(b.misses), static_cast<long long>(l.misses),
            ratio, static_cast<long long>(b.dirty_evictions),
            static_cast<long long>(l.dirty_evictions));
        std::fflush(stdout);
        rows.push_back(absl::StrFormat(
            "{\"data\": \"%s\", \"policy\": \"%s\", \"nodes\": %d, "
            "\"batches\": %d, \"largest_batch_reads\": %d, \"share\": %.6f, "
            "\"capacity_states\": %d, \"reads\": %d, \"distinct\": %d, "
            "\"belady\": {\"misses\": %d, \"evictions\": %d, "
            "\"dirty_evictions\": %d}, \"lru\": {\"misses\": %d, "
            "\"evictions\": %d, \"dirty_evictions\": %d}, "
            "\"lru_over_belady_misses\": %.4f}",
            file, c.name, log->num_nodes, reads.num_batches(), largest, share,
            capacity, b.reads, distinct.size(), b.misses, b.evictions,
            b.dirty_evictions, l.misses, l.evictions, l.dirty_evictions,
            ratio));
      }
    }
  }
  if (!mnemo::bench::WriteRowsJson(
          out_path, argc, argv,
          absl::StrFormat("\"workers\": %d, \"rank\": 0, \"neighbors\": %d",
                          kWorkers, kNeighbors),
          rows)) {
    return 1;
  }
  return 0;
}
