// A trainer's place in a cluster: its rank, the coordinator, the node
// ownership, and its two collective groups, the gradients' (NCCL on a GPU,
// else gloo) and a gloo group of its own for the control collectives
// (control.h), called from the training thread in the same order on every
// rank. One process has none (RunParts::cluster is null).
#ifndef MNEMO_TRAINER_RUNTIME_CLUSTER_WORKER_H_
#define MNEMO_TRAINER_RUNTIME_CLUSTER_WORKER_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "trainer/runtime/cluster/collectives.h"
#include "trainer/runtime/cluster/control.h"
#include "trainer/runtime/cluster/distributed.h"
#include "trainer/runtime/cluster/grad_buckets.h"
#include "trainer/runtime/train.h"

namespace mnemo::runtime {

class ClusterWorker {
 public:
  // Checks `dist` (a store and a coordinator), forms the control and the
  // gradient groups (NCCL when `cuda`), makes every rank's initial
  // `parameters` rank 0's and lays their gradients out in buckets as
  // `gradients` says (grad_buckets.h). A policy whose workers do not
  // all-reduce gradients (`all_reduce` false: the parameters travel down a
  // pipeline instead) gets no buckets; one that runs pipelines
  // (`pipeline`) gets a third group, gloo, for the point-to-point
  // handoffs between workers (pipeline()). `collectives` (not owned)
  // counts the control collectives' waits. Errors: a missing store or
  // coordinator (INVALID_ARGUMENT), peers that do not come (UNAVAILABLE or
  // DEADLINE_EXCEEDED).
  static absl::StatusOr<std::unique_ptr<ClusterWorker>> Connect(
      const DistributedContext* dist, bool cuda,
      const std::vector<torch::Tensor>& parameters,
      const GradientOptions& gradients, CollectiveStats* collectives,
      bool all_reduce = true, bool pipeline = false);

  const DistributedContext& dist() const { return *dist_; }
  int rank() const { return dist_->rank; }
  int world() const { return dist_->world_size; }
  bool leader() const { return rank() == 0; }
  // pi(u): the worker that owns node u.
  const std::function<int(int64_t)>& owner() const { return owner_; }
  Collectives* gradients() const { return gradients_.get(); }
  // The parameters' gradients in the gradient group's buckets (null when
  // the policy all-reduces none).
  GradientBuckets* buckets() const { return buckets_.get(); }
  // The pipeline handoffs' group (null unless the policy runs pipelines).
  Collectives* pipeline() const { return pipeline_group_.get(); }
  ControlChannel* control() const { return control_.get(); }

  // Every rank ends with rank 0's `values` (a control collective; its time
  // counted as the all-reduce's).
  absl::Status ShareFromLeader(std::vector<double>* values);
  // A named barrier of training through the coordinator (the client's
  // default deadline), its wait counted as the barriers'.
  absl::Status Barrier(const std::string& name);
  // A named barrier where the others wait while the leader evaluates or
  // tests: no fixed deadline (a dead leader fails the job through the
  // coordinator's liveness check, which releases the barrier), not counted
  // as training's wait.
  absl::Status WaitForLeader(const std::string& name);
  // Ends this worker's training with `s`: a failure is reported to the
  // coordinator, which fails the job everywhere. Returns `s`.
  absl::Status Fail(absl::Status s) const;

 private:
  explicit ClusterWorker(const DistributedContext* dist) : dist_(dist) {}

  const DistributedContext* dist_;
  std::function<int(int64_t)> owner_;
  CollectiveStats* collectives_ = nullptr;
  std::unique_ptr<Collectives> control_group_;
  std::unique_ptr<ControlChannel> control_;
  std::unique_ptr<Collectives> gradients_;
  std::unique_ptr<Collectives> pipeline_group_;
  std::unique_ptr<GradientBuckets> buckets_;  // after gradients_: uses it
};

}  // namespace mnemo::runtime

#endif  // MNEMO_TRAINER_RUNTIME_CLUSTER_WORKER_H_
