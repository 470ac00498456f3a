#include "trainer/data/split.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "absl/container/flat_hash_map.h"
#include "trainer/data/python_random.h"

namespace mnemo::data {
namespace {

std::vector<int32_t> SortedUnique(std::vector<int32_t> v) {
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  return v;
}

// The node ids the TGN reference sees: the file's ids for one id space
// (its ml_ files); for JODIE's two id spaces its preprocessing's renumbering
// (users u + 1, items i + max_user + 2).
std::vector<int64_t> ReferenceIds(const EventLog& log) {
  std::vector<int64_t> ids(log.original_ids.begin(), log.original_ids.end());
  if (static_cast<int64_t>(ids.size()) != log.num_nodes) {
    // A log made in memory, without file ids: its dense ids.
    ids.resize(log.num_nodes);
    std::iota(ids.begin(), ids.end(), 0);
    return ids;
  }
  if (log.node_is_item.size() != ids.size()) return ids;
  int64_t max_user = 0;
  for (size_t v = 0; v < ids.size(); ++v) {
    if (!log.node_is_item[v]) max_user = std::max(max_user, ids[v]);
  }
  for (size_t v = 0; v < ids.size(); ++v) {
    ids[v] += log.node_is_item[v] ? max_user + 2 : 1;
  }
  return ids;
}

// random.seed(seed); random.sample(tuple(set(late sources) | set(late
// destinations)), want), in dense ids.
std::vector<int32_t> ReferenceHoldOut(const EventLog& log, double val_time,
                                      int64_t want, uint64_t seed) {
  const std::vector<int64_t> ids = ReferenceIds(log);
  py::IntSet sources, destinations;
  for (int64_t e = 0; e < log.num_events(); ++e) {
    if (log.t[e] > val_time) {
      sources.Add(ids[log.src[e]]);
      destinations.Add(ids[log.dst[e]]);
    }
  }
  py::IntSet late;  // set.union copies, then merges
  late.Merge(sources);
  late.Merge(destinations);
  py::Random rng(seed);
  absl::flat_hash_map<int64_t, int32_t> dense;
  for (size_t v = 0; v < ids.size(); ++v) dense[ids[v]] = v;
  std::vector<int32_t> out;
  for (int64_t id : rng.Sample(late.Keys(), want)) out.push_back(dense[id]);
  return out;
}

}  // namespace

double Quantile(const Column<double>& sorted_t, double q) {
  if (sorted_t.empty()) return 0;
  const int64_t n = static_cast<int64_t>(sorted_t.size());
  const double pos = q * static_cast<double>(n - 1);
  int64_t lo = static_cast<int64_t>(std::floor(pos));
  lo = std::clamp<int64_t>(lo, 0, n - 1);
  const int64_t hi = std::min<int64_t>(lo + 1, n - 1);
  const double frac = pos - static_cast<double>(lo);
  const double a = sorted_t[lo];
  const double b = sorted_t[hi];
  // numpy's _lerp: a + (b-a)*t, or b - (b-a)*(1-t) for t >= 0.5.
  const double diff = b - a;
  return frac >= 0.5 ? b - diff * (1 - frac) : a + diff * frac;
}

Split MakeSplit(const EventLog& log, const SplitOptions& options) {
  Split s;
  const int64_t n = log.num_events();
  const int64_t num_nodes = log.num_nodes;
  s.held_out_node.assign(num_nodes, 0);
  s.new_node.assign(num_nodes, 0);
  if (n == 0) return s;

  // The log is time-sorted, so log.t is already the sorted sample.
  s.val_time = Quantile(log.t, options.val_quantile);
  s.test_time = Quantile(log.t, options.test_quantile);

  // Nodes seen after the validation cut-off are the hold-out candidates.
  std::vector<uint8_t> late(num_nodes, 0);
  for (int64_t e = 0; e < n; ++e) {
    if (log.t[e] > s.val_time) late[log.src[e]] = late[log.dst[e]] = 1;
  }
  std::vector<int32_t> candidates;
  for (int32_t v = 0; v < num_nodes; ++v)
    if (late[v]) candidates.push_back(v);
  const int64_t want = std::min<int64_t>(
      static_cast<int64_t>(std::floor(options.new_node_fraction *
                                      static_cast<double>(num_nodes))),
      static_cast<int64_t>(candidates.size()));
  if (options.reference_draw) {
    for (int32_t v : ReferenceHoldOut(log, s.val_time, want, options.seed)) {
      s.held_out_node[v] = 1;
    }
  } else {
    // Uniform sample without replacement: partial Fisher-Yates.
    std::mt19937_64 rng(options.seed);
    const int64_t m = static_cast<int64_t>(candidates.size());
    for (int64_t i = 0; i < want; ++i) {
      std::uniform_int_distribution<int64_t> pick(i, m - 1);
      std::swap(candidates[i], candidates[pick(rng)]);
      s.held_out_node[candidates[i]] = 1;
    }
  }

  std::vector<uint8_t> in_train(num_nodes, 0);
  std::vector<int32_t> train_dst, all_dst;
  all_dst.reserve(n);
  for (int64_t e = 0; e < n; ++e) {
    const double t = log.t[e];
    const int32_t u = log.src[e], v = log.dst[e];
    all_dst.push_back(v);
    if (t <= s.val_time) {
      if (!s.held_out_node[u] && !s.held_out_node[v]) {
        s.train.push_back(e);
        in_train[u] = in_train[v] = 1;
        train_dst.push_back(v);
      }
    } else if (t <= s.test_time) {
      s.val.push_back(e);
    } else {
      s.test.push_back(e);
    }
  }
  for (int64_t v = 0; v < num_nodes; ++v) s.new_node[v] = !in_train[v];
  for (int64_t e : s.val)
    if (s.new_node[log.src[e]] || s.new_node[log.dst[e]])
      s.new_node_val.push_back(e);
  for (int64_t e : s.test)
    if (s.new_node[log.src[e]] || s.new_node[log.dst[e]])
      s.new_node_test.push_back(e);
  s.train_destinations = SortedUnique(std::move(train_dst));
  s.all_destinations = SortedUnique(std::move(all_dst));
  return s;
}

}  // namespace mnemo::data
