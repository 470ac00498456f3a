// The enumerated training options that have no home of their own in the
// layers below (the model kind, the neighbour strategy and the partitioner
// do: trainer/model/model_spec.h, trainer/data/neighbor_sampler.h,
// trainer/plan/batch_plan.h). Torch-free: the CLI parses flags into them.
// Each Parse* takes the text a user gives and returns INVALID_ARGUMENT
// naming the flag and its accepted values otherwise; each *Name gives that
// text back (summary.json, the run-configuration text).
#ifndef MNEMO_TRAINER_RUNTIME_TRAIN_ENUMS_H_
#define MNEMO_TRAINER_RUNTIME_TRAIN_ENUMS_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace mnemo::runtime {

// --protocol (docs/training.md "Evaluation protocol").
enum class Protocol {
  kTgnReference,  // "tgn-reference": as twitter-research/tgn
  kMnemo,         // "mnemo": no test-time data in training statistics
  kTgb,           // "tgb": the Temporal Graph Benchmark's MRR ranking
};
absl::StatusOr<Protocol> ParseProtocol(std::string_view name);
std::string_view ProtocolName(Protocol protocol);

// --precision.
enum class Precision {
  kFp32,  // "fp32"
  kBf16,  // "bf16": autocast with fp32 master weights
};
absl::StatusOr<Precision> ParsePrecision(std::string_view name);
std::string_view PrecisionName(Precision precision);

// --grad-comm: the type gradients travel in through the all-reduce.
enum class GradComm {
  kFp32,  // "fp32": as computed
  kBf16,  // "bf16": halved bytes; accumulated and stepped in fp32
};
absl::StatusOr<GradComm> ParseGradComm(std::string_view name);
std::string_view GradCommName(GradComm comm);

// --push-scope (DepTGL): which states a worker pushes.
enum class PushScope {
  kAdvanced,  // "advanced": every state it advanced
  kOwned,     // "owned": the paper's owner states only
};
absl::StatusOr<PushScope> ParsePushScope(std::string_view name);
std::string_view PushScopeName(PushScope scope);

// --sync-scope (DepTGL): what a refresh pulls.
enum class SyncScope {
  kReads,     // "reads": also the remote neighbours and negatives read
  kFrontier,  // "frontier": the paper's N_sync
};
absl::StatusOr<SyncScope> ParseSyncScope(std::string_view name);
std::string_view SyncScopeName(SyncScope scope);

// --device: where the model, node memory and batch tensors live.
struct Device {
  enum class Kind { kCpu, kCuda };
  Kind kind = Kind::kCpu;
  // kCuda: the GPU's index among the visible ones (CUDA_VISIBLE_DEVICES);
  // -1: the worker's rank (one process per GPU), 0 in one process.
  int index = -1;
  bool cuda() const { return kind == Kind::kCuda; }
  bool operator==(const Device& o) const {
    return kind == o.kind && index == o.index;
  }
};
// "cpu", "cuda" or "cuda:N" (N >= 0).
absl::StatusOr<Device> ParseDevice(std::string_view name);
std::string DeviceName(const Device& device);

}  // namespace mnemo::runtime

#endif  // MNEMO_TRAINER_RUNTIME_TRAIN_ENUMS_H_
