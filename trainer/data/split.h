// Chronological train/validation/test splits as in the TGN protocol.
#ifndef MNEMO_TRAINER_DATA_SPLIT_H_
#define MNEMO_TRAINER_DATA_SPLIT_H_

#include <cstdint>
#include <vector>

#include "trainer/data/event_log.h"

namespace mnemo::data {

struct SplitOptions {
  double val_quantile = 0.70;   // val starts after this time quantile
  double test_quantile = 0.85;  // test starts after this time quantile
  // Share of all nodes held out of training for new-node evaluation, drawn
  // from the nodes that appear after the validation cut-off (TGN protocol).
  double new_node_fraction = 0.10;
  // Seed of the new-node hold-out; independent of the training seed.
  uint64_t seed = 2020;
  // Draw the hold-out exactly as the TGN reference does (Python's
  // random.sample over its set of late node ids, python_random.h), so both
  // train on the same events; else a Fisher-Yates draw over dense ids.
  bool reference_draw = true;
};

// Event indices (into the EventLog, ascending, so time-ordered) per split.
struct Split {
  double val_time = 0;   // train: t <= val_time
  double test_time = 0;  // val: val_time < t <= test_time; test: t > test_time
  std::vector<int64_t> train;  // without events touching held-out nodes
  std::vector<int64_t> val;
  std::vector<int64_t> test;
  std::vector<int64_t> new_node_val;  // val events with a node unseen in train
  std::vector<int64_t> new_node_test;
  std::vector<uint8_t> held_out_node;  // per node: 1 if held out of training
  std::vector<uint8_t> new_node;       // per node: 1 if not in the train set
  std::vector<int32_t> train_destinations;  // sorted unique train dst ids
  std::vector<int32_t> all_destinations;    // sorted unique dst ids, all events
};

// Quantile with linear interpolation (numpy's default) of sorted `t`.
double Quantile(const Column<double>& sorted_t, double q);

Split MakeSplit(const EventLog& log, const SplitOptions& options);

}  // namespace mnemo::data

#endif  // MNEMO_TRAINER_DATA_SPLIT_H_
