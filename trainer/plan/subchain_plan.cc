#include "trainer/plan/subchain_plan.h"

#include <dlfcn.h>
#include <metis.h>
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <numeric>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"

namespace mnemo::plan {
namespace {

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
      .count();
}

// Fixed so that every rank (and every run) gets the same partition.
constexpr idx_t kMetisSeed = 20261015;
// Above this total node weight METIS's 32-bit sums could overflow.
constexpr int64_t kMaxMetisWeight = int64_t{1} << 30;

// Heaviest node first, each to the lightest part (ties: lower local id,
// lower part). For graphs without edges or with fewer nodes than parts.
std::vector<int32_t> BinPack(const WindowGraph& g, int parts) {
  const int64_t n = g.num_nodes();
  std::vector<int32_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&g](int32_t a, int32_t b) {
    return g.node_weight[a] > g.node_weight[b];
  });
  std::vector<int64_t> load(parts, 0);
  std::vector<int32_t> part(n, 0);
  for (const int32_t v : order) {
    const int p = static_cast<int>(std::min_element(load.begin(), load.end()) -
                                   load.begin());
    part[v] = p;
    load[p] += g.node_weight[v];
  }
  return part;
}

// Linear deterministic greedy (Stanton & Kliot, KDD 2012) over the nodes in
// order of first appearance: node v goes to the part p maximising
// w(N(v) in p) * (1 - load_p / capacity) among the parts it fits in
// (capacity = (1 + imbalance) * total / parts); ties (and nodes with no
// placed neighbour) go to the lighter part, then the lower part.
std::vector<int32_t> GreedyPartition(const WindowGraph& g, int parts,
                                     double imbalance) {
  const int64_t n = g.num_nodes();
  const double capacity =
      (1.0 + imbalance) * static_cast<double>(g.total_node_weight()) / parts;
  std::vector<int32_t> part(n, -1);
  std::vector<int64_t> load(parts, 0);
  std::vector<int64_t> score(parts, 0);
  for (int64_t v = 0; v < n; ++v) {
    std::fill(score.begin(), score.end(), 0);
    for (int64_t j = g.offsets[v]; j < g.offsets[v + 1]; ++j) {
      const int32_t p = part[g.neighbors[j]];
      if (p >= 0) score[p] += g.edge_weight[j];
    }
    const int64_t wv = g.node_weight[v];
    bool any_fits = false;
    for (int p = 0; p < parts; ++p) {
      any_fits |= static_cast<double>(load[p] + wv) <= capacity;
    }
    int best = -1;
    double best_value = 0;
    for (int p = 0; p < parts; ++p) {
      if (any_fits && static_cast<double>(load[p] + wv) > capacity) continue;
      const double value =
          static_cast<double>(score[p]) *
          std::max(0.0, 1.0 - static_cast<double>(load[p]) / capacity);
      if (best < 0 || value > best_value ||
          (value == best_value && load[p] < load[best])) {
        best = p;
        best_value = value;
      }
    }
    part[v] = best;
    load[best] += wv;
  }
  return part;
}

// METIS is not documented as reentrant; one call at a time per process.
ABSL_CONST_INIT absl::Mutex metis_mutex(absl::kConstInit);

// METIS seeds libc's rand() with options[METIS_OPTION_SEED] and draws from
// it, but that generator is one per process: any other thread of a trainer
// that calls rand() meanwhile (a library's) shifts the draws, and the
// partition, hence the plan and the run's accuracy, changed from run to run.
// While this thread partitions, its rand() and srand() (defined below, in
// the executable, so that libmetis's calls come here before libc's) use a
// generator of its own: libc's algorithm (random_r over rand's 128-byte
// state), so the partition is the one a process with no other threads
// makes. Everywhere else they are libc's.
struct MetisRandom {
  bool active = false;
  random_data data;
  char state[128];
};
thread_local MetisRandom metis_random;

void SeedMetisRandom(unsigned seed) {
  metis_random.data = random_data{};
  initstate_r(seed, metis_random.state, sizeof(metis_random.state),
              &metis_random.data);
}

// The scope of one METIS call: this thread's generator, seeded as libc's is
// at start-up (METIS seeds it again).
class MetisRandomScope {
 public:
  MetisRandomScope() {
    SeedMetisRandom(1);
    metis_random.active = true;
  }
  ~MetisRandomScope() { metis_random.active = false; }
  MetisRandomScope(const MetisRandomScope&) = delete;
  MetisRandomScope& operator=(const MetisRandomScope&) = delete;
};

