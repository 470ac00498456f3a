// mnemo trainer: one worker of a training cluster.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "coordinator/coordinator_state.h"
#include "services/cli/commands.h"
#include "services/cli/flags.h"
#include "services/cli/security_flags.h"
#include "services/cli/train_flags.h"
#include "services/coordinator_client.h"
#include "services/grpc_util.h"
#include "services/memstore_client.h"
#include "services/metrics.h"
#include "services/trainer_metrics.h"
#include "trainer/runtime/checkpoint/resume_point.h"
#include "trainer/runtime/cluster/distributed.h"
#include "util/file.h"
#include "util/json.h"
#include "util/proc.h"
#include "util/usage_error.h"

namespace mnemo {
namespace {
std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}
}  // namespace

int TrainerMain(int argc, char** argv, int first) {
  TrainFlags f;
  FlagSet flags(
      "trainer",
      "usage: mnemo trainer --coordinator ADDR --rank R --world-size N "
      "[training flags]\n\n"
      "Runs one trainer worker of a cluster: joins the coordinator, pulls "
      "and pushes node\nstates through the memory-store shards it names, "
      "all-reduces gradients (gloo, or NCCL\nwith --device cuda). Every worker "
      "must get the same training flags. RANK (or\nJOB_COMPLETION_INDEX), "
      "WORLD_SIZE, MASTER_ADDR and MASTER_PORT are read from the\n"
      "environment; flags override them. LOCAL_RANK, where set, is the GPU "
      "that\n--device cuda takes (else the rank's). A --config file may also "
      "hold mnemo train's\nlauncher keys (workers, pin): they are skipped "
      "here. Exit codes: 0 done, 1 this\nworker failed, 2 usage, 3 the job "
      "failed elsewhere (another worker, a memstore\nor the coordinator).");
  AddTrainFlags(&flags, &f);
  // One --config file may serve `mnemo train --workers N` and its trainers.
  flags.IgnoreInConfig(
      {"workers", "pin", "memstore-hot-bytes", "memstore-mmap-reads"});
  int rank = -1, world_size = -1;
  std::string coordinator, bind_host, metrics_listen;
  double timeout = 30;
  flags.Int("rank", &rank,
            "this worker's rank (-1: $RANK, else $JOB_COMPLETION_INDEX)");
  flags.Int("world-size", &world_size, "number of workers (-1: $WORLD_SIZE)");
  flags.HostPort(
      "coordinator", &coordinator,
      "coordinator gRPC address (default $MASTER_ADDR:$MASTER_PORT+1)",
      /*min_port=*/1);
  flags.String("bind-host", &bind_host,
               "address this worker's collective transport binds to "
               "(default: 127.0.0.1 when the coordinator is on loopback, "
               "else this host's name, e.g. a pod's or container's own "
               "address)");
  flags.HostPort("metrics-listen", &metrics_listen,
                 "serve Prometheus metrics (GET /metrics) on this host:port "
                 "(empty: off)");
  flags.Double("timeout", &timeout,
               "seconds before a silent peer, store or coordinator fails the "
               "job (also how long to wait at start for memory stores that "
               "are not listening yet)");
  double connect_timeout = 60;
  flags.Double("connect-timeout", &connect_timeout,
               "seconds to keep trying to reach and join the coordinator "
               "(it may start after the trainer)");
  services::ClientSecurity security;
  services::AddClientSecurityFlags(&flags, &security,
                                   "coordinator and memory stores");
  std::vector<std::string> positional;
  if (auto rc = flags.ParseOrExitCode(argc, argv, first, &positional)) {
    return *rc;
  }
  absl::Status s = ResolveTrainFlags(&f);
  // Environment (Kubernetes, torchrun-style launchers); flags win.
  auto env_rank = IntFromEnv(
      Env("RANK").empty() ? "JOB_COMPLETION_INDEX" : "RANK", -1, 0, 1 << 20);
  auto env_world = IntFromEnv("WORLD_SIZE", -1, 1, 1 << 20);
  auto env_port = IntFromEnv("MASTER_PORT", 29500, 1, 65534);
  auto env_local_rank = IntFromEnv("LOCAL_RANK", -1, 0, 1 << 20);
  for (const auto* e : {&env_rank, &env_world, &env_port, &env_local_rank}) {
    if (s.ok() && !e->ok()) s = e->status();
  }
  if (s.ok() && rank < 0) rank = static_cast<int>(*env_rank);
  if (s.ok() && world_size < 0) world_size = static_cast<int>(*env_world);
  if (s.ok() && coordinator.empty() && !Env("MASTER_ADDR").empty()) {
    coordinator = absl::StrCat(Env("MASTER_ADDR"), ":", *env_port + 1);
  }
  if (s.ok()) s = CheckSeconds("--connect-timeout", connect_timeout);
  if (s.ok()) s = CheckSeconds("--timeout", timeout);
  if (s.ok() && (rank < 0 || world_size < 1 || coordinator.empty())) {
    s = absl::InvalidArgumentError(
        "need --rank (or RANK), --world-size (or WORLD_SIZE) and "
        "--coordinator (or MASTER_ADDR)");
  }
  // The coordinator's bound: far above any cluster, a typo that would size
  // tables by it.
  if (s.ok() && world_size > coordinator::kMaxWorldSize) {
    s = absl::InvalidArgumentError(absl::StrCat("--world-size must be in [1, ",
                                                coordinator::kMaxWorldSize,
                                                "], got ", world_size));
  }
  if (s.ok() && rank >= world_size) {
    s = absl::InvalidArgumentError(
        absl::StrCat("--rank ", rank, " is outside 0..", world_size - 1,
                     " (--world-size ", world_size, ")"));
  }
  if (s.ok()) ApplyPolicyDefaults(flags, world_size, &f);
  if (!s.ok()) {
    std::fprintf(stderr, "mnemo trainer: %s\n",
                 std::string(s.message()).c_str());
    return 2;
  }
  const std::string config_text = RunConfigText(f.options, f.policy);
  f.options.run.run_config = config_text;
  if (rank == 0) {
    // Before joining: rank 0 checks the checkpoint every rank resumes from
    // (the last complete one; the others load their file of it) and that
    // --out is not another run's. (`mnemo train --workers N` holds --out's
    // lock for its trainers.)
    if (int rc = PrecheckRun(f, /*own_out=*/false, "mnemo trainer", nullptr)) {
      return rc;
    }
  }
  services::CoordinatorClientOptions co;
  co.address = coordinator;
  co.rank = rank;
  co.my_address = absl::StrCat(HostName(), " pid ", getpid());
  co.config_hash = RunConfigHash(config_text);
  co.config_text = config_text;
  co.rpc_timeout_s = timeout;
  co.connect_timeout_s = connect_timeout;
  co.security = security;
  services::ClusterSpecInfo spec;
  auto cluster = services::CoordinatorClient::Connect(co, &spec);
  if (!cluster.ok()) {
    std::fprintf(stderr, "mnemo trainer [rank %d]: %s\n", rank,
                 std::string(cluster.status().message()).c_str());
    // Refused for its flags (other than the job's, a rank out of range):
    // a usage error; nothing was started.
    const absl::StatusCode code = cluster.status().code();
    return code == absl::StatusCode::kFailedPrecondition ||
                   code == absl::StatusCode::kInvalidArgument
               ? 2
               : 1;
  }
  auto fail = [&](int code, const std::string& msg) {
    std::fprintf(stderr, "mnemo trainer [rank %d]: %s\n", rank, msg.c_str());
    if (code == 1) (*cluster)->ReportError(msg);
    return code;
  };
  if (spec.world_size != world_size) {
    return fail(1, absl::StrFormat("--world-size %d but the coordinator's job "
                                   "has %d workers",
                                   world_size, spec.world_size));
  }
  if (spec.policy != f.policy) {
    return fail(1, absl::StrFormat("--policy %s but the coordinator runs %s",
                                   f.policy, spec.policy));
  }
  if (spec.memstore_addresses.empty()) {
    return fail(1,
                "the coordinator names no memory-store shards "
                "(start it with --memstores)");
  }
  services::MemstoreClientOptions mo;
  mo.addresses = spec.memstore_addresses;
  mo.deadline_seconds = timeout;
  mo.connect_wait_seconds = timeout;
  mo.max_message_bytes = 64 << 20;
  mo.security = security;
  mo.shard_of = [](int64_t id, int n) { return runtime::HashOwner(id, n); };
  auto store = services::MemstoreClient::Connect(mo);
  if (!store.ok()) {
    return fail(1, absl::StrCat("memory store: ", store.status().message()));
  }
  runtime::DistributedContext ctx;
  ctx.rank = rank;
  ctx.world_size = world_size;
  ctx.local_rank = static_cast<int>(*env_local_rank);
  ctx.policy = f.spec;
  ctx.rendezvous = cluster->get();
  if (bind_host.empty()) {
    const std::string normalized = services::NormalizeAddress(coordinator);
    const std::string coordinator_host =
        normalized.substr(0, normalized.rfind(':'));
    bind_host = IsLoopbackHost(coordinator_host) ? "127.0.0.1" : HostName();
  }
  ctx.bind_host = bind_host;
  ctx.timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout * 1000));
  ctx.store = store->get();
  ctx.cluster = cluster->get();
  f.options.distributed = &ctx;
  runtime::TrainCallbacks callbacks;
  callbacks.log = [](const std::string& line) {
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
  };
  services::MetricsRegistry registry;
  services::TrainerMetrics metrics(&registry, rank);
  if (!metrics_listen.empty()) {
    if (absl::Status ms = metrics.Serve(metrics_listen, &callbacks); !ms.ok()) {
      return fail(1, std::string(ms.message()));
    }
  }
  // The job failed elsewhere while this trainer waits (in a collective, or
  // on a frozen peer): stop within seconds, not at the wait's timeout.
  std::atomic<bool> returned{false};
  std::thread watchdog([&] {
    while (!returned.load()) {
      absl::Status job = (*cluster)->job_status();
      if (!job.ok()) {
        for (int i = 0; i < 30 && !returned.load(); ++i) {
          std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
        if (returned.load()) return;
        const bool mine = job.message().find(absl::StrCat(
                              "worker ", rank, " ")) != absl::string_view::npos;
        std::fprintf(stderr, "mnemo trainer [rank %d]: the job failed: %s\n",
                     rank, std::string(job.message()).c_str());
        std::fflush(stdout);
        std::fflush(stderr);
        _exit(mine ? 1 : 3);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  });
  // A SIGTERM while a checkpoint is written leaves no .pt.tmp.
  RemoveTempFilesOnTermination();
  auto result = runtime::Train(f.options, callbacks);
  returned = true;
  watchdog.join();
  if (!result.ok()) {
    // A failure here is often the echo of one elsewhere (a dead peer breaks
    // the all-reduce): wait briefly for the coordinator's verdict. Nothing
    // to report when the job has failed already, or the coordinator is
    // gone (a report to a frozen one would wait for its deadline).
    if ((*cluster)->job_status().ok()) {
      (*cluster)->ReportError(std::string(result.status().message()));
    }
    absl::Status elsewhere;
    for (int i = 0; i < 40 && elsewhere.ok(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      elsewhere = (*cluster)->job_status();
    }
    if (!elsewhere.ok() &&
        elsewhere.message().find(absl::StrCat("worker ", rank, " failed")) ==
            absl::string_view::npos) {
      return fail(3, absl::StrCat("the job failed: ", elsewhere.message(),
                                  " (here: ", result.status().message(), ")"));
    }
    std::fprintf(stderr, "mnemo trainer [rank %d]: %s\n", rank,
                 std::string(result.status().message()).c_str());
    return ExitCodeOf(result.status());
  }
  if (!f.options.run.out_dir.empty()) {
    JsonWriter w;
    w.BeginObject();
    w.Field("rank", rank);
    w.Field("world_size", world_size);
    w.Field("policy", f.policy);
    w.Field("parameter_checksum", result->parameter_checksum);
    w.Field("peak_rss_bytes", result->peak_rss_bytes);
    w.EndObject();
    std::error_code ec;
    std::filesystem::create_directories(f.options.run.out_dir, ec);
    std::ofstream(std::filesystem::path(f.options.run.out_dir) /
                  absl::StrCat("worker-", rank, ".json"))
        << w.str() << "\n";
  }
  std::printf("worker %d done: parameter checksum %.10g\n", rank,
              result->parameter_checksum);
  absl::Status fin = (*cluster)->Finish();
  if (!fin.ok()) return fail(3, std::string(fin.message()));
  return 0;
}

}  // namespace mnemo
