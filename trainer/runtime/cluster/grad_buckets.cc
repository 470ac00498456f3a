#include "trainer/runtime/cluster/grad_buckets.h"

#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "trainer/runtime/cluster/collectives.h"
#include "util/status_macros.h"

namespace mnemo::runtime {

// Runs after parameter `index`'s gradient has been accumulated.
class GradientBuckets::Hook : public torch::autograd::PostAccumulateGradHook {
 public:
  Hook(GradientBuckets* owner, int index) : owner_(owner), index_(index) {}
  void operator()(const torch::autograd::Variable& /*param*/) override {
    owner_->Done(index_);
  }

 private:
  GradientBuckets* const owner_;
  const int index_;
};

absl::StatusOr<std::unique_ptr<GradientBuckets>> GradientBuckets::Make(
    Collectives* group, const std::vector<torch::Tensor>& params,
    int64_t bucket_bytes, GradComm comm) {
  if (group == nullptr) {
    return absl::InvalidArgumentError("gradient buckets need a group");
  }
  std::unique_ptr<GradientBuckets> g(new GradientBuckets(group, comm));
  g->params_ = params;
  const int n = static_cast<int>(params.size());
  g->bucket_of_.assign(n, -1);
  std::vector<int64_t> offset(n, 0);  // each parameter's, in its bucket
  // Reverse order: the backward pass reaches the last parameters first.
  std::vector<std::vector<int>> members;
  std::vector<torch::TensorOptions> kinds;
  std::vector<int64_t> sizes;
  int open = -1;  // the bucket being filled
  for (int i = n - 1; i >= 0; --i) {
    const torch::Tensor& p = params[i];
    // A parameter that takes no gradient (frozen) has no bucket: no hook
    // would ever count it done, so its bucket, and every bucket after it,
    // would wait for the end of the backward pass.
    if (!p.requires_grad()) continue;
    if (!p.is_floating_point()) {
      return absl::InvalidArgumentError(
          absl::StrCat("parameter ", i, " is not floating point (",
                       std::string(p.dtype().name()), ")"));
    }
    const int64_t bytes = p.numel() * p.element_size();
    const bool fits = open >= 0 && kinds[open].dtype() == p.dtype() &&
                      kinds[open].device() == p.device() &&
                      (bucket_bytes <= 0 ||
                       sizes[open] * p.element_size() + bytes <= bucket_bytes);
    if (!fits) {
      // A parameter of another type or device, or a full bucket: the
      // buckets of one kind stay apart (bucket_bytes 0: one per kind).
      open = -1;
      if (bucket_bytes <= 0) {
        for (size_t k = 0; k < kinds.size(); ++k) {
          if (kinds[k].dtype() == p.dtype() &&
              kinds[k].device() == p.device()) {
            open = static_cast<int>(k);
          }
        }
      }
      if (open < 0) {
        open = static_cast<int>(members.size());
        members.emplace_back();
        kinds.push_back(p.options());
        sizes.push_back(0);
      }
    }
    g->bucket_of_[i] = open;
    offset[i] = sizes[open];
    sizes[open] += p.numel();
    members[open].push_back(i);
  }
  torch::NoGradGuard no_grad;
  for (size_t k = 0; k < members.size(); ++k) {
    Bucket b;
    b.flat = torch::zeros({sizes[k]}, kinds[k].requires_grad(false));
    if (comm == GradComm::kBf16) b.comm = b.flat.to(torch::kBFloat16);
    b.params = std::move(members[k]);
    g->buckets_.push_back(std::move(b));
  }
  for (int i = 0; i < n; ++i) {
    if (g->bucket_of_[i] < 0) {  // frozen
      g->views_.emplace_back();
      continue;
    }
    g->views_.push_back(g->buckets_[g->bucket_of_[i]]
                            .flat.narrow(0, offset[i], params[i].numel())
                            .view(params[i].sizes()));
    g->BindGrad(i);
    torch::autograd::impl::set_post_acc_grad_hooks(
        params[i], std::make_unique<Hook>(g.get(), i));
  }
  return g;
}

GradientBuckets::~GradientBuckets() {
  for (size_t i = 0; i < params_.size(); ++i) {
    if (bucket_of_[i] < 0) continue;
    torch::autograd::impl::set_post_acc_grad_hooks(params_[i], nullptr);
  }
}

void GradientBuckets::BindGrad(int i) {
  if (bucket_of_[i] < 0) return;  // frozen: no bucket
  const torch::Tensor& p = params_[i];
  if (!p.grad().is_same(views_[i])) p.mutable_grad() = views_[i];
}

void GradientBuckets::Zero() {
  for (Bucket& b : buckets_) {
    b.flat.zero_();
    b.pending = static_cast<int>(b.params.size());
  }
  for (int i = 0; i < static_cast<int>(params_.size()); ++i) BindGrad(i);
  next_ = 0;
  started_early_ = 0;
  error_ = absl::OkStatus();
  in_batch_ = true;
}

void GradientBuckets::Done(int i) {
  // Outside a batch (an evaluation's or a test's backward pass) nothing
  // starts: collectives must be started by every rank in the same order.
  if (!in_batch_) return;
  Bucket& b = buckets_[bucket_of_[i]];
  if (b.pending > 0) --b.pending;
  StartReady(/*early=*/true);
}

void GradientBuckets::StartReady(bool early) {
  while (next_ < static_cast<int>(buckets_.size()) &&
         buckets_[next_].pending == 0) {
    if (absl::Status s = Start(buckets_[next_]); !s.ok() && error_.ok()) {
      error_ = s;
    }
    if (early) ++started_early_;
    ++next_;
  }
}

absl::Status GradientBuckets::Start(Bucket& b) {
  const int world = group_->world_size();
  torch::NoGradGuard no_grad;
  if (world > 1) b.flat.div_(world);
  if (comm_ == GradComm::kBf16 && world > 1) {
    b.comm.copy_(b.flat);
    return group_->StartAllReduceSum(b.comm);
  }
  return group_->StartAllReduceSum(b.flat);
}

absl::Status GradientBuckets::Flush() {
  if (!in_batch_) return absl::OkStatus();
  for (Bucket& b : buckets_) b.pending = 0;
  StartReady(/*early=*/false);
  return error_;
}

bool GradientBuckets::waits_on_host() const {
  return group_->reduces_on_host();
}

absl::Status GradientBuckets::Wait() {
  RETURN_IF_ERROR(Flush());
  in_batch_ = false;
  RETURN_IF_ERROR(group_->WaitStarted());
  if (comm_ == GradComm::kBf16 && group_->world_size() > 1) {
    torch::NoGradGuard no_grad;
    for (Bucket& b : buckets_) b.flat.copy_(b.comm);
  }
  return absl::OkStatus();
}

}  // namespace mnemo::runtime
