// The online working-set cache's cost per read (trainer/plan/
// working_set.h, WorkingSetCache: what a trainer with --memory-cache-bytes
// runs before every batch), on a synthetic read stream shaped like TGN's
// evaluation at scale: batches of `reads` node ids drawn from a power law
// over `nodes` ids (a few hubs read by most batches, a long tail read
// rarely), a budget of `capacity` states, and the whole stream predicted
// (Belady's rule reads it). Prints ns per read and the decision counts
// (misses, evictions), which any two builds must agree on: the counts
// check that a faster cache drops exactly what the slower one does.
//
// Usage: bench_working_set_cache [NODES] [CAPACITY] [BATCHES] [READS]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "bench/bench_util.h"
#include "trainer/plan/working_set.h"

namespace plan = mnemo::plan;

int main(int argc, char** argv) {
  const int64_t nodes = argc > 1 ? std::atoll(argv[1]) : 2000000;
  const int64_t capacity = argc > 2 ? std::atoll(argv[2]) : 200000;
  const int64_t batches = argc > 3 ? std::atoll(argv[3]) : 2000;
  const int64_t reads = argc > 4 ? std::atoll(argv[4]) : 6000;
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> unit(0, 1);
  plan::BatchNodes stream;
  std::vector<int64_t> batch;
  for (int64_t b = 0; b < batches; ++b) {
    batch.clear();
    for (int64_t i = 0; i < reads; ++i) {
      // Power law with exponent about 2 over the ids.
      const double x = std::pow(unit(rng), 3.0);
      batch.push_back(std::min<int64_t>(nodes - 1, x * nodes));
    }
    std::sort(batch.begin(), batch.end());
    batch.erase(std::unique(batch.begin(), batch.end()), batch.end());
    stream.Add(batch);
  }
  std::printf(
      "working-set cache: %ld ids, capacity %ld, %ld batches, %ld "
      "distinct reads\n",
      (long)nodes, (long)capacity, (long)batches, (long)stream.nodes.size());
  for (const plan::Eviction rule :
       {plan::Eviction::kBelady, plan::Eviction::kLru}) {
    plan::WorkingSetCache cache(nodes, capacity, rule);
    cache.Reset(stream);
    std::vector<int64_t> misses, victims;
    int64_t evicted = 0;
    const double t0 = mnemo::bench::Now();
    for (int64_t b = 0; b < batches; ++b) {
      misses.clear();
      victims.clear();
      if (!cache.Acquire(b, stream.batch(b), &misses, &victims).ok()) {
        std::fprintf(stderr, "Acquire failed at batch %ld\n", (long)b);
        return 1;
      }
      evicted += static_cast<int64_t>(victims.size());
    }
    const double seconds = mnemo::bench::Now() - t0;
    std::printf("%-7s %7.1f ns/read  %.2f s  misses %ld  evictions %ld\n",
                std::string(plan::EvictionName(rule)).c_str(),
                1e9 * seconds / stream.nodes.size(), seconds,
                (long)cache.stats().misses, (long)evicted);
  }
  return 0;
}
