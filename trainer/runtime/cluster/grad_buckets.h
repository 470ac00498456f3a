// A cluster's gradients in persistent flat buckets, each all-reduced as
// soon as the backward pass has produced it (docs/design.md "The gradient
// all-reduce"), as PyTorch DDP's reducer does.
//
// Every parameter's gradient is a view of one bucket's flat buffer, for the
// whole run: backward adds into it (no copy in or out), the optimizer reads
// it. A parameter that takes no gradient (requires_grad false: TGN's key
// bias) has no bucket and is not all-reduced; its gradient stays whatever
// the step defines (zeros), equal on every rank. Buckets hold the parameters in
// reverse order (the backward pass produces the last layers' gradients first),
// each up to about `bytes`. A hook after each parameter's gradient accumulation
// counts the bucket's parameters done; a bucket whose parameters are all done
// starts its all-reduce at once, unless a bucket before it is still waiting:
// buckets start in index order on every rank (a collective's order must agree),
// whatever order one rank's graph produced them in. Parameters the batch's
// graph did not reach (and a rank without targets, which runs no backward
// pass) keep zeros, and their buckets start when the backward pass ends.
//
// Each bucket is divided by the number of ranks before its sum, so the sum
// is the mean (with 2 ranks exactly today's sum-then-divide). With bf16
// communication a bucket travels as a bf16 copy, and the sum comes back
// into the fp32 buffer the optimizer steps from.
#ifndef MNEMO_TRAINER_RUNTIME_CLUSTER_GRAD_BUCKETS_H_
#define MNEMO_TRAINER_RUNTIME_CLUSTER_GRAD_BUCKETS_H_

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "trainer/runtime/train_enums.h"

namespace mnemo::runtime {

class Collectives;  // collectives.h

class GradientBuckets {
 public:
  // Lays out `params`' gradients in buckets of about `bucket_bytes` (0: one
  // bucket per type and device) and hooks their accumulation. `group` (not
  // owned) outlives this. The parameters must not be replaced (their data
  // may change) while this lives.
  static absl::StatusOr<std::unique_ptr<GradientBuckets>> Make(
      Collectives* group, const std::vector<torch::Tensor>& params,
      int64_t bucket_bytes, GradComm comm);
  ~GradientBuckets();
  GradientBuckets(const GradientBuckets&) = delete;
  GradientBuckets& operator=(const GradientBuckets&) = delete;

  // A batch starts: every gradient zero, no bucket started. (Every
  // parameter's gradient is its view again, should anything have replaced
  // it.)
  void Zero();
  // The backward pass has ended (or did not run): the buckets not started
  // yet start, in order.
  absl::Status Flush();
  // Waits for every bucket's sum: the gradients are the ranks' mean. The
  // first error (a start's or a wait's) is returned.
  absl::Status Wait();

  // Whether Wait() blocks this thread (gloo sums on the host) rather than
  // only the device's stream (NCCL).
  bool waits_on_host() const;

  int num_buckets() const { return static_cast<int>(buckets_.size()); }
  // The parameters (indices into `params`) of bucket `b`, in its order.
  const std::vector<int>& bucket_params(int b) const {
    return buckets_[b].params;
  }
  // Bytes of bucket `b`'s gradients (before any compression).
  int64_t bucket_bytes(int b) const {
    return buckets_[b].flat.numel() * buckets_[b].flat.element_size();
  }
  // Buckets started during the backward pass since Zero() (by the hooks,
  // not by Flush): how much of the all-reduce the pass overlapped.
  int started_early() const { return started_early_; }

 private:
  class Hook;
  struct Bucket {
    torch::Tensor flat;       // the gradients, end to end
    torch::Tensor comm;       // bf16: what travels; else undefined
    std::vector<int> params;  // indices into params_
    int pending = 0;          // parameters whose gradient is not done
  };
  GradientBuckets(Collectives* group, GradComm comm)
      : group_(group), comm_(comm) {}
  // Parameter `i`'s gradient is done (the hook).
  void Done(int i);
  // Starts every bucket from next_ on that has nothing pending.
  void StartReady(bool early);
  absl::Status Start(Bucket& b);
  // Parameter i's gradient is its view of the bucket (again, should
  // anything have replaced it).
  void BindGrad(int i);

  Collectives* const group_;
  const GradComm comm_;
  std::vector<torch::Tensor> params_;
  std::vector<int> bucket_of_;        // per parameter
  std::vector<torch::Tensor> views_;  // per parameter: its gradient
  std::vector<Bucket> buckets_;
  int next_ = 0;  // the first bucket not started
  int started_early_ = 0;
  bool in_batch_ = false;
  absl::Status error_;  // the first start's failure
};

}  // namespace mnemo::runtime

#endif  // MNEMO_TRAINER_RUNTIME_CLUSTER_GRAD_BUCKETS_H_
