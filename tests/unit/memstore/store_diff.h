// Comparing two stores' contents in tests.
#ifndef MNEMO_TESTS_UNIT_MEMSTORE_STORE_DIFF_H_
#define MNEMO_TESTS_UNIT_MEMSTORE_STORE_DIFF_H_

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "memstore/node_state_store.h"

namespace mnemo::memstore::testing {

// Empty when `got` holds what `want` holds for ids 0..num_ids-1 (states,
// versions, times, update counts and writers, the number of nodes), else
// the first difference.
inline std::string StoreDiff(NodeStateStore& got, NodeStateStore& want,
                             int64_t num_ids) {
  std::vector<int64_t> ids(num_ids);
  for (int64_t i = 0; i < num_ids; ++i) ids[i] = i;
  PulledStates a, b;
  if (absl::Status st = got.Pull(ids, &a); !st.ok()) {
    return absl::StrCat("pull: ", st.ToString());
  }
  if (!want.Pull(ids, &b).ok()) return "pull of the expected states failed";
  const int dim = got.dim();
  for (int64_t i = 0; i < num_ids; ++i) {
    if (a.version[i] != b.version[i] || a.time[i] != b.time[i]) {
      return absl::StrCat("id ", i, ": version ", a.version[i], " time ",
                          a.time[i], ", want version ", b.version[i], " time ",
                          b.time[i]);
    }
    if (!std::equal(a.states.begin() + i * dim,
                    a.states.begin() + (i + 1) * dim,
                    b.states.begin() + i * dim)) {
      return absl::StrCat("id ", i, ": state differs");
    }
    if (b.version[i] == 0) continue;
    auto ga = got.Get(i), gb = want.Get(i);
    if (!ga.ok() || !gb.ok()) return absl::StrCat("id ", i, ": Get failed");
    if (ga->updates != gb->updates || ga->writer != gb->writer) {
      return absl::StrCat("id ", i, ": ", ga->updates, " updates by writer ",
                          ga->writer, ", want ", gb->updates, " by ",
                          gb->writer);
    }
  }
  auto sa = got.Stats(), sb = want.Stats();
  if (!sa.ok() || !sb.ok()) return "stats failed";
  if (sa->hot_states + sa->cold_states != sb->hot_states + sb->cold_states) {
    return absl::StrCat("node count ", sa->hot_states + sa->cold_states,
                        ", want ", sb->hot_states + sb->cold_states);
  }
  return "";
}

}  // namespace mnemo::memstore::testing

#endif  // MNEMO_TESTS_UNIT_MEMSTORE_STORE_DIFF_H_
