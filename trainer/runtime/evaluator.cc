#include "trainer/runtime/evaluator.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <optional>

#include "absl/strings/str_format.h"
#include "trainer/data/negative_sampler.h"
#include "trainer/runtime/batch_staging.h"
#include "trainer/runtime/engine_util.h"
#include "trainer/runtime/metrics.h"
#include "util/status_macros.h"

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
  // A batch built and (on a GPU) staged; two, so that the next batch is
  // built while the device scores this one.
  struct Built {
    model::BatchTensors batch;
    PositiveUpdate update;
    int64_t n = 0;
    bool ready = false;
  };
  Built built[2];
  auto build = [&](int64_t begin, Built* b) -> absl::Status {
    b->n = std::min<int64_t>(s.batch_size, total - begin);
    negs.Sample(b->n, neg.data());
    s.builder->Prepare(events.data() + begin, neg.data(), b->n, nullptr, 0,
                       sampler ? &*sampler : nullptr);
    if (s.acquire) {
      RETURN_IF_ERROR(s.acquire(begin / s.batch_size, s.builder->StateNodes()));
    }
    s.builder->Finish(*state, s.time_gaps, &b->batch, &b->update);
    b->ready = true;
    return absl::OkStatus();
  };
  // A working set admits the next batch's states only after this batch's
  // update: no look-ahead there.
  const bool ahead = s.prepare_ahead && !s.acquire;
  const bool cuda = s.builder->device().is_cuda();
  int64_t index = 0;
  for (int64_t begin = 0; begin < total; begin += s.batch_size, ++index) {
    Built& b = built[index % 2];
    if (!b.ready) RETURN_IF_ERROR(build(begin, &b));
    b.ready = false;
    const int64_t n = b.n;
    model::ModelOutput out;
    {
      AutocastScope autocast(s.bf16, s.builder->device().type());
      out = model->Forward(*state, b.batch);
    }
    auto score = [&](const torch::Tensor& pos, const torch::Tensor& neg_logits,
                     double loss) -> absl::Status {
      if (!metrics.AddBatch(pos.data_ptr<float>(), neg_logits.data_ptr<float>(),
                            n)) {
        return absl::InternalError(absl::StrFormat(
            "%s, batch %d (events %d-%d of %d): the model's scores are not "
            "finite: the parameters have diverged (lower --lr, now %g) or "
            "the data holds extreme values",
            label, begin / s.batch_size, begin, begin + n - 1, total, s.lr));
      }
      loss_sum += loss;
      ++batches;
      return absl::OkStatus();
    };
    // On a GPU the scores and the loss come back in one copy, read after
    // the next batch is built; on the CPU they are read at once.
    std::function<torch::Tensor()> read;
    if (cuda) {
      read = ReadToHostLater(
          torch::cat({out.pos_logits.reshape(-1), out.neg_logits.reshape(-1),
                      model::Loss(out).reshape({1})})
              .to(torch::kFloat));
    } else {
      RETURN_IF_ERROR(score(out.pos_logits.contiguous(),
                            out.neg_logits.contiguous(),
                            model::Loss(out).item<double>()));
    }
    state->Apply(b.update, out.memory, out.rows);
    if (s.changed) s.changed(b.update.node_ids);
    if (ahead && begin + s.batch_size < total) {
      RETURN_IF_ERROR(build(begin + s.batch_size, &built[(index + 1) % 2]));
    }
    if (read) {
      const torch::Tensor h = read();
      RETURN_IF_ERROR(
          score(h.narrow(0, 0, n), h.narrow(0, n, n), h[2 * n].item<double>()));
    }
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

absl::StatusOr<RankResult> EvaluateRanking(
    const EvalSetup& s, const std::vector<int64_t>& events,
    const data::RankingNegatives& negatives, const std::string& label,
    memory::NodeMemory* state, Progress* progress, int64_t max_rows) {
  torch::NoGradGuard no_grad;
  model::Model model = s.model;  // shares the module
  model->eval();
  const int64_t total = events.size();
  if (negatives.positives() != total) {
    return absl::InternalError(
        absl::StrFormat("%s: %d negative lists for %d events", label,
                        negatives.positives(), total));
  }
  std::optional<data::NeighborSampler> sampler;
  if (model->needs().neighbors || model->needs().mail_to_neighbors) {
    sampler.emplace(s.graph, s.neighbors, s.strategy, /*seed=*/1000);
  }
  RankingMetrics metrics;
  progress->Start(label, total);
  model::BatchTensors batch;
  PositiveUpdate update;
  std::vector<int32_t> negs;
  // Rows of one scoring chunk: the positive (event) repeated per negative.
  std::vector<int64_t> row_event;
  std::vector<int32_t> row_neg;
  std::vector<int64_t> row_owner;  // index of the positive in the batch
  std::vector<float> pos_score;
  std::vector<uint8_t> has_pos;
  std::vector<std::vector<float>> neg_score;
  int64_t scored = 0;
  auto not_finite = [&](int64_t begin, int64_t n) {
    return absl::InternalError(absl::StrFormat(
        "%s, batch %d (events %d-%d of %d): the model's scores are not "
        "finite: the parameters have diverged (lower --lr, now %g) or the "
        "data holds extreme values",
        label, begin / s.batch_size, begin, begin + n - 1, total, s.lr));
  };
  for (int64_t begin = 0; begin < total; begin += s.batch_size) {
    const int64_t n = std::min<int64_t>(s.batch_size, total - begin);
    pos_score.assign(n, 0.0f);
    has_pos.assign(n, 0);
    neg_score.assign(n, {});
    row_event.clear();
    row_neg.clear();
    row_owner.clear();
    auto score_rows = [&]() -> absl::Status {
      if (row_event.empty()) return absl::OkStatus();
      const int64_t m = static_cast<int64_t>(row_event.size());
      s.builder->Build(row_event.data(), row_neg.data(), m, *state,
                       sampler ? &*sampler : nullptr, s.time_gaps, &batch,
                       &update);
      model::ModelOutput out;
      {
        AutocastScope autocast(s.bf16, s.builder->device().type());
        out = model->Forward(*state, batch);
      }
      torch::Tensor pos =
          out.pos_logits.to(torch::kCPU).to(torch::kFloat).contiguous();
      torch::Tensor neg =
          out.neg_logits.to(torch::kCPU).to(torch::kFloat).contiguous();
      const float* p = pos.data_ptr<float>();
      const float* q = neg.data_ptr<float>();
      for (int64_t r = 0; r < m; ++r) {
        const int64_t i = row_owner[r];
        if (!has_pos[i]) {
          pos_score[i] = p[r];
          has_pos[i] = 1;
        }
        neg_score[i].push_back(q[r]);
      }
      scored += m;
      row_event.clear();
      row_neg.clear();
      row_owner.clear();
      return absl::OkStatus();
    };
    for (int64_t i = 0; i < n; ++i) {
      negatives.Get(begin + i, &negs);
      if (negs.empty()) {
        // No negative: rank 1. Its positive score still comes from a row.
        row_event.push_back(events[begin + i]);
        row_neg.push_back(s.log->dst[events[begin + i]]);
        row_owner.push_back(i);
        RETURN_IF_ERROR(score_rows());
        neg_score[i].clear();
        continue;
      }
      for (const int32_t d : negs) {
        row_event.push_back(events[begin + i]);
        row_neg.push_back(d);
        row_owner.push_back(i);
        if (static_cast<int64_t>(row_event.size()) >= max_rows) {
          RETURN_IF_ERROR(score_rows());
        }
      }
    }
    RETURN_IF_ERROR(score_rows());
    for (int64_t i = 0; i < n; ++i) {
      if (!metrics.Add(pos_score[i], neg_score[i].data(),
                       static_cast<int64_t>(neg_score[i].size()))) {
        return not_finite(begin, n);
      }
    }
    // Then the batch's own events update memory (its negatives are not
    // scored: any destination serves).
    std::vector<int32_t> any(n);
    for (int64_t i = 0; i < n; ++i) any[i] = s.log->dst[events[begin + i]];
    s.builder->Build(events.data() + begin, any.data(), n, *state,
                     sampler ? &*sampler : nullptr, s.time_gaps, &batch,
                     &update);
    model::ModelOutput out;
    {
      AutocastScope autocast(s.bf16, s.builder->device().type());
      out = model->Forward(*state, batch);
    }
    state->Apply(update, out.memory, out.rows);
    progress->Advance(n, /*loss=*/-1);
  }
  RankResult r;
  r.events = total;
  r.negatives = scored;
  r.mrr = metrics.mrr();
  r.hits_at_10 = metrics.hits_at_10();
  return r;
}

}  // namespace mnemo::runtime
