#include "trainer/plan/batch_plan.h"

#include <metis.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <type_traits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "trainer/plan/subchain_plan.h"
#include "util/enum_names.h"

namespace mnemo::plan {

namespace {
constexpr EnumName<Partitioner> kPartitionerNames[] = {
    {Partitioner::kMetis, "metis"},
    {Partitioner::kGreedy, "greedy"},
    {Partitioner::kTime, "time"}};
}  // namespace

absl::StatusOr<Partitioner> ParsePartitioner(std::string_view name) {
  return ParseEnum(kPartitionerNames, "--partitioner", name);
}

std::string_view PartitionerName(Partitioner partitioner) {
  return EnumToName(kPartitionerNames, partitioner);
}

int64_t WorkerPlan::num_batches() const {
  return batch_begin.empty() ? 0 : static_cast<int64_t>(batch_begin.size()) - 1;
}

int64_t WorkerPlan::num_windows() const {
  return refresh_begin.empty() ? 0
                               : static_cast<int64_t>(refresh_begin.size()) - 1;
}

BatchView WorkerPlan::batch(int64_t b) const {
  BatchView v;
  const int64_t lo = batch_begin[b], hi = batch_begin[b + 1];
  v.events = absl::MakeConstSpan(events.data() + lo, hi - lo);
  v.target = absl::MakeConstSpan(target.data() + lo, hi - lo);
  const int64_t w = window_of(b);
  v.boundary = b == window_first_batch(w);
  if (v.boundary) {
    const int64_t rlo = refresh_begin[w], rhi = refresh_begin[w + 1];
    v.refresh = absl::MakeConstSpan(refresh.data() + rlo, rhi - rlo);
  }
  return v;
}

int64_t WorkerPlan::window_of(int64_t b) const {
  if (window_begin.empty()) return b / sync_every;
  // The last window starting at or before b (windows are never empty).
  return std::upper_bound(window_begin.begin(), window_begin.end(), b) -
         window_begin.begin() - 1;
}

int64_t WorkerPlan::window_first_batch(int64_t w) const {
  return window_begin.empty() ? w * sync_every : window_begin[w];
}

int64_t WorkerPlan::window_batches(int64_t w) const {
  if (!window_begin.empty()) return window_begin[w + 1] - window_begin[w];
  return std::min<int64_t>(num_batches(), (w + 1) * sync_every) -
         w * sync_every;
}

absl::Span<const int64_t> WorkerPlan::urgent(int64_t w) const {
  if (urgent_begin.empty()) return {};
  const int64_t lo = urgent_begin[w], hi = urgent_begin[w + 1];
  return absl::MakeConstSpan(urgent_nodes.data() + lo, hi - lo);
}

int64_t WorkerPlan::step_events(int64_t b) const {
  return step_event_counts.empty() ? 0 : step_event_counts[b];
}

namespace {

// Bumped whenever the planner's output or the file layout changes.
// 2: window_begin, urgent sets, step event counts, window statistics.
// 3: urgent sets of every worker; the given partition in the key.
constexpr uint64_t kFormatVersion = 3;
constexpr uint64_t kMagic = 0x314e414c504f4d4eull;  // "NMOPLAN1"

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
      .count();
}

const char* KindName(PlanKind kind) {
  switch (kind) {
    case PlanKind::kOwnTargets:
      return "own";
    case PlanKind::kFullReplay:
      return "full";
    case PlanKind::kDependencyScan:
      return "scan";
    case PlanKind::kSubChains:
      return "sub";
  }
  return "unknown";
}

// ---------------------------------------------------------------------------
// Input checks and the ownership table.

absl::Status CheckInputs(const data::EventLog& log,
                         absl::Span<const int64_t> train, int rank,
                         const PlanOptions& o) {
  if (o.world_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("plan: world_size must be >= 1, got ", o.world_size));
  }
  if (rank < 0 || rank >= o.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("plan: rank ", rank, " outside [0, ", o.world_size, ")"));
  }
  if (o.batch_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("plan: batch_size must be >= 1, got ", o.batch_size));
  }
  if (o.sync_every < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("plan: sync_every must be >= 1, got ", o.sync_every));
  }
  if (o.neighbor_reads < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "plan: neighbor_reads must be >= 0, got ", o.neighbor_reads));
  }
  if (o.kind == PlanKind::kSubChains) {
    if (o.window_events < 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "plan: window_events must be >= 1, got ", o.window_events));
    }
    if (!(o.imbalance >= 0) || !std::isfinite(o.imbalance)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "plan: imbalance must be finite and >= 0, got ", o.imbalance));
    }
    if (o.urgent_batches < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "plan: urgent_batches must be >= 0, got ", o.urgent_batches));
    }
    if (o.partitioner != Partitioner::kMetis &&
        o.partitioner != Partitioner::kGreedy &&
        o.partitioner != Partitioner::kTime) {
      return absl::InvalidArgumentError("plan: unknown partitioner");
    }
    if (o.given_chain != nullptr) {
      if (o.given_chain->size() != train.size()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "plan: the given partition has ", o.given_chain->size(),
            " sub-chain ids for ", train.size(), " training events"));
      }
      for (const int32_t c : *o.given_chain) {
        if (c < 0 || c >= o.world_size) {
          return absl::InvalidArgumentError(
              absl::StrCat("plan: the given partition names sub-chain ", c,
                           " of ", o.world_size));
        }
      }
    }
  }
  if (o.kind == PlanKind::kDependencyScan && o.neighbor_reads > 0) {
    if (o.graph == nullptr) {
      return absl::InvalidArgumentError(
          "plan: neighbor_reads > 0 needs a TemporalGraph");
    }
    if (o.graph->num_nodes() != log.num_nodes) {
      return absl::InvalidArgumentError(
          absl::StrCat("plan: the graph has ", o.graph->num_nodes(),
                       " nodes, the log ", log.num_nodes));
    }
  }
  const int64_t m = log.num_events();
  if (static_cast<int64_t>(log.dst.size()) != m ||
      static_cast<int64_t>(log.t.size()) != m) {
    return absl::InvalidArgumentError(
        "plan: the log's src, dst and t columns differ in length");
  }
  int64_t prev = -1;
  for (const int64_t e : train) {
    if (e <= prev || e >= m) {
      return absl::InvalidArgumentError(
          absl::StrCat("plan: training events must be strictly ascending log "
                       "indices in [0, ",
                       m, "); got ", e, " after ", prev));
    }
    prev = e;
    if (log.src[e] < 0 || log.src[e] >= log.num_nodes || log.dst[e] < 0 ||
        log.dst[e] >= log.num_nodes) {
      return absl::InvalidArgumentError(
          absl::StrCat("plan: event ", e, " has a node id outside [0, ",
                       log.num_nodes, ")"));
    }
  }
  return absl::OkStatus();
}

