// Temporal neighbour sampling over a time-sorted CSR adjacency.
#ifndef MNEMO_TRAINER_DATA_NEIGHBOR_SAMPLER_H_
#define MNEMO_TRAINER_DATA_NEIGHBOR_SAMPLER_H_

#include <cstdint>
#include <random>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "trainer/data/event_log.h"

namespace mnemo::data {

enum class NeighborStrategy { kRecent, kUniform };

// "recent" or "uniform"; INVALID_ARGUMENT naming --neighbor-strategy and
// the accepted values otherwise.
absl::StatusOr<NeighborStrategy> ParseNeighborStrategy(std::string_view name);
std::string_view NeighborStrategyName(NeighborStrategy strategy);

// Undirected temporal adjacency: for every node, its (neighbour, event id,
// time) entries in time order (ties in event order). Built from a subset of a
// log's events. Immutable after construction (but for Append); safe for
// concurrent reads.
class TemporalGraph {
 public:
  // `events`: ascending event indices into `log` (e.g. Split::train).
  TemporalGraph(const EventLog& log, const std::vector<int64_t>& events);
  // All events of the log.
  explicit TemporalGraph(const EventLog& log);

  int64_t num_nodes() const {
    return grown() ? static_cast<int64_t>(begin_.size())
                   : static_cast<int64_t>(offsets_.size()) - 1;
  }
  // Entries held (each event gives two).
  int64_t num_entries() const {
    return grown() ? live_ : static_cast<int64_t>(nbr_.size());
  }

  // Adds the log's events [begin, log.num_events()), which come after every
  // event the graph holds (times no earlier, ids higher), and grows the node
  // range to log.num_nodes: the graph the constructor would build over the
  // old events and these (a serving process's neighbour index as events
  // arrive). Amortized O(new events): a node's entries move to the end of
  // the arrays with room to double when they outgrow their place, and the
  // arrays are compacted once the places left behind outweigh the entries.
  // After it each node's entries are still contiguous and in time order,
  // but no longer side by side in node order (offsets() is then empty).
  void Append(const EventLog& log, int64_t begin);
  // Takes back the last Append: the log's events [begin, log.num_events()),
  // which it added, are removed again (the log still holds them), in
  // O(nodes + their number). False, changing nothing, where they are not the
  // last entries of their nodes (no such Append, or one that failed part way).
  bool RemoveAppended(const EventLog& log, int64_t begin);

  // Entries [begin, end) of `node` with time strictly before `t`.
  void Before(int32_t node, double t, int64_t* begin, int64_t* end) const;
  // Entries [begin, end) of `node` with time in [from, to).
  void Between(int32_t node, double from, double to, int64_t* begin,
               int64_t* end) const;

  // Node v's entries are [offsets()[v], offsets()[v + 1]) in a graph that
  // was built, not appended to (empty after Append: use Before/Between).
  const std::vector<int64_t>& offsets() const { return offsets_; }
  const std::vector<int32_t>& neighbors() const { return nbr_; }
  // Event ids fit 32 bits (a log of 2^32 events is refused at Build).
  const std::vector<uint32_t>& event_ids() const { return eid_; }
  const std::vector<double>& times() const { return t_; }

 private:
  void Build(const EventLog& log, const std::vector<int64_t>* events);
  bool grown() const { return !begin_.empty() || offsets_.empty(); }
  // All of node v's entries.
  void Range(int32_t node, int64_t* begin, int64_t* end) const {
    if (grown()) {
      *begin = begin_[node], *end = end_[node];
    } else {
      *begin = offsets_[node], *end = offsets_[node + 1];
    }
  }
  // Append's parts: the node's entries to the end of the arrays with room
  // for `capacity`; the arrays rewritten with every node's entries side by
  // side again (each with room to double).
  void Move(int64_t node, int64_t capacity);
  void Compact();

  std::vector<int64_t> offsets_;  // size num_nodes + 1 (a built graph)
  // An appended graph: node v's entries are [begin_[v], end_[v]), with room
  // up to cap_[v]; live_ entries in all, the rest places left behind.
  std::vector<int64_t> begin_, end_, cap_;
  int64_t live_ = 0;
  std::vector<int32_t> nbr_;
  std::vector<uint32_t> eid_;  // 4 bytes an entry, not 8: 20M events, 2
                               // graphs, 2 entries each: 0.3 GB a trainer
  std::vector<double> t_;
};

// Fills k neighbour slots per query. Slot layout per query: the sampled
// neighbours in time order first, then padding (neighbor -1, event -1, t 0).
struct NeighborBlock {
  int k = 0;
  std::vector<int32_t> nbr;    // [n * k]
  std::vector<int64_t> eid;    // [n * k]
  std::vector<double> t;       // [n * k]
  std::vector<int32_t> count;  // [n] valid slots per query
};

class NeighborSampler {
 public:
  NeighborSampler(const TemporalGraph* graph, int k,
                  NeighborStrategy strategy = NeighborStrategy::kRecent,
                  uint64_t seed = 0);

  // For each (nodes[i], times[i]): the k most recent neighbours strictly
  // before times[i] (kRecent), or k drawn uniformly with replacement from
  // all neighbours strictly before times[i], sorted by time (kUniform).
  void Sample(const int32_t* nodes, const double* times, int64_t n,
              NeighborBlock* out);
  // The same within a time window per query: neighbours with time in
  // [from[i], to[i]) (a snapshot of the graph, as DySAT reads it).
  void SampleBetween(const int32_t* nodes, const double* from, const double* to,
                     int64_t n, NeighborBlock* out);

  int k() const { return k_; }
  // The draws' generator (kUniform): a caller that must undo a batch's
  // draws saves and restores it.
  std::mt19937_64& rng() { return rng_; }

 private:
  // Fills `out` for queries whose entries [b, e) `range(q, &b, &e)` gives.
  template <typename Range>
  void Fill(int64_t n, Range range, NeighborBlock* out);

  const TemporalGraph* graph_;
  int k_;
  NeighborStrategy strategy_;
  std::mt19937_64 rng_;
};

}  // namespace mnemo::data

#endif  // MNEMO_TRAINER_DATA_NEIGHBOR_SAMPLER_H_
