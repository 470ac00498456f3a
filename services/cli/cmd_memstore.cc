// mnemo memstore: serve one shard of node memory over gRPC.
#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "coordinator/coordinator_state.h"
#include "memstore/node_state_store.h"
#include "services/cli/commands.h"
#include "services/cli/flags.h"
#include "services/cli/security_flags.h"
#include "services/grpc_util.h"
#include "services/memstore_service.h"
#include "services/metrics.h"

namespace mnemo {
namespace {

// Upper bounds of mnemo memstore's flags (docs/operations.md): far beyond
// what serving one shard uses, far below what would exhaust a machine.
constexpr int64_t kMaxThreads = 1024;            // --threads
constexpr int64_t kMaxBatch = int64_t{1} << 30;  // --max-batch (ids)

}  // namespace

int MemstoreMain(int argc, char** argv, int first) {
  namespace fs = std::filesystem;
  memstore::NodeStateStoreOptions store_options;
  services::MemstoreServerOptions server_options;
  server_options.listen = "127.0.0.1:50051";
  std::string write_policy = "write-through", promotion = "on-read";
  std::string metrics_listen, id_map_path, checkpoint_dir;
  FlagSet flags(
      "memstore",
      "usage: mnemo memstore --data-dir DIR --dim D [flags]\n\n"
      "Serves one shard of a job's node memory (state vectors and last-update "
      "times) over\ngRPC (mnemo.v1.Memstore, with grpc.health.v1 and server "
      "reflection): hot states in\nRAM, cold ones in RocksDB under "
      "--data-dir. Stops cleanly on SIGTERM/SIGINT/SIGHUP (write-back\nstores "
      "flush on the way out).");
  flags.HostPort("listen", &server_options.listen,
                 "gRPC address host:port (':PORT' means 127.0.0.1:PORT; port 0 "
                 "picks a free one, printed at start)");
  flags.String("data-dir", &store_options.data_dir,
               "RocksDB directory of the cold tier and durable state "
               "(required)");
  flags.Int("dim", &store_options.dim, "state width in float32 (required)");
  flags.Int64("hot-capacity-bytes", &store_options.hot_capacity_bytes,
              "bytes of state kept in RAM before spilling the least recently "
              "updated to RocksDB (0: unlimited)");
  flags.String("write-policy", &write_policy,
               "write-through (every acknowledged push survives a crash) or "
               "write-back (durable at Checkpoint and clean shutdown)");
  flags.Bool("mmap-reads", &store_options.mmap_reads,
             "read the cold tier's files through mmap (faster cold pulls; a "
             "disk read error then ends the process, SIGBUS, instead of "
             "failing the call; restart recovers every acknowledged push)");
  flags.Int("cold-read-threads", &store_options.cold_read_threads,
            "threads that read a large cold pull in parallel with the pulling "
            "one (-1: one less than the CPUs, at most 7; 0: none)");
  flags.Bool("sync", &store_options.sync,
             "write-through: fdatasync the journal before acknowledging a "
             "push");
  flags.Int64("journal-limit-bytes", &store_options.journal_limit_bytes,
              "write-through: once the push journal holds this many bytes, "
              "the states it changed are written to RocksDB and its files "
              "deleted; pushes wait at twice this (bounds disk use and the "
              "replay at restart; larger: a state pushed again meanwhile is "
              "written once)");
  flags.String("promotion", &promotion,
               "what a pull does to a cold state: on-read (bring it back to "
               "RAM) or never");
  flags.Int("shard-id", &server_options.shard_id, "this server's shard index");
  flags.Int("num-shards", &server_options.num_shards,
            "the job's number of memory-store shards");
  flags.Int64("max-message-bytes", &server_options.max_message_bytes,
              "largest gRPC message sent or received; larger pulls and pushes "
              "use the streaming RPCs");
  flags.Int64("max-batch", &server_options.max_batch,
              "most ids one request may carry");
  flags.Int("threads", &server_options.executor_threads,
            "threads running store work for the RPC handlers");
  flags.HostPort("metrics-listen", &metrics_listen,
                 "serve Prometheus metrics (GET /metrics) on this host:port "
                 "(empty: off)");
  flags.String("id-map", &id_map_path,
               "the job's id_map.csv (dense_id,original_id[,kind]) for "
               "queries by original id; copied into --data-dir so it "
               "survives restarts");
  flags.Int64("num-nodes", &server_options.num_nodes,
              "the job's number of nodes: requests for dense ids >= it are "
              "refused (0: the --id-map's size, or no bound without one)");
  services::AddServerSecurityFlags(&flags, &server_options.security);
  flags.String("checkpoint-dir", &checkpoint_dir,
               "directory of named checkpoints (default DATA_DIR/checkpoints)");
  std::vector<std::string> positional;
  if (auto rc = flags.ParseOrExitCode(argc, argv, first, &positional)) {
    return *rc;
  }
  auto usage = [](const std::string& msg) {
    std::fprintf(stderr, "mnemo memstore: %s\n", msg.c_str());
    return 2;
  };
  if (store_options.data_dir.empty()) return usage("--data-dir is required");
  if (store_options.dim <= 0) return usage("--dim is required (> 0)");
  // One state must fit one gRPC message (below 2 GiB).
  if (services::MinMessageBytes(store_options.dim) > (int64_t{1} << 31) - 1) {
    // The largest width that fits (MinMessageBytes grows with it).
    int lo = 1, hi = store_options.dim;
    while (lo + 1 < hi) {
      const int mid = lo + (hi - lo) / 2;
      (services::MinMessageBytes(mid) <= (int64_t{1} << 31) - 1 ? lo : hi) =
          mid;
    }
    return usage(
        absl::StrCat("--dim must be in [1, ", lo, "] (one state of --dim ",
                     store_options.dim, " takes ",
                     services::MinMessageBytes(store_options.dim),
                     " bytes, above the 2 GiB a gRPC message holds), got ",
                     store_options.dim));
  }
  if (server_options.num_nodes < 0) {
    return usage(absl::StrCat("--num-nodes must be >= 0, got ",
                              server_options.num_nodes));
  }
  // Every value in its range before anything is written (the data dir's
  // shard file included): a usage error, exit 2, naming the flag and the
  // range.
  struct Range {
    const char* flag;
    int64_t value, min, max;
  };
  const int64_t kMaxShards = coordinator::kMaxWorldSize;  // one per worker
  for (const Range& r : std::initializer_list<Range>{
           {"--num-shards", server_options.num_shards, 1, kMaxShards},
           {"--shard-id", server_options.shard_id, 0,
            std::max(0, server_options.num_shards - 1)},
           {"--threads", server_options.executor_threads, 1, kMaxThreads},
           {"--max-batch", server_options.max_batch, 1, kMaxBatch},
           {"--cold-read-threads", store_options.cold_read_threads, -1,
            memstore::kMaxColdReadThreads},
           {"--hot-capacity-bytes", store_options.hot_capacity_bytes, 0,
            std::numeric_limits<int64_t>::max()},
           {"--journal-limit-bytes", store_options.journal_limit_bytes, 1,
            std::numeric_limits<int64_t>::max()},
           {"--max-message-bytes", server_options.max_message_bytes,
            services::MinMessageBytes(store_options.dim),
            (int64_t{1} << 31) - 1}}) {
    if (r.value >= r.min && r.value <= r.max) continue;
    std::string why;
    if (r.flag == std::string("--shard-id")) {
      why =
          absl::StrCat(" (a job of --num-shards ", server_options.num_shards,
                       " has shards 0 to ", server_options.num_shards - 1, ")");
    } else if (r.flag == std::string("--max-message-bytes")) {
      why = absl::StrCat(" (one state of --dim ", store_options.dim,
                         " and the framing, at least; below 2 GiB)");
    }
    return usage(absl::StrCat(
        r.flag, " must be in [", r.min, ", ",
        r.max == std::numeric_limits<int64_t>::max() ? std::string("inf")
                                                     : absl::StrCat(r.max),
        r.max == std::numeric_limits<int64_t>::max() ? ")" : "]", ", got ",
        r.value, why));
  }
  auto policy = memstore::ParseWritePolicy(write_policy);
  if (!policy.ok()) return usage(std::string(policy.status().message()));
  store_options.write_policy = *policy;
  if (promotion == "on-read") {
    store_options.promotion = memstore::PromotionPolicy::kOnRead;
  } else if (promotion == "never") {
    store_options.promotion = memstore::PromotionPolicy::kNever;
  } else {
    return usage("--promotion must be on-read or never, got '" + promotion +
                 "'");
  }
  store_options.max_batch = server_options.max_batch;
  server_options.checkpoint_root =
      checkpoint_dir.empty()
          ? (fs::path(store_options.data_dir) / "checkpoints").string()
          : checkpoint_dir;

  // Signals go to the sigwait below, not to a random thread.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  auto fail = [](const absl::Status& st) {
    std::fprintf(stderr, "mnemo memstore: %s\n",
                 std::string(st.message()).c_str());
    return 1;
  };
  std::error_code ec;
  fs::create_directories(store_options.data_dir, ec);
  if (ec) {
    return fail(absl::InternalError(absl::StrFormat(
        "cannot create %s: %s", store_options.data_dir, ec.message())));
  }
  // The data dir remembers which shard of how many it holds: a shard
  // restarted on another's directory (or with another --num-shards) would
  // serve the wrong nodes' states. A fresh directory records it once the
  // server has started: a server refused while starting leaves no record
  // that would refuse the corrected command.
  const fs::path shard_file = fs::path(store_options.data_dir) / "shard";
  const std::string mine = absl::StrFormat("%d of %d", server_options.shard_id,
                                           server_options.num_shards);
  const bool shard_recorded = fs::exists(shard_file);
  if (shard_recorded) {
    std::ifstream in(shard_file);
    std::string recorded;
    std::getline(in, recorded);
    if (recorded != mine) {
      return fail(absl::FailedPreconditionError(absl::StrFormat(
          "%s holds shard %s, but this server is shard %s (--shard-id, "
          "--num-shards); start it on its own --data-dir",
          store_options.data_dir, recorded, mine)));
    }
  }
  const fs::path kept_map = fs::path(store_options.data_dir) / "id_map.csv";
  if (!id_map_path.empty()) {
    auto map = services::IdMap::Load(id_map_path);
    if (!map.ok()) return fail(map.status());
    if (fs::absolute(id_map_path) != fs::absolute(kept_map)) {
      fs::copy_file(id_map_path, kept_map, fs::copy_options::overwrite_existing,
                    ec);
      if (ec) {
        return fail(absl::InternalError(
            absl::StrFormat("cannot copy %s to %s: %s", id_map_path,
                            kept_map.string(), ec.message())));
      }
    }
    server_options.id_map = *std::move(map);
  } else if (fs::exists(kept_map)) {
    auto map = services::IdMap::Load(kept_map.string());
    if (!map.ok()) return fail(map.status());
    server_options.id_map = *std::move(map);
  }

