// The Temporal Graph Benchmark's evaluation negatives (TGB, Huang et al.
// 2023: one-vs-many link prediction). Each positive event (src, dst, t) of
// the validation or test split is ranked against negative destinations of
// the same source:
//
//   * every other destination (kEveryOther; tgbl-wiki's protocol): all
//     destinations of the data set but the ones src reaches at time t in the
//     split (its true edges, dst among them);
//   * historical + random (kHistRandom, TGB's "hist_rnd"): up to
//     hist_ratio * k destinations src reached in the training events (not
//     at time t), the rest drawn from the destinations it neither reached
//     in training nor reaches at t (with replacement only when too few are
//     left).
//
// Draws use their own seeded generator (splitmix64): the same seed, data
// and split give the same negatives on every machine. They are written to
// and read from files keyed, as TGB keys its negatives, by each positive's
// (src, dst, t) in original ids (WriteTgbNegatives, ReadTgbNegatives).
// Torch-free.
#ifndef MNEMO_TRAINER_DATA_TGB_NEGATIVES_H_
#define MNEMO_TRAINER_DATA_TGB_NEGATIVES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "trainer/data/event_log.h"

namespace mnemo::data {

enum class TgbStrategy { kEveryOther, kHistRandom };

struct TgbNegativeOptions {
  TgbStrategy strategy = TgbStrategy::kHistRandom;
  int64_t per_positive = 100;  // k (kHistRandom)
  double hist_ratio = 0.5;
  uint64_t seed = 42;
};

// The negative destinations (dense ids) of each positive of a split.
class RankingNegatives {
 public:
  RankingNegatives() = default;
  // Explicit lists: positive i's are dst[begin[i], begin[i+1]).
  RankingNegatives(std::vector<int64_t> begin, std::vector<int32_t> dst);
  // Every destination of `all` (sorted) except, for positive i,
  // excluded[excluded_begin[i], excluded_begin[i+1]) (sorted).
  static RankingNegatives EveryOther(std::vector<int32_t> all,
                                     std::vector<int64_t> excluded_begin,
                                     std::vector<int32_t> excluded);

  int64_t positives() const;
  // Positive i's negatives, appended to *out after clearing it.
  void Get(int64_t i, std::vector<int32_t>* out) const;
  bool every_other() const { return every_other_; }

 private:
  bool every_other_ = false;
  std::vector<int64_t> begin_;
  std::vector<int32_t> dst_;
  std::vector<int32_t> all_;  // kEveryOther
};

// The negatives of `positives` (log indices, ascending). `destinations`:
// the candidate destinations (sorted, distinct dense ids); `history`: the
// training events (log indices) whose destinations are a source's
// historical ones.
RankingNegatives MakeTgbNegatives(const EventLog& log,
                                  absl::Span<const int64_t> positives,
                                  absl::Span<const int32_t> destinations,
                                  absl::Span<const int64_t> history,
                                  const TgbNegativeOptions& options);

// Writes explicit negatives: a header line "# mnemo tgb negatives: <what>",
// then one line per positive "src dst t neg neg ..." in original ids,
// written durably (util/file.h: a temporary file, fsync, rename).
absl::Status WriteTgbNegatives(const std::string& path, const EventLog& log,
                               absl::Span<const int64_t> positives,
                               const RankingNegatives& negatives,
                               const std::string& what);
// Reads what WriteTgbNegatives wrote for the same positives; an error naming
// the file and line when it holds other positives (another data set, split
// or --max-events), unknown ids or a malformed line.
absl::StatusOr<RankingNegatives> ReadTgbNegatives(
    const std::string& path, const EventLog& log,
    absl::Span<const int64_t> positives);

}  // namespace mnemo::data

#endif  // MNEMO_TRAINER_DATA_TGB_NEGATIVES_H_