template <typename F>
F LibcFunction(const char* name) {
  return reinterpret_cast<F>(dlsym(RTLD_NEXT, name));
}

// Both METIS drivers, k-way and recursive bisection; the smaller weighted
// cut wins (ties: k-way). On Wikipedia and sx-mathoverflow windows neither
// is better throughout (k-way cut less on 20,000-event Wikipedia windows
// with 2 parts, bisection on 80,000-event ones with 4), and METIS takes
// milliseconds per window. False when both report an error.
bool MetisPartition(const WindowGraph& g, int parts, double imbalance,
                    std::vector<int32_t>* out) {
  const idx_t n = static_cast<idx_t>(g.num_nodes());
  std::vector<idx_t> xadj(g.offsets.begin(), g.offsets.end());
  std::vector<idx_t> adjncy(g.neighbors.begin(), g.neighbors.end());
  std::vector<idx_t> adjwgt(g.edge_weight.begin(), g.edge_weight.end());
  std::vector<idx_t> vwgt(g.node_weight.begin(), g.node_weight.end());
  idx_t options[METIS_NOPTIONS];
  METIS_SetDefaultOptions(options);
  options[METIS_OPTION_NUMBERING] = 0;
  options[METIS_OPTION_SEED] = kMetisSeed;
  // METIS's balance bound is 1 + ufactor / 1000 times the mean part weight:
  // ufactor = 1000 * delta (DepBloom's constraint; at least 1).
  options[METIS_OPTION_UFACTOR] = static_cast<idx_t>(
      std::max(1.0, std::min(1e6, std::round(1000.0 * imbalance))));
  bool found = false;
  idx_t best_cut = 0;
  for (const bool recursive : {false, true}) {
    idx_t nvtxs = n, ncon = 1, nparts = parts, cut = 0;
    std::vector<idx_t> part(n, 0);
    int rc;
    {
      absl::MutexLock lock(&metis_mutex);
      MetisRandomScope own_rand;
      rc = recursive ? METIS_PartGraphRecursive(
                           &nvtxs, &ncon, xadj.data(), adjncy.data(),
                           vwgt.data(), nullptr, adjwgt.data(), &nparts,
                           nullptr, nullptr, options, &cut, part.data())
                     : METIS_PartGraphKway(&nvtxs, &ncon, xadj.data(),
                                           adjncy.data(), vwgt.data(), nullptr,
                                           adjwgt.data(), &nparts, nullptr,
                                           nullptr, options, &cut, part.data());
    }
    if (rc != METIS_OK) continue;
    if (std::any_of(part.begin(), part.end(),
                    [parts](idx_t p) { return p < 0 || p >= parts; })) {
      continue;
    }
    if (!found || cut < best_cut) {
      found = true;
      best_cut = cut;
      out->assign(part.begin(), part.end());
    }
  }
  return found;
}

// The symmetric CSR adjacency of g (num_nodes() already set) from one
// (low << 32 | high) key per unit of edge weight.
void FillAdjacency(std::vector<uint64_t> keys, WindowGraph* out) {
  WindowGraph& g = *out;
  std::sort(keys.begin(), keys.end());
  // Distinct edges with weights, then the symmetric CSR.
  std::vector<uint64_t> edges;
  std::vector<int64_t> weights;
  for (size_t i = 0; i < keys.size();) {
    size_t j = i;
    while (j < keys.size() && keys[j] == keys[i]) ++j;
    edges.push_back(keys[i]);
    weights.push_back(static_cast<int64_t>(j - i));
    i = j;
  }
  const int64_t n = g.num_nodes();
  g.offsets.assign(n + 1, 0);
  for (const uint64_t k : edges) {
    ++g.offsets[(k >> 32) + 1];
    ++g.offsets[(k & 0xffffffffu) + 1];
  }
  for (int64_t v = 0; v < n; ++v) g.offsets[v + 1] += g.offsets[v];
  g.neighbors.resize(2 * edges.size());
  g.edge_weight.resize(2 * edges.size());
  std::vector<int64_t> fill(g.offsets.begin(), g.offsets.end() - 1);
  // Keys ascend by (low, high): every list comes out ascending, since a
  // node's lower neighbours are appended (as `high`) before its higher ones
  // (as `low`), each group in ascending order.
  for (size_t i = 0; i < edges.size(); ++i) {
    const int32_t lo = static_cast<int32_t>(edges[i] >> 32);
    const int32_t hi = static_cast<int32_t>(edges[i] & 0xffffffffu);
    g.neighbors[fill[lo]] = hi;
    g.edge_weight[fill[lo]++] = weights[i];
    g.neighbors[fill[hi]] = lo;
    g.edge_weight[fill[hi]++] = weights[i];
  }
}

}  // namespace

