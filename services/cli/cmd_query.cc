// mnemo query: read node memory from running memory-store services.
// mnemo healthcheck: exit 0 when a gRPC server reports SERVING.
#include <cstdio>
#include <limits>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "services/cli/commands.h"
#include "services/cli/flags.h"
#include "services/cli/security_flags.h"
#include "services/memstore_client.h"
#include "util/json.h"

namespace mnemo {
namespace {

void NodeJson(const services::RemoteNodeState& n, JsonWriter& w) {
  w.BeginObject();
  w.Field("original_id", n.original_id);
  w.Field("dense_id", n.view.id);
  w.Field("kind", n.kind);
  w.Field("shard", n.shard);
  w.Field("version", n.view.version);
  w.Field("time", n.view.time);
  w.Field("updates", n.view.updates);
  w.Field("writer", n.view.writer);
  w.Field("tier", n.view.hot ? "hot" : "cold");
  w.Field("dim", static_cast<int64_t>(n.view.state.size()));
  w.Key("memory");
  w.BeginArray();
  for (float x : n.view.state) w.Number(x);
  w.EndArray();
  w.EndObject();
}

std::string Preview(const std::vector<float>& s, size_t max) {
  std::vector<std::string> parts;
  for (size_t i = 0; i < s.size() && i < max; ++i) {
    parts.push_back(absl::StrFormat("%.6g", s[i]));
  }
  if (s.size() > max) parts.push_back("...");
  return "[" + absl::StrJoin(parts, ", ") + "]";
}

std::string Label(const services::RemoteNodeState& n) {
  return absl::StrFormat("node %d%s (dense id %d, shard %d)", n.original_id,
                         n.kind.empty() ? "" : " " + n.kind, n.view.id,
                         n.shard);
}

}  // namespace

int QueryMain(int argc, char** argv, int first) {
  std::string addresses, kind;
  int64_t node = 0, recent = 0;
  bool stats = false, json = false, full = false;
  double deadline = 5;
  int64_t max_message_bytes = 4 << 20;
  FlagSet flags(
      "query",
      "usage: mnemo query --memstore ADDR[,ADDR...] (--node ID | --recent N "
      "| --stats) [--json]\n\n"
      "Reads node memory from running memory-store shards (listed in shard "
      "order): a node's\nmemory vector, version, event time, update count, "
      "writer and tier by ORIGINAL node\nid, the most recently updated nodes "
      "(highest version first), or the shards'\nstatistics. Exit code 1 when "
      "the node is unknown or a shard cannot be reached.");
  flags.HostPortList("memstore", &addresses,
                     "comma-separated memory-store addresses, shard 0 first");
  flags.Int64("node", &node, "original node id to show");
  flags.String("kind", &kind,
               "user or item, for bipartite datasets whose users and items "
               "share ids");
  flags.Int64("recent", &recent, "show the N most recently updated nodes");
  flags.Bool("stats", &stats, "show each shard's statistics");
  flags.Bool("json", &json, "print JSON (for scripts)");
  flags.Bool("full", &full, "print whole memory vectors (text output)");
  flags.Double("deadline", &deadline, "seconds to wait for an answer");
  flags.Int64("max-message-bytes", &max_message_bytes,
              "the servers' --max-message-bytes");
  services::ClientSecurity security;
  services::AddClientSecurityFlags(&flags, &security, "memory stores");
  std::vector<std::string> positional;
  if (auto rc = flags.ParseOrExitCode(argc, argv, first, &positional)) {
    return *rc;
  }
  auto usage = [](const std::string& msg) {
    std::fprintf(stderr, "mnemo query: %s\n", msg.c_str());
    return 2;
  };
  const int modes = flags.WasSet("node") + flags.WasSet("recent") + stats;
  if (addresses.empty()) return usage("--memstore is required");
  if (modes != 1) return usage("give exactly one of --node, --recent, --stats");
  if (flags.WasSet("recent") && recent <= 0) {
    return usage("--recent must be > 0");
  }
  services::MemstoreClientOptions o;
  o.addresses = absl::StrSplit(addresses, ',', absl::SkipEmpty());
  o.deadline_seconds = deadline;
  o.max_message_bytes = max_message_bytes;
  // A connection that fails (a shard restarting, a TLS handshake cut short
  // on a loaded machine) is retried with backoff until --deadline: gRPC
  // waits about 1 s before reconnecting a failed channel, so a fixed small
  // number of quick attempts all met the same failure.
  o.max_attempts = std::numeric_limits<int>::max();
  o.security = security;
  auto fail = [](const absl::Status& st) {
    std::fprintf(stderr, "mnemo query: %s\n", st.ToString().c_str());
    return 1;
  };
  auto client = services::MemstoreClient::Connect(o);
  if (!client.ok()) return fail(client.status());

  if (flags.WasSet("node")) {
    auto n = (*client)->GetByOriginalId(node, kind);
    if (!n.ok()) return fail(n.status());
    if (json) {
      JsonWriter w;
      NodeJson(*n, w);
      std::printf("%s\n", w.str().c_str());
    } else {
      std::printf("%s\n", Label(*n).c_str());
      std::printf("  version      %llu\n",
                  static_cast<unsigned long long>(n->view.version));
      std::printf("  time         %.17g\n", n->view.time);
      std::printf("  updates      %llu\n",
                  static_cast<unsigned long long>(n->view.updates));
      std::printf("  writer       %d\n", n->view.writer);
      std::printf("  tier         %s\n", n->view.hot ? "hot" : "cold");
      std::printf(
          "  memory       %s (dim %zu)\n",
          Preview(n->view.state, full ? n->view.state.size() : 8).c_str(),
          n->view.state.size());
    }
    return 0;
  }
  if (flags.WasSet("recent")) {
    auto nodes = (*client)->ListRecentNodes(recent);
    if (!nodes.ok()) return fail(nodes.status());
    if (json) {
      JsonWriter w;
      w.BeginArray();
      for (const auto& n : *nodes) NodeJson(n, w);
      w.EndArray();
      std::printf("%s\n", w.str().c_str());
    } else {
      std::printf("%-14s %-6s %-10s %-6s %-20s %-22s %-8s %-6s %s\n",
                  "original_id", "kind", "dense_id", "shard", "version", "time",
                  "updates", "writer", "tier");
      for (const auto& n : *nodes) {
        std::printf(
            "%-14lld %-6s %-10lld %-6d %-20llu %-22.17g %-8llu %-6d %s\n",
            static_cast<long long>(n.original_id),
            n.kind.empty() ? "-" : n.kind.c_str(),
            static_cast<long long>(n.view.id), n.shard,
            static_cast<unsigned long long>(n.view.version), n.view.time,
            static_cast<unsigned long long>(n.view.updates), n.view.writer,
            n.view.hot ? "hot" : "cold");
      }
    }
    return 0;
  }
  auto shards = (*client)->StatsPerShard();
  if (!shards.ok()) return fail(shards.status());
  if (json) {
    JsonWriter w;
    w.BeginArray();
    for (const auto& sh : *shards) {
      const auto& t = sh.stats;
      w.BeginObject();
      w.Field("address", sh.address);
      w.Field("shard_id", sh.shard_id);
      w.Field("num_shards", sh.num_shards);
      w.Field("dim", t.dim);
      w.Field("write_policy", t.write_policy);
      w.Field("hot_states", t.hot_states);
      w.Field("cold_states", t.cold_states);
      w.Field("hot_bytes", t.hot_bytes);
      w.Field("hot_capacity_bytes", t.hot_capacity_bytes);
      w.Field("pulls", t.pulls);
      w.Field("pushes", t.pushes);
      w.Field("states_pulled", t.states_pulled);
      w.Field("states_pushed", t.states_pushed);
      w.Field("states_accepted", t.states_accepted);
      w.Field("hot_hits", t.hot_hits);
      w.Field("cold_hits", t.cold_hits);
      w.Field("misses", t.misses);
      w.Field("spills", t.spills);
      w.Field("promotions", t.promotions);
      w.Field("spill_writes", t.spill_writes);
      w.Field("rocksdb_bytes", t.rocksdb_bytes);
      w.Field("checkpoints", t.checkpoints);
      w.Field("max_message_bytes", sh.max_message_bytes);
      w.Field("has_id_map", sh.has_id_map);
      w.EndObject();
    }
    w.EndArray();
    std::printf("%s\n", w.str().c_str());
  } else {
    for (const auto& sh : *shards) {
      const auto& t = sh.stats;
      std::printf(
          "shard %d of %d at %s: dim %d, %s\n"
          "  states     %lld hot (%lld bytes of %lld), %lld cold, RocksDB "
          "%lld bytes\n"
          "  pulls      %lld calls, %lld states (hot %lld, cold %lld, never "
          "updated %lld)\n"
          "  pushes     %lld calls, %lld states, %lld accepted\n"
          "  tiering    %lld spills (%lld written), %lld promotions, %lld "
          "checkpoints\n",
          sh.shard_id, sh.num_shards, sh.address.c_str(), t.dim,
          t.write_policy.c_str(), (long long)t.hot_states,
          (long long)t.hot_bytes, (long long)t.hot_capacity_bytes,
          (long long)t.cold_states, (long long)t.rocksdb_bytes,
          (long long)t.pulls, (long long)t.states_pulled, (long long)t.hot_hits,
          (long long)t.cold_hits, (long long)t.misses, (long long)t.pushes,
          (long long)t.states_pushed, (long long)t.states_accepted,
          (long long)t.spills, (long long)t.spill_writes,
          (long long)t.promotions, (long long)t.checkpoints);
    }
  }
  return 0;
}

int HealthcheckMain(int argc, char** argv, int first) {
  double timeout = 2;
  std::string service;
  FlagSet flags("healthcheck",
                "usage: mnemo healthcheck [--timeout S] [--service NAME] "
                "ADDR\n\n"
                "Asks the gRPC server at ADDR (grpc.health.v1) whether it is "
                "SERVING: exit code 0\nif so, 1 otherwise (including no "
                "answer within --timeout). For docker-compose\nand k8s "
                "health checks.");
  flags.Double("timeout", &timeout, "seconds to wait for an answer");
  flags.String("service", &service,
               "service to check (empty: the server as a whole), e.g. "
               "mnemo.v1.Memstore");
  services::ClientSecurity security;
  services::AddClientSecurityFlags(&flags, &security, "server");
  std::vector<std::string> positional;
  if (auto rc = flags.ParseOrExitCode(argc, argv, first, &positional,
                                      /*max_positional=*/1)) {
    return *rc;
  }
  if (positional.size() != 1) {
    std::fprintf(stderr, "mnemo healthcheck: give one address (see --help)\n");
    return 2;
  }
  absl::Status a = CheckHostPort(positional[0], 1);
  if (a.ok()) a = CheckSeconds("--timeout", timeout);
  if (!a.ok()) {
    std::fprintf(stderr, "mnemo healthcheck: %s\n",
                 std::string(a.message()).c_str());
    return 2;
  }
  auto serving =
      services::CheckHealth(positional[0], timeout, service, security);
  if (!serving.ok()) {
    std::printf("%s: %s\n", positional[0].c_str(),
                serving.status().ToString().c_str());
    return 1;
  }
  std::printf("%s: %s\n", positional[0].c_str(),
              *serving ? "SERVING" : "NOT_SERVING");
  return *serving ? 0 : 1;
}

}  // namespace mnemo
