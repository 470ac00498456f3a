#include "trainer/runtime/cluster/worker.h"

#include "absl/strings/str_format.h"
#include "util/proc.h"
#include "util/status_macros.h"

namespace mnemo::runtime {

absl::StatusOr<std::unique_ptr<ClusterWorker>> ClusterWorker::Connect(
    const DistributedContext* dist, bool cuda,
    const std::vector<torch::Tensor>& parameters,
    const GradientOptions& gradients, CollectiveStats* collectives,
    bool all_reduce, bool pipeline) {
  if (dist->store == nullptr || dist->cluster == nullptr) {
    return absl::InvalidArgumentError(
        "a distributed run needs a node-state store and a coordinator");
  }
  std::unique_ptr<ClusterWorker> w(new ClusterWorker(dist));
  w->collectives_ = collectives;
  w->owner_ =
      dist->owner ? dist->owner : [world = dist->world_size](int64_t u) {
        return HashOwner(u, world);
      };
  CollectiveOptions co;
  co.rendezvous = dist->rendezvous;
  co.master_addr = dist->master_addr;
  co.master_port = dist->master_port;
  co.rank = dist->rank;
  co.world_size = dist->world_size;
  co.bind_host = dist->bind_host;
  co.timeout = dist->timeout;
  // Control values (host doubles and ints) go over gloo, apart from the
  // gradients, which go over NCCL on a GPU.
  CollectiveOptions control = co;
  control.prefix = "mnemo-control";
  ASSIGN_OR_RETURN(w->control_group_, Collectives::Connect(control));
  w->control_ = ControlOver(w->control_group_.get());
  if (pipeline) {
    // Host rows and parameters between neighbours of a pipeline (gloo; on
    // a GPU they are copied through the host).
    CollectiveOptions p = co;
    p.prefix = "mnemo-pipeline";
    ASSIGN_OR_RETURN(w->pipeline_group_, Collectives::Connect(p));
  }
  if (cuda) co.backend = CollectiveOptions::Backend::kNccl;
  ASSIGN_OR_RETURN(w->gradients_, Collectives::Connect(co));
  // Identical initial parameters everywhere (the seed already makes them
  // equal; the broadcast makes it a guarantee).
  torch::NoGradGuard guard;
  RETURN_IF_ERROR(w->gradients_->Broadcast(parameters, 0));
  if (!all_reduce) return w;
  ASSIGN_OR_RETURN(
      w->buckets_,
      GradientBuckets::Make(
          w->gradients_.get(), parameters,
          static_cast<int64_t>(gradients.BucketMb(cuda) * (1 << 20)),
          gradients.comm));
  return w;
}

absl::Status ClusterWorker::ShareFromLeader(std::vector<double>* values) {
  ScopedTimer timer(&collectives_->allreduce_seconds);
  return control_->Broadcast(values, 0);
}

absl::Status ClusterWorker::Barrier(const std::string& name) {
  ScopedTimer timer(&collectives_->barrier_seconds);
  return dist_->cluster->Barrier(name);
}

absl::Status ClusterWorker::WaitForLeader(const std::string& name) {
  return dist_->cluster->Barrier(name, /*timeout_s=*/0);
}

absl::Status ClusterWorker::Fail(absl::Status s) const {
  if (!s.ok()) dist_->cluster->ReportError(std::string(s.message()));
  return s;
}

}  // namespace mnemo::runtime