int64_t WindowGraph::total_node_weight() const {
  int64_t total = 0;
  for (const int64_t w : node_weight) total += w;
  return total;
}

WindowGraph BuildWindowGraph(const data::EventLog& log,
                             absl::Span<const int64_t> events) {
  WindowGraph g;
  absl::flat_hash_map<int32_t, int32_t> local;
  local.reserve(events.size());
  auto local_id = [&](int32_t x) {
    auto [it, inserted] =
        local.try_emplace(x, static_cast<int32_t>(g.nodes.size()));
    if (inserted) {
      g.nodes.push_back(x);
      g.node_weight.push_back(0);
    }
    return it->second;
  };
  g.event_src.reserve(events.size());
  g.event_dst.reserve(events.size());
  // Undirected edges as (low << 32 | high) keys, one per event.
  std::vector<uint64_t> keys;
  keys.reserve(events.size());
  for (const int64_t e : events) {
    const int32_t u = local_id(log.src[e]);
    const int32_t v = local_id(log.dst[e]);
    g.event_src.push_back(u);
    g.event_dst.push_back(v);
    ++g.node_weight[u];
    if (v == u) continue;
    ++g.node_weight[v];
    const uint32_t lo = static_cast<uint32_t>(std::min(u, v));
    const uint32_t hi = static_cast<uint32_t>(std::max(u, v));
    keys.push_back((static_cast<uint64_t>(lo) << 32) | hi);
  }
  FillAdjacency(std::move(keys), &g);
  return g;
}

std::vector<int32_t> PartitionWindowGraph(const WindowGraph& g, int parts,
                                          Partitioner partitioner,
                                          double imbalance, bool* fallback) {
  if (fallback != nullptr) *fallback = false;
  const int64_t n = g.num_nodes();
  if (parts <= 1) return std::vector<int32_t>(n, 0);
  if (g.neighbors.empty() || n <= parts) return BinPack(g, parts);
  if (partitioner == Partitioner::kMetis) {
    std::vector<int32_t> part;
    if (g.total_node_weight() <= kMaxMetisWeight &&
        MetisPartition(g, parts, imbalance, &part)) {
      return part;
    }
    if (fallback != nullptr) *fallback = true;
  }
  return GreedyPartition(g, parts, imbalance);
}

namespace {

// AssignChains with the parts of each event's endpoints given per event
// (src_part[i], dst_part[i]): a node's pieces (SplitNodes) may lie in
// different parts. Chains and weights are those of g's nodes.
std::vector<int32_t> AssignEventChains(const WindowGraph& g,
                                       absl::Span<const int32_t> src_part,
                                       absl::Span<const int32_t> dst_part,
                                       int parts, ChainAssignment assignment,
                                       double imbalance) {
  const int64_t m = static_cast<int64_t>(g.event_src.size());
  std::vector<int32_t> chain(m, 0);
  if (assignment == ChainAssignment::kSource) {
    std::copy(src_part.begin(), src_part.end(), chain.begin());
    return chain;
  }
  const int64_t mean = (m + parts - 1) / parts;
  const int64_t cap = std::max<int64_t>(
      mean + 1, static_cast<int64_t>(std::ceil(
                    (1.0 + imbalance) * static_cast<double>(m) / parts)));
  std::vector<int64_t> load(parts, 0);
  // Per local node: the sub-chain of its latest event so far (-1: none).
  std::vector<int32_t> last(g.num_nodes(), -1);
  for (int64_t i = 0; i < m; ++i) {
    const int32_t u = g.event_src[i], v = g.event_dst[i];
    // The heavier endpoint's part first, then the other's.
    const bool dst_first = g.node_weight[v] > g.node_weight[u];
    int32_t first = dst_first ? dst_part[i] : src_part[i];
    int32_t second = dst_first ? src_part[i] : dst_part[i];
    if (assignment == ChainAssignment::kFollow && first != second) {
      auto broken = [&](int32_t c) {
        return int{last[u] >= 0 && last[u] != c} +
               int{last[v] >= 0 && last[v] != c};
      };
      if (broken(second) < broken(first)) std::swap(first, second);
    }
    int32_t c = first;
    if (load[c] >= cap) c = second;
    if (load[c] >= cap) {
      c = static_cast<int32_t>(std::min_element(load.begin(), load.end()) -
                               load.begin());
    }
    chain[i] = c;
    ++load[c];
    last[u] = c;
    last[v] = c;
  }
  return chain;
}

}  // namespace

