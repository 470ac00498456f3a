// Link-prediction metrics with scikit-learn's definitions.
#ifndef MNEMO_TRAINER_RUNTIME_EVAL_METRICS_H_
#define MNEMO_TRAINER_RUNTIME_EVAL_METRICS_H_

#include <cstdint>
#include <vector>

namespace mnemo::runtime {

// Average precision as sklearn.metrics.average_precision_score:
// sum_n (R_n - R_{n-1}) P_n over distinct score thresholds, descending.
// Returns NaN when there are no positives or any score is not finite.
double AveragePrecision(const std::vector<float>& scores,
                        const std::vector<uint8_t>& labels);

// Area under the ROC curve (ties count half), as sklearn's roc_auc_score.
// Returns NaN when only one class is present or any score is not finite.
double RocAuc(const std::vector<float>& scores,
              const std::vector<uint8_t>& labels);

// Accumulates scores over an evaluation pass: AP/AUC over all events, and
// the mean of per-batch AP/AUC (what the TGN reference prints).
class LinkMetrics {
 public:
  // False (and nothing added) when a score is not finite.
  [[nodiscard]] bool AddBatch(const float* pos, const float* neg, int64_t n);
  double ap() const;
  double auc() const;
  double ap_batch_mean() const;
  double auc_batch_mean() const;
  int64_t events() const { return static_cast<int64_t>(scores_.size() / 2); }

 private:
  std::vector<float> scores_;
  std::vector<uint8_t> labels_;
  double ap_sum_ = 0, auc_sum_ = 0;
  int64_t batches_ = 0;
};

// One-vs-many ranking metrics as the Temporal Graph Benchmark's evaluator
// computes them: a positive's rank among its negatives is
// 1 + (#negatives scoring higher + #negatives scoring at least as high) / 2
// (ties count half), MRR the mean of 1 / rank, Hits@10 the share of ranks
// <= 10.
class RankingMetrics {
 public:
  // The rank of `pos` among `neg[0..k)`.
  static double Rank(float pos, const float* neg, int64_t k);
  // False (and nothing added) when a score is not finite.
  [[nodiscard]] bool Add(float pos, const float* neg, int64_t k);
  double mrr() const;         // NaN when nothing was added
  double hits_at_10() const;  // NaN when nothing was added
  int64_t positives() const { return count_; }

 private:
  double reciprocal_sum_ = 0;
  int64_t hits_at_10_ = 0, count_ = 0;
};

}  // namespace mnemo::runtime

#endif  // MNEMO_TRAINER_RUNTIME_EVAL_METRICS_H_
