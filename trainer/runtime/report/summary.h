// summary.json and metrics.csv: the stable, documented outputs of a run
// (see docs/outputs.md "summary.json").
#ifndef MNEMO_TRAINER_RUNTIME_REPORT_SUMMARY_H_
#define MNEMO_TRAINER_RUNTIME_REPORT_SUMMARY_H_

#include <string>

#include "absl/status/status.h"
#include "trainer/data/event_log.h"
#include "trainer/data/split.h"
#include "trainer/runtime/train.h"

namespace mnemo::runtime {

inline constexpr char kVersion[] = "0.1.0";

struct SummaryInfo {
  const TrainOptions* options = nullptr;
  std::string data_path;
  const data::EventLog* log = nullptr;
  const data::Split* split = nullptr;
  int threads = 0;
  int64_t eval_batch_size = 0;  // as used
  // The sizes derived from the data rather than given: "window_events",
  // "batch_size" or both, comma separated (trainer/runtime/depbloom_sizes.h).
  std::string derived_sizes;
  // oneDNN's CPU ISA ceiling set for this run ("" when none was set).
  std::string onednn_isa_cap;
  // How malloc serves tensors (allocator.h).
  std::string malloc;
  // The device trained on ("cpu", "cuda:0"), the GPU's name and the peak
  // bytes LibTorch's allocator held on it (rank 0's; "" and 0 on the CPU).
  std::string device = "cpu";
  std::string gpu_name;
  int64_t peak_gpu_bytes = 0;
  // Whether fp32 products on the GPU took TF32 (false on the CPU).
  bool tf32 = false;
  // How far the training loop prepared the next batch while one computed
  // ("none", "prepare", "prepare+stage").
  std::string batch_lookahead = "none";
  // The run's id (as in its checkpoints; kept across --resume).
  std::string run_id;
};

std::string SummaryJson(const SummaryInfo& info, const TrainResult& result);

// Writes summary.json, metrics.csv and id_map.csv into `dir`.
absl::Status WriteOutputs(const std::string& dir, const data::EventLog& log,
                          const TrainResult& result);

}  // namespace mnemo::runtime

#endif  // MNEMO_TRAINER_RUNTIME_REPORT_SUMMARY_H_