// owner(u) for every node of the log (all 0 without an owner function when
// world_size is 1; empty for kSubChains, which does not use ownership).
absl::StatusOr<std::vector<int32_t>> OwnerTable(const data::EventLog& log,
                                                const OwnerFn& owner,
                                                const PlanOptions& o) {
  if (o.kind == PlanKind::kSubChains) return std::vector<int32_t>();
  const int world_size = o.world_size;
  std::vector<int32_t> own(log.num_nodes, 0);
  if (!owner) {
    if (world_size == 1) return own;
    return absl::InvalidArgumentError("plan: no owner function");
  }
  for (int64_t u = 0; u < log.num_nodes; ++u) {
    const int r = owner(u);
    if (r < 0 || r >= world_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "plan: owner(", u, ") = ", r, " outside [0, ", world_size, ")"));
    }
    own[u] = r;
  }
  return own;
}

// ---------------------------------------------------------------------------
// The planners. `own` is the ownership table; inputs are already checked.

// Appends batch [lo, hi) of `train`: the events `keep` selects, with their
// target flags.
template <typename Keep>
void AppendBatch(const data::EventLog& log, absl::Span<const int64_t> train,
                 int64_t lo, int64_t hi, const std::vector<int32_t>& own,
                 int rank, Keep keep, WorkerPlan* plan) {
  for (int64_t i = lo; i < hi; ++i) {
    const int64_t e = train[i];
    const bool is_target = own[log.src[e]] == rank;
    if (is_target || keep(i)) {
      plan->events.push_back(e);
      plan->target.push_back(is_target ? 1 : 0);
    }
  }
  plan->batch_begin.push_back(static_cast<int64_t>(plan->events.size()));
}

// kOwnTargets and kFullReplay: K = 1, empty refresh sets.
void PlanPerBatch(const data::EventLog& log, absl::Span<const int64_t> train,
                  const std::vector<int32_t>& own, int rank,
                  const PlanOptions& o, WorkerPlan* plan) {
  const int64_t n = static_cast<int64_t>(train.size());
  const int64_t nb = (n + o.batch_size - 1) / o.batch_size;
  const bool replay_all = o.kind == PlanKind::kFullReplay;
  plan->sync_every = 1;
  plan->batch_begin.assign(1, 0);
  plan->refresh_begin.assign(nb + 1, 0);
  for (int64_t b = 0; b < nb; ++b) {
    const int64_t lo = b * o.batch_size, hi = std::min(n, lo + o.batch_size);
    AppendBatch(
        log, train, lo, hi, own, rank,
        [replay_all](int64_t) { return replay_all; }, plan);
  }
}