std::vector<int32_t> AssignChains(const WindowGraph& g,
                                  absl::Span<const int32_t> part, int parts,
                                  ChainAssignment assignment,
                                  double imbalance) {
  const int64_t m = static_cast<int64_t>(g.event_src.size());
  std::vector<int32_t> src_part(m), dst_part(m);
  for (int64_t i = 0; i < m; ++i) {
    src_part[i] = part[g.event_src[i]];
    dst_part[i] = part[g.event_dst[i]];
  }
  return AssignEventChains(g, src_part, dst_part, parts, assignment, imbalance);
}

WindowGraph SplitNodes(const WindowGraph& g, int64_t piece_events) {
  const int64_t n = g.num_nodes();
  const int64_t m = static_cast<int64_t>(g.event_src.size());
  // Node v's pieces are first_piece[v] .. first_piece[v + 1] - 1, of equal
  // size (within one event) in time order.
  std::vector<int64_t> first_piece(n + 1, 0);
  for (int64_t v = 0; v < n; ++v) {
    const int64_t w = std::max<int64_t>(1, g.node_weight[v]);
    first_piece[v + 1] = first_piece[v] + (w + piece_events - 1) / piece_events;
  }
  WindowGraph p;
  const int64_t np = first_piece[n];
  p.nodes.resize(np);
  p.node_weight.assign(np, 0);
  for (int64_t v = 0; v < n; ++v) {
    for (int64_t q = first_piece[v]; q < first_piece[v + 1]; ++q) {
      p.nodes[q] = g.nodes[v];
    }
  }
  std::vector<int64_t> seen(n, 0);  // events of each node so far
  auto piece_of = [&](int32_t v) {
    const int64_t k = first_piece[v + 1] - first_piece[v];
    const int64_t w = std::max<int64_t>(1, g.node_weight[v]);
    return static_cast<int32_t>(first_piece[v] + seen[v] * k / w);
  };
  p.event_src.resize(m);
  p.event_dst.resize(m);
  std::vector<uint64_t> keys;
  keys.reserve(m + np);
  for (int64_t i = 0; i < m; ++i) {
    const int32_t u = g.event_src[i], v = g.event_dst[i];
    const int32_t pu = piece_of(u), pv = piece_of(v);
    p.event_src[i] = pu;
    p.event_dst[i] = pv;
    ++p.node_weight[pu];
    ++seen[u];
    if (v == u) continue;
    ++p.node_weight[pv];
    ++seen[v];
    keys.push_back((static_cast<uint64_t>(std::min(pu, pv)) << 32) |
                   static_cast<uint32_t>(std::max(pu, pv)));
  }
  // One unit of weight between consecutive pieces: placing them apart
  // breaks the node's chain once (on sx-mathoverflow, CollegeMsg and
  // bitcoin-alpha a weight of 2 or 4 leaves more events crossing:
  // bench_subchains).
  for (int64_t v = 0; v < n; ++v) {
    for (int64_t q = first_piece[v]; q + 1 < first_piece[v + 1]; ++q) {
      keys.push_back((static_cast<uint64_t>(q) << 32) |
                     static_cast<uint32_t>(q + 1));
    }
  }
  FillAdjacency(std::move(keys), &p);
  return p;
}

