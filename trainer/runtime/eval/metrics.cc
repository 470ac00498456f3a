#include "trainer/runtime/eval/metrics.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace mnemo::runtime {
namespace {
bool AllFinite(const std::vector<float>& scores) {
  return std::all_of(scores.begin(), scores.end(),
                     [](float s) { return std::isfinite(s); });
}

std::vector<int64_t> DescendingOrder(const std::vector<float>& scores) {
  std::vector<int64_t> order(scores.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return scores[a] > scores[b]; });
  return order;
}
}  // namespace

double AveragePrecision(const std::vector<float>& scores,
                        const std::vector<uint8_t>& labels) {
  const int64_t n = scores.size();
  int64_t total_pos = 0;
  for (uint8_t l : labels) total_pos += l != 0;
  // Sorting NaNs is undefined behaviour: non-finite scores have no AP.
  if (total_pos == 0 || !AllFinite(scores)) {
    return std::numeric_limits<double>::quiet_NaN();
  }
  std::vector<int64_t> order = DescendingOrder(scores);
  double ap = 0, prev_recall = 0;
  int64_t tp = 0, fp = 0;
  for (int64_t i = 0; i < n; ++i) {
    (labels[order[i]] ? tp : fp)++;
    // A threshold ends where the next score differs.
    if (i + 1 < n && scores[order[i + 1]] == scores[order[i]]) continue;
    double recall = static_cast<double>(tp) / total_pos;
    double precision = static_cast<double>(tp) / (tp + fp);
    ap += (recall - prev_recall) * precision;
    prev_recall = recall;
  }
  return ap;
}

double RocAuc(const std::vector<float>& scores,
              const std::vector<uint8_t>& labels) {
  const int64_t n = scores.size();
  if (!AllFinite(scores)) return std::numeric_limits<double>::quiet_NaN();
  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](int64_t a, int64_t b) { return scores[a] < scores[b]; });
  // Mann-Whitney U with average ranks for ties.
  double rank_sum_pos = 0;
  int64_t pos = 0;
  for (int64_t i = 0; i < n;) {
    int64_t j = i + 1;
    while (j < n && scores[order[j]] == scores[order[i]]) ++j;
    double avg_rank = (i + 1 + j) / 2.0;  // ranks i+1..j
    for (int64_t r = i; r < j; ++r) {
      if (labels[order[r]]) {
        rank_sum_pos += avg_rank;
        ++pos;
      }
    }
    i = j;
  }
  const int64_t neg = n - pos;
  if (pos == 0 || neg == 0) return std::numeric_limits<double>::quiet_NaN();
  return (rank_sum_pos - pos * (pos + 1) / 2.0) /
         (static_cast<double>(pos) * neg);
}

bool LinkMetrics::AddBatch(const float* pos, const float* neg, int64_t n) {
  if (n == 0) return true;
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(pos[i]) || !std::isfinite(neg[i])) return false;
  }
  std::vector<float> s(pos, pos + n);
  s.insert(s.end(), neg, neg + n);
  std::vector<uint8_t> l(2 * n, 0);
  std::fill(l.begin(), l.begin() + n, 1);
  ap_sum_ += AveragePrecision(s, l);
  auc_sum_ += RocAuc(s, l);
  ++batches_;
  scores_.insert(scores_.end(), s.begin(), s.end());
  labels_.insert(labels_.end(), l.begin(), l.end());
  return true;
}

double LinkMetrics::ap() const { return AveragePrecision(scores_, labels_); }
double LinkMetrics::auc() const { return RocAuc(scores_, labels_); }
double LinkMetrics::ap_batch_mean() const {
  return batches_ ? ap_sum_ / batches_
                  : std::numeric_limits<double>::quiet_NaN();
}
double LinkMetrics::auc_batch_mean() const {
  return batches_ ? auc_sum_ / batches_
                  : std::numeric_limits<double>::quiet_NaN();
}

double RankingMetrics::Rank(float pos, const float* neg, int64_t k) {
  int64_t higher = 0, at_least = 0;
  for (int64_t j = 0; j < k; ++j) {
    higher += neg[j] > pos;
    at_least += neg[j] >= pos;
  }
  return 0.5 * static_cast<double>(higher + at_least) + 1.0;
}

bool RankingMetrics::Add(float pos, const float* neg, int64_t k) {
  if (!std::isfinite(pos)) return false;
  for (int64_t j = 0; j < k; ++j) {
    if (!std::isfinite(neg[j])) return false;
  }
  const double rank = Rank(pos, neg, k);
  reciprocal_sum_ += 1.0 / rank;
  hits_at_10_ += rank <= 10.0;
  ++count_;
  return true;
}

double RankingMetrics::mrr() const {
  return count_ ? reciprocal_sum_ / static_cast<double>(count_)
                : std::numeric_limits<double>::quiet_NaN();
}

double RankingMetrics::hits_at_10() const {
  return count_ ? static_cast<double>(hits_at_10_) / static_cast<double>(count_)
                : std::numeric_limits<double>::quiet_NaN();
}

}  // namespace mnemo::runtime
