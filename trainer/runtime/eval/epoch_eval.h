// A run's evaluation: validation after each epoch and the test of the best
// epoch at the end. The workers of a cluster whose memory holds every node
// share each evaluation (eval_share.h: the same figures as one rank alone);
// with --eval-on leader, a bounded working set or the TGB protocol, rank 0
// (the leader) evaluates and the others wait for its figures. With a
// bounded working set the leader evaluates through it, batch by batch, and
// tests each best epoch at once (nothing keeps a copy of the best epoch's
// memory).
#ifndef MNEMO_TRAINER_RUNTIME_EVAL_EPOCH_EVAL_H_
#define MNEMO_TRAINER_RUNTIME_EVAL_EPOCH_EVAL_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "trainer/plan/working_set.h"
#include "trainer/runtime/eval/evaluator.h"
#include "trainer/runtime/eval/ranking.h"
#include "trainer/runtime/run_parts.h"

namespace mnemo::runtime {

class EpochEvaluation {
 public:
  // `parts` (set up) outlives the evaluation.
  explicit EpochEvaluation(RunParts* parts) : p_(*parts) {}

  // Before training: INVALID_ARGUMENT when a validation or test batch
  // reads more states than a bounded working set holds (the leader's
  // evaluation would stop there after a whole epoch).
  absl::Status CheckFitsWorkingSet() const;
  // After epoch `r->epoch`'s training (every worker's states in the
  // store): its validation figures into `r`, every rank with the leader's.
  absl::Status Validate(EpochResult* r);
  // Whether `r`'s validation improves on the best epoch so far (the
  // protocol's criterion); if so the parameters and memory are kept.
  bool Improves(const EpochResult& r) const;
  // Keeps the epoch just validated as the best one (its parameters and
  // post-validation memory; where the workers shared the validation, the
  // rank that ended it sends that memory to the others).
  absl::Status KeepBest(const EpochResult& r);
  // Whether the workers share this run's evaluation.
  bool Shared() const;
  // After training: the best epoch's test (TGN protocol: new-node test
  // starts again from the validation memory) on the leader, with the
  // parameters and memory restored; the others wait.
  absl::Status Test(TestResult* test, RankResult* ranked);

 private:
  // The best-epoch criterion of the protocol.
  double Score(const EpochResult& r) const;
  // What an evaluation pass of this run runs on, at `epoch`'s versions.
  EvalSetup Setup(int epoch) const;
  absl::StatusOr<EvalResult> Pass(int epoch, const std::vector<int64_t>& events,
                                  const EvalNegatives& negatives,
                                  const std::string& label);
  absl::StatusOr<RankResult> RankPass(const std::vector<int64_t>& events,
                                      const data::RankingNegatives& negatives,
                                      const std::string& label);
  // The leader's validation with a memory that holds every node (pulled
  // from the store in a cluster).
  absl::Status ValidateWhole(EpochResult* r);
  // The leader's with a bounded working set: new-node validation and
  // validation from the memory training left in the shards and, when the
  // epoch is the best so far, the test passes from the post-validation
  // memory (pushed to the shards first) at once, into record.best_test.
  absl::Status ValidateBounded(EpochResult* r);
  // One pass over `events` through the working set, starting from the
  // memory the shards hold (epoch `epoch`'s); what it changes stays in
  // this worker (held or spilled).
  absl::StatusOr<EvalResult> BoundedPass(int epoch,
                                         const std::vector<int64_t>& events,
                                         const EvalNegatives& negatives,
                                         const std::string& label);
  // What each batch of an evaluation pass over `events` reads
  // (plan::EventReads with the pass's negatives).
  plan::ReadPredictor PredictReads(const std::vector<int64_t>& events,
                                   const EvalNegatives& negatives) const;
  // Rank 0 pulls every state for evaluation.
  absl::Status PullAll(int epoch);
  // Every rank ends with every state, each having pulled a slice of them.
  absl::Status PullAllShared(int epoch);
  // Moves the store traffic since `before` from training's counters to
  // evaluation's (CommStats::eval).
  void CountAsEvaluation(const memory::StoreTraffic& before);
  // Every rank ends with the leader's validation figures.
  absl::Status ShareValidation(EpochResult* r);
  // A main pass and a side pass from the same memory (the one in p_.memory),
  // shared by the workers as eval_share.h says; every rank ends with both
  // passes' figures, and the last rank with the main pass's end memory.
  // `barrier`: the name every rank meets at before the scores travel (no
  // deadline: ranks finish their parts at different times).
  struct SharedResult {
    EvalResult main, side;
  };
  absl::StatusOr<SharedResult> SharedPasses(
      int epoch, const std::vector<int64_t>& main,
      const EvalNegatives& main_negs, const std::string& main_label,
      const std::vector<int64_t>& side, const EvalNegatives& side_negs,
      const std::string& side_label, const std::string& barrier);
  // Every rank ends with rank `root`'s memory (p_.memory) in `into`.
  absl::Status BroadcastMemory(int root, memory::NodeMemory* into);

  // What a replayed batch costs against a scored one (eval_share.h), from
  // the model until the run has measured it.
  double replay_cost_ = -1;
  // Every rank holds the same best memory (KeepBest sent it this session).
  bool best_state_everywhere_ = false;

  RunParts& p_;
};

// TrainingRecord::best_test (kBestTestFields figures) from and into the
// best epoch's test and new-node test results: one field order for both.
std::vector<double> PackBestTest(const EvalResult& test,
                                 const EvalResult& nn_test);
void UnpackBestTest(const std::vector<double>& f, EvalResult* test,
                    EvalResult* nn_test);

}  // namespace mnemo::runtime

#endif  // MNEMO_TRAINER_RUNTIME_EVAL_EPOCH_EVAL_H_
