// Prometheus helpers shared by the mnemo services.
//
// A MetricsRegistry owns a prometheus-cpp registry and, once Serve() is
// called, a small HTTP server answering GET /metrics in the Prometheus text
// format. Naming follows
// docs/design.md "Observability": `mnemo_<service>_` prefix, base units
// (seconds, bytes), `_total` for counters, histograms for latencies, and
// never a node id as a label (label values must come from a small fixed
// set: method names, status codes).
//
// Thread safety: metric objects returned here are safe for concurrent use;
// registration (Counter/Gauge/Histogram/AddCollectable) is internally
// synchronized.
#ifndef MNEMO_SERVICES_METRICS_H_
#define MNEMO_SERVICES_METRICS_H_

#include <prometheus/collectable.h>
#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/metric_family.h>
#include <prometheus/registry.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace mnemo::services {

using MetricLabels = std::map<std::string, std::string>;

// A currently free TCP port on 127.0.0.1 (racy by nature: another process
// may take it before the caller binds it), or -1.
int FreeTcpPort();
// `n` distinct free ports (the same race), or none.
std::vector<int> FreeTcpPorts(int n);

// Bucket bounds for request latencies: 50 us .. ~13 s, factor 2.
std::vector<double> LatencyBucketsSeconds();
// start, start*factor, ... (count bounds).
std::vector<double> ExponentialBuckets(double start, double factor, int count);

// The metrics endpoint serves each connection on its own thread, at most
// this many at once (one more is answered 503 and closed)...
inline constexpr int kMetricsMaxConnections = 16;
// ... and closes a connection this long after accepting it, whether or not
// the client has sent its request and read the answer (a slow or stalled
// client holds one slot for this long at most, and delays nobody else).
inline constexpr double kMetricsConnectionSeconds = 10;

class MetricsRegistry {
 public:
  MetricsRegistry();
  ~MetricsRegistry();

  // Starts serving GET /metrics on `address` ("host:port" with an IPv4
  // host; ":port" binds 127.0.0.1; port 0 picks a free one, see port()).
  // INVALID_ARGUMENT / UNAVAILABLE when it cannot bind. At most once.
  [[nodiscard]] absl::Status Serve(const std::string& address);
  // The bound port after Serve(), else 0.
  int port() const;

  // Returns the series `name{labels}`, creating family and series on first
  // use. `help` is used when the family is created. Names must be unique
  // across kinds.
  prometheus::Counter& Counter(const std::string& name, const std::string& help,
                               const MetricLabels& labels = {});
  prometheus::Gauge& Gauge(const std::string& name, const std::string& help,
                           const MetricLabels& labels = {});
  prometheus::Histogram& Histogram(const std::string& name,
                                   const std::string& help,
                                   const MetricLabels& labels,
                                   const std::vector<double>& buckets);

  // Adds a collectable computed at scrape time (e.g. from a store's Stats()).
  // Kept alive by the registry.
  void AddCollectable(std::shared_ptr<prometheus::Collectable> collectable);

  // Everything registered, in the Prometheus text format (what GET /metrics
  // answers).
  std::string TextExposition() const;

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  mutable absl::Mutex mu_;
  std::map<std::string, prometheus::Family<prometheus::Counter>*> counters_
      ABSL_GUARDED_BY(mu_);
  std::map<std::string, prometheus::Family<prometheus::Gauge>*> gauges_
      ABSL_GUARDED_BY(mu_);
  std::map<std::string, prometheus::Family<prometheus::Histogram>*> histograms_
      ABSL_GUARDED_BY(mu_);
  std::vector<std::shared_ptr<prometheus::Collectable>> collectables_
      ABSL_GUARDED_BY(mu_);
  class HttpServer;
  std::unique_ptr<HttpServer> http_ ABSL_GUARDED_BY(mu_);
};

// Builders for scrape-time collectables.
prometheus::MetricFamily GaugeFamily(const std::string& name,
                                     const std::string& help, double value);
prometheus::MetricFamily CounterFamily(const std::string& name,
                                       const std::string& help, double value);

}  // namespace mnemo::services

#endif  // MNEMO_SERVICES_METRICS_H_