// window_begin and step_event_counts of a plan over global batches of
// batch_size: step b's targets over all workers are global batch b.
void FillGlobalBatchLayout(int64_t n, const PlanOptions& o, WorkerPlan* plan) {
  const int64_t nb = plan->num_batches();
  const int64_t k = plan->sync_every;
  plan->window_begin.clear();
  for (int64_t b = 0; b < nb; b += k) plan->window_begin.push_back(b);
  plan->window_begin.push_back(nb);
  plan->step_event_counts.resize(nb);
  for (int64_t b = 0; b < nb; ++b) {
    plan->step_event_counts[b] =
        std::min(n, (b + 1) * o.batch_size) - b * o.batch_size;
  }
}

// DepTGL Algorithm 1: source-based backward dependency scan and mixed-batch
// construction, one synchronization window (Definition 1) at a time.
//
// Within a batch the auxiliary scan (Lines 6-14) visits events in REVERSE
// time order. The paper's text says only "for each event e' in B^s"; the
// order matters when a replayed event adds a node to F that an EARLIER event
// of the same batch updated: scanning backwards picks that earlier event up
// (it is a dependency of the replayed one), scanning forwards would miss it,
// and a later event that touches the new node (not a dependency) is never
// picked up for it. The Fig. 4 walk-through scans batch r backwards ("e5
// no; e4 touches v7: auxiliary; e3 touches v5: auxiliary, F gains v8; e2
// no"); its mixed batches happen to come out the same in either direction,
// so tests/unit/plan also checks a case where the direction matters and
// checks every plan against a closure of the reads computed forward.
//
// Each window's batches are scanned once, so every event is visited at most
// once per window and I_aux (Line 8) needs no storage: the per-position
// `aux` flags are it. F and the refresh set are epoch-stamped per-node
// markers, so a window costs O(its events + frontier insertions), plus
// O(neighbor_reads) per target with neighbor_reads.
void PlanDependencyScan(const data::EventLog& log,
                        absl::Span<const int64_t> train,
                        const std::vector<int32_t>& own, int rank,
                        const PlanOptions& o, WorkerPlan* plan) {
  const int64_t n = static_cast<int64_t>(train.size());
  const int64_t bs = o.batch_size;
  const int64_t k_sync = o.sync_every;
  const int64_t nb = (n + bs - 1) / bs;
  const int64_t nw = (nb + k_sync - 1) / k_sync;
  const int reads = o.neighbor_reads;
  plan->sync_every = o.sync_every;
  plan->batch_begin.assign(1, 0);
  plan->refresh_begin.assign(1, 0);

  // Per node: the epoch (window + 1) in which it entered F / the refresh set.
  std::vector<uint32_t> in_frontier(log.num_nodes, 0);
  std::vector<uint32_t> in_refresh(log.num_nodes, 0);
  std::vector<uint8_t> aux;             // per position in the window
  std::vector<int64_t> window_refresh;  // N_sync of the window, unsorted
  const int32_t* src = log.src.data();
  const int32_t* dst = log.dst.data();

  for (int64_t w = 0; w < nw; ++w) {
    const uint32_t epoch = static_cast<uint32_t>(w + 1);
    const int64_t b0 = w * k_sync, b1 = std::min(nb, b0 + k_sync);
    const int64_t wlo = b0 * bs, whi = std::min(n, b1 * bs);
    aux.assign(whi - wlo, 0);  // Line 2: I_aux <- {}
    window_refresh.clear();    // Line 2: F <- {}
    auto add_refresh = [&](int32_t x) {
      if (in_refresh[x] != epoch) {
        in_refresh[x] = epoch;
        window_refresh.push_back(x);
      }
    };
    auto add_frontier = [&](int32_t x) {
      if (in_frontier[x] != epoch) {
        in_frontier[x] = epoch;
        add_refresh(x);
      }
    };
    // Refresh-set extension: remote recent neighbours of a target endpoint.
    auto add_neighbors = [&](int32_t x, double t) {
      int64_t begin, end;
      o.graph->Before(x, t, &begin, &end);
      const int32_t* nbr = o.graph->neighbors().data();
      for (int64_t j = std::max<int64_t>(begin, end - reads); j < end; ++j) {
        if (own[nbr[j]] != rank) add_refresh(nbr[j]);
      }
    };

    // Line 3: the window's batches in reverse chronological order.
    for (int64_t b = b1 - 1; b >= b0; --b) {
      const int64_t lo = b * bs, hi = std::min(n, lo + bs);
      // Lines 4-5: targets (source owned by p); their remote destinations
      // join F.
      for (int64_t i = lo; i < hi; ++i) {
        const int64_t e = train[i];
        const int32_t u = src[e], v = dst[e];
        if (own[u] != rank) continue;
        if (own[v] != rank) add_frontier(v);
        if (reads > 0) {
          add_neighbors(u, log.t[e]);
          add_neighbors(v, log.t[e]);
        }
      }
      // Lines 6-14, later events first (see above).
      for (int64_t i = hi - 1; i >= lo; --i) {
        const int64_t e = train[i];
        const int32_t u = src[e], v = dst[e];
        if (own[u] == rank) continue;  // Line 7: pi(u') != p
        if (in_frontier[u] != epoch && in_frontier[v] != epoch) continue;
        aux[i - wlo] = 1;  // Lines 8-10
        add_frontier(u);   // Line 12: remote endpoints join F
        if (own[v] != rank) add_frontier(v);
      }
    }

    // Line 16: N_sync <- F (here F plus the neighbour reads).
    std::sort(window_refresh.begin(), window_refresh.end());
    plan->refresh.insert(plan->refresh.end(), window_refresh.begin(),
                         window_refresh.end());
    plan->refresh_begin.push_back(static_cast<int64_t>(plan->refresh.size()));
    // Lines 17-19: mixed batches, time-ordered (train is ascending).
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t lo = b * bs, hi = std::min(n, lo + bs);
      AppendBatch(
          log, train, lo, hi, own, rank,
          [&](int64_t i) { return aux[i - wlo] != 0; }, plan);
    }
  }
}

