#include "services/memstore_metrics.h"

#include <string>

#include "absl/strings/strip.h"
#include "services/metrics.h"

namespace mnemo::services {

void StoreStatsCollectable::Detach() {
  absl::MutexLock l(&mu_);
  store_ = nullptr;
}

std::vector<prometheus::MetricFamily> StoreStatsCollectable::Collect() const {
  absl::MutexLock l(&mu_);
  if (!store_) return {};
  auto s = store_->Stats();
  if (!s.ok()) return {};
  const double hits = s->hot_hits + s->cold_hits;
  return {
      GaugeFamily("mnemo_memstore_hot_states", "States held in RAM.",
                  s->hot_states),
      GaugeFamily("mnemo_memstore_cold_states",
                  "States spilled to the RocksDB cold tier.", s->cold_states),
      GaugeFamily("mnemo_memstore_hot_bytes", "Bytes of state held in RAM.",
                  s->hot_bytes),
      GaugeFamily("mnemo_memstore_hot_capacity_bytes",
                  "Capacity of the hot tier in bytes (0: unlimited).",
                  s->hot_capacity_bytes),
      GaugeFamily("mnemo_memstore_rocksdb_size_bytes",
                  "Live bytes on disk (RocksDB's SST and WAL files, the push "
                  "journal).",
                  s->rocksdb_bytes),
      GaugeFamily("mnemo_memstore_hot_hit_ratio",
                  "Share of pulled stored states served from RAM.",
                  hits > 0 ? s->hot_hits / hits : 0),
      CounterFamily("mnemo_memstore_hot_hits_total",
                    "Pulled ids served from RAM.", s->hot_hits),
      CounterFamily("mnemo_memstore_cold_hits_total",
                    "Pulled ids served from RocksDB.", s->cold_hits),
      CounterFamily("mnemo_memstore_misses_total", "Pulled ids never updated.",
                    s->misses),
      CounterFamily("mnemo_memstore_accepted_states_total",
                    "Pushed states that won newest-wins (by version).",
                    s->states_accepted),
      CounterFamily("mnemo_memstore_spills_total",
                    "States moved from RAM to RocksDB.", s->spills),
      CounterFamily("mnemo_memstore_spill_writes_total",
                    "Spilled states written to RocksDB (the others were "
                    "clean: RocksDB held them already).",
                    s->spill_writes),
      CounterFamily("mnemo_memstore_promotions_total",
                    "States moved from RocksDB back to RAM.", s->promotions),
      CounterFamily("mnemo_memstore_checkpoints_total", "Checkpoints taken.",
                    s->checkpoints),
  };
}

MemstoreMetrics::MemstoreMetrics(MetricsRegistry* registry)
    : registry_(registry) {
  states_pulled_ = &registry->Counter("mnemo_memstore_states_pulled_total",
                                      "States sent to clients by pulls.");
  states_pushed_ =
      &registry->Counter("mnemo_memstore_states_pushed_total",
                         "States received from clients by pushes.");
  bytes_pulled_ = &registry->Counter(
      "mnemo_memstore_pulled_bytes_total",
      "State, version and time payload bytes sent to clients by pulls.");
  bytes_pushed_ = &registry->Counter(
      "mnemo_memstore_pushed_bytes_total",
      "State, version and time payload bytes received from clients by "
      "pushes.");
}

void MemstoreMetrics::Pulled(int64_t states, int64_t bytes) {
  states_pulled_->Increment(states);
  bytes_pulled_->Increment(bytes);
}

void MemstoreMetrics::Pushed(int64_t states, int64_t bytes) {
  states_pushed_->Increment(states);
  bytes_pushed_->Increment(bytes);
}

void MemstoreMetrics::Refused(MetricsRegistry* registry,
                              absl::string_view path) {
  static constexpr absl::string_view kPrefix = "/mnemo.v1.Memstore/";
  std::string method = "other";
  if (absl::ConsumePrefix(&path, kPrefix)) {
    for (const char* m : {"Pull", "PullStream", "Push", "PushStream", "Get",
                          "BatchGet", "ListRecent", "Stats", "Checkpoint"}) {
      if (path == m) method = m;
    }
  }
  registry
      ->Counter("mnemo_memstore_requests_total",
                "Memory-store RPCs finished, by method and status code.",
                {{"method", method},
                 {"code", absl::StatusCodeToString(
                              absl::StatusCode::kUnauthenticated)}})
      .Increment();
}

void MemstoreMetrics::Done(const char* method, const absl::Status& status,
                           double seconds) {
  registry_
      ->Histogram("mnemo_memstore_request_duration_seconds",
                  "Latency of memory-store RPCs, by method.",
                  {{"method", method}}, LatencyBucketsSeconds())
      .Observe(seconds);
  registry_
      ->Counter("mnemo_memstore_requests_total",
                "Memory-store RPCs finished, by method and status code.",
                {{"method", method},
                 {"code", absl::StatusCodeToString(status.code())}})
      .Increment();
}

}  // namespace mnemo::services
