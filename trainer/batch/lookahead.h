// The look-ahead loop that training and evaluation share: batches run one
// after another, and while the device computes batch i the host prepares
// batch i + 1. Each batch goes through these calls:
//
//   begin(i)     the batch starts (optional; after its prepare and finish
//                when they ran ahead)
//   prepare(i)   host work that reads no node memory (targets, negatives,
//                sampled neighbours): may run while batch i - 1 computes
//   finish(i)    work that reads node memory as batch i - 1 left it (the
//                states admitted or pulled, the tensors built and staged)
//   run(i)       the batch's compute, queued on the device (the host does
//                not wait for it)
//   complete(i)  the batch's one wait for the device, then its results
//
// With Ahead::kPrepare the loop calls prepare(i + 1) between run(i) and
// complete(i); with kFinish also finish(i + 1), which is only right where
// batch i's queued work precedes i + 1's on the device (one stream) and
// finish reads nothing batch i writes on the host. The calls of one batch
// keep their order, and batch i + 1's prepare always follows batch i's
// finish: a builder holds one prepared batch at a time.
#ifndef MNEMO_TRAINER_BATCH_LOOKAHEAD_H_
#define MNEMO_TRAINER_BATCH_LOOKAHEAD_H_

#include <cstdint>
#include <functional>

#include "absl/status/status.h"
#include "util/status_macros.h"

namespace mnemo::batch {

// How far the loop prepares the next batch while one computes.
enum class Ahead {
  kNone,     // not at all
  kPrepare,  // its prepare
  kFinish,   // its prepare and finish
};

inline const char* AheadName(Ahead a) {
  return a == Ahead::kFinish    ? "prepare+stage"
         : a == Ahead::kPrepare ? "prepare"
                                : "none";
}

// The calls of a batch of type `Slot` (the loop keeps two slots, so
// that one is prepared while the other computes; a slot is reused every
// second batch, its fields as the last batch left them). A non-OK status
// ends the loop with it.
template <typename Slot>
struct LookaheadCalls {
  std::function<void(int64_t i, Slot*)> begin;  // may be empty
  std::function<absl::Status(int64_t i, Slot*)> prepare;
  std::function<absl::Status(int64_t i, Slot*)> finish;
  std::function<absl::Status(int64_t i, Slot*)> run;
  std::function<absl::Status(int64_t i, Slot*)> complete;
};

// Runs batches [0, n) through `calls` in `slots` (two of them, whose
// contents the calls own).
template <typename Slot>
absl::Status RunLookahead(int64_t n, Ahead ahead, Slot (&slots)[2],
                          const LookaheadCalls<Slot>& calls) {
  int64_t prepared[2] = {-1, -1};  // the batch each slot's prepare ran for
  bool finished[2] = {false, false};
  for (int64_t i = 0; i < n; ++i) {
    const int at = static_cast<int>(i % 2);
    Slot& slot = slots[at];
    if (calls.begin) calls.begin(i, &slot);
    if (prepared[at] != i) RETURN_IF_ERROR(calls.prepare(i, &slot));
    if (!finished[at]) RETURN_IF_ERROR(calls.finish(i, &slot));
    prepared[at] = -1;
    finished[at] = false;
    RETURN_IF_ERROR(calls.run(i, &slot));
    if (ahead != Ahead::kNone && i + 1 < n) {
      const int next = 1 - at;
      RETURN_IF_ERROR(calls.prepare(i + 1, &slots[next]));
      prepared[next] = i + 1;
      if (ahead == Ahead::kFinish) {
        RETURN_IF_ERROR(calls.finish(i + 1, &slots[next]));
        finished[next] = true;
      }
    }
    RETURN_IF_ERROR(calls.complete(i, &slot));
  }
  return absl::OkStatus();
}

}  // namespace mnemo::batch

#endif  // MNEMO_TRAINER_BATCH_LOOKAHEAD_H_
