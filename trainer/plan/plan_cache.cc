#include "trainer/plan/plan_cache.h"

#include <metis.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_format.h"

namespace mnemo::plan {
namespace {

// Bumped whenever the planner's output or the file layout changes.
// 2: window_begin, urgent sets, step event counts, window statistics.
// 3: urgent sets of every worker; the given partition in the key.
constexpr uint64_t kFormatVersion = 3;
constexpr uint64_t kMagic = 0x314e414c504f4d4eull;  // "NMOPLAN1"

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

}  // namespace

uint64_t PlanCacheKey(const data::EventLog& log,
                      absl::Span<const int64_t> train,
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
    h.Add(static_cast<uint64_t>(o.chain_assignment));
    h.Add(static_cast<uint64_t>(o.piece_events));
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

namespace {

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

}  // namespace

std::string SerializePlan(const WorkerPlan& plan,
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

namespace {

// What a plan file's header says: the plan's sync_every, the sizes of its
// arrays (batch_begin, events and target, refresh_begin, refresh,
// window_begin, urgent_begin, urgent_nodes, step_event_counts) and the
// number of window statistics.
struct PlanFileHeader {
  int sync_every = 0;
  uint64_t nbb = 0, nev = 0, nrb = 0, nrf = 0, nwb = 0, nub = 0, nun = 0,
           nsc = 0, nws = 0;
};

// The header of the plan file in `bytes` when the file is whole and for
// `key` and `rank`: magic, version, key and rank match, the sizes are
// within bounds, the length is the one they give and the checksum holds.
// Else nullopt.
std::optional<PlanFileHeader> ReadHeader(const std::string& bytes, uint64_t key,
                                         int rank) {
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
  constexpr uint64_t kMax = uint64_t{1} << 40;  // guards the size arithmetic
  for (int i = 4; i < kHeaderWords; ++i) {
    if (h[i] > kMax) return std::nullopt;
  }
  PlanFileHeader f;
  f.sync_every = static_cast<int>(h[4]);
  f.nbb = h[5];
  f.nev = h[6];
  f.nrb = h[7];
  f.nrf = h[8];
  f.nwb = h[9];
  f.nub = h[10];
  f.nun = h[11];
  f.nsc = h[12];
  f.nws = h[13];
  const uint64_t need = kHeaderWords + f.nbb + f.nev + (f.nev + 7) / 8 + f.nrb +
                        f.nrf + f.nwb + f.nub + f.nun + f.nsc +
                        kWindowStatWords * f.nws + 1;
  if (need != words || Checksum(bytes.data(), words - 1) != sum) {
    return std::nullopt;
  }
  return f;
}

// Reads a plan file's body in order (ReadHeader has checked its length).
class WordReader {
 public:
  explicit WordReader(const char* p) : p_(p) {}
  // The next `n` values of an array, zero-padded to a word.
  template <typename T>
  void Take(std::vector<T>* v, uint64_t n) {
    v->resize(n);
    std::memcpy(v->data(), p_, n * sizeof(T));
    p_ += (n * sizeof(T) + 7) / 8 * 8;
  }
  uint64_t Word() {
    uint64_t w;
    std::memcpy(&w, p_, sizeof w);
    p_ += 8;
    return w;
  }
  double Double() {
    const uint64_t w = Word();
    double d;
    std::memcpy(&d, &w, sizeof d);
    return d;
  }

 private:
  const char* p_;
};

// One window's statistics, in SerializePlan's order.
WindowStats ReadWindowStats(WordReader* r) {
  WindowStats w;
  w.events = static_cast<int64_t>(r->Word());
  w.nodes = static_cast<int64_t>(r->Word());
  w.cross_events = static_cast<int64_t>(r->Word());
  w.cross_ratio = r->Double();
  w.shared_events = static_cast<int64_t>(r->Word());
  w.shared_ratio = r->Double();
  w.cut_events = static_cast<int64_t>(r->Word());
  w.max_chain_events = static_cast<int64_t>(r->Word());
  w.imbalance = r->Double();
  w.weight_imbalance = r->Double();
  w.steps = static_cast<int64_t>(r->Word());
  w.partition_seconds = r->Double();
  w.fallback = r->Word() != 0;
  return w;
}

// Offsets: starts at 0, non-decreasing, ends at `total`.
bool ValidOffsets(const std::vector<int64_t>& v, int64_t total) {
  if (v.empty() || v.front() != 0 || v.back() != total) return false;
  for (size_t i = 1; i < v.size(); ++i) {
    if (v[i] < v[i - 1]) return false;
  }
  return true;
}

// Whether `plan`, read with header `f`, has the structure of a plan of
// o.kind over `train_size` training events (a checksum collision or a
// planner bug must not reach the runtime as out-of-range offsets).
bool ValidStructure(const WorkerPlan& plan, const PlanFileHeader& f,
                    const PlanOptions& o, int64_t train_size) {
  const int64_t nb = static_cast<int64_t>(f.nbb) - 1;
  const int64_t nw = static_cast<int64_t>(f.nrb) - 1;
  if (!ValidOffsets(plan.batch_begin, f.nev) ||
      !ValidOffsets(plan.refresh_begin, f.nrf) ||
      !ValidOffsets(plan.window_begin, nb) ||
      static_cast<int64_t>(f.nwb) != nw + 1 ||
      static_cast<int64_t>(f.nsc) != nb) {
    return false;
  }
  for (int64_t w = 0; w < nw; ++w) {  // windows are never empty
    if (plan.window_begin[w + 1] == plan.window_begin[w]) return false;
  }
  for (const uint8_t t : plan.target) {
    if (t > 1) return false;
  }
  if (o.kind == PlanKind::kSubChains) {
    return plan.sync_every == 0 &&
           nw == (train_size + o.window_events - 1) / o.window_events &&
           ValidOffsets(plan.urgent_begin, f.nun) &&
           static_cast<int64_t>(f.nub) == nw + 1 &&
           static_cast<int64_t>(f.nws) == nw;
  }
  const int64_t k_sync = plan.sync_every;
  const int expected_k = o.kind == PlanKind::kDependencyScan ? o.sync_every : 1;
  if (k_sync != expected_k || nw != (nb + k_sync - 1) / k_sync || f.nub != 0 ||
      f.nun != 0 || f.nws != 0) {
    return false;
  }
  for (int64_t w = 0; w < nw; ++w) {
    if (plan.window_begin[w] != w * k_sync) return false;
  }
  return true;
}

}  // namespace

std::optional<WorkerPlan> DeserializePlan(
    const std::string& bytes, uint64_t key, int rank, const PlanOptions& o,
    int64_t train_size, std::vector<WindowStats>* window_stats) {
  const std::optional<PlanFileHeader> f = ReadHeader(bytes, key, rank);
  if (!f) return std::nullopt;
  WorkerPlan plan;
  plan.rank = rank;
  plan.sync_every = f->sync_every;
  WordReader r(bytes.data() + 8 * kHeaderWords);
  r.Take(&plan.batch_begin, f->nbb);
  r.Take(&plan.events, f->nev);
  r.Take(&plan.target, f->nev);
  r.Take(&plan.refresh_begin, f->nrb);
  r.Take(&plan.refresh, f->nrf);
  r.Take(&plan.window_begin, f->nwb);
  r.Take(&plan.urgent_begin, f->nub);
  r.Take(&plan.urgent_nodes, f->nun);
  r.Take(&plan.step_event_counts, f->nsc);
  window_stats->assign(f->nws, WindowStats());
  for (WindowStats& w : *window_stats) w = ReadWindowStats(&r);
  if (!ValidStructure(plan, *f, o, train_size)) return std::nullopt;
  return plan;
}

std::optional<std::string> ReadPlanFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return std::nullopt;
  return std::move(ss).str();
}

// Writes `bytes` to `path` atomically: a unique temp file in the same
// directory, then rename. False (and nothing left behind) on failure.
bool WritePlanFile(const std::string& path, const std::string& bytes) {
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

}  // namespace mnemo::plan