// `window_stats` receives kSubChains's per-window statistics (else cleared).
WorkerPlan PlanWithOwners(const data::EventLog& log,
                          absl::Span<const int64_t> train,
                          const std::vector<int32_t>& own, int rank,
                          const PlanOptions& o,
                          std::vector<WindowStats>* window_stats) {
  window_stats->clear();
  if (o.kind == PlanKind::kSubChains) {
    SubChainPartition partition = PartitionSubChains(log, train, o);
    *window_stats = std::move(partition.stats);
    return SubChainWorkerPlan(log, train, partition, rank, o);
  }
  WorkerPlan plan;
  plan.rank = rank;
  if (o.kind == PlanKind::kDependencyScan) {
    PlanDependencyScan(log, train, own, rank, o, &plan);
  } else {
    PlanPerBatch(log, train, own, rank, o, &plan);
  }
  FillGlobalBatchLayout(static_cast<int64_t>(train.size()), o, &plan);
  return plan;
}

// Plan-wide totals of `stats->window_stats` (already set).
void FillWindowTotals(const WorkerPlan& plan, PlanStats* stats) {
  int64_t events = 0, cross = 0, shared = 0;
  double imbalance_sum = 0;
  for (const WindowStats& w : stats->window_stats) {
    events += w.events;
    cross += w.cross_events;
    shared += w.shared_events;
    imbalance_sum += w.imbalance;
    stats->max_imbalance = std::max(stats->max_imbalance, w.imbalance);
    stats->partition_seconds += w.partition_seconds;
  }
  if (events > 0) {
    stats->cross_ratio =
        static_cast<double>(cross) / static_cast<double>(events);
    stats->shared_ratio =
        static_cast<double>(shared) / static_cast<double>(events);
  }
  if (!stats->window_stats.empty()) {
    stats->mean_imbalance =
        imbalance_sum / static_cast<double>(stats->window_stats.size());
  }
  for (int64_t b = 0; b < plan.num_batches(); ++b) {
    stats->empty_batches += plan.batch_begin[b + 1] == plan.batch_begin[b];
  }
}

void FillStats(const WorkerPlan& plan, PlanStats* stats) {
  stats->batches = plan.num_batches();
  stats->windows = plan.num_windows();
  stats->targets = std::count(plan.target.begin(), plan.target.end(), 1);
  stats->auxiliaries =
      static_cast<int64_t>(plan.target.size()) - stats->targets;
  stats->refresh_total = static_cast<int64_t>(plan.refresh.size());
  stats->refresh_max = 0;
  for (int64_t w = 0; w < plan.num_windows(); ++w) {
    stats->refresh_max = std::max(
        stats->refresh_max, plan.refresh_begin[w + 1] - plan.refresh_begin[w]);
  }
  FillWindowTotals(plan, stats);
}

