#include "services/trainer_metrics.h"

#include <cstdio>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace mnemo::services {
namespace {

void AddDelta(prometheus::Counter* c, int64_t total, int64_t* seen) {
  // A resumed run starts its totals again: never count backwards.
  if (total > *seen) c->Increment(static_cast<double>(total - *seen));
  *seen = total;
}
void AddDelta(prometheus::Counter* c, double total, double* seen) {
  if (total > *seen) c->Increment(total - *seen);
  *seen = total;
}

}  // namespace

TrainerMetrics::TrainerMetrics(MetricsRegistry* r, int rank) : registry_(r) {
  const MetricLabels l = {{"rank", std::to_string(rank)}};
  auto gauge = [&](const char* name, const char* help) {
    return &r->Gauge(name, help, l);
  };
  epoch_ = gauge("mnemo_trainer_epoch", "Last finished training epoch.");
  train_loss_ = gauge("mnemo_trainer_train_loss",
                      "Training loss of the last epoch (global mean).");
  val_loss_ =
      gauge("mnemo_trainer_val_loss", "Validation loss of the last epoch.");
  val_ap_ = gauge("mnemo_trainer_val_ap",
                  "Validation average precision of the last epoch.");
  val_new_node_ap_ =
      gauge("mnemo_trainer_val_new_node_ap",
            "Validation average precision on new nodes, last epoch.");
  epoch_seconds_ = gauge("mnemo_trainer_epoch_seconds",
                         "Training seconds of the last epoch.");
  test_ap_ = gauge("mnemo_trainer_test_ap",
                   "Test average precision of the best epoch (rank 0).");
  test_new_node_ap_ = gauge("mnemo_trainer_test_new_node_ap",
                            "Test average precision on new nodes (rank 0).");
  batch_loss_ = gauge("mnemo_trainer_batch_loss", "Loss of the last step.");
  grad_norm_ = gauge("mnemo_trainer_grad_norm",
                     "Gradient L2 norm of the last step (all-reduced).");
  events_ = &r->Counter("mnemo_trainer_events_total",
                        "Training events whose loss this rank computed.", l);
  batches_ = &r->Counter("mnemo_trainer_batches_total", "Training steps.", l);
  auto dir = [&](const char* d) {
    MetricLabels x = l;
    x["direction"] = d;
    return x;
  };
  const char* states_help = "Node states moved between trainer and store.";
  const char* bytes_help = "Bytes of node states moved (payload).";
  states_pulled_ =
      &r->Counter("mnemo_trainer_states_total", states_help, dir("pull"));
  states_pushed_ =
      &r->Counter("mnemo_trainer_states_total", states_help, dir("push"));
  bytes_pulled_ =
      &r->Counter("mnemo_trainer_state_bytes_total", bytes_help, dir("pull"));
  bytes_pushed_ =
      &r->Counter("mnemo_trainer_state_bytes_total", bytes_help, dir("push"));
  {
    const char* kinds[5] = {"hit", "miss", "eviction", "spill", "restore"};
    for (int i = 0; i < 5; ++i) {
      MetricLabels x = l;
      x["event"] = kinds[i];
      working_set_[i] = &r->Counter(
          "mnemo_trainer_working_set_total",
          "Bounded working set (--memory-cache-bytes): states found held "
          "(hit), brought in (miss), dropped (eviction), spilled to the "
          "worker's own store, restored from it.",
          x);
    }
    working_set_bytes_[0] = &r->Counter(
        "mnemo_trainer_working_set_bytes_total",
        "Bytes of node states spilled to and restored from the worker's "
        "own store.",
        dir("spill"));
    working_set_bytes_[1] =
        &r->Counter("mnemo_trainer_working_set_bytes_total",
                    "Bytes of node states spilled to and restored from the "
                    "worker's own store.",
                    dir("restore"));
  }
  {
    const char* waits[2] = {"states", "parameters"};
    for (int i = 0; i < 2; ++i) {
      MetricLabels x = l;
      x["for"] = waits[i];
      pipeline_wait_[i] = &r->Counter(
          "mnemo_trainer_pipeline_bubble_seconds_total",
          "A pipeline (pipetgl, depbloom --pipeline-depth): seconds idle "
          "waiting for the worker before it, for its states or its "
          "parameters.",
          x);
    }
    handoff_states_ =
        &r->Counter("mnemo_trainer_pipeline_handoff_states_total",
                    "Node states handed to the next worker of a pipeline.", l);
    handoff_bytes_ = &r->Counter(
        "mnemo_trainer_pipeline_handoff_bytes_total",
        "Bytes of node states handed to the next worker of a pipeline.", l);
  }
  batch_seconds_ = &r->Histogram(
      "mnemo_trainer_batch_seconds",
      "Training step time, including waits for states and collectives.", l,
      ExponentialBuckets(0.001, 2, 16));
}

