// The deterministic push stream shared by the crash tests and their helper.
#ifndef MNEMO_TESTS_UNIT_MEMSTORE_CRASH_STREAM_H_
#define MNEMO_TESTS_UNIT_MEMSTORE_CRASH_STREAM_H_

#include <cstdint>
#include <string>
#include <vector>

#include "memstore/node_state_store.h"

namespace mnemo::memstore::crash_stream {

constexpr int kDim = 6;
constexpr int64_t kIds = 500;
constexpr int64_t kBatch = 32;
constexpr int64_t kCheckpointAfter = 40;

// Tiny hot tier and journal limit: spills and journal truncation happen
// while the child runs.
inline NodeStateStoreOptions Options(const std::string& dir,
                                     WritePolicy policy) {
  NodeStateStoreOptions o;
  o.dim = kDim;
  o.data_dir = dir;
  o.write_policy = policy;
  o.hot_capacity_bytes = 16 * kDim * sizeof(float);
  o.journal_limit_bytes = 16 << 10;
  return o;
}

struct Batch {
  std::vector<int64_t> ids;
  std::vector<float> states;
  std::vector<uint64_t> versions;
  std::vector<double> times;
  int32_t writer = 0;
};

// Batch b (b >= 1): kBatch ids, version 10 * b + 40 (some 10 * b + 5:
// older than batch b - 3's, so newest-wins losers where such an update
// exists), writer b % 3. Event times repeat: four batches share each one,
// as in datasets with few distinct timestamps; only versions order them.
inline Batch MakeBatch(int64_t b) {
  Batch out;
  out.writer = static_cast<int32_t>(b % 3);
  for (int64_t j = 0; j < kBatch; ++j) {
    const int64_t id = (b * 7 + j * 13 + (b * j) % 11) % kIds;
    const bool loser = j % 5 == 4;
    out.ids.push_back(id);
    out.versions.push_back(static_cast<uint64_t>(10 * b + (loser ? 5 : 40)));
    out.times.push_back(static_cast<double>(b / 4));
    for (int k = 0; k < kDim; ++k)
      out.states.push_back(static_cast<float>(b * 1000 + j) + 0.5f * k);
  }
  return out;
}

}  // namespace mnemo::memstore::crash_stream

#endif  // MNEMO_TESTS_UNIT_MEMSTORE_CRASH_STREAM_H_
