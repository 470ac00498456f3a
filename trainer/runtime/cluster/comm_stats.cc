#include "trainer/runtime/cluster/comm_stats.h"

#include <algorithm>
#include <type_traits>
#include <vector>

#include "util/fields.h"
#include "util/status_macros.h"

namespace mnemo::runtime {
namespace {

// Every field of `c` as doubles, in CommStats::Parts' order.
std::vector<double> AllValues(const CommStats& c) {
  std::vector<double> v;
  CommStats::Parts(c, [&](const auto& part) {
    const std::vector<double> p = FieldValues(part);
    v.insert(v.end(), p.begin(), p.end());
  });
  return v;
}

// `c`'s fields from `v` (AllValues' order), starting at `at`.
CommStats FromValues(const std::vector<double>& v, size_t at) {
  CommStats c;
  CommStats::Parts(c, [&](auto& part) { SetFieldValues(v, &at, &part); });
  return c;
}

// Merges worker `w` into `total`, field by field as each field says.
void MergeInto(const CommStats& w, bool first, CommStats* total) {
  const std::vector<double> v = AllValues(w);
  size_t i = 0;
  CommStats::Parts(*total, [&](auto& part) {
    std::decay_t<decltype(part)>::Fields(
        part, [&](const char*, auto& x, Merge merge) {
          using T = std::decay_t<decltype(x)>;
          const T value = static_cast<T>(v[i++]);
          switch (merge) {
            case Merge::kSum:
              x += value;
              break;
            case Merge::kMax:
              x = first ? value : std::max(x, value);
              break;
            case Merge::kFirst:
              if (first) x = value;
              break;
          }
        });
  });
}

}  // namespace

absl::Status GatherCommStats(ControlChannel* control, int rank, int world,
                             const CommStats& mine, double train_loss,
                             TrainResult* result) {
  const std::vector<double> own = AllValues(mine);
  const size_t fields = own.size();
  std::vector<double> all(static_cast<size_t>(world) * fields, 0.0);
  std::copy(own.begin(), own.end(),
            all.begin() + static_cast<size_t>(rank) * fields);
  RETURN_IF_ERROR(control->Sum(&all));
  result->per_worker.clear();
  CommStats total;
  for (int r = 0; r < world; ++r) {
    result->per_worker.push_back(
        FromValues(all, static_cast<size_t>(r) * fields));
    MergeInto(result->per_worker.back(), r == 0, &total);
  }
  total.train_loss = train_loss;
  result->comm = total;
  return absl::OkStatus();
}

}  // namespace mnemo::runtime