[[noreturn]] void Die(const absl::Status& status) {
  std::fprintf(stderr, "MakeWorkerPlan: %s\n", status.ToString().c_str());
  std::abort();
}

// ---------------------------------------------------------------------------
// Cache key and file format.

uint64_t Mix64(uint64_t x) {
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// A stable (process-independent) 64-bit hash of a word sequence; not
// cryptographic. Each step is a bijection of the state, so sequences that
// differ in one word always hash differently.
class Hasher {
 public:
  void Add(uint64_t w) { h_ = Mix64((h_ ^ w) + 0x9E3779B97F4A7C15ull); }
  void AddDouble(double d) {
    uint64_t w;
    std::memcpy(&w, &d, sizeof w);
    Add(w);
  }
  uint64_t value() const { return h_; }

 private:
  uint64_t h_ = 0x6D6E656D6F706C6Eull;
};

uint64_t CacheKey(const data::EventLog& log, absl::Span<const int64_t> train,
                  const std::vector<int32_t>& own, int rank,
                  const PlanOptions& o) {
  Hasher h;
  h.Add(kFormatVersion);
  h.Add(static_cast<uint64_t>(o.kind));
  h.Add(static_cast<uint64_t>(o.world_size));
  h.Add(static_cast<uint64_t>(rank));
  h.Add(static_cast<uint64_t>(o.batch_size));
  h.Add(static_cast<uint64_t>(o.sync_every));
  h.Add(static_cast<uint64_t>(o.neighbor_reads));
  h.Add(static_cast<uint64_t>(log.num_nodes));
  h.Add(train.size());
  for (const int64_t e : train) {
    h.Add(static_cast<uint64_t>(e));
    h.Add((static_cast<uint64_t>(static_cast<uint32_t>(log.src[e])) << 32) |
          static_cast<uint32_t>(log.dst[e]));
    h.AddDouble(log.t[e]);
  }
  for (const int32_t r : own) h.Add(static_cast<uint64_t>(r));
  if (o.kind == PlanKind::kSubChains) {
    h.Add(static_cast<uint64_t>(o.window_events));
    h.Add(static_cast<uint64_t>(o.partitioner));
    h.AddDouble(o.imbalance);
    h.Add(static_cast<uint64_t>(o.urgent_batches));
    // A given partition replaces the partitioner's (and may differ from
    // what this process's METIS would cut).
    h.Add(o.given_chain != nullptr);
    if (o.given_chain != nullptr) {
      for (const int32_t c : *o.given_chain) h.Add(static_cast<uint64_t>(c));
    }
    // Another METIS may cut differently.
    h.Add(METIS_VER_MAJOR * 1000000 + METIS_VER_MINOR * 1000 +
          METIS_VER_SUBMINOR);
  }
  const bool uses_graph =
      o.kind == PlanKind::kDependencyScan && o.neighbor_reads > 0;
  h.Add(uses_graph);
  if (uses_graph) {
    const data::TemporalGraph& g = *o.graph;
    for (const int64_t x : g.offsets()) h.Add(static_cast<uint64_t>(x));
    for (int64_t j = 0; j < g.num_entries(); ++j) {
      h.Add(static_cast<uint64_t>(static_cast<uint32_t>(g.neighbors()[j])));
      h.Add(static_cast<uint64_t>(g.event_ids()[j]));
      h.AddDouble(g.times()[j]);
    }
  }
  return h.value();
}

// File layout (native little-endian 64-bit words): magic, version, key,
// rank, sync_every, then the sizes of batch_begin, events, refresh_begin,
// refresh, window_begin, urgent_begin, urgent_nodes, step_event_counts and
// the number of window statistics; then those arrays with `target` as bytes
// between events and refresh_begin, zero-padded to a word; then the window
// statistics (kWindowStatWords words each, doubles bit-copied); then a
// checksum word (Hasher over every word before it).
constexpr int kHeaderWords = 14;
constexpr int kWindowStatWords = 13;

void PutWord(std::string* out, uint64_t w) {
  out->append(reinterpret_cast<const char*>(&w), sizeof w);
}

template <typename T>
void PutArray(std::string* out, const std::vector<T>& v) {
  out->append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
  out->append((8 - out->size() % 8) % 8, '\0');
}

uint64_t Checksum(const char* data, size_t words) {
  Hasher h;
  for (size_t i = 0; i < words; ++i) {
    uint64_t w;
    std::memcpy(&w, data + 8 * i, sizeof w);
    h.Add(w);
  }
  return h.value();
}

std::string Serialize(const WorkerPlan& plan,
                      const std::vector<WindowStats>& window_stats,
                      uint64_t key) {
  std::string out;
  for (const uint64_t w :
       {kMagic, kFormatVersion, key, static_cast<uint64_t>(plan.rank),
        static_cast<uint64_t>(plan.sync_every),
        static_cast<uint64_t>(plan.batch_begin.size()),
        static_cast<uint64_t>(plan.events.size()),
        static_cast<uint64_t>(plan.refresh_begin.size()),
        static_cast<uint64_t>(plan.refresh.size()),
        static_cast<uint64_t>(plan.window_begin.size()),
        static_cast<uint64_t>(plan.urgent_begin.size()),
        static_cast<uint64_t>(plan.urgent_nodes.size()),
        static_cast<uint64_t>(plan.step_event_counts.size()),
        static_cast<uint64_t>(window_stats.size())}) {
    PutWord(&out, w);
  }
  PutArray(&out, plan.batch_begin);
  PutArray(&out, plan.events);
  PutArray(&out, plan.target);
  PutArray(&out, plan.refresh_begin);
  PutArray(&out, plan.refresh);
  PutArray(&out, plan.window_begin);
  PutArray(&out, plan.urgent_begin);
  PutArray(&out, plan.urgent_nodes);
  PutArray(&out, plan.step_event_counts);
  auto put_double = [&out](double d) {
    uint64_t w;
    std::memcpy(&w, &d, sizeof w);
    PutWord(&out, w);
  };
  for (const WindowStats& w : window_stats) {
    PutWord(&out, static_cast<uint64_t>(w.events));
    PutWord(&out, static_cast<uint64_t>(w.nodes));
    PutWord(&out, static_cast<uint64_t>(w.cross_events));
    put_double(w.cross_ratio);
    PutWord(&out, static_cast<uint64_t>(w.shared_events));
    put_double(w.shared_ratio);
    PutWord(&out, static_cast<uint64_t>(w.cut_events));
    PutWord(&out, static_cast<uint64_t>(w.max_chain_events));
    put_double(w.imbalance);
    put_double(w.weight_imbalance);
    PutWord(&out, static_cast<uint64_t>(w.steps));
    put_double(w.partition_seconds);
    PutWord(&out, w.fallback ? 1 : 0);
  }
  PutWord(&out, Checksum(out.data(), out.size() / 8));
  return out;
}

// Offsets: starts at 0, non-decreasing, ends at `total`.
bool ValidOffsets(const std::vector<int64_t>& v, int64_t total) {
  if (v.empty() || v.front() != 0 || v.back() != total) return false;
  for (size_t i = 1; i < v.size(); ++i) {
    if (v[i] < v[i - 1]) return false;
  }
  return true;
}

// The plan in `bytes` (and its window statistics into *window_stats), or
// nullopt when it is not a well-formed plan for `key` (truncated, corrupt,
// another key or version). `train_size`: events of the training stream.
std::optional<WorkerPlan> Deserialize(const std::string& bytes, uint64_t key,
                                      int rank, const PlanOptions& o,
                                      int64_t train_size,
                                      std::vector<WindowStats>* window_stats) {
  if (bytes.size() % 8 != 0 || bytes.size() < 8 * (kHeaderWords + 1)) {
    return std::nullopt;
  }
  const size_t words = bytes.size() / 8;
  uint64_t h[kHeaderWords], sum;
  std::memcpy(h, bytes.data(), sizeof h);
  std::memcpy(&sum, bytes.data() + bytes.size() - 8, sizeof sum);
  if (h[0] != kMagic || h[1] != kFormatVersion || h[2] != key ||
      h[3] != static_cast<uint64_t>(rank)) {
    return std::nullopt;
  }
  const uint64_t nbb = h[5], nev = h[6], nrb = h[7], nrf = h[8], nwb = h[9],
                 nub = h[10], nun = h[11], nsc = h[12], nws = h[13];
  constexpr uint64_t kMax = uint64_t{1} << 40;  // guards the size arithmetic
  for (int i = 4; i < kHeaderWords; ++i) {
    if (h[i] > kMax) return std::nullopt;
  }
  const uint64_t need = kHeaderWords + nbb + nev + (nev + 7) / 8 + nrb + nrf +
                        nwb + nub + nun + nsc + kWindowStatWords * nws + 1;
  if (need != words || Checksum(bytes.data(), words - 1) != sum) {
    return std::nullopt;
  }
  WorkerPlan plan;
  plan.rank = rank;
  plan.sync_every = static_cast<int>(h[4]);
  const char* p = bytes.data() + 8 * kHeaderWords;
  auto take = [&p](auto* v, uint64_t n) {
    using T = typename std::remove_reference_t<decltype(*v)>::value_type;
    v->resize(n);
    std::memcpy(v->data(), p, n * sizeof(T));
    p += (n * sizeof(T) + 7) / 8 * 8;
  };
  take(&plan.batch_begin, nbb);
  take(&plan.events, nev);
  take(&plan.target, nev);
  take(&plan.refresh_begin, nrb);
  take(&plan.refresh, nrf);
  take(&plan.window_begin, nwb);
  take(&plan.urgent_begin, nub);
  take(&plan.urgent_nodes, nun);
  take(&plan.step_event_counts, nsc);
  window_stats->assign(nws, WindowStats());
  auto word = [&p]() {
    uint64_t w;
    std::memcpy(&w, p, sizeof w);
    p += 8;
    return w;
  };
  auto dbl = [&word]() {
    const uint64_t w = word();
    double d;
    std::memcpy(&d, &w, sizeof d);
    return d;
  };
  for (WindowStats& w : *window_stats) {
    w.events = static_cast<int64_t>(word());
    w.nodes = static_cast<int64_t>(word());
    w.cross_events = static_cast<int64_t>(word());
    w.cross_ratio = dbl();
    w.shared_events = static_cast<int64_t>(word());
    w.shared_ratio = dbl();
    w.cut_events = static_cast<int64_t>(word());
    w.max_chain_events = static_cast<int64_t>(word());
    w.imbalance = dbl();
    w.weight_imbalance = dbl();
    w.steps = static_cast<int64_t>(word());
    w.partition_seconds = dbl();
    w.fallback = word() != 0;
  }
  // Structure (a checksum collision or a planner bug must not reach the
  // runtime as out-of-range offsets).
  const int64_t nb = static_cast<int64_t>(nbb) - 1;
  const int64_t nw = static_cast<int64_t>(nrb) - 1;
  if (!ValidOffsets(plan.batch_begin, nev) ||
      !ValidOffsets(plan.refresh_begin, nrf) ||
      !ValidOffsets(plan.window_begin, nb) ||
      static_cast<int64_t>(nwb) != nw + 1 || static_cast<int64_t>(nsc) != nb) {
    return std::nullopt;
  }
  for (int64_t w = 0; w < nw; ++w) {  // windows are never empty
    if (plan.window_begin[w + 1] == plan.window_begin[w]) return std::nullopt;
  }
  for (const uint8_t t : plan.target) {
    if (t > 1) return std::nullopt;
  }
  if (o.kind == PlanKind::kSubChains) {
    if (plan.sync_every != 0 ||
        nw != (train_size + o.window_events - 1) / o.window_events ||
        !ValidOffsets(plan.urgent_begin, nun) ||
        static_cast<int64_t>(nub) != nw + 1 ||
        static_cast<int64_t>(nws) != nw) {
      return std::nullopt;
    }
  } else {
    const int64_t k_sync = plan.sync_every;
    const int expected_k =
        o.kind == PlanKind::kDependencyScan ? o.sync_every : 1;
    if (k_sync != expected_k || nw != (nb + k_sync - 1) / k_sync || nub != 0 ||
        nun != 0 || nws != 0) {
      return std::nullopt;
    }
    for (int64_t w = 0; w < nw; ++w) {
      if (plan.window_begin[w] != w * k_sync) return std::nullopt;
    }
  }
  return plan;
}

std::optional<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return std::nullopt;
  return std::move(ss).str();
}

