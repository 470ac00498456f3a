// Prometheus metrics of a trainer (`mnemo trainer --metrics-listen`,
// `mnemo train --metrics-listen`): what the Grafana dashboard shows per rank
// (deploy/grafana/mnemo.json). Every series carries `rank`. Torch-free: it
// only wraps the runtime's TrainCallbacks.
//
//   mnemo_trainer_epoch                      last finished epoch
//   mnemo_trainer_train_loss, _val_loss      last epoch
//   mnemo_trainer_val_ap, _val_new_node_ap   last epoch
//   mnemo_trainer_epoch_seconds              last epoch's training time
//   mnemo_trainer_test_ap, _test_new_node_ap after the test pass (rank 0)
//   mnemo_trainer_events_total               target events trained
//   mnemo_trainer_batches_total              training steps
//   mnemo_trainer_batch_seconds              step time histogram
//   mnemo_trainer_batch_loss, _grad_norm     last step
//   mnemo_trainer_states_total{direction}    states pulled / pushed
//   mnemo_trainer_state_bytes_total{direction}
#ifndef MNEMO_SERVICES_TRAINER_METRICS_H_
#define MNEMO_SERVICES_TRAINER_METRICS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "services/metrics.h"
#include "trainer/runtime/train.h"

namespace mnemo::services {

class TrainerMetrics {
 public:
  // Registers the series in `registry` (which must outlive this).
  TrainerMetrics(MetricsRegistry* registry, int rank);

  // `base` with the metric updates added before each of its callbacks.
  // The returned callbacks refer to this object.
  runtime::TrainCallbacks Wrap(runtime::TrainCallbacks base);

  // Serves the registry on `listen` (host:port; port 0 picks one), prints
  // where, and wraps `*callbacks` (Wrap). What `mnemo train` and `mnemo
  // trainer` do with --metrics-listen.
  [[nodiscard]] absl::Status Serve(const std::string& listen,
                                   runtime::TrainCallbacks* callbacks);

 private:
  void OnBatch(const runtime::TrainCallbacks::Batch& b);
  void OnEpoch(const runtime::EpochResult& e);
  void OnTest(const runtime::TestResult& t);

  MetricsRegistry* const registry_;
  prometheus::Gauge *epoch_, *train_loss_, *val_loss_, *val_ap_,
      *val_new_node_ap_, *epoch_seconds_, *test_ap_, *test_new_node_ap_,
      *batch_loss_, *grad_norm_;
  prometheus::Counter *events_, *batches_, *states_pulled_, *states_pushed_,
      *bytes_pulled_, *bytes_pushed_;
  prometheus::Histogram* batch_seconds_;
  // The bounded working set (--memory-cache-bytes): hits, misses,
  // evictions, spills, restores; spilled and restored bytes.
  prometheus::Counter* working_set_[5];
  prometheus::Counter* working_set_bytes_[2];
  // A pipeline: seconds idle waiting for the worker before (its states,
  // its parameters), and states and bytes handed to the next.
  prometheus::Counter* pipeline_wait_[2];
  prometheus::Counter *handoff_states_, *handoff_bytes_;
  double seen_pipeline_wait_[2] = {};
  int64_t seen_handoff_states_ = 0, seen_handoff_bytes_ = 0;
  // The runtime reports running totals; counters take the increments.
  int64_t seen_states_pulled_ = 0, seen_states_pushed_ = 0,
          seen_bytes_pulled_ = 0, seen_bytes_pushed_ = 0;
  int64_t seen_working_set_[5] = {}, seen_working_set_bytes_[2] = {};
};

}  // namespace mnemo::services

#endif  // MNEMO_SERVICES_TRAINER_METRICS_H_
