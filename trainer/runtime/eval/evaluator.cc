#include "trainer/runtime/eval/evaluator.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "trainer/batch/lookahead.h"
#include "trainer/data/negative_sampler.h"
#include "trainer/platform/autocast.h"
#include "trainer/platform/cuda_transfer.h"
#include "trainer/runtime/eval/metrics.h"
#include "util/proc.h"
#include "util/status_macros.h"

namespace mnemo::runtime {

EvalResult NoEvalResult() {
  EvalResult r;
  r.ap = r.auc = r.ap_batch_mean = r.auc_batch_mean =
      std::numeric_limits<double>::quiet_NaN();
  return r;
}

namespace {

// One evaluation batch: a slot of the look-ahead loop.
struct EvalBatch {
  int64_t begin = 0, n = 0;  // its events [begin, begin + n) of the pass
  std::vector<int32_t> negatives;
  batch::BatchTensors tensors;
  batch::PositiveUpdate update;
  // A GPU's scores and loss, read at the batch's end.
  std::function<torch::Tensor()> read;
};

// A pass's figures from its metrics and the sum of its batches' losses: the
// one reckoning for a pass and for the scores of a shared one
// (ResultOfScores), so that both give the same figures.
EvalResult Figures(const LinkMetrics& metrics, double loss_sum, int64_t batches,
                   int64_t events) {
  EvalResult r = NoEvalResult();
  r.events = events;
  if (batches > 0) {
    r.ap = metrics.ap();
    r.auc = metrics.auc();
    r.ap_batch_mean = metrics.ap_batch_mean();
    r.auc_batch_mean = metrics.auc_batch_mean();
    r.loss = loss_sum / static_cast<double>(batches);
  }
  return r;
}

// One link-prediction pass (Evaluate): its state and the look-ahead loop's
// calls.
class LinkPass {
 public:
  LinkPass(const EvalSetup& s, const std::vector<int64_t>& events,
           const EvalNegatives& negatives, const std::string& label,
           memory::WorkerMemory* memory, Progress* progress, PassRange range,
           PassScores* scores)
      : s_(s),
        events_(events),
        label_(label),
        memory_(memory),
        progress_(progress),
        range_(range),
        scores_(scores),
        model_(s.model),
        negs_(negatives.candidates, negatives.seed),
        cuda_(s.builder->device().is_cuda()) {
    if (model_->needs().neighbors || model_->needs().mail_to_neighbors) {
      sampler_.emplace(s.graph, s.neighbors, s.strategy, negatives.seed + 1000);
    }
  }

  absl::StatusOr<EvalResult> Run() {
    model_->eval();
    const int64_t total = static_cast<int64_t>(events_.size());
    progress_->Start(label_, total);
    // A bounded memory admits the next batch's states after this one's
    // update: no look-ahead there.
    const batch::Ahead ahead = s_.prepare_ahead && !memory_->bounded()
                                   ? batch::Ahead::kFinish
                                   : batch::Ahead::kNone;
    EvalBatch slots[2];
    const int64_t batches =
        std::min((total + s_.batch_size - 1) / s_.batch_size, range_.score_end);
    // Wall time of the replayed batches, then of the scored ones.
    const double t0 = MonotonicSeconds();
    score_start_ = range_.score_begin > 0 ? -1 : t0;
    // bf16: one autocast region for the pass, on only while the model
    // runs; each weight's cast is made once and kept (the weights do not
    // change during evaluation), dropped when the pass ends, before any
    // optimizer step.
    autocast_.Begin(s_.bf16, s_.builder->device().type());
    autocast_.Pause();
    RETURN_IF_ERROR(batch::RunLookahead(batches, ahead, slots, Calls()));
    autocast_.End();
    if (scores_ != nullptr) {
      const double t1 = MonotonicSeconds();
      const double mid = score_start_ < 0 ? t1 : score_start_;
      scores_->replay_seconds += mid - t0;
      scores_->score_seconds += t1 - mid;
    }
    return Figures(metrics_, loss_sum_, batches_, total);
  }