void CountCrossEvents(const WindowGraph& g, absl::Span<const int32_t> chain,
                      WindowStats* stats) {
  const int64_t m = static_cast<int64_t>(g.event_src.size());
  // Per local node: the sub-chain of its latest event so far (-1: none).
  std::vector<int32_t> last(g.num_nodes(), -1);
  int64_t cross = 0;
  for (int64_t i = 0; i < m; ++i) {
    const int32_t u = g.event_src[i], v = g.event_dst[i];
    const int32_t c = chain[i];
    if ((last[u] >= 0 && last[u] != c) || (last[v] >= 0 && last[v] != c)) {
      ++cross;
    }
    last[u] = c;
    last[v] = c;
  }
  // Per local node: sub-chains with an event of it (bit set; parts beyond
  // 64 share bits, which can only undercount).
  std::vector<uint64_t> chains(g.num_nodes(), 0);
  for (int64_t i = 0; i < m; ++i) {
    const uint64_t bit = uint64_t{1} << (chain[i] % 64);
    chains[g.event_src[i]] |= bit;
    chains[g.event_dst[i]] |= bit;
  }
  auto several = [](uint64_t bits) { return (bits & (bits - 1)) != 0; };
  int64_t shared = 0;
  for (int64_t i = 0; i < m; ++i) {
    shared +=
        several(chains[g.event_src[i]]) || several(chains[g.event_dst[i]]);
  }
  stats->events = m;
  stats->nodes = g.num_nodes();
  stats->cross_events = cross;
  stats->shared_events = shared;
  stats->shared_ratio =
      m > 0 ? static_cast<double>(shared) / static_cast<double>(m) : 0.0;
  stats->cross_ratio =
      m > 0 ? static_cast<double>(cross) / static_cast<double>(m) : 0.0;
}

