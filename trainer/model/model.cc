#include "trainer/model/model.h"

#include "trainer/model/apan.h"
#include "trainer/model/memory_models.h"
#include "trainer/model/tgat.h"

namespace mnemo::model {
namespace F = torch::nn::functional;

torch::Tensor Loss(const ModelOutput& out) {
  return F::binary_cross_entropy_with_logits(out.pos_logits,
                                             torch::ones_like(out.pos_logits)) +
         F::binary_cross_entropy_with_logits(out.neg_logits,
                                             torch::zeros_like(out.neg_logits));
}

Model MakeModel(const ModelOptions& options) {
  switch (options.kind) {
    case ModelKind::kTgn:
      return std::make_shared<TgnImpl>(options);
    case ModelKind::kJodie:
      return std::make_shared<JodieImpl>(options);
    case ModelKind::kApan:
      return std::make_shared<ApanImpl>(options);
    case ModelKind::kTgat:
      return std::make_shared<TgatImpl>(options);
  }
  return nullptr;
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
