// mnemo serve: a trained run's model on live node memory, over gRPC
// (mnemo.v1.Inference; docs/serving.md).
#include <signal.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "services/cli/commands.h"
#include "services/cli/flags.h"
#include "services/cli/security_flags.h"
#include "services/cli/train_flags.h"
#include "services/grpc_util.h"
#include "services/memstore_client.h"
#include "services/metrics.h"
#include "trainer/runtime/checkpoint/resume_point.h"
#include "trainer/runtime/cluster/distributed.h"
#include "trainer/serve/inference_server.h"
#include "trainer/serve/serving_model.h"
#include "util/proc.h"

namespace mnemo {
namespace {

int g_signal_pipe[2] = {-1, -1};

void OnSignal(int sig) {
  const unsigned char b = static_cast<unsigned char>(sig);
  // Async-signal-safe; a full pipe means a stop is already on its way.
  ssize_t ignored = write(g_signal_pipe[1], &b, 1);
  (void)ignored;
}

}  // namespace

int ServeMain(int argc, char** argv, int first) {
  std::string from, data, metrics_listen, journal_dir;
  std::vector<std::string> data_dirs;
  serve::ServingOptions so;
  serve::InferenceServerOptions server;
  server.listen = "127.0.0.1:50061";
  int threads = 0;
  int64_t wait_seconds = 0;
  FlagSet flags(
      "serve",
      "usage: mnemo serve --from RUN_DIR [flags]\n\n"
      "Serves a trained run's model on live node memory over gRPC "
      "(mnemo.v1.Inference,\nwith grpc.health.v1 and server reflection): "
      "Score and TopK rank candidate links\nat a time, Embed gives node "
      "embeddings; Ingest takes a stream of events, scores\neach batch "
      "against its negatives, then applies it to node memory (predict, "
      "then\nupdate). The model and memory are the "
      "run's best epoch's, from its last\ncheckpoint; by default the data's "
      "test period is replayed first, so the memory\nstands at its last "
      "event. Node ids are the data's own; times are in its unit.\nStops on "
      "SIGTERM/SIGINT (docs/serving.md).");
  flags.String("from", &from,
               "the run's --out directory (its checkpoints hold the model, "
               "the memory and the flags)");
  flags.HostPort("listen", &server.listen,
                 "gRPC address host:port (':PORT' means 127.0.0.1:PORT; port "
                 "0 picks a free one, printed at start)");
  flags.String("data", &data,
               "the run's dataset, where it is not found as the run named it "
               "(a name or a file; the same data)");
  flags.StringList("data-dir", &data_dirs,
                   "directories searched for the dataset by name (then "
                   "$MNEMO_DATA_DIR, then ../shared/data)");
  flags.Int64("wait-seconds", &wait_seconds,
              "wait this long for the run's first checkpoint when --from "
              "has none yet (a server started beside its training job; 0: "
              "exit 2 at once)");
  flags.String("journal", &journal_dir,
               "make every ingested batch durable in DIR/ingest.journal before "
               "its ack, and apply the journal's batches again at start (a "
               "restarted server stands where the last acknowledged batch "
               "left it; empty: off)");
  flags.Bool("replay-test", &so.replay_test,
             "replay the data's test period at start (predict, then update, "
             "as the run's test pass; its AP is printed): the memory then "
             "stands at the data's last event. Off: it stands at the end of "
             "validation, and clients may ingest the test period themselves");
  flags.Int64("max-new-nodes", &so.max_new_nodes,
              "nodes ingestion may add to the run's (their memory is made at "
              "start; 0: unknown ids are refused in Ingest)");
  flags.Int64("max-batch", &so.limits.max_batch,
              "most events one Ingest request may carry (one model batch)");
  so.limits.max_time_gap = -1;
  flags.Double("max-time-gap", &so.limits.max_time_gap,
               "refuse an ingested event this far past the memory's time, in "
               "the data's unit (-1: the run's data's whole time span, which "
               "catches a timestamp in another unit; 0: no limit)");
  flags.Int64("max-candidates", &so.limits.max_candidates,
              "most candidates one Score or TopK request may carry");
  flags.Bool("batching", &server.batching,
             "dynamic batching: the queries waiting are computed as one model "
             "batch (off: one batch each)");
  flags.Int64("batch-pairs", &server.batch_pairs,
              "most candidate pairs in one model batch of queries");
  flags.Int64("max-delay-us", &server.max_delay_us,
              "how long to wait for more queries after the first one "
              "(microseconds; 0: batch what is already waiting)");
  flags.Int64("online-window", &so.online_window,
              "the online AP and MRR of Ingest's acks and metrics are over "
              "the last this many events (0: not computed)");
  flags.Int("threads", &threads,
            "CPU threads for the model (0: every CPU this process may use)");
  flags.Int64("max-message-bytes", &server.max_message_bytes,
              "largest gRPC message received or sent");
  flags.HostPort("metrics-listen", &metrics_listen,
                 "serve Prometheus metrics (GET /metrics) on this host:port "
                 "(empty: off)");
  std::string memstores;
  services::ClientSecurity store_security;
  double store_timeout = 10;
  flags.HostPortList("memstore", &memstores,
                     "keep the node memory in these memory-store shards "
                     "(host:port,... in shard order; started with --dim the "
                     "run's record width and --num-shards their count) "
                     "instead of in this process: every batch reads its states "
                     "from them and an ingested batch is acknowledged once "
                     "they took its states. At start serve writes its memory "
                     "into them (they must be empty or serve's)");
  flags.Bool("follow", &so.follow,
             "with --memstore: read the node memory a training job writes "
             "into its shards (the job of --from, as it trains) instead of "
             "serve's own; Ingest is refused, and the parameters are the "
             "checkpoint's latest, which the job's memory is computed with");
  double reload_seconds = 0;
  flags.Double("reload", &reload_seconds,
               "with --follow: look for a newer checkpoint of --from's run "
               "every this many seconds and take its parameters (0: never)");
  flags.Double("memstore-timeout", &store_timeout,
               "seconds a call to the memory-store shards may take, retries "
               "included; a shard down longer fails the request with "
               "UNAVAILABLE");
  services::AddClientSecurityFlags(&flags, &store_security,
                                   "memory-store shards", "memstore-");
  services::AddServerSecurityFlags(&flags, &server.security);
  std::vector<std::string> positional;
  if (auto rc = flags.ParseOrExitCode(argc, argv, first, &positional)) {
    return *rc;
  }
  auto usage = [](const std::string& msg) {
    std::fprintf(stderr, "mnemo serve: %s\n", msg.c_str());
    return 2;
  };
  auto fail = [](const absl::Status& s) {
    std::fprintf(stderr, "mnemo serve: %s\n", std::string(s.message()).c_str());
    return 1;
  };
  if (from.empty()) return usage("--from RUN_DIR is required");
  struct Range {
    const char* flag;
    int64_t value, min, max;
  };
  for (const Range& r : std::initializer_list<Range>{
           {"--max-new-nodes", so.max_new_nodes, 0, int64_t{1} << 30},
           {"--max-batch", so.limits.max_batch, 1, int64_t{1} << 20},
           {"--max-candidates", so.limits.max_candidates, 1, int64_t{1} << 24},
           {"--batch-pairs", server.batch_pairs, 1, int64_t{1} << 24},
           {"--max-delay-us", server.max_delay_us, 0, 10'000'000},
           {"--online-window", so.online_window, 0, int64_t{1} << 26},
           {"--threads", int64_t{threads}, 0, 1024},
           {"--wait-seconds", wait_seconds, 0, int64_t{1} << 40},
           {"--max-message-bytes", server.max_message_bytes, 1 << 16,
            (int64_t{1} << 31) - 1}}) {
    if (r.value < r.min || r.value > r.max) {
      return usage(absl::StrCat(r.flag, " must be in [", r.min, ", ", r.max,
                                "], got ", r.value));
    }
  }
  if (so.follow && memstores.empty()) {
    return usage(
        "--follow reads a training job's shards: name them with "
        "--memstore");
  }
  if (so.follow && !journal_dir.empty()) {
    return usage("--follow does not ingest: --journal has nothing to keep");
  }
  if (!(reload_seconds >= 0 && reload_seconds <= 86400)) {
    return usage(absl::StrCat("--reload must be in [0, 86400] seconds, got ",
                              reload_seconds));
  }
  if (reload_seconds > 0 && !so.follow) {
    return usage(
        "--reload needs --follow (serve's own memory was computed by the "
        "parameters it started with; restart serve to take a newer run)");
  }
  so.reload_seconds = reload_seconds;
  so.run_dir = from;
  if (!(store_timeout > 0 && store_timeout <= 3600)) {
    return usage(absl::StrCat("--memstore-timeout must be in (0, 3600], got ",
                              store_timeout));
  }
  if (!(so.limits.max_time_gap >= -1)) {
    return usage(absl::StrCat("--max-time-gap must be -1, 0 or positive, got ",
                              so.limits.max_time_gap));
  }
  // The run: its last checkpoint (a single process's, or rank 0's of the
  // last complete cluster set), every file verified.
  auto point = runtime::FindResumePoint(from);
  if (!point.ok() && point.status().code() == absl::StatusCode::kNotFound &&
      wait_seconds > 0) {
    std::fprintf(stderr,
                 "mnemo serve: --from %s has no checkpoint yet; waiting up to "
                 "%lld s for one\n",
                 from.c_str(), static_cast<long long>(wait_seconds));
    const double until = MonotonicSeconds() + static_cast<double>(wait_seconds);
    while (!point.ok() &&
           point.status().code() == absl::StatusCode::kNotFound &&
           MonotonicSeconds() < until) {
      std::this_thread::sleep_for(std::chrono::seconds(2));
      point = runtime::FindResumePoint(from);
    }
  }
  if (!point.ok()) {
    const bool missing = point.status().code() == absl::StatusCode::kNotFound;
    std::fprintf(stderr, "mnemo serve: --from %s: %s\n", from.c_str(),
                 std::string(point.status().message()).c_str());
    return missing ? 2 : 1;
  }
  if (point->run_config.empty()) {
    return usage(absl::StrCat(
        "--from ", from,
        ": its checkpoint does not record the run's flags (a run from "
        "before they were recorded): the model cannot be rebuilt"));
  }
  auto run = FlagsOfRun(point->run_config, data, data_dirs);
  if (!run.ok()) return usage(std::string(run.status().message()));
  so.train = run->options;
  so.checkpoint = point->FileFor(0, 1);
  // The run's model has the refiner's parameters where it refined batches:
  // --refine-chunks > 1, or DepBloom's default in a cluster.
  const int chunks = run->options.policy.depbloom.refine_chunks;
  so.refine = chunks > 0
                  ? chunks > 1
                  : point->cluster &&
                        run->spec.policy == coordinator::PolicyKind::kDepBloom;
  so.log = [](const std::string& line) {
    std::fprintf(stderr, "mnemo serve: %s\n", line.c_str());
    std::fflush(stderr);
  };
  // A signal, on whichever thread takes it (LibTorch starts threads before
  // main, so no mask covers them all), wakes the stopper below through a
  // pipe.
  if (pipe(g_signal_pipe) != 0) {
    return fail(absl::InternalError("cannot make the signal pipe"));
  }
  std::signal(SIGTERM, OnSignal);
  std::signal(SIGINT, OnSignal);
  std::signal(SIGHUP, OnSignal);
  at::set_num_threads(threads > 0 ? threads : UsableCpuCount());

  for (const std::string& w :
       services::ServerCertificateWarnings(server.security)) {
    std::fprintf(stderr, "mnemo serve: warning: %s\n", w.c_str());
  }
  const double t0 = MonotonicSeconds();
  // The shards, placed by node as a training job places them.
  std::unique_ptr<services::MemstoreClient> store;
  if (!memstores.empty()) {
    services::MemstoreClientOptions mo;
    mo.addresses = absl::StrSplit(memstores, ',', absl::SkipEmpty());
    mo.deadline_seconds = store_timeout;
    mo.connect_wait_seconds = store_timeout;
    mo.security = store_security;
    mo.shard_of = [](int64_t id, int n) { return runtime::HashOwner(id, n); };
    auto connected = services::MemstoreClient::Connect(mo);
    if (!connected.ok()) {
      std::fprintf(stderr, "mnemo serve: --memstore: %s\n",
                   std::string(connected.status().message()).c_str());
      return connected.status().code() == absl::StatusCode::kInvalidArgument
                 ? 2
                 : 1;
    }
    store = *std::move(connected);
    so.store = store.get();
  }
  auto model = serve::ServingModel::Load(so);
  if (!model.ok()) return fail(model.status());
  // The journal, for this run, checkpoint and starting point only.
  std::unique_ptr<serve::IngestJournal> journal;
  if (!journal_dir.empty()) {
    const std::string identity = absl::StrCat(
        "run ", point->run_id, ", ", point->describe, ", memory from ",
        so.replay_test ? "the end of the data (test period replayed)"
                       : "the end of validation");
    std::string warning;
    auto opened = serve::IngestJournal::Open(journal_dir, identity,
                                             &server.recovered, &warning);
    if (!opened.ok()) return fail(opened.status());
    if (!warning.empty()) so.log("warning: " + warning);
    journal = *std::move(opened);
    server.journal = journal.get();
  }
  server.log = so.log;
  const int64_t nodes = (*model)->ids().run_nodes();
  services::MetricsRegistry metrics;
  if (!metrics_listen.empty()) {
    if (absl::Status s = metrics.Serve(metrics_listen); !s.ok()) {
      return fail(s);
    }
  }
  auto started =
      serve::InferenceServer::Start(*std::move(model), server, &metrics);
  if (!started.ok()) return fail(started.status());
  const serve::Version v = (*started)->version();
  const std::string bound = services::NormalizeAddress(server.listen);
  std::printf(
      "mnemo serve: %s, %lld nodes, memory at t %.17g; ready in %.1f s, "
      "listening on %s:%d\n",
      from.c_str(), static_cast<long long>(nodes), v.time,
      MonotonicSeconds() - t0, bound.substr(0, bound.rfind(':')).c_str(),
      (*started)->port());
  if (!metrics_listen.empty()) {
    std::printf("mnemo serve: metrics on port %d\n", metrics.port());
  }
  std::fflush(stdout);
  // The serving loop runs here, on the thread that loaded the model
  // (InferenceServer::Serve); a signal stops it from another.
  serve::InferenceServer* server_ptr = started->get();
  std::thread stopper([server_ptr] {
    unsigned char sig = 0;
    while (read(g_signal_pipe[0], &sig, 1) < 0 && errno == EINTR) {
    }
    std::printf("mnemo serve: %s, shutting down\n", strsignal(sig));
    std::fflush(stdout);
    server_ptr->Shutdown();
  });
  (*started)->Serve();
  stopper.join();
  return 0;
}

}  // namespace mnemo
