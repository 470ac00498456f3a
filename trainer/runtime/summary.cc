#include "trainer/runtime/summary.h"

#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "util/json.h"
#include "util/proc.h"

namespace mnemo::runtime {

std::string SummaryJson(const SummaryInfo& info, const TrainResult& r) {
  const TrainOptions& o = *info.options;
  JsonWriter w;
  w.BeginObject();
  w.Field("dataset", info.log->name);
  w.Field("data_path", info.data_path);
  w.Field("model", model::ModelName(o.model));
  w.Field("policy", r.policy);
  w.Field("workers", r.workers);
  w.Key("config");
  w.BeginObject();
  w.Field("epochs", o.epochs);
  w.Field("batch_size", o.batch_size);
  w.Field("eval_batch_size", info.eval_batch_size);
  w.Field("protocol", ProtocolName(o.protocol));
  w.Field("lr", o.lr);
  w.Field("lr_scale", o.lr_scale);
  w.Field("memory_dim", o.memory_dim);
  w.Field("time_dim", o.time_dim);
  w.Field("embedding_dim", o.embedding_dim);
  w.Field("neighbors", o.neighbors);
  w.Field("neighbor_strategy",
          o.neighbor_strategy ? data::NeighborStrategyName(*o.neighbor_strategy)
                              : std::string_view());
  w.Field("heads", o.heads);
  w.Field("dropout", o.dropout);
  w.Field("layers", o.layers);
  w.Field("mailbox", o.mailbox);
  w.Field("snapshots", o.snapshots);
  w.Field("snapshot_span", o.snapshot_span);
  w.Field("patience", o.patience);
  w.Field("seed", static_cast<int64_t>(o.seed));
  w.Field("threads", info.threads);
  w.Field("precision", PrecisionName(o.precision));
  w.Field("device", info.device);
  w.Field("gpu_name", info.gpu_name);
  w.Field("batch_lookahead", info.batch_lookahead);
  w.Field("onednn_isa_cap", info.onednn_isa_cap);
  w.Field("malloc", info.malloc);
  w.Field("format", o.format);
  w.Field("max_events", o.max_events);
  w.Field("config_file", o.config_path);
  w.Field("run_id", info.run_id);
  w.Field("resumed_from", o.resume_dir);
  w.EndObject();
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
  w.Field("best_epoch", r.best_epoch);
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
  w.Field("train_events_per_second", r.train_events_per_second);
  w.Key("time_breakdown_seconds");
  w.BeginObject();
  for (const auto& [name, secs] : r.time_breakdown_seconds) {
    w.Field(name, secs);
  }
  w.EndObject();
  w.Field("peak_rss_bytes", r.peak_rss_bytes);
  w.Field("peak_gpu_bytes", info.peak_gpu_bytes);
  auto comm = [&w](const CommStats& c) {
    w.BeginObject();
    w.Field("sync_count", c.sync_count);
    w.Field("rpcs", c.rpcs);
    w.Field("states_pulled", c.states_pulled);
    w.Field("states_pushed", c.states_pushed);
    w.Field("bytes_pulled", c.bytes_pulled);
    w.Field("bytes_pushed", c.bytes_pushed);
    w.Field("seconds", c.seconds);
    w.Field("share", c.share);
    w.Field("allreduce_seconds", c.allreduce_seconds);
    w.Field("allreduce_bytes", c.allreduce_bytes);
    w.Field("barrier_wait_seconds", c.barrier_seconds);
    w.Field("train_seconds", c.train_seconds);
    w.Key("time_seconds");
    w.BeginObject();
    w.Field("communication",
            c.seconds + c.allreduce_seconds + c.barrier_seconds);
    w.Field("preparation", c.preparation_seconds);
    w.Field("forward", c.forward_seconds);
    w.Field("backward", c.backward_seconds);
    w.Field("memory_management", c.memory_seconds);
    w.EndObject();
    w.Field("target_events", c.target_events);
    w.Field("replayed_events", c.replayed_events);
    w.Field("eval_states_pulled", c.eval_states_pulled);
    w.Field("eval_bytes_pulled", c.eval_bytes_pulled);
    w.Field("eval_pull_seconds", c.eval_pull_seconds);
    w.Field("eval_states_pushed", c.eval_states_pushed);
    w.Field("eval_bytes_pushed", c.eval_bytes_pushed);
    w.Field("train_loss", c.train_loss);
    w.Field("peak_rss_bytes", c.peak_rss_bytes);
    w.Key("plan");
    w.BeginObject();
    w.Field("seconds", c.plan_seconds);
    w.Field("targets", c.target_events);
    w.Field("auxiliaries", c.replayed_events);
    w.Field("pruned", c.pruned_events);
    w.Field("heavy_load_batches", c.heavy_load_batches);
    w.Field("boundaries", c.boundaries);
    w.Field("boundaries_refreshed", c.boundaries_refreshed);
    w.Field("boundaries_skipped", c.boundaries_skipped);
    w.Field("refresh_nodes_total", c.refresh_nodes_total);
    w.Field("refresh_nodes_max", c.refresh_nodes_max);
    w.Field("urgent_states", c.urgent_states);
    w.Field("urgent_bytes", c.urgent_bytes);
    w.Field("nonurgent_states", c.nonurgent_states);
    w.Field("nonurgent_bytes", c.nonurgent_bytes);
    w.Field("cross_ratio", c.cross_ratio);
    w.Field("imbalance", c.imbalance);
    w.Field("partition_seconds", c.partition_seconds);
    w.EndObject();
    // --memory-cache-bytes (all 0 when unbounded).
    w.Key("working_set");
    w.BeginObject();
    w.Field("capacity_states", c.cache_capacity_states);
    w.Field("peak_states", c.cache_peak_states);
    w.Field("reads", c.cache_reads);
    w.Field("hits", c.cache_hits);
    w.Field("misses", c.cache_misses);
    w.Field("evictions", c.cache_evictions);
    w.Field("spills", c.cache_spills);
    w.Field("restores", c.cache_restores);
    w.Field("spill_bytes", c.cache_spill_bytes);
    w.Field("restore_bytes", c.cache_restore_bytes);
    w.Field("prefetched", c.cache_prefetched);
    w.Field("prefetch_unused", c.cache_prefetch_unused);
    w.Field("seconds", c.cache_seconds);
    w.EndObject();
    w.EndObject();
  };
  w.Key("comm");
  comm(r.comm);
  w.Key("per_worker");
  w.BeginArray();
  for (const CommStats& c : r.per_worker) comm(c);
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
  auto write = [&](const std::string& name,
                   const std::string& text) -> absl::Status {
    const std::string path = (fs::path(dir) / name).string();
    const std::string tmp = path + ".tmp";
    {
      std::ofstream out(tmp);
      out << text;
      if (!out.good()) {
        return absl::InternalError(absl::StrCat("cannot write ", tmp));
      }
    }
    fs::rename(tmp, path, ec);
    if (ec) {
      return absl::InternalError(
          absl::StrCat("cannot rename ", tmp, ": ", ec.message()));
    }
    return absl::OkStatus();
  };
  std::string csv =
      "epoch,train_loss,val_ap,val_auc,val_new_node_ap,val_new_node_auc,"
      "seconds,train_events_per_second\n";
  for (const EpochResult& e : r.epochs) {
    absl::StrAppendFormat(&csv, "%d,%.6f,%.6f,%.6f,%.6f,%.6f,%.3f,%.1f\n",
                          e.epoch, e.train_loss, e.val_ap, e.val_auc,
                          e.val_new_node_ap, e.val_new_node_auc, e.seconds,
                          e.train_events_per_second);
  }
  absl::Status s = write("summary.json", r.summary_json);
  if (!s.ok()) return s;
  s = write("metrics.csv", csv);
  if (!s.ok()) return s;
  return data::SaveIdMap(log, (fs::path(dir) / "id_map.csv").string());
}

}  // namespace mnemo::runtime
