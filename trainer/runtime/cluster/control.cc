#include "trainer/runtime/cluster/control.h"

#include <torch/torch.h>

#include <cstring>

#include "trainer/runtime/cluster/collectives.h"
#include "util/proc.h"
#include "util/status_macros.h"

namespace mnemo::runtime {
namespace {

class GroupControl final : public ControlChannel {
 public:
  explicit GroupControl(Collectives* group) : group_(group) {}

  absl::Status Broadcast(std::vector<double>* values, int root) override {
    return Run(values, torch::kDouble,
               [&](torch::Tensor& t) { return group_->Broadcast({t}, root); });
  }
  absl::Status Broadcast(std::vector<int32_t>* values, int root) override {
    return Run(values, torch::kInt32,
               [&](torch::Tensor& t) { return group_->Broadcast({t}, root); });
  }
  absl::Status Broadcast(std::string* bytes, int root) override {
    std::vector<double> size = {static_cast<double>(bytes->size())};
    RETURN_IF_ERROR(Broadcast(&size, root));
    const double t0 = MonotonicSeconds();
    bytes->resize(static_cast<size_t>(size[0]));
    torch::Tensor t = torch::from_blob(
        bytes->data(), {static_cast<int64_t>(bytes->size())}, torch::kUInt8);
    absl::Status s = group_->Broadcast({t}, root);
    seconds_ += MonotonicSeconds() - t0;
    return s;
  }
  absl::Status Sum(std::vector<double>* values) override {
    return Run(values, torch::kDouble,
               [&](torch::Tensor& t) { return group_->AllReduceSum(t); });
  }
  double seconds() const override { return seconds_; }

 private:
  // Runs `op` on a tensor copy of `values` and copies the result back.
  template <typename T, typename Op>
  absl::Status Run(std::vector<T>* values, torch::ScalarType type, Op op) {
    const double t0 = MonotonicSeconds();
    torch::Tensor t =
        torch::from_blob(values->data(), {static_cast<int64_t>(values->size())},
                         type)
            .clone();
    absl::Status s = op(t);
    if (s.ok()) {
      std::memcpy(values->data(), t.data_ptr(), values->size() * sizeof(T));
    }
    seconds_ += MonotonicSeconds() - t0;
    return s;
  }

  Collectives* group_;
  double seconds_ = 0;
};

}  // namespace

std::unique_ptr<ControlChannel> ControlOver(Collectives* group) {
  return std::make_unique<GroupControl>(group);
}

}  // namespace mnemo::runtime
