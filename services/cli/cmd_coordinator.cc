// mnemo coordinator: membership, rendezvous, barriers and decisions of
// one training job.
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "coordinator/policy_spec.h"
#include "services/cli/commands.h"
#include "services/cli/flags.h"
#include "services/cli/security_flags.h"
#include "services/coordinator_service.h"
#include "services/grpc_util.h"
#include "services/metrics.h"

namespace mnemo {
namespace {
volatile std::sig_atomic_t g_stop = 0;
void OnSignal(int signo) { g_stop = signo; }
}  // namespace

int CoordinatorMain(int argc, char** argv, int first) {
  auto env_port = IntFromEnv("MASTER_PORT", 29500, 0, 65534);
  auto env_world = IntFromEnv("WORLD_SIZE", 1, 1, coordinator::kMaxWorldSize);
  for (const auto* e : {&env_port, &env_world}) {
    if (!e->ok()) {
      std::fprintf(stderr, "mnemo coordinator: %s\n",
                   std::string(e->status().message()).c_str());
      return 2;
    }
  }
  const int master_port = static_cast<int>(*env_port);
  std::string listen = absl::StrCat(":", master_port + 1);
  int world_size = static_cast<int>(*env_world);
  std::string memstores, policy = "vanilla", metrics_listen;
  double heartbeat_timeout = 10;
  coordinator::DecisionParams decision;
  FlagSet flags(
      "coordinator",
      "usage: mnemo coordinator --world-size N --memstores ADDR,ADDR... "
      "[flags]\n\n"
      "Runs the coordinator of one training job: workers join it and "
      "rendezvous through\nit (the c10d key-value store of their collective "
      "group, on the same gRPC\nport, TLS and token), it keeps barriers, "
      "collects per-batch reports and\nbroadcasts the sync/skip decisions. "
      "Exits 0 when every worker has finished, 3\nwhen the job failed (a "
      "worker or memory store died or stopped answering),\n128+N when "
      "stopped by signal N. Defaults come from MASTER_PORT (29500: gRPC\n"
      "on MASTER_PORT+1) and WORLD_SIZE.");
  flags.HostPort("listen", &listen,
                 "gRPC address (default :MASTER_PORT+1; ':port' is 127.0.0.1)");
  flags.Int("world-size", &world_size,
            absl::StrCat("number of trainer workers (1 to ",
                         coordinator::kMaxWorldSize, ")"));
  flags.HostPortList(
      "memstores", &memstores,
      "comma-separated memory-store shard addresses, shard 0 first");
  flags.String("policy", &policy,
               absl::StrCat("training policy: ", coordinator::PolicyNames(),
                            " (it picks the sync/skip decisions)"));
  flags.Double("tau-grad", &decision.tau_g,
               "DepTGL Eq. 7 threshold (deptgl, deptgl:replay+sync): skip a "
               "boundary unless the gradient norm exceeds tau times its EMA");
  flags.Double("heartbeat-timeout", &heartbeat_timeout,
               "seconds of silence after which a worker is declared dead");
  double join_timeout = 0;
  flags.Double("join-timeout", &join_timeout,
               "once a worker has joined, seconds the others have to join, "
               "and every memory-store shard to answer a health check, "
               "before the job fails naming them (0: no limit; the workers' "
               "rendezvous --timeout still applies)");
  flags.HostPort("metrics-listen", &metrics_listen,
                 "Prometheus metrics address (host:port; empty: off)");
  services::ServerSecurity security;
  services::AddServerSecurityFlags(&flags, &security);
  services::ClientSecurity memstore_security;
  flags.String("memstore-tls-ca", &memstore_security.ca_file,
               "probe the memory stores over TLS, checking their "
               "certificates against this PEM CA (with --tls-cert/--tls-key "
               "as the client certificate for mutual TLS and "
               "--auth-token-file as the token)");
  std::vector<std::string> positional;
  if (auto rc = flags.ParseOrExitCode(argc, argv, first, &positional)) {
    return *rc;
  }
  if (!memstore_security.ca_file.empty()) {
    memstore_security.cert_file = security.cert_file;
    memstore_security.key_file = security.key_file;
    memstore_security.token_file = security.token_file;
  }
  if (auto spec = coordinator::ParsePolicySpec(policy); !spec.ok()) {
    std::fprintf(stderr, "mnemo coordinator: --policy: %s\n",
                 std::string(spec.status().message()).c_str());
    return 2;
  }
  if (world_size < 1 || world_size > coordinator::kMaxWorldSize) {
    std::fprintf(stderr,
                 "mnemo coordinator: --world-size must be >= 1 and <= %d, got "
                 "%d\n",
                 coordinator::kMaxWorldSize, world_size);
    return 2;
  }
  if (!(decision.tau_g > 0)) {
    std::fprintf(stderr, "mnemo coordinator: --tau-grad must be positive\n");
    return 2;
  }
  if (!(join_timeout >= 0) || join_timeout > kMaxSeconds) {
    std::fprintf(stderr,
                 "mnemo coordinator: --join-timeout must be in [0, %g] "
                 "seconds (0: no limit), got %g\n",
                 kMaxSeconds, join_timeout);
    return 2;
  }
  if (absl::Status h = CheckSeconds("--heartbeat-timeout", heartbeat_timeout);
      !h.ok()) {
    std::fprintf(stderr, "mnemo coordinator: %s\n",
                 std::string(h.message()).c_str());
    return 2;
  }
  for (const std::string& w : services::ServerCertificateWarnings(security)) {
    std::fprintf(stderr, "coordinator: warning: %s\n", w.c_str());
  }
  services::MetricsRegistry metrics;
  if (!metrics_listen.empty()) {
    absl::Status ms = metrics.Serve(metrics_listen);
    if (!ms.ok()) {
      std::fprintf(stderr, "mnemo coordinator: metrics: %s\n",
                   std::string(ms.message()).c_str());
      return 1;
    }
  }
  services::CoordinatorServerOptions o;
  o.listen = listen;
  o.world_size = world_size;
  for (absl::string_view a :
       absl::StrSplit(memstores, ',', absl::SkipEmpty())) {
    o.memstore_addresses.emplace_back(a);
  }
  o.policy = policy;
  o.heartbeat_timeout_s = heartbeat_timeout;
  o.join_timeout_s = join_timeout;
  o.decision = decision;
  o.security = security;
  o.memstore_security = memstore_security;
  auto server = services::CoordinatorServer::Start(o, &metrics);
  if (!server.ok()) {
    std::fprintf(stderr, "mnemo coordinator: %s\n",
                 std::string(server.status().message()).c_str());
    return 1;
  }
  std::printf(
      "coordinator: listening on %s (also the workers' rendezvous), waiting "
      "for %d workers (policy %s, decisions %s, %zu memstore shards)%s\n",
      (*server)->address().c_str(), world_size, policy.c_str(),
      (*server)->state().policy_name().c_str(), o.memstore_addresses.size(),
      metrics_listen.empty()
          ? ""
          : absl::StrCat(", metrics on :", metrics.port()).c_str());
  std::fflush(stdout);
  std::signal(SIGTERM, OnSignal);
  std::signal(SIGINT, OnSignal);
  std::signal(SIGHUP, OnSignal);
  auto& state = (*server)->state();
  int rc = 0;
  while (true) {
    absl::Status job = state.job_status();
    if (!job.ok()) {
      std::fprintf(stderr, "coordinator: the job failed: %s\n",
                   std::string(job.message()).c_str());
      // Let the workers' heartbeats and streams pick the failure up.
      std::this_thread::sleep_for(std::chrono::seconds(2));
      rc = 3;
      break;
    }
    if (state.all_finished()) {
      std::printf("coordinator: all %d workers finished\n", world_size);
      break;
    }
    if (g_stop) {
      std::fprintf(stderr, "coordinator: stopped by signal\n");
      rc = 128 + g_stop;  // the exit-code scheme: stopped by signal N
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  std::fflush(stdout);
  (*server)->Shutdown();
  return rc;
}

}  // namespace mnemo