// Writes `bytes` to `path` atomically: a unique temp file in the same
// directory, then rename. False (and nothing left behind) on failure.
bool WriteFileAtomically(const std::string& path, const std::string& bytes) {
  static std::atomic<uint64_t> counter{0};
  const std::string tmp = absl::StrFormat(
      "%s.tmp.%d.%d", path, static_cast<int>(getpid()), counter.fetch_add(1));
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) return false;
  const bool written =
      std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  const bool closed = std::fclose(f) == 0;
  if (!written || !closed || std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return false;
  }
  return true;
}

}  // namespace

WorkerPlan MakeWorkerPlan(const data::EventLog& log,
                          absl::Span<const int64_t> train, const OwnerFn& owner,
                          int rank, const PlanOptions& options,
                          PlanStats* stats) {
  const auto start = std::chrono::steady_clock::now();
  if (absl::Status s = CheckInputs(log, train, rank, options); !s.ok()) {
    Die(s);
  }
  absl::StatusOr<std::vector<int32_t>> own = OwnerTable(log, owner, options);
  if (!own.ok()) Die(own.status());
  std::vector<WindowStats> window_stats;
  WorkerPlan plan =
      PlanWithOwners(log, train, *own, rank, options, &window_stats);
  if (stats != nullptr) {
    *stats = PlanStats();
    stats->window_stats = std::move(window_stats);
    FillStats(plan, stats);
    stats->seconds = SecondsSince(start);
  }
  return plan;
}

