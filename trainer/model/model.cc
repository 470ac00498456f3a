#include "trainer/model/model.h"

namespace mnemo::model {
namespace F = torch::nn::functional;

torch::Tensor Loss(const ModelOutput& out) {
  return F::binary_cross_entropy_with_logits(out.pos_logits,
                                             torch::ones_like(out.pos_logits)) +
         F::binary_cross_entropy_with_logits(out.neg_logits,
                                             torch::zeros_like(out.neg_logits));
}

double ParameterChecksum(torch::nn::Module& module) {
  torch::NoGradGuard guard;
  double sum = 0;
  for (const auto& p : module.parameters()) {
    sum += p.to(torch::kDouble).sum().item<double>();
  }
  return sum;
}

}  // namespace mnemo::model
