#include "trainer/runtime/eval/ranking.h"

#include <algorithm>
#include <optional>

#include "absl/strings/str_format.h"
#include "trainer/platform/autocast.h"
#include "trainer/runtime/eval/metrics.h"
#include "util/status_macros.h"

namespace mnemo::runtime {
namespace {

// One ranking pass: per batch, its positives' and negatives' scores in
// chunks of rows, then the batch applied to memory.
class RankingPass {
 public:
  RankingPass(const EvalSetup& s, const std::vector<int64_t>& events,
              const data::RankingNegatives& negatives, const std::string& label,
              memory::WorkerMemory* memory, int64_t max_rows)
      : s_(s),
        events_(events),
        negatives_(negatives),
        label_(label),
        memory_(memory),
        max_rows_(max_rows),
        model_(s.model) {
    if (model_->needs().neighbors || model_->needs().mail_to_neighbors) {
      sampler_.emplace(s.graph, s.neighbors, s.strategy, /*seed=*/1000);
    }
  }

  absl::StatusOr<RankResult> Run(Progress* progress) {
    model_->eval();
    const int64_t total = static_cast<int64_t>(events_.size());
    if (negatives_.positives() != total) {
      return absl::InternalError(
          absl::StrFormat("%s: %d negative lists for %d events", label_,
                          negatives_.positives(), total));
    }
    progress->Start(label_, total);
    // bf16: one autocast region for the pass, on only while the model
    // runs: each weight is cast once (evaluation does not change them).
    autocast_.Begin(s_.bf16, s_.builder->device().type());
    autocast_.Pause();
    for (int64_t begin = 0; begin < total; begin += s_.batch_size) {
      const int64_t n = std::min<int64_t>(s_.batch_size, total - begin);
      RETURN_IF_ERROR(ScoreBatch(begin, n));
      ApplyBatch(begin, n);
      progress->Advance(n, /*loss=*/-1);
    }
    autocast_.End();
    RankResult r;
    r.events = total;
    r.negatives = scored_;
    r.mrr = metrics_.mrr();
    r.hits_at_10 = metrics_.hits_at_10();
    return r;
  }

 private:
  // Scores every positive of events [begin, begin + n) against its
  // negatives with the memory before the batch, into the metrics.
  absl::Status ScoreBatch(int64_t begin, int64_t n) {
    pos_score_.assign(n, 0.0f);
    has_pos_.assign(n, 0);
    neg_score_.assign(n, {});
    for (int64_t i = 0; i < n; ++i) {
      negatives_.Get(begin + i, &negs_);
      if (negs_.empty()) {
        // No negative: rank 1. Its positive score still comes from a row.
        AddRow(begin + i, s_.log->dst[events_[begin + i]], i);
        RETURN_IF_ERROR(ScoreRows());
        neg_score_[i].clear();
        continue;
      }
      for (const int32_t d : negs_) {
        AddRow(begin + i, d, i);
        if (static_cast<int64_t>(row_event_.size()) >= max_rows_) {
          RETURN_IF_ERROR(ScoreRows());
        }
      }
    }
    RETURN_IF_ERROR(ScoreRows());
    for (int64_t i = 0; i < n; ++i) {
      if (!metrics_.Add(pos_score_[i], neg_score_[i].data(),
                        static_cast<int64_t>(neg_score_[i].size()))) {
        return absl::InternalError(absl::StrFormat(
            "%s, batch %d (events %d-%d of %d): the model's scores are not "
            "finite: the parameters have diverged (lower --lr, now %g) or the "
            "data holds extreme values",
            label_, begin / s_.batch_size, begin, begin + n - 1, events_.size(),
            s_.lr));
      }
    }
    return absl::OkStatus();
  }

  // A row of the next chunk: event `index` of the pass against negative
  // `negative`, for the batch's positive `owner`.
  void AddRow(int64_t index, int32_t negative, int64_t owner) {
    row_event_.push_back(events_[index]);
    row_neg_.push_back(negative);
    row_owner_.push_back(owner);
  }

  // Scores the rows gathered so far, as one model batch.
  absl::Status ScoreRows() {
    if (row_event_.empty()) return absl::OkStatus();
    const int64_t m = static_cast<int64_t>(row_event_.size());
    const model::ModelOutput out =
        Forward(row_event_.data(), row_neg_.data(), m);
    const torch::Tensor pos =
        out.pos_logits.to(torch::kCPU).to(torch::kFloat).contiguous();
    const torch::Tensor neg =
        out.neg_logits.to(torch::kCPU).to(torch::kFloat).contiguous();
    const float* p = pos.data_ptr<float>();
    const float* q = neg.data_ptr<float>();
    for (int64_t r = 0; r < m; ++r) {
      const int64_t i = row_owner_[r];
      if (!has_pos_[i]) {
        pos_score_[i] = p[r];
        has_pos_[i] = 1;
      }
      neg_score_[i].push_back(q[r]);
    }
    scored_ += m;
    row_event_.clear();
    row_neg_.clear();
    row_owner_.clear();
    return absl::OkStatus();
  }

  // Then the batch's own events update memory (its negatives are not
  // scored: any destination serves).
  void ApplyBatch(int64_t begin, int64_t n) {
    std::vector<int32_t> any(n);
    for (int64_t i = 0; i < n; ++i) any[i] = s_.log->dst[events_[begin + i]];
    const model::ModelOutput out =
        Forward(events_.data() + begin, any.data(), n);
    memory_->Advance(update_, out.memory, out.rows, {}, {});
    memory_->EndBatch();
  }

  // The model over events `e[0..n)` against negatives `neg[0..n)`.
  model::ModelOutput Forward(const int64_t* e, const int32_t* neg, int64_t n) {
    s_.builder->Build(e, neg, n, memory_->view(),
                      sampler_ ? &*sampler_ : nullptr, s_.time_gaps, &tensors_,
                      &update_);
    autocast_.Resume();
    model::ModelOutput out = model_->Forward(memory_->view(), tensors_);
    autocast_.Pause();
    return out;
  }

  const EvalSetup& s_;
  const std::vector<int64_t>& events_;
  const data::RankingNegatives& negatives_;
  const std::string& label_;
  memory::WorkerMemory* memory_;
  const int64_t max_rows_;
  model::Model model_;  // shares the module
  std::optional<data::NeighborSampler> sampler_;
  RankingMetrics metrics_;
  platform::AutocastRegion autocast_;  // the pass's (Run)
  int64_t scored_ = 0;
  batch::BatchTensors tensors_;
  batch::PositiveUpdate update_;
  std::vector<int32_t> negs_;
  // Rows of one scoring chunk: the positive (event) repeated per negative,
  // and the index of the positive in the batch.
  std::vector<int64_t> row_event_;
  std::vector<int32_t> row_neg_;
  std::vector<int64_t> row_owner_;
  // The batch's scores: each positive's and its negatives'.
  std::vector<float> pos_score_;
  std::vector<uint8_t> has_pos_;
  std::vector<std::vector<float>> neg_score_;
};

}  // namespace

absl::StatusOr<RankResult> EvaluateRanking(
    const EvalSetup& setup, const std::vector<int64_t>& events,
    const data::RankingNegatives& negatives, const std::string& label,
    memory::WorkerMemory* memory, Progress* progress, int64_t max_rows) {
  torch::NoGradGuard no_grad;
  RankingPass pass(setup, events, negatives, label, memory, max_rows);
  return pass.Run(progress);
}

}  // namespace mnemo::runtime