  for (const std::string& w :
       services::ServerCertificateWarnings(server_options.security)) {
    std::fprintf(stderr, "mnemo memstore: warning: %s\n", w.c_str());
  }
  services::MetricsRegistry metrics;
  if (!metrics_listen.empty()) {
    absl::Status ms = metrics.Serve(metrics_listen);
    if (!ms.ok()) return fail(ms);
  }
  // What recovery changed that the operator should know (a torn journal
  // record cut, and what it held): on stderr, where the launcher and the
  // service manager's log pick it up.
  store_options.warn = [](const std::string& line) {
    std::fprintf(stderr, "mnemo memstore: warning: %s\n", line.c_str());
    std::fflush(stderr);
  };
  auto store = memstore::Open(store_options);
  if (!store.ok()) return fail(store.status());
  const int shard = server_options.shard_id, shards = server_options.num_shards;
  // What the server binds (0.0.0.0 stays 0.0.0.0 here; address() is how
  // a local client reaches it).
  const std::string bound = services::NormalizeAddress(server_options.listen);
  const std::string listen_host = bound.substr(0, bound.rfind(':'));
  auto server = services::MemstoreServer::Start(
      store->get(), std::move(server_options), &metrics);
  if (!server.ok()) return fail(server.status());
  if (!shard_recorded) {
    std::ofstream out(shard_file);
    out << mine << "\n";
    if (!out.flush()) {
      return fail(absl::InternalError(
          absl::StrCat("cannot write ", shard_file.string())));
    }
  }
  std::printf(
      "mnemo memstore: shard %d of %d, dim %d, %s, listening on %s:%d\n", shard,
      shards, store_options.dim, write_policy.c_str(), listen_host.c_str(),
      (*server)->port());
  if (!metrics_listen.empty()) {
    std::printf("mnemo memstore: metrics on port %d\n", metrics.port());
  }
  std::fflush(stdout);

  int sig = 0;
  sigwait(&signals, &sig);
  std::printf("mnemo memstore: %s, shutting down\n", strsignal(sig));
  std::fflush(stdout);
  (*server)->Shutdown();
  absl::Status cs = (*store)->Close();
  if (!cs.ok()) return fail(cs);
  return 0;
}

}  // namespace mnemo
