// Prometheus metrics of the memory-store service (docs/operations.md lists
// them): the store's counters and sizes, read at scrape time, and the
// service's own request and payload counters.
#ifndef MNEMO_SERVICES_MEMSTORE_METRICS_H_
#define MNEMO_SERVICES_MEMSTORE_METRICS_H_

#include <prometheus/collectable.h>
#include <prometheus/counter.h>
#include <prometheus/metric_family.h>

#include <cstdint>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "memstore/node_state_store.h"

namespace mnemo::services {

class MetricsRegistry;

// Store counters and sizes (mnemo_memstore_hot_states, ...), read from
// Stats() at scrape time. Thread-safe.
class StoreStatsCollectable : public prometheus::Collectable {
 public:
  // `store` is not owned: Detach() before it goes.
  explicit StoreStatsCollectable(memstore::NodeStateStore* store)
      : store_(store) {}
  // Stops reading the store; waits for a scrape that is reading it.
  void Detach();
  // No families once detached, or when Stats() fails.
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  mutable absl::Mutex mu_;  // held across Stats() so Detach() waits for it
  memstore::NodeStateStore* store_ ABSL_GUARDED_BY(mu_);
};

// The service's counters: states and payload bytes pulled and pushed,
// RPC latencies and results by method and code. Thread-safe.
class MemstoreMetrics {
 public:
  // Registers the counters in `registry` (not owned; must outlive this).
  explicit MemstoreMetrics(MetricsRegistry* registry);

  void Pulled(int64_t states, int64_t bytes);
  void Pushed(int64_t states, int64_t bytes);
  // A call refused before any handler (its bearer token): counted in
  // mnemo_memstore_requests_total with code UNAUTHENTICATED. The method
  // label is one of the service's methods, or "other" (the path is the
  // client's to choose: labels stay a small fixed set).
  static void Refused(MetricsRegistry* registry, absl::string_view path);
  // One finished RPC.
  void Done(const char* method, const absl::Status& status, double seconds);

 private:
  MetricsRegistry* registry_;
  prometheus::Counter *states_pulled_, *states_pushed_, *bytes_pulled_,
      *bytes_pushed_;
};

}  // namespace mnemo::services

#endif  // MNEMO_SERVICES_MEMSTORE_METRICS_H_