absl::StatusOr<WorkerPlan> LoadOrMakeWorkerPlan(const data::EventLog& log,
                                                absl::Span<const int64_t> train,
                                                const OwnerFn& owner, int rank,
                                                const PlanOptions& options,
                                                const std::string& cache_dir,
                                                PlanStats* stats) {
  const auto start = std::chrono::steady_clock::now();
  PlanStats local_stats;
  if (stats == nullptr) stats = &local_stats;
  *stats = PlanStats();
  if (absl::Status s = CheckInputs(log, train, rank, options); !s.ok()) {
    return s;
  }
  absl::StatusOr<std::vector<int32_t>> own = OwnerTable(log, owner, options);
  if (!own.ok()) return own.status();

  std::string path;
  uint64_t key = 0;
  if (!cache_dir.empty()) {
    key = CacheKey(log, train, *own, rank, options);
    const std::string kind =
        options.kind == PlanKind::kSubChains
            ? absl::StrCat(KindName(options.kind), "_",
                           std::string(PartitionerName(options.partitioner)))
            : std::string(KindName(options.kind));
    path = absl::StrFormat("%s/plan-%s-r%dof%d-%016x.bin", cache_dir, kind,
                           rank, options.world_size, key);
    if (std::optional<std::string> bytes = ReadFile(path)) {
      std::vector<WindowStats> window_stats;
      if (std::optional<WorkerPlan> plan =
              Deserialize(*bytes, key, rank, options,
                          static_cast<int64_t>(train.size()), &window_stats)) {
        stats->window_stats = std::move(window_stats);
        FillStats(*plan, stats);
        stats->from_cache = true;
        stats->cache_path = path;
        stats->seconds = SecondsSince(start);
        return *std::move(plan);
      }
    }
  }

  WorkerPlan plan =
      PlanWithOwners(log, train, *own, rank, options, &stats->window_stats);
  FillStats(plan, stats);
  if (!path.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(cache_dir, ec);
    if (!ec &&
        WriteFileAtomically(path, Serialize(plan, stats->window_stats, key))) {
      stats->cache_path = path;
    }
  }
  stats->seconds = SecondsSince(start);
  return plan;
}

