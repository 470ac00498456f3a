#include "trainer/runtime/eval/eval_share.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace mnemo::runtime {
namespace {

// Fills `begin` for a largest cost of `limit`, from the last rank down:
// each takes as many batches from the end as its cost allows (the last
// rank holds the end memory; ranks below it replay less). Whether rank 0's
// part, the side pass and what is left, fits too.
bool Fill(int64_t batches, int64_t side_batches, int world, double c,
          double limit, std::vector<int64_t>* begin) {
  begin->assign(world + 1, 0);
  (*begin)[world] = batches;
  int64_t at = batches;
  for (int r = world - 1; r >= 1; --r) {
    // c * b + (at - b) <= limit
    const double b =
        std::ceil((static_cast<double>(at) - limit) / (1 - c) - 1e-9);
    at = std::clamp<int64_t>(static_cast<int64_t>(std::max(0.0, b)), 0, at);
    (*begin)[r] = at;
  }
  return static_cast<double>(side_batches + at) <= limit + 1e-9;
}

}  // namespace

double ShareCost(const std::vector<int64_t>& begin, int64_t side_batches,
                 int rank, double replay_cost) {
  const double scored = static_cast<double>(begin[rank + 1] - begin[rank]);
  return (rank == 0 ? static_cast<double>(side_batches)
                    : replay_cost * static_cast<double>(begin[rank])) +
         scored;
}

std::vector<int64_t> SharePass(int64_t batches, int64_t side_batches, int world,
                               double replay_cost) {
  // A replay as dear as scoring still lets the side pass run beside.
  const double c = std::clamp(replay_cost, 0.0, 0.999);
  std::vector<int64_t> begin;
  if (world <= 1) {
    begin = {0, batches};
    return begin;
  }
  // The smallest largest cost that places every batch (bisection: rank 0
  // alone always fits).
  double lo = 0, hi = static_cast<double>(side_batches + batches);
  for (int i = 0; i < 100 && hi - lo > 1e-3; ++i) {
    const double mid = (lo + hi) / 2;
    (Fill(batches, side_batches, world, c, mid, &begin) ? hi : lo) = mid;
  }
  Fill(batches, side_batches, world, c, hi, &begin);
  return begin;
}

double DefaultReplayCost(const char* model) {
  // From the step's operator profiles (bench/results/profile_*.md): the
  // memory update's share of the forward pass on the CPU.
  if (std::strcmp(model, "tgn") == 0) return 0.3;
  if (std::strcmp(model, "jodie") == 0) return 0.7;
  if (std::strcmp(model, "apan") == 0) return 0.8;
  return 0.1;  // tgat, dysat: no memory; the neighbours' sampling alone
}

}  // namespace mnemo::runtime