void TrainerMetrics::OnBatch(const runtime::TrainCallbacks::Batch& b) {
  events_->Increment(static_cast<double>(b.target_events));
  batches_->Increment();
  batch_seconds_->Observe(b.seconds);
  batch_loss_->Set(b.loss);
  grad_norm_->Set(b.grad_norm);
  AddDelta(states_pulled_, b.store.states_pulled, &seen_states_pulled_);
  AddDelta(states_pushed_, b.store.states_pushed, &seen_states_pushed_);
  AddDelta(bytes_pulled_, b.store.bytes_pulled, &seen_bytes_pulled_);
  AddDelta(bytes_pushed_, b.store.bytes_pushed, &seen_bytes_pushed_);
  const int64_t ws[5] = {b.working_set.hits, b.working_set.misses,
                         b.working_set.evictions, b.working_set.spills,
                         b.working_set.restores};
  for (int i = 0; i < 5; ++i) {
    AddDelta(working_set_[i], ws[i], &seen_working_set_[i]);
  }
  AddDelta(working_set_bytes_[0], b.working_set.spill_bytes,
           &seen_working_set_bytes_[0]);
  AddDelta(working_set_bytes_[1], b.working_set.restore_bytes,
           &seen_working_set_bytes_[1]);
  AddDelta(pipeline_wait_[0], b.pipeline.state_wait_seconds,
           &seen_pipeline_wait_[0]);
  AddDelta(pipeline_wait_[1], b.pipeline.parameter_wait_seconds,
           &seen_pipeline_wait_[1]);
  AddDelta(handoff_states_, b.pipeline.states_sent, &seen_handoff_states_);
  AddDelta(handoff_bytes_, b.pipeline.bytes_sent, &seen_handoff_bytes_);
}

void TrainerMetrics::OnEpoch(const runtime::EpochResult& e) {
  epoch_->Set(e.epoch);
  train_loss_->Set(e.train_loss);
  val_loss_->Set(e.val_loss);
  val_ap_->Set(e.val_ap);
  val_new_node_ap_->Set(e.val_new_node_ap);
  epoch_seconds_->Set(e.seconds);
}

void TrainerMetrics::OnTest(const runtime::TestResult& t) {
  test_ap_->Set(t.ap);
  test_new_node_ap_->Set(t.new_node_ap);
}

absl::Status TrainerMetrics::Serve(const std::string& listen,
                                   runtime::TrainCallbacks* callbacks) {
  if (absl::Status s = registry_->Serve(listen); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("metrics: ", s.message()));
  }
  std::printf("metrics on %s:%d (GET /metrics)\n",
              listen.substr(0, listen.rfind(':')).c_str(), registry_->port());
  std::fflush(stdout);
  *callbacks = Wrap(std::move(*callbacks));
  return absl::OkStatus();
}

runtime::TrainCallbacks TrainerMetrics::Wrap(runtime::TrainCallbacks base) {
  runtime::TrainCallbacks out;
  out.log = std::move(base.log);
  out.batch = [this, next = std::move(base.batch)](
                  const runtime::TrainCallbacks::Batch& b) {
    OnBatch(b);
    if (next) next(b);
  };
  out.epoch = [this,
               next = std::move(base.epoch)](const runtime::EpochResult& e) {
    OnEpoch(e);
    if (next) next(e);
  };
  out.test = [this, next = std::move(base.test)](const runtime::TestResult& t) {
    OnTest(t);
    if (next) next(t);
  };
  return out;
}

}  // namespace mnemo::services
