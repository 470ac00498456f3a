#include "trainer/data/neighbor_sampler.h"

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <string>

#include "absl/strings/str_cat.h"
#include "util/enum_names.h"

namespace mnemo::data {

namespace {
constexpr EnumName<NeighborStrategy> kNeighborStrategyNames[] = {
    {NeighborStrategy::kRecent, "recent"},
    {NeighborStrategy::kUniform, "uniform"}};
}  // namespace

absl::StatusOr<NeighborStrategy> ParseNeighborStrategy(std::string_view name) {
  return ParseEnum(kNeighborStrategyNames, "--neighbor-strategy", name);
}

std::string_view NeighborStrategyName(NeighborStrategy strategy) {
  return EnumToName(kNeighborStrategyNames, strategy);
}

TemporalGraph::TemporalGraph(const EventLog& log,
                             const std::vector<int64_t>& events) {
  Build(log, &events);
}

TemporalGraph::TemporalGraph(const EventLog& log) { Build(log, nullptr); }

void TemporalGraph::Build(const EventLog& log,
                          const std::vector<int64_t>* events) {
  const int64_t num_nodes = log.num_nodes;
  if (log.num_events() > std::numeric_limits<uint32_t>::max()) {
    throw std::length_error(absl::StrCat(
        "temporal graph: ", log.num_events(),
        " events; event ids are 32-bit (at most 2^32 - 1 events)"));
  }
  // Event ids in ascending order; the log is time-sorted, so appending in
  // this order leaves every node's entries sorted by (time, event id).
  std::vector<int64_t> sorted_copy;
  if (events != nullptr && !std::is_sorted(events->begin(), events->end())) {
    sorted_copy = *events;
    std::sort(sorted_copy.begin(), sorted_copy.end());
    events = &sorted_copy;
  }
  const int64_t m =
      events ? static_cast<int64_t>(events->size()) : log.num_events();
  auto event_at = [&](int64_t i) { return events ? (*events)[i] : i; };

  // Counting sort: degrees, prefix sums, then fill in event order.
  offsets_.assign(num_nodes + 1, 0);
  for (int64_t i = 0; i < m; ++i) {
    const int64_t e = event_at(i);
    ++offsets_[log.src[e] + 1];
    ++offsets_[log.dst[e] + 1];
  }
  for (int64_t v = 0; v < num_nodes; ++v) offsets_[v + 1] += offsets_[v];
  nbr_.resize(2 * m);
  eid_.resize(2 * m);
  t_.resize(2 * m);
  std::vector<int64_t> pos(offsets_.begin(), offsets_.end() - 1);
  for (int64_t i = 0; i < m; ++i) {
    const int64_t e = event_at(i);
    const int32_t s = log.src[e], d = log.dst[e];
    const double t = log.t[e];
    int64_t p = pos[s]++;
    nbr_[p] = d, eid_[p] = static_cast<uint32_t>(e), t_[p] = t;
    p = pos[d]++;
    nbr_[p] = s, eid_[p] = static_cast<uint32_t>(e), t_[p] = t;
  }
}

void TemporalGraph::Append(const EventLog& log, int64_t begin) {
  const int64_t end = log.num_events();
  if (end > std::numeric_limits<uint32_t>::max()) {
    throw std::length_error(absl::StrCat(
        "temporal graph: ", end,
        " events; event ids are 32-bit (at most 2^32 - 1 events)"));
  }
  if (!grown()) {
    // A built graph's entries stay where they are, each node without room.
    begin_.assign(offsets_.begin(), offsets_.end() - 1);
    end_.assign(offsets_.begin() + 1, offsets_.end());
    cap_ = end_;
    live_ = static_cast<int64_t>(nbr_.size());
    offsets_.clear();
  }
  const int64_t nodes = std::max<int64_t>(num_nodes(), log.num_nodes);
  const int64_t size = static_cast<int64_t>(nbr_.size());
  begin_.resize(nodes, size);
  end_.resize(nodes, size);
  cap_.resize(nodes, size);
  auto add = [&](int32_t v, int32_t other, int64_t e) {
    if (end_[v] == cap_[v])
      Move(v, std::max<int64_t>(4, 2 * (end_[v] - begin_[v])));
    const int64_t p = end_[v]++;
    nbr_[p] = other, eid_[p] = static_cast<uint32_t>(e), t_[p] = log.t[e];
    ++live_;
  };
  for (int64_t e = begin; e < end; ++e) {
    add(log.src[e], log.dst[e], e);
    add(log.dst[e], log.src[e], e);
  }
  // Compacted once the arrays hold more than three times the entries.
  if (static_cast<int64_t>(nbr_.size()) > 3 * live_ + 1024) Compact();
}

bool TemporalGraph::RemoveAppended(const EventLog& log, int64_t begin) {
  const int64_t end = log.num_events();
  if (!grown()) return begin == end;
  // Each event's two entries, the last of their nodes in reverse order.
  std::vector<int64_t> ends(end_);
  auto take = [&](int32_t v, int64_t e) {
    if (v < 0 || v >= num_nodes() || ends[v] <= begin_[v] ||
        eid_[ends[v] - 1] != static_cast<uint32_t>(e)) {
      return false;
    }
    --ends[v];
    return true;
  };
  for (int64_t e = end - 1; e >= begin; --e) {
    if (!take(log.dst[e], e) || !take(log.src[e], e)) return false;
  }
  end_ = std::move(ends);
  live_ -= 2 * (end - begin);
  return true;
}

void TemporalGraph::Move(int64_t node, int64_t capacity) {
  const int64_t b = begin_[node], n = end_[node] - b;
  const int64_t at = static_cast<int64_t>(nbr_.size());
  nbr_.resize(at + capacity);
  eid_.resize(at + capacity);
  t_.resize(at + capacity);
  std::copy(nbr_.begin() + b, nbr_.begin() + b + n, nbr_.begin() + at);
  std::copy(eid_.begin() + b, eid_.begin() + b + n, eid_.begin() + at);
  std::copy(t_.begin() + b, t_.begin() + b + n, t_.begin() + at);
  begin_[node] = at;
  end_[node] = at + n;
  cap_[node] = at + capacity;
}

void TemporalGraph::Compact() {
  const int64_t nodes = num_nodes();
  int64_t total = 0;
  for (int64_t v = 0; v < nodes; ++v) total += 2 * (end_[v] - begin_[v]);
  std::vector<int32_t> nbr(total);
  std::vector<uint32_t> eid(total);
  std::vector<double> t(total);
  int64_t at = 0;
  for (int64_t v = 0; v < nodes; ++v) {
    const int64_t b = begin_[v], n = end_[v] - b;
    std::copy(nbr_.begin() + b, nbr_.begin() + b + n, nbr.begin() + at);
    std::copy(eid_.begin() + b, eid_.begin() + b + n, eid.begin() + at);
    std::copy(t_.begin() + b, t_.begin() + b + n, t.begin() + at);
    begin_[v] = at;
    end_[v] = at + n;
    cap_[v] = at + 2 * n;
    at += 2 * n;
  }
  nbr_ = std::move(nbr);
  eid_ = std::move(eid);
  t_ = std::move(t);
}

void TemporalGraph::Before(int32_t node, double t, int64_t* begin,
                           int64_t* end) const {
  if (node < 0 || node >= num_nodes()) {
    *begin = *end = 0;
    return;
  }
  int64_t b, e;
  Range(node, &b, &e);
  *begin = b;
  *end = std::lower_bound(t_.begin() + b, t_.begin() + e, t) - t_.begin();
}

void TemporalGraph::Between(int32_t node, double from, double to,
                            int64_t* begin, int64_t* end) const {
  if (node < 0 || node >= num_nodes() || !(from < to)) {
    *begin = *end = 0;
    return;
  }
  int64_t b, e;
  Range(node, &b, &e);
  *begin = std::lower_bound(t_.begin() + b, t_.begin() + e, from) - t_.begin();
  *end = std::lower_bound(t_.begin() + *begin, t_.begin() + e, to) - t_.begin();
}

NeighborSampler::NeighborSampler(const TemporalGraph* graph, int k,
                                 NeighborStrategy strategy, uint64_t seed)
    : graph_(graph), k_(k), strategy_(strategy), rng_(seed) {}

void NeighborSampler::Sample(const int32_t* nodes, const double* times,
                             int64_t n, NeighborBlock* out) {
  Fill(
      n,
      [&](int64_t q, int64_t* b, int64_t* e) {
        graph_->Before(nodes[q], times[q], b, e);
      },
      out);
}

void NeighborSampler::SampleBetween(const int32_t* nodes, const double* from,
                                    const double* to, int64_t n,
                                    NeighborBlock* out) {
  Fill(
      n,
      [&](int64_t q, int64_t* b, int64_t* e) {
        graph_->Between(nodes[q], from[q], to[q], b, e);
      },
      out);
}

template <typename Range>
void NeighborSampler::Fill(int64_t n, Range range, NeighborBlock* out) {
  const int k = k_;
  out->k = k;
  out->nbr.resize(n * k);
  out->eid.resize(n * k);
  out->t.resize(n * k);
  out->count.resize(n);
  const int32_t* nbr = graph_->neighbors().data();
  const uint32_t* eid = graph_->event_ids().data();
  const double* tt = graph_->times().data();
  std::vector<int64_t> picks(k);
  for (int64_t q = 0; q < n; ++q) {
    int64_t b, e;
    range(q, &b, &e);
    int32_t* onbr = out->nbr.data() + q * k;
    int64_t* oeid = out->eid.data() + q * k;
    double* ot = out->t.data() + q * k;
    int c = 0;
    if (e > b) {
      if (strategy_ == NeighborStrategy::kRecent) {
        const int64_t start = std::max<int64_t>(b, e - k);
        c = static_cast<int>(e - start);
        std::copy_n(nbr + start, c, onbr);
        std::copy_n(eid + start, c, oeid);
        std::copy_n(tt + start, c, ot);
      } else {
        // k draws with replacement (Lemire's multiply-shift), then sorted so
        // the slots are in time order.
        const uint64_t range = static_cast<uint64_t>(e - b);
        for (int i = 0; i < k; ++i) {
          const unsigned __int128 r =
              static_cast<unsigned __int128>(rng_()) * range;
          picks[i] = b + static_cast<int64_t>(r >> 64);
        }
        std::sort(picks.begin(), picks.end());
        for (int i = 0; i < k; ++i) {
          onbr[i] = nbr[picks[i]];
          oeid[i] = eid[picks[i]];
          ot[i] = tt[picks[i]];
        }
        c = k;
      }
    }
    out->count[q] = c;
    std::fill(onbr + c, onbr + k, -1);
    std::fill(oeid + c, oeid + k, -1);
    std::fill(ot + c, ot + k, 0.0);
  }
}

}  // namespace mnemo::data
