#include "trainer/runtime/report/summary.h"

#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "util/file.h"
#include "util/json.h"
#include "util/proc.h"
#include "util/status_macros.h"

namespace mnemo::runtime {

namespace {

void WriteConfig(const SummaryInfo& info, JsonWriter& w) {
  const TrainOptions& o = *info.options;
  w.Key("config");
  w.BeginObject();
  w.Field("epochs", o.optim.epochs);
  w.Field("batch_size", o.optim.batch_size);
  w.Field("eval_batch_size", info.eval_batch_size);
  w.Field("protocol", ProtocolName(o.eval.protocol));
  w.Field("lr", o.optim.lr);
  w.Field("lr_scale", o.optim.lr_scale);
  // depbloom's window (events), the one trained with, and which of it and
  // batch_size were derived from the data rather than given.
  w.Field("window_events", o.policy.depbloom.window_events);
  w.Field("derived_sizes", info.derived_sizes);
  w.Field("memory_dim", o.model.memory_dim);
  w.Field("time_dim", o.model.time_dim);
  w.Field("embedding_dim", o.model.embedding_dim);
  w.Field("neighbors", o.model.neighbors);
  w.Field("neighbor_strategy",
          o.model.neighbor_strategy
              ? data::NeighborStrategyName(*o.model.neighbor_strategy)
              : std::string_view());
  w.Field("heads", o.model.heads);
  w.Field("dropout", o.model.dropout);
  w.Field("layers", o.model.layers);
  w.Field("mailbox", o.model.mailbox);
  w.Field("apan_mailbox", model::ApanMailboxName(o.model.apan_mailbox));
  w.Field("snapshots", o.model.snapshots);
  w.Field("snapshot_span", o.model.snapshot_span);
  w.Field("patience", o.optim.patience);
  w.Field("seed", static_cast<int64_t>(o.optim.seed));
  w.Field("threads", info.threads);
  w.Field("precision", PrecisionName(o.optim.precision));
  w.Field("device", info.device);
  w.Field("gpu_name", info.gpu_name);
  w.Field("tf32", info.tf32);
  // A cluster's gradient all-reduce (docs/design.md).
  w.Field("grad_comm", GradCommName(o.gradients.comm));
  w.Field("bucket_mb", o.gradients.BucketMb(o.compute.device.cuda()));
  w.Field("batch_lookahead", info.batch_lookahead);
  w.Field("onednn_isa_cap", info.onednn_isa_cap);
  w.Field("malloc", info.malloc);
  w.Field("format", o.data.format);
  w.Field("max_events", o.data.max_events);
  w.Field("config_file", o.run.config_path);
  w.Field("run_id", info.run_id);
  w.Field("resumed_from", o.run.resume_dir);
  w.EndObject();
}

void WriteData(const SummaryInfo& info, JsonWriter& w) {
  w.Key("data");
  w.BeginObject();
  w.Field("events", info.log->num_events());
  w.Field("nodes", info.log->num_nodes);
  w.Field("bipartite", info.log->bipartite);
  w.Field("edge_feature_dim", info.log->edge_feature_dim);
  w.Field("train_events", static_cast<int64_t>(info.split->train.size()));
  w.Field("val_events", static_cast<int64_t>(info.split->val.size()));
  w.Field("test_events", static_cast<int64_t>(info.split->test.size()));
  w.Field("new_node_val_events",
          static_cast<int64_t>(info.split->new_node_val.size()));
  w.Field("new_node_test_events",
          static_cast<int64_t>(info.split->new_node_test.size()));
  w.EndObject();
}

void WriteEpochs(const TrainResult& r, JsonWriter& w) {
  w.Key("epochs");
  w.BeginArray();
  for (const EpochResult& e : r.epochs) {
    w.BeginObject();
    w.Field("epoch", e.epoch);
    w.Field("train_loss", e.train_loss);
    w.Field("val_loss", e.val_loss);
    w.Field("val_ap", e.val_ap);
    w.Field("val_auc", e.val_auc);
    w.Field("val_new_node_ap", e.val_new_node_ap);
    w.Field("val_new_node_auc", e.val_new_node_auc);
    w.Field("val_ap_batch_mean", e.val_ap_batch_mean);
    w.Field("val_new_node_ap_batch_mean", e.val_new_node_ap_batch_mean);
    w.Field("val_mrr", e.val_mrr);
    w.Field("val_hits_at_10", e.val_hits_at_10);
    w.Field("seconds", e.seconds);
    w.Field("eval_seconds", e.eval_seconds);
    w.Field("train_events", e.train_events);
    w.Field("train_events_per_second", e.train_events_per_second);
    w.Field("grad_norm_mean", e.grad_norm_mean);
    w.Field("steps", e.steps);
    w.EndObject();
  }
  w.EndArray();
}

void WriteTest(const TrainResult& r, JsonWriter& w) {
  w.Key("test");
  w.BeginObject();
  w.Field("ap", r.test.ap);
  w.Field("auc", r.test.auc);
  w.Field("new_node_ap", r.test.new_node_ap);
  w.Field("new_node_auc", r.test.new_node_auc);
  w.Field("ap_batch_mean", r.test.ap_batch_mean);
  w.Field("auc_batch_mean", r.test.auc_batch_mean);
  w.Field("new_node_ap_batch_mean", r.test.new_node_ap_batch_mean);
  w.Field("new_node_auc_batch_mean", r.test.new_node_auc_batch_mean);
  w.Field("events", r.test.events);
  w.Field("new_node_events", r.test.new_node_events);
  w.Field("mrr", r.test.mrr);
  w.Field("hits_at_10", r.test.hits_at_10);
  w.EndObject();
}

// `part`'s fields (their Fields list), each key with `prefix`.
template <typename Part>
void WriteFields(const Part& part, std::string_view prefix, JsonWriter& w) {
  Part::Fields(part, [&](const char* name, const auto& value, Merge) {
    w.Field(std::string(prefix) + name, value);
  });
}

// One worker's CommStats (or the totals).
void WriteComm(const CommStats& c, JsonWriter& w) {
  w.BeginObject();
  w.Field("sync_count", c.policy.refreshes);
  WriteFields(c.store, "", w);
  w.Field("share", c.share());
  WriteFields(c.collectives, "", w);
  w.Field("train_seconds", c.train_seconds);
  w.Key("time_seconds");
  w.BeginObject();
  w.Field("communication", c.store.seconds + c.collectives.allreduce_seconds +
                               c.collectives.barrier_seconds);
  WriteFields(c.time, "", w);
  w.EndObject();
  w.Field("target_events", c.target_events);
  w.Field("replayed_events", c.replayed_events);
  WriteFields(c.eval, "eval_", w);
  w.Field("train_loss", c.train_loss);
  w.Field("peak_rss_bytes", c.peak_rss_bytes);
  w.Key("plan");
  w.BeginObject();
  w.Field("targets", c.target_events);
  w.Field("auxiliaries", c.replayed_events);
  PolicyCounters::Fields(c.policy,
                         [&](const char* name, const auto& value, Merge) {
                           if (std::string_view(name) != "sync_count")
                             w.Field(name, value);
                         });
  w.EndObject();
  // --memory-cache-bytes (all 0 when unbounded).
  w.Key("working_set");
  w.BeginObject();
  WriteFields(c.working_set, "", w);
  w.EndObject();
  // A pipeline's handoffs (all 0 for the other policies); bubble_share:
  // the bubble's part of the training time.
  w.Key("pipeline");
  w.BeginObject();
  WriteFields(c.pipeline, "", w);
  w.Field("bubble_share", c.train_seconds > 0
                              ? c.pipeline.bubble_seconds / c.train_seconds
                              : 0.0);
  w.EndObject();
  w.EndObject();
}

}  // namespace

std::string SummaryJson(const SummaryInfo& info, const TrainResult& r) {
  JsonWriter w;
  w.BeginObject();
  w.Field("dataset", info.log->name);
  w.Field("data_path", info.data_path);
  w.Field("model", model::ModelName(info.options->model.kind));
  w.Field("policy", r.policy);
  w.Field("workers", r.workers);
  WriteConfig(info, w);
  WriteData(info, w);
  WriteEpochs(r, w);
  w.Field("best_epoch", r.best_epoch);
  WriteTest(r, w);
  w.Field("train_events_per_second", r.train_events_per_second);
  w.Field("test_seconds", r.test_seconds);
  w.Key("time_breakdown_seconds");
  w.BeginObject();
  for (const auto& [name, secs] : r.time_breakdown_seconds) {
    w.Field(name, secs);
  }
  w.EndObject();
  w.Field("peak_rss_bytes", r.peak_rss_bytes);
  w.Field("peak_gpu_bytes", info.peak_gpu_bytes);
  w.Key("comm");
  WriteComm(r.comm, w);
  w.Key("per_worker");
  w.BeginArray();
  for (const CommStats& c : r.per_worker) WriteComm(c, w);
  w.EndArray();
  w.Field("parameter_checksum", r.parameter_checksum);
  w.Field("version", kVersion);
  w.Field("host", HostName());
  w.Field("finished_at", NowIso8601());
  w.EndObject();
  return w.str() + "\n";
}

absl::Status WriteOutputs(const std::string& dir, const data::EventLog& log,
                          const TrainResult& r) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    return absl::InternalError(
        absl::StrCat("cannot create --out ", dir, ": ", ec.message()));
  }
  std::string csv =
      "epoch,train_loss,val_ap,val_auc,val_new_node_ap,val_new_node_auc,"
      "seconds,train_events_per_second\n";
  for (const EpochResult& e : r.epochs) {
    absl::StrAppendFormat(&csv, "%d,%.6f,%.6f,%.6f,%.6f,%.6f,%.3f,%.1f\n",
                          e.epoch, e.train_loss, e.val_ap, e.val_auc,
                          e.val_new_node_ap, e.val_new_node_auc, e.seconds,
                          e.train_events_per_second);
  }
  // Each file whole or not at all (a full disk leaves no part of one);
  // `mnemo train --resume` writes them again where one is missing.
  RETURN_IF_ERROR(WriteFileDurably((fs::path(dir) / "summary.json").string(),
                                   {r.summary_json}));
  RETURN_IF_ERROR(
      WriteFileDurably((fs::path(dir) / "metrics.csv").string(), {csv}));
  return data::SaveIdMap(log, (fs::path(dir) / "id_map.csv").string());
}

}  // namespace mnemo::runtime
