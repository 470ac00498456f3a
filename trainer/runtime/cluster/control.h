// The control collectives of a cluster: the small values every rank must
// agree on (the training loss, validation figures and early stopping,
// parameter checks, checkpoint outcomes, resume points, the plan's
// partition, communication statistics), kept apart from the gradient
// all-reduce (grad_buckets.h) so that each can travel over the
// group that suits it. Calls are collective: every rank makes them in the
// same order. Torch-free.
#ifndef MNEMO_TRAINER_RUNTIME_CLUSTER_CONTROL_H_
#define MNEMO_TRAINER_RUNTIME_CLUSTER_CONTROL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace mnemo::runtime {

class Collectives;

class ControlChannel {
 public:
  virtual ~ControlChannel() = default;
  // Every rank ends with rank `root`'s `values` (same length everywhere).
  virtual absl::Status Broadcast(std::vector<double>* values, int root) = 0;
  virtual absl::Status Broadcast(std::vector<int32_t>* values, int root) = 0;
  // Every rank ends with rank `root`'s `bytes` (of any length: the root's
  // is sent first).
  virtual absl::Status Broadcast(std::string* bytes, int root) = 0;
  // Every rank ends with the element-wise sum over ranks.
  virtual absl::Status Sum(std::vector<double>* values) = 0;
  // Seconds spent in these calls (waits for slower ranks included).
  virtual double seconds() const = 0;
};

// Control collectives over a c10d group (not owned; it must outlive the
// channel): the engine gives them a gloo group of their own, apart from the
// gradients' (NCCL on a GPU).
std::unique_ptr<ControlChannel> ControlOver(Collectives* group);

}  // namespace mnemo::runtime

#endif  // MNEMO_TRAINER_RUNTIME_CLUSTER_CONTROL_H_
