#include "trainer/runtime/evaluator.h"

#include <limits>
#include <optional>

#include "absl/strings/str_format.h"
#include "trainer/data/negative_sampler.h"
#include "trainer/runtime/engine_util.h"
#include "trainer/runtime/metrics.h"

namespace mnemo::runtime {

EvalResult NoEvalResult() {
  EvalResult r;
  r.ap = r.auc = r.ap_batch_mean = r.auc_batch_mean =
      std::numeric_limits<double>::quiet_NaN();
  return r;
}

absl::StatusOr<EvalResult> Evaluate(const EvalSetup& s,
                                    const std::vector<int64_t>& events,
                                    const EvalNegatives& negatives,
                                    const std::string& label,
                                    memory::NodeMemory* state,
                                    Progress* progress) {
  torch::NoGradGuard no_grad;
  model::Model model = s.model;  // shares the module
  model->eval();
  data::NegativeSampler negs(negatives.candidates, negatives.seed);
  std::optional<data::NeighborSampler> sampler;
  if (model->needs().neighbors || model->needs().mail_to_neighbors) {
    sampler.emplace(s.graph, s.neighbors, s.strategy, negatives.seed + 1000);
  }
  LinkMetrics metrics;
  double loss_sum = 0;
  int64_t batches = 0;
  const int64_t total = events.size();
  progress->Start(label, total);
  std::vector<int32_t> neg(s.batch_size);
  model::BatchTensors batch;
  PositiveUpdate update;
  for (int64_t begin = 0; begin < total; begin += s.batch_size) {
    const int64_t n = std::min<int64_t>(s.batch_size, total - begin);
    negs.Sample(n, neg.data());
    s.builder->Build(events.data() + begin, neg.data(), n, *state,
                     sampler ? &*sampler : nullptr, s.time_gaps, &batch,
                     &update);
    model::ModelOutput out;
    {
      AutocastScope autocast(s.bf16, s.builder->device().type());
      out = model->Forward(*state, batch);
    }
    torch::Tensor pos = out.pos_logits.to(torch::kCPU).contiguous();
    torch::Tensor neg_logits = out.neg_logits.to(torch::kCPU).contiguous();
    if (!metrics.AddBatch(pos.data_ptr<float>(), neg_logits.data_ptr<float>(),
                          n)) {
      return absl::InternalError(absl::StrFormat(
          "%s, batch %d (events %d-%d of %d): the model's scores are not "
          "finite: the parameters have diverged (lower --lr, now %g) or the "
          "data holds extreme values",
          label, begin / s.batch_size, begin, begin + n - 1, total, s.lr));
    }
    loss_sum += model::Loss(out).item<double>();
    ++batches;
    state->Apply(update, out.memory, out.rows);
    progress->Advance(n, /*loss=*/-1);  // evaluation: no loss
  }
  EvalResult r = NoEvalResult();
  r.events = total;
  if (total > 0) {
    r.ap = metrics.ap();
    r.auc = metrics.auc();
    r.ap_batch_mean = metrics.ap_batch_mean();
    r.auc_batch_mean = metrics.auc_batch_mean();
    r.loss = loss_sum / batches;
  }
  return r;
}

}  // namespace mnemo::runtime