namespace {

// How a node partition cut a window: the parts of each event's endpoints
// and the parts' node weights. Empty when the window's events were placed
// without one (a given partition, kTime).
struct WindowCut {
  std::vector<int32_t> src_part, dst_part;
  std::vector<int64_t> part_weight;
};

// kTime: the window's slices of batch_size events dealt to the `parts`
// sub-chains in turn (chain[i] for the window's event i); a window shorter
// than `parts` batches (e.g. the last one) is dealt in `parts` slices of
// ceil(len / parts) events, so that every worker gets its share.
void DealTimeSlices(int64_t batch_size, int parts, absl::Span<int32_t> chain) {
  const int64_t len = static_cast<int64_t>(chain.size());
  const int64_t slice = std::min(batch_size, (len + parts - 1) / parts);
  for (int64_t i = 0; i < len; ++i) {
    chain[i] = static_cast<int32_t>((i / slice) % parts);
  }
}

// kMetis and kGreedy: partitions window graph `g` and places each of its
// events in the sub-chain of one of its endpoints' parts
// (o.chain_assignment): chain[i] for the window's event i. Sets
// s->fallback, and s->partition_seconds to the time since `start` once
// the events are placed.
WindowCut CutWindow(const WindowGraph& g, const PlanOptions& o,
                    std::chrono::steady_clock::time_point start,
                    absl::Span<int32_t> chain, WindowStats* s) {
  const int parts = o.world_size;
  const int64_t m = static_cast<int64_t>(chain.size());
  // Pieces for METIS only: the greedy partitioner's one pass over pieces in
  // order of appearance breaks more dependencies than over whole nodes
  // (bench_subchains).
  const bool split = o.piece_events > 0 && o.partitioner == Partitioner::kMetis;
  const WindowGraph pieces =
      split ? SplitNodes(g, o.piece_events) : WindowGraph();
  const WindowGraph& cut = split ? pieces : g;
  const std::vector<int32_t> part = PartitionWindowGraph(
      cut, parts, o.partitioner, o.imbalance, &s->fallback);
  WindowCut c;
  c.src_part.resize(m);
  c.dst_part.resize(m);
  for (int64_t i = 0; i < m; ++i) {
    c.src_part[i] = part[cut.event_src[i]];
    c.dst_part[i] = part[cut.event_dst[i]];
  }
  const std::vector<int32_t> assigned = AssignEventChains(
      g, c.src_part, c.dst_part, parts, o.chain_assignment, o.imbalance);
  std::copy(assigned.begin(), assigned.end(), chain.begin());
  s->partition_seconds = SecondsSince(start);
  c.part_weight.assign(parts, 0);
  for (int64_t v = 0; v < cut.num_nodes(); ++v) {
    c.part_weight[part[v]] += cut.node_weight[v];
  }
  return c;
}

// A window's statistics but partition_seconds and fallback: graph `g`, the
// sub-chain `chain` of each event, `cut` (empty when not cut).
void FillWindowStats(const WindowGraph& g, absl::Span<const int32_t> chain,
                     const WindowCut& cut, const PlanOptions& o,
                     WindowStats* s) {
  const int parts = o.world_size;
  const int64_t m = static_cast<int64_t>(chain.size());
  CountCrossEvents(g, chain, s);
  std::vector<int64_t> chain_events(parts, 0);
  for (const int32_t c : chain) ++chain_events[c];
  s->max_chain_events =
      *std::max_element(chain_events.begin(), chain_events.end());
  const double mean = static_cast<double>(m) / parts;
  s->imbalance = static_cast<double>(s->max_chain_events) / mean;
  s->steps = (s->max_chain_events + o.batch_size - 1) / o.batch_size;
  if (cut.part_weight.empty()) return;
  for (int64_t i = 0; i < m; ++i) {
    s->cut_events += cut.src_part[i] != cut.dst_part[i];
  }
  s->weight_imbalance = static_cast<double>(*std::max_element(
                            cut.part_weight.begin(), cut.part_weight.end())) /
                        (static_cast<double>(g.total_node_weight()) / parts);
}

// Partitions one window, `events`, into o.world_size sub-chains: chain[i]
// for events[i], and the window's statistics into *s. `given`: the given
// partition's sub-chains of the window (o.given_chain set).
void PartitionWindow(const data::EventLog& log,
                     absl::Span<const int64_t> events,
                     absl::Span<const int32_t> given, const PlanOptions& o,
                     absl::Span<int32_t> chain, WindowStats* s) {
  const auto start = std::chrono::steady_clock::now();
  WindowGraph g;
  WindowCut cut;
  if (o.given_chain != nullptr) {
    std::copy(given.begin(), given.end(), chain.begin());
    g = BuildWindowGraph(log, events);  // for the statistics only
  } else if (o.partitioner == Partitioner::kTime) {
    DealTimeSlices(o.batch_size, o.world_size, chain);
    s->partition_seconds = SecondsSince(start);
    g = BuildWindowGraph(log, events);  // for the statistics only
  } else {
    g = BuildWindowGraph(log, events);
    cut = CutWindow(g, o, start, chain, s);
  }
  FillWindowStats(g, chain, cut, o, s);
}

// Endpoints of `events`, ascending and distinct.
std::vector<int64_t> Endpoints(const data::EventLog& log,
                               absl::Span<const int64_t> events) {
  std::vector<int64_t> nodes;
  nodes.reserve(2 * events.size());
  for (const int64_t e : events) {
    nodes.push_back(log.src[e]);
    nodes.push_back(log.dst[e]);
  }
  std::sort(nodes.begin(), nodes.end());
  nodes.erase(std::unique(nodes.begin(), nodes.end()), nodes.end());
  return nodes;
}

// Appends to `plan` the urgent set of the window before train[lo, hi):
// the endpoints of every worker's first `head` events of [lo, hi) (each
// worker pushes first what any worker reads first).
void AppendUrgentSet(const data::EventLog& log, absl::Span<const int64_t> train,
                     const SubChainPartition& partition, int64_t lo, int64_t hi,
                     int64_t head, WorkerPlan* plan) {
  std::vector<int64_t> heads;
  std::vector<int64_t> taken(partition.parts, 0);
  for (int64_t i = lo; i < hi; ++i) {
    if (taken[partition.chain[i]]++ < head) heads.push_back(train[i]);
  }
  const std::vector<int64_t> urgent = Endpoints(log, heads);
  plan->urgent_nodes.insert(plan->urgent_nodes.end(), urgent.begin(),
                            urgent.end());
  plan->urgent_begin.push_back(static_cast<int64_t>(plan->urgent_nodes.size()));
}

// Appends a window's batches to `plan`: consecutive slices of `bs` events
// of `mine` (this worker's sub-chain), then empty padding up to the steps
// of the longest sub-chain; `chain_events`: every sub-chain's events.
void AppendWindowBatches(const std::vector<int64_t>& mine,
                         const std::vector<int64_t>& chain_events, int64_t bs,
                         WorkerPlan* plan) {
  const int64_t longest =
      *std::max_element(chain_events.begin(), chain_events.end());
  const int64_t steps = (longest + bs - 1) / bs;
  const int64_t count = static_cast<int64_t>(mine.size());
  for (int64_t k = 0; k < steps; ++k) {
    const int64_t blo = std::min(count, k * bs);
    const int64_t bhi = std::min(count, blo + bs);
    plan->events.insert(plan->events.end(), mine.begin() + blo,
                        mine.begin() + bhi);
    plan->batch_begin.push_back(static_cast<int64_t>(plan->events.size()));
    int64_t step_events = 0;
    for (const int64_t c : chain_events) {
      step_events += std::clamp<int64_t>(c - k * bs, 0, bs);
    }
    plan->step_event_counts.push_back(step_events);
  }
}

}  // namespace

