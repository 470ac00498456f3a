// Synthetic event streams for scale tests (mnemo data --synthetic): a
// deterministic generator of "src dst time" events whose shape has the
// properties that matter to temporal-graph training at scale:
//
//   * power-law activity: node u is an event's source or destination with
//     weight (rank(u) + 1)^(-1 / (degree_exponent - 1)), ranks a random
//     permutation of the nodes, so degrees follow P(d) ~ d^-degree_exponent
//     (Zipf's law for 2); 0 gives every node the same weight;
//   * communities: node u belongs to community u % communities; a
//     destination is drawn from the source's community, or with probability
//     `mixing` from the whole graph;
//   * bursts: `bursts` episodes of `burst_events` events each, at positions
//     drawn uniformly, during which events arrive `burst_factor` times
//     faster;
//   * time: exponential gaps of mean `mean_gap` seconds between events,
//     written as whole seconds (ties are common, as in real logs).
//
// No self-loops. The same options give the same stream, byte for byte, on
// every machine: the generator uses its own random number generator
// (splitmix64) and its own samplers, never the C++ library's
// distributions, whose algorithms differ between implementations.
#ifndef MNEMO_TRAINER_DATA_SYNTHETIC_H_
#define MNEMO_TRAINER_DATA_SYNTHETIC_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"

namespace mnemo::data {

struct SyntheticOptions {
  int64_t nodes = 10000;    // ids 0..nodes-1 (>= 2)
  int64_t events = 100000;  // >= 1
  uint64_t seed = 1;
  double degree_exponent = 2.0;  // > 1, or 0 for uniform activity
  int64_t communities = 1;       // >= 1, <= nodes
  double mixing = 0.1;           // in [0, 1]
  int64_t bursts = 0;            // >= 0
  int64_t burst_events = 1000;   // >= 1
  double burst_factor = 20;      // >= 1
  double mean_gap = 1.0;         // > 0, seconds
};

// INVALID_ARGUMENT naming the flag (--nodes, --events, ...) for options
// outside the ranges above.
absl::Status ValidateSyntheticOptions(const SyntheticOptions& o);

// Calls emit(src, dst, time) for every event, in time order.
absl::Status GenerateSynthetic(
    const SyntheticOptions& o,
    const std::function<void(int64_t src, int64_t dst, int64_t time)>& emit);

// Writes the stream to `path` in the SNAP format ("src dst time" lines),
// gzip-compressed when the path ends in ".gz". The file is written under a
// temporary name and renamed when complete.
absl::Status WriteSynthetic(const SyntheticOptions& o, const std::string& path);

}  // namespace mnemo::data

#endif  // MNEMO_TRAINER_DATA_SYNTHETIC_H_
