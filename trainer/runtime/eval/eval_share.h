// How the workers of a cluster share an evaluation (docs/design.md "Shared
// evaluation"). A pass is sequential: each batch's memory update feeds the
// next batch. A worker can still score batches [b, e) of a pass with
// exactly the memory one process would have there, by first replaying
// batches [0, b): sampled and built as the scoring pass does, the memory
// updated and advanced, but not embedded or scored. A replayed batch costs
// a fraction c of a scored one (the memory update of TGN and JODIE without
// the embedding's attention and the link predictor).
//
// So the passes that start from one memory (validation and new-node
// validation; test and new-node test) are split this way: rank 0 runs the
// side pass (new nodes) whole and scores the first batches of the main
// pass; each other rank replays up to its range and scores it; the last
// rank ends holding the main pass's end memory. Torch-free.
#ifndef MNEMO_TRAINER_RUNTIME_EVAL_EVAL_SHARE_H_
#define MNEMO_TRAINER_RUNTIME_EVAL_EVAL_SHARE_H_

#include <cstdint>
#include <vector>

namespace mnemo::runtime {

// Where each of `world` ranks begins scoring a main pass of `batches`
// batches, rank 0 also running a side pass of `side_batches` batches, with
// a replayed batch costing `replay_cost` (in [0, 1]) of a scored one:
// begin[0] = 0 <= begin[1] <= ... <= begin[world] = batches. Rank r replays
// [0, begin[r]) and scores [begin[r], begin[r + 1]). The split that
// minimizes the largest rank's cost, in whole batches (the later ranks
// round up). The same inputs give the same split on every rank.
std::vector<int64_t> SharePass(int64_t batches, int64_t side_batches, int world,
                               double replay_cost);

// The cost of rank `rank`'s part of a SharePass split, in scored batches.
double ShareCost(const std::vector<int64_t>& begin, int64_t side_batches,
                 int rank, double replay_cost);

// The replay cost assumed before a run has measured one, by model name
// ("tgn", "jodie", "apan", "tgat", "dysat"): what the memory update is of
// the whole forward pass on the CPU.
double DefaultReplayCost(const char* model);

}  // namespace mnemo::runtime

#endif  // MNEMO_TRAINER_RUNTIME_EVAL_EVAL_SHARE_H_