SubChainPartition PartitionSubChains(const data::EventLog& log,
                                     absl::Span<const int64_t> train,
                                     const PlanOptions& o) {
  const int64_t n = static_cast<int64_t>(train.size());
  const int64_t nw = (n + o.window_events - 1) / o.window_events;
  SubChainPartition result;
  result.parts = o.world_size;
  result.chain.assign(n, 0);
  result.window_begin.reserve(nw + 1);
  for (int64_t w = 0; w <= nw; ++w) {
    result.window_begin.push_back(std::min(n, w * o.window_events));
  }
  result.stats.resize(nw);
  for (int64_t w = 0; w < nw; ++w) {
    const int64_t lo = result.window_begin[w], hi = result.window_begin[w + 1];
    const absl::Span<const int32_t> given =
        o.given_chain != nullptr
            ? absl::MakeConstSpan(*o.given_chain).subspan(lo, hi - lo)
            : absl::Span<const int32_t>();
    PartitionWindow(log, train.subspan(lo, hi - lo), given, o,
                    absl::MakeSpan(result.chain).subspan(lo, hi - lo),
                    &result.stats[w]);
  }
  return result;
}

WorkerPlan SubChainWorkerPlan(const data::EventLog& log,
                              absl::Span<const int64_t> train,
                              const SubChainPartition& partition, int rank,
                              const PlanOptions& o) {
  const int64_t nw = partition.num_windows();
  WorkerPlan plan;
  plan.rank = rank;
  plan.sync_every = 0;
  plan.batch_begin.assign(1, 0);
  plan.refresh_begin.assign(1, 0);
  plan.window_begin.assign(1, 0);
  plan.urgent_begin.assign(1, 0);
  std::vector<int64_t> mine;  // this rank's sub-chain of the window
  std::vector<int64_t> chain_events(partition.parts);
  for (int64_t w = 0; w < nw; ++w) {
    const int64_t lo = partition.window_begin[w];
    const int64_t hi = partition.window_begin[w + 1];
    mine.clear();
    std::fill(chain_events.begin(), chain_events.end(), 0);
    for (int64_t i = lo; i < hi; ++i) {
      const int32_t c = partition.chain[i];
      ++chain_events[c];
      if (c == rank) mine.push_back(train[i]);
    }
    if (w > 0) {
      AppendUrgentSet(log, train, partition, lo, hi,
                      static_cast<int64_t>(o.urgent_batches) * o.batch_size,
                      &plan);
    }
    AppendWindowBatches(mine, chain_events, o.batch_size, &plan);
    plan.window_begin.push_back(plan.num_batches());
    const std::vector<int64_t> refresh = Endpoints(log, mine);
    plan.refresh.insert(plan.refresh.end(), refresh.begin(), refresh.end());
    plan.refresh_begin.push_back(static_cast<int64_t>(plan.refresh.size()));
  }
  if (nw > 0) plan.urgent_begin.push_back(plan.urgent_begin.back());
  plan.target.assign(plan.events.size(), 1);
  return plan;
}

}  // namespace mnemo::plan

// libc's rand() and srand(), but this thread's own generator while it runs
// METIS (MetisRandomScope above).
extern "C" int rand() noexcept {
  if (mnemo::plan::metis_random.active) {
    int32_t r = 0;
    random_r(&mnemo::plan::metis_random.data, &r);
    return r;
  }
  static const auto libc_rand = mnemo::plan::LibcFunction<int (*)()>("rand");
  return libc_rand();
}

extern "C" void srand(unsigned seed) noexcept {
  if (mnemo::plan::metis_random.active) {
    mnemo::plan::SeedMetisRandom(seed);
    return;
  }
  static const auto libc_srand =
      mnemo::plan::LibcFunction<void (*)(unsigned)>("srand");
  libc_srand(seed);
}