std::string Describe(const data::EventLog& log, const WorkerPlan& plan,
                     int64_t first, int64_t count) {
  const int64_t targets = std::count(plan.target.begin(), plan.target.end(), 1);
  std::string out = absl::StrFormat(
      "plan: rank %d, K %d, %d batches, %d windows, %d events (%d targets, "
      "%d auxiliaries), refresh %d in all\n",
      plan.rank, plan.sync_every, plan.num_batches(), plan.num_windows(),
      plan.events.size(), targets,
      static_cast<int64_t>(plan.events.size()) - targets, plan.refresh.size());
  constexpr size_t kMaxRefreshShown = 32;
  const int64_t lo = std::max<int64_t>(0, first);
  const int64_t hi =
      std::min(plan.num_batches(), first + std::max<int64_t>(0, count));
  for (int64_t b = lo; b < hi; ++b) {
    const BatchView v = plan.batch(b);
    absl::StrAppend(&out, "batch ", b, ":");
    if (v.boundary) {
      absl::StrAppend(&out, " boundary, refresh ", v.refresh.size(), " {");
      for (size_t i = 0; i < v.refresh.size() && i < kMaxRefreshShown; ++i) {
        absl::StrAppend(&out, i ? ", " : "", v.refresh[i]);
      }
      if (v.refresh.size() > kMaxRefreshShown) {
        absl::StrAppend(&out, ", ... (", v.refresh.size() - kMaxRefreshShown,
                        " more)");
      }
      absl::StrAppend(&out, "}");
      if (!plan.urgent_begin.empty()) {
        absl::StrAppend(&out, ", urgent ",
                        plan.urgent(plan.window_of(b)).size());
      }
    }
    absl::StrAppend(&out, "\n");
    for (size_t i = 0; i < v.events.size(); ++i) {
      const int64_t e = v.events[i];
      absl::StrAppend(&out, "  e", e, v.target[i] ? "(T) " : "(A) ", log.src[e],
                      "->", log.dst[e], "\n");
    }
  }
  return out;
}

}  // namespace mnemo::plan