 private:
  batch::LookaheadCalls<EvalBatch> Calls() {
    batch::LookaheadCalls<EvalBatch> c;
    // Sampling: the batch's negatives and neighbours.
    c.prepare = [this](int64_t i, EvalBatch* b) {
      b->begin = i * s_.batch_size;
      b->n = std::min<int64_t>(s_.batch_size, events_.size() - b->begin);
      b->negatives.resize(b->n);
      negs_.Sample(b->n, b->negatives.data());
      s_.builder->Prepare(events_.data() + b->begin, b->negatives.data(), b->n,
                          nullptr, 0, sampler_ ? &*sampler_ : nullptr);
      return absl::OkStatus();
    };
    // The batch's states held, its tensors built (and staged).
    c.finish = [this](int64_t, EvalBatch* b) -> absl::Status {
      if (absl::Status s =
              memory_->Ready(s_.builder->StateNodes(), s_.versions);
          !s.ok()) {
        return absl::Status(s.code(), absl::StrCat(label_, ": ", s.message()));
      }
      s_.builder->Finish(memory_->view(), s_.time_gaps, &b->tensors,
                         &b->update);
      return absl::OkStatus();
    };
    // Scored (on a GPU the scores come back with the batch's wait), then
    // applied: predict, then update.
    c.run = [this](int64_t i, EvalBatch* b) -> absl::Status {
      b->read = nullptr;
      if (i < range_.score_begin) {
        // Replayed: the memory update alone, as the scoring pass makes it.
        autocast_.Resume();
        model::UpdatedMemory updated =
            model_->UpdateMemory(memory_->view(), b->tensors);
        autocast_.Pause();
        memory_->Advance(b->update, updated.memory, updated.rows, {}, {});
        return absl::OkStatus();
      }
      if (score_start_ < 0) score_start_ = MonotonicSeconds();
      autocast_.Resume();
      model::ModelOutput out = model_->Forward(memory_->view(), b->tensors);
      autocast_.Pause();
      if (cuda_) {
        b->read = platform::ReadToHostLater(
            torch::cat({out.pos_logits.reshape(-1), out.neg_logits.reshape(-1),
                        model::Loss(out).reshape({1})})
                .to(torch::kFloat));
      } else {
        RETURN_IF_ERROR(Score(*b, out.pos_logits.contiguous(),
                              out.neg_logits.contiguous(),
                              model::Loss(out).item<double>()));
      }
      memory_->Advance(b->update, out.memory, out.rows, {}, {});
      return absl::OkStatus();
    };
    c.complete = [this](int64_t, EvalBatch* b) -> absl::Status {
      if (b->read) {
        const torch::Tensor h = b->read();
        const int64_t n = b->n;
        RETURN_IF_ERROR(Score(*b, h.narrow(0, 0, n), h.narrow(0, n, n),
                              h[2 * n].item<double>()));
      }
      memory_->EndBatch();
      progress_->Advance(b->n, /*loss=*/-1);  // evaluation: no loss
      return absl::OkStatus();
    };
    return c;
  }

  // Adds a batch's scores (float, on the host) to the metrics.
  absl::Status Score(const EvalBatch& b, const torch::Tensor& pos,
                     const torch::Tensor& neg, double loss) {
    if (!metrics_.AddBatch(pos.data_ptr<float>(), neg.data_ptr<float>(), b.n)) {
      return absl::InternalError(absl::StrFormat(
          "%s, batch %d (events %d-%d of %d): the model's scores are not "
          "finite: the parameters have diverged (lower --lr, now %g) or "
          "the data holds extreme values",
          label_, b.begin / s_.batch_size, b.begin, b.begin + b.n - 1,
          events_.size(), s_.lr));
    }
    loss_sum_ += loss;
    ++batches_;
    if (scores_ != nullptr) {
      scores_->batch_events.push_back(b.n);
      scores_->pos.insert(scores_->pos.end(), pos.data_ptr<float>(),
                          pos.data_ptr<float>() + b.n);
      scores_->neg.insert(scores_->neg.end(), neg.data_ptr<float>(),
                          neg.data_ptr<float>() + b.n);
      scores_->loss.push_back(loss);
    }
    return absl::OkStatus();
  }

  const EvalSetup& s_;
  const std::vector<int64_t>& events_;
  const std::string& label_;
  memory::WorkerMemory* memory_;
  Progress* progress_;
  const PassRange range_;
  PassScores* scores_;       // null: not kept
  double score_start_ = -1;  // when the first scored batch ran
  model::Model model_;       // shares the module
  data::NegativeSampler negs_;
  std::optional<data::NeighborSampler> sampler_;
  const bool cuda_;
  LinkMetrics metrics_;
  platform::AutocastRegion autocast_;  // the pass's (Run)
  double loss_sum_ = 0;
  int64_t batches_ = 0;
};

}  // namespace

absl::StatusOr<EvalResult> ResultOfScores(const PassScores& scores,
                                          int64_t events) {
  LinkMetrics metrics;
  double loss_sum = 0;
  int64_t at = 0;
  for (size_t b = 0; b < scores.batch_events.size(); ++b) {
    const int64_t n = scores.batch_events[b];
    if (!metrics.AddBatch(scores.pos.data() + at, scores.neg.data() + at, n)) {
      return absl::InternalError(absl::StrFormat(
          "evaluation batch %d: the model's scores are not finite", b));
    }
    loss_sum += scores.loss[b];
    at += n;
  }
  return Figures(metrics, loss_sum,
                 static_cast<int64_t>(scores.batch_events.size()), events);
}

absl::StatusOr<EvalResult> Evaluate(const EvalSetup& setup,
                                    const std::vector<int64_t>& events,
                                    const EvalNegatives& negatives,
                                    const std::string& label,
                                    memory::WorkerMemory* memory,
                                    Progress* progress, PassRange range,
                                    PassScores* scores) {
  torch::NoGradGuard no_grad;
  LinkPass pass(setup, events, negatives, label, memory, progress, range,
                scores);
  return pass.Run();
}

}  // namespace mnemo::runtime
