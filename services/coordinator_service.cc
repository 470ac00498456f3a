#include "services/coordinator_service.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <deque>
#include <functional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/rendezvous_kv.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "mnemo/v1/coordinator.grpc.pb.h"
#include "services/grpc_util.h"
#include "services/metrics.h"
#include "trainer/runtime/checkpoint/resume_point.h"
#include "util/proc.h"

namespace mnemo::services {
namespace {

using coordinator::CoordinatorState;

// Bounds of what a join may carry: far above what a worker sends (a host
// name, an address, a hex hash, its flags as text), far below what would
// cost the coordinator memory it keeps for the job.
constexpr size_t kMaxJoinNameBytes = 1024;       // address, host
constexpr size_t kMaxConfigHashBytes = 256;      // config_hash
constexpr size_t kMaxConfigTextBytes = 1 << 20;  // config_text
constexpr size_t kMaxErrorBytes = 64 << 10;      // ReportError's message

bool Printable(const std::string& s) {
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return c >= 0x20 && c < 0x7f; });
}

// OK when every field of `req` is well-formed for a job of `world_size`
// workers: the rank in range, a configuration hash (printable, bounded),
// the address and host printable and bounded, the configuration text
// bounded. INVALID_ARGUMENT naming the field otherwise.
absl::Status ValidateJoinRequest(const v1::JoinRequest& req, int world_size) {
  auto bad = [&](const std::string& what) {
    return absl::InvalidArgumentError(
        absl::StrCat("Join refused (the job is not affected): ", what));
  };
  if (req.rank() < 0 || req.rank() >= world_size) {
    return bad(absl::StrFormat("rank %d is out of range: the world size is %d",
                               req.rank(), world_size));
  }
  if (req.config_hash().empty()) {
    return bad(absl::StrCat("worker ", req.rank(),
                            " sent no run configuration hash (config_hash)"));
  }
  if (req.config_hash().size() > kMaxConfigHashBytes ||
      !Printable(req.config_hash())) {
    return bad(absl::StrCat("config_hash of worker ", req.rank(),
                            " is not a printable string of at most ",
                            kMaxConfigHashBytes, " bytes"));
  }
  for (const auto& [name, value] :
       {std::pair<const char*, const std::string*>{"address", &req.address()},
        {"host", &req.host()}}) {
    if (value->size() > kMaxJoinNameBytes || !Printable(*value)) {
      return bad(absl::StrCat(name, " of worker ", req.rank(),
                              " is not a printable string of at most ",
                              kMaxJoinNameBytes, " bytes"));
    }
  }
  if (req.config_text().size() > kMaxConfigTextBytes) {
    return bad(absl::StrCat("config_text of worker ", req.rank(), " is ",
                            req.config_text().size(), " bytes, over ",
                            kMaxConfigTextBytes));
  }
  return absl::OkStatus();
}

void FillJobStatus(const CoordinatorState& state, v1::JobStatus* out) {
  absl::Status s = state.job_status();
  out->set_code(static_cast<int>(s.code()));
  out->set_message(std::string(s.message()));
  out->set_all_finished(state.all_finished());
}

// Streams decisions to one worker. Owned by gRPC until OnDone, which
// unsubscribes (waiting for a callback in flight, CoordinatorState's
// contract) before deleting it. The stream of a rank's worker (`owner`)
// breaking means the worker is lost; any other stream (an observer, or a
// second stream claiming a rank that has one) breaks without effect.
// `on_done` runs in OnDone.
class DecisionWriter : public grpc::ServerWriteReactor<v1::Decision> {
 public:
  DecisionWriter(CoordinatorState* state, int rank, bool owner,
                 std::function<void()> on_done)
      : state_(state),
        rank_(rank),
        owner_(owner),
        on_done_(std::move(on_done)) {
    // The subscription callbacks may run on any thread; they only queue.
    subscription_ = state_->Subscribe(
        [this](const coordinator::Decision& d) {
          absl::MutexLock lock(&mu_);
          v1::Decision m;
          m.set_boundary(d.boundary);
          m.set_sync(d.sync);
          queue_.push_back(std::move(m));
          MaybeWriteLocked();
        },
        [this](absl::Status s) {
          absl::MutexLock lock(&mu_);
          end_ = ToGrpcStatus(s);
          ended_ = true;
          MaybeWriteLocked();
        });
  }

  void OnWriteDone(bool ok) override {
    absl::MutexLock lock(&mu_);
    writing_ = false;
    if (!ok) {
      FinishLocked(grpc::Status(grpc::StatusCode::UNAVAILABLE, "write failed"));
      return;
    }
    MaybeWriteLocked();
  }
  void OnCancel() override {
    // The worker's stream broke: its process died or lost the network (a
    // worker that finished cleanly is not blamed).
    if (owner_) state_->WorkerLost(rank_, "its decision stream disconnected");
    absl::MutexLock lock(&mu_);
    FinishLocked(grpc::Status::CANCELLED);
  }
  void OnDone() override {
    // Blocks only while a callback (a few microseconds under mu_) runs.
    state_->Unsubscribe(subscription_);
    if (on_done_) on_done_();
    delete this;
  }

 private:
  void MaybeWriteLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (writing_ || finished_) return;
    if (!queue_.empty()) {
      current_ = std::move(queue_.front());
      queue_.pop_front();
      writing_ = true;
      StartWrite(&current_);
    } else if (ended_) {
      FinishLocked(end_);
    }
  }
  void FinishLocked(grpc::Status s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finished_) return;
    finished_ = true;
    Finish(s);
  }

  CoordinatorState* state_;
  const int rank_;
  const bool owner_;
  const std::function<void()> on_done_;
  int subscription_ = -1;
  absl::Mutex mu_;
  std::deque<v1::Decision> queue_ ABSL_GUARDED_BY(mu_);
  v1::Decision current_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status end_ ABSL_GUARDED_BY(mu_);
};

struct Metrics {
  prometheus::Gauge* workers_alive = nullptr;
  prometheus::Counter* decisions_sync = nullptr;
  prometheus::Counter* decisions_skip = nullptr;
  prometheus::Counter* reports = nullptr;
  prometheus::Counter* duplicate_reports = nullptr;
  prometheus::Counter* reported_batches = nullptr;
  prometheus::Counter* heavy_load_batches = nullptr;
  prometheus::Counter* pruned_events = nullptr;
  prometheus::Histogram* barrier_wait = nullptr;
  prometheus::Gauge* grad_norm = nullptr;
  prometheus::Gauge* grad_norm_ema = nullptr;
  std::vector<prometheus::Histogram*> batch_seconds;    // per rank
  std::vector<prometheus::Histogram*> compute_seconds;  // per rank
  MetricsRegistry* registry = nullptr;
};

class CoordinatorServiceImpl final : public v1::Coordinator::CallbackService {
 public:
  CoordinatorServiceImpl(std::shared_ptr<CoordinatorState> state,
                         const CoordinatorServerOptions& options,
                         Metrics* metrics)
      : owned_state_(std::move(state)),
        state_(owned_state_.get()),
        options_(options),
        metrics_(metrics) {}

  grpc::ServerUnaryReactor* Join(grpc::CallbackServerContext* ctx,
                                 const v1::JoinRequest* req,
                                 v1::JoinResponse* resp) override {
    // Every field is checked before the job's state is touched: a
    // malformed join (an empty message, a rank out of range) is refused
    // and changes nothing.
    if (absl::Status bad = ValidateJoinRequest(*req, options_.world_size);
        !bad.ok()) {
      return Done(ctx, bad);
    }
    absl::Status s = state_->Join(req->rank(), req->address(), req->host(),
                                  req->config_hash());
    if (absl::IsFailedPrecondition(s) &&
        req->config_hash() != state_->config_hash()) {
      s = RefuseOtherFlags(*req);
    }
    if (s.ok()) {
      {
        absl::MutexLock lock(&mu_);
        if (config_text_.empty()) config_text_ = req->config_text();
      }
      v1::ClusterSpec* spec = resp->mutable_spec();
      spec->set_world_size(options_.world_size);
      for (const auto& a : options_.memstore_addresses) {
        spec->add_memstore_addresses(a);
      }
      spec->set_ownership("hash");
      spec->set_policy(options_.policy);
      spec->set_config_hash(state_->config_hash());
      {
        absl::MutexLock lock(&mu_);
        spec->set_config_text(config_text_);
      }
      spec->set_heartbeat_period_seconds(options_.heartbeat_period_s);
    }
    UpdateGauges();
    return Done(ctx, s);
  }

  // A worker started with other flags than the job's first: the message
  // names each flag that differs, and the job fails at once, so the
  // workers already waiting stop now instead of at their timeout.
  absl::Status RefuseOtherFlags(const v1::JoinRequest& req) {
    std::string first;
    {
      absl::MutexLock lock(&mu_);
      first = config_text_;
    }
    const std::vector<std::string> diff =
        first.empty() || req.config_text().empty()
            ? std::vector<std::string>{}
            : runtime::RunConfigDifferences(first, req.config_text());
    const std::string what =
        diff.empty() ? absl::StrCat("run configuration ", req.config_hash(),
                                    ", the job's ", state_->config_hash())
                     : absl::StrJoin(diff, ", ");
    const std::string msg = absl::StrFormat(
        "worker %d was started with other flags than the job's first worker "
        "(%s): start every worker with the same flags and data",
        req.rank(), what);
    state_->Abort(absl::FailedPreconditionError(msg));
    return absl::FailedPreconditionError(msg);
  }

  grpc::ServerUnaryReactor* Heartbeat(grpc::CallbackServerContext* ctx,
                                      const v1::HeartbeatRequest* req,
                                      v1::JobStatus* resp) override {
    absl::Status s = state_->Heartbeat(req->rank());
    FillJobStatus(*state_, resp);
    // A failed job is reported in the body, not as an RPC error.
    if (!s.ok() && s.code() == absl::StatusCode::kNotFound) return Done(ctx, s);
    return Done(ctx, absl::OkStatus());
  }

  grpc::ServerUnaryReactor* Barrier(grpc::CallbackServerContext* ctx,
                                    const v1::BarrierRequest* req,
                                    v1::BarrierResponse*) override {
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    const double start = MonotonicSeconds();
    Metrics* m = metrics_;
    state_->ArriveAtBarrier(
        req->name(), req->rank(), [reactor, start, m](absl::Status s) {
          if (m->barrier_wait) {
            m->barrier_wait->Observe(MonotonicSeconds() - start);
          }
          reactor->Finish(ToGrpcStatus(s));
        });
    return reactor;
  }

  grpc::ServerUnaryReactor* Report(grpc::CallbackServerContext* ctx,
                                   const v1::BatchReport* req,
                                   v1::ReportResponse*) override {
    coordinator::BatchReport r;
    r.rank = req->rank();
    r.batch = req->batch();
    r.grad_norm = req->grad_norm();
    r.batch_seconds = req->batch_seconds();
    r.events = req->events();
    r.targets = req->targets();
    r.auxiliaries = req->auxiliaries();
    r.epoch_batch = req->epoch_batch();
    r.last_of_epoch = req->last_of_epoch();
    r.grad_norm_ema = req->grad_norm_ema();
    r.compute_seconds = req->compute_seconds();
    r.batches = req->batches() == 0 ? 1 : req->batches();  // unset: 1
    r.heavy_load_batches = req->heavy_load_batches();
    r.pruned = req->pruned();
    // The counters follow what this call did (each decision is taken by
    // exactly one Report call), never deltas of the state's totals: those
    // race between concurrent reports.
    CoordinatorState::ReportOutcome outcome;
    absl::Status s = state_->Report(r, &outcome);
    if (s.ok() && metrics_->reports != nullptr) {
      if (outcome.duplicate) {
        metrics_->duplicate_reports->Increment();
        return Done(ctx, s);
      }
      metrics_->reports->Increment();
      metrics_->reported_batches->Increment(static_cast<double>(r.batches));
      metrics_->heavy_load_batches->Increment(
          static_cast<double>(r.heavy_load_batches));
      metrics_->pruned_events->Increment(static_cast<double>(r.pruned));
      if (r.rank >= 0 &&
          r.rank < static_cast<int>(metrics_->batch_seconds.size())) {
        metrics_->batch_seconds[r.rank]->Observe(r.batch_seconds);
        // 0: the worker does not measure it.
        if (r.compute_seconds > 0) {
          metrics_->compute_seconds[r.rank]->Observe(r.compute_seconds);
        }
      }
      metrics_->grad_norm->Set(r.grad_norm);
      if (outcome.decided) {
        // The EMA the decision used (the workers' Eq. 6 EMA when they
        // report one, else the coordinator's own).
        metrics_->grad_norm_ema->Set(outcome.view.grad_norm_ema);
        (outcome.decision.sync ? metrics_->decisions_sync
                               : metrics_->decisions_skip)
            ->Increment();
      }
    }
    return Done(ctx, s);
  }

  grpc::ServerWriteReactor<v1::Decision>* WatchDecisions(
      grpc::CallbackServerContext*,
      const v1::WatchDecisionsRequest* req) override {
    // The first stream of a rank that has joined speaks for its worker;
    // later ones (another peer claiming the rank) only watch, so that
    // their breaking does not fail the job.
    const int rank = req->rank();
    bool owner = false;
    if (rank >= 0 && rank < options_.world_size) {
      const std::vector<coordinator::WorkerInfo> workers = state_->workers();
      absl::MutexLock lock(&mu_);
      if (streamed_.empty()) streamed_.assign(options_.world_size, false);
      owner = workers[rank].joined && !streamed_[rank];
      if (owner) streamed_[rank] = true;
    }
    std::function<void()> on_done;
    if (owner) {
      on_done = [this, rank] {
        absl::MutexLock lock(&mu_);
        streamed_[rank] = false;
      };
    }
    return new DecisionWriter(state_, rank, owner, std::move(on_done));
  }

  grpc::ServerUnaryReactor* ReportError(grpc::CallbackServerContext* ctx,
                                        const v1::ErrorReport* req,
                                        v1::ErrorResponse*) override {
    // Only a worker of the job (a rank that has joined) fails it.
    const int rank = req->rank();
    const std::vector<coordinator::WorkerInfo> workers = state_->workers();
    if (rank < 0 || rank >= static_cast<int>(workers.size()) ||
        !workers[rank].joined) {
      return Done(ctx, absl::NotFoundError(absl::StrCat(
                           "ReportError: rank ", rank,
                           " has not joined the job; the report is ignored")));
    }
    // A worker's error is often the echo of another one's death (a broken
    // all-reduce). Give the root cause a moment to be detected first, so
    // the job's error names the worker that really failed.
    std::thread([state = owned_state_, rank,
                 msg = req->message().substr(0, kMaxErrorBytes)] {
      std::this_thread::sleep_for(std::chrono::milliseconds(1500));
      state->ReportError(rank, msg);
    }).detach();
    return Done(ctx, absl::OkStatus());
  }

  grpc::ServerUnaryReactor* Finish(grpc::CallbackServerContext* ctx,
                                   const v1::FinishRequest* req,
                                   v1::JobStatus* resp) override {
    absl::Status s = state_->Finish(req->rank());
    FillJobStatus(*state_, resp);
    UpdateGauges();
    return Done(ctx,
                s.code() == absl::StatusCode::kNotFound ? s : absl::OkStatus());
  }

  grpc::ServerUnaryReactor* GetStatus(grpc::CallbackServerContext* ctx,
                                      const v1::StatusRequest*,
                                      v1::ClusterStatus* resp) override {
    FillJobStatus(*state_, resp->mutable_job());
    const double now = MonotonicSeconds();
    auto stats = state_->rank_stats();
    for (const auto& w : state_->workers()) {
      v1::WorkerStatus* ws = resp->add_workers();
      ws->set_rank(w.rank);
      ws->set_address(w.address);
      ws->set_host(w.host);
      ws->set_joined(w.joined);
      ws->set_finished(w.finished);
      ws->set_seconds_since_seen(w.joined ? now - w.last_seen : 0);
      ws->set_batches(stats[w.rank].batches);
    }
    resp->set_decisions_sync(state_->decisions_sync());
    resp->set_decisions_skip(state_->decisions_skip());
    resp->set_policy(options_.policy);
    return Done(ctx, absl::OkStatus());
  }

  grpc::ServerUnaryReactor* Rendezvous(grpc::CallbackServerContext* ctx,
                                       const v1::RendezvousRequest* req,
                                       v1::RendezvousResponse* resp) override {
    coordinator::KvRequest r;
    r.op = static_cast<coordinator::KvRequest::Op>(req->op());
    r.keys.assign(req->keys().begin(), req->keys().end());
    r.value = req->value();
    r.expected = req->expected();
    r.amount = req->amount();
    r.timeout_s = req->timeout_seconds();
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    const bool may_block = coordinator::KvStore::MayBlock(r);
    auto run = [kv = kv_, r = std::move(r), reactor, resp] {
      absl::StatusOr<coordinator::KvReply> reply = kv->Call(r);
      if (reply.ok()) {
        resp->set_value(reply->value);
        resp->set_number(reply->number);
        resp->set_flag(reply->flag);
      }
      reactor->Finish(ToGrpcStatus(reply.status()));
    };
    // Waits (GET, WAIT) must not hold one of gRPC's callback threads; the
    // rendezvous makes a handful of them per worker.
    if (may_block) {
      std::thread(std::move(run)).detach();
    } else {
      run();
    }
    return reactor;
  }

  // Ends the rendezvous waits (the job failed or the server stops).
  void CloseRendezvous(absl::Status why) { kv_->Close(std::move(why)); }

  void UpdateGauges() {
    if (metrics_->workers_alive) {
      metrics_->workers_alive->Set(state_->joined_count());
    }
  }

 private:
  grpc::ServerUnaryReactor* Done(grpc::CallbackServerContext* ctx,
                                 const absl::Status& s) {
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    reactor->Finish(ToGrpcStatus(s));
    return reactor;
  }

  std::shared_ptr<coordinator::KvStore> kv_ =
      std::make_shared<coordinator::KvStore>();    // outlives detached waits
  std::shared_ptr<CoordinatorState> owned_state_;  // outlives delayed reports
  CoordinatorState* state_;
  const CoordinatorServerOptions options_;
  Metrics* metrics_;
  absl::Mutex mu_;
  std::string config_text_ ABSL_GUARDED_BY(mu_);
  // Per rank: whether its worker's decision stream is open.
  std::vector<bool> streamed_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

class CoordinatorServer::Impl {
 public:
  CoordinatorServerOptions options;
  std::shared_ptr<CoordinatorState> state;
  Metrics metrics;
  std::unique_ptr<CoordinatorServiceImpl> service;
  std::unique_ptr<grpc::Server> server;
  int port = 0;
  // How ProbeMemstores reaches the shards (options.memstore_security).
  std::shared_ptr<grpc::ChannelCredentials> memstore_credentials;
  std::thread liveness, memstore_probe;
  std::atomic<bool> stop{false};

  // Fails the job when a memory-store shard that has answered a health
  // check stops answering for heartbeat_timeout_s (a frozen or vanished
  // shard: trainers waiting on it would otherwise wait for their deadline).
  void ProbeMemstores() {
    struct Shard {
      std::string address;
      std::unique_ptr<grpc::health::v1::Health::Stub> stub;
      double last_ok = -1;  // never answered yet
      bool warned = false;
    };
    const double started = MonotonicSeconds();
    std::vector<Shard> shards;
    for (const auto& a : options.memstore_addresses) {
      grpc::ChannelArguments args;
      args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
      shards.push_back(
          {a, grpc::health::v1::Health::NewStub(grpc::CreateCustomChannel(
                  NormalizeAddress(a), memstore_credentials, args))});
    }
    while (!stop.load() && state->job_status().ok() && !state->all_finished()) {
      for (size_t i = 0; i < shards.size(); ++i) {
        grpc::ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(2));
        grpc::health::v1::HealthCheckRequest req;
        grpc::health::v1::HealthCheckResponse resp;
        const grpc::Status s = shards[i].stub->Check(&ctx, req, &resp);
        const double now = MonotonicSeconds();
        if (s.ok() &&
            resp.status() == grpc::health::v1::HealthCheckResponse::SERVING) {
          shards[i].last_ok = now;
        } else if (shards[i].last_ok < 0 && options.join_timeout_s > 0 &&
                   state->first_join_time() >= 0 &&
                   now - state->first_join_time() > options.join_timeout_s) {
          // The workers are up and will need it: a shard that has never
          // answered by now is hung or not started (with a join timeout:
          // every process starts together).
          state->Abort(absl::UnavailableError(absl::StrFormat(
              "memory-store shard %d at %s has not answered a health check "
              "within %g s of the first worker joining (last: %s)",
              i, shards[i].address, options.join_timeout_s,
              s.ok() ? "NOT_SERVING" : s.error_message())));
          return;
        } else if (shards[i].last_ok < 0 && !shards[i].warned) {
          // A shard that never answered is not monitored (it may start
          // after the coordinator): say so when that is a setting to fix
          // (TLS), or once it has been silent for the heartbeat timeout.
          const absl::Status st = FromGrpcStatus(s);
          std::string w;
          if (IsTransportSecurityError(st)) {
            w = options.memstore_security.tls()
                    ? absl::StrCat(
                          "memory-store shard ", i, " at ", shards[i].address,
                          " refuses the coordinator's TLS health checks: ",
                          ExplainConnectionError(st, options.memstore_security)
                              .message())
                    : absl::StrCat(
                          "memory-store shard ", i, " at ", shards[i].address,
                          " closes the coordinator's plaintext health checks "
                          "(",
                          st.message(),
                          "): it serves TLS, and the coordinator needs "
                          "--memstore-tls-ca (the CA of the shards' "
                          "certificates; with --tls-cert/--tls-key and "
                          "--auth-token-file as its client certificate and "
                          "token)");
          } else if (now - started > options.heartbeat_timeout_s) {
            w = absl::StrFormat(
                "memory-store shard %d at %s has not answered a health check "
                "in %.0f s (last: %s)",
                i, shards[i].address, now - started,
                s.ok() ? "NOT_SERVING" : s.error_message());
          }
          if (!w.empty()) {
            shards[i].warned = true;
            Warn(absl::StrCat(w,
                              "; until it answers, the coordinator does not "
                              "notice it freeze or vanish"));
          }
        } else if (shards[i].last_ok >= 0 &&
                   now - shards[i].last_ok > options.heartbeat_timeout_s) {
          state->Abort(absl::UnavailableError(absl::StrFormat(
              "memory-store shard %d at %s has not answered health checks "
              "for %.0f s (last: %s)",
              i, shards[i].address, now - shards[i].last_ok,
              s.ok() ? "NOT_SERVING" : s.error_message())));
          return;
        }
      }
      for (int k = 0; k < 10 && !stop.load(); ++k) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    }
  }
  void Warn(const std::string& line) {
    if (options.warn) {
      options.warn(line);
    } else {
      std::fprintf(stderr, "coordinator: warning: %s\n", line.c_str());
      std::fflush(stderr);
    }
  }
  absl::Mutex mu;
  bool shut_down = false;
};

CoordinatorServer::CoordinatorServer(std::unique_ptr<Impl> impl)
    : impl_(std::move(impl)) {}

absl::StatusOr<std::unique_ptr<CoordinatorServer>> CoordinatorServer::Start(
    CoordinatorServerOptions options, MetricsRegistry* registry) {
  if (options.world_size < 1 ||
      options.world_size > coordinator::kMaxWorldSize) {
    return absl::InvalidArgumentError(
        absl::StrCat("--world-size must be in [1, ", coordinator::kMaxWorldSize,
                     "], got ", options.world_size));
  }
  auto spec = coordinator::ParsePolicySpec(options.policy);
  if (!spec.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--policy: ", spec.status().message()));
  }
  if (!(options.decision.tau_g > 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--tau-grad must be positive, got ", options.decision.tau_g));
  }
  auto credentials = MakeServerCredentials(options.security);
  if (!credentials.ok()) return credentials.status();
  auto memstore_credentials = MakeChannelCredentials(options.memstore_security);
  if (!memstore_credentials.ok()) return memstore_credentials.status();
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->memstore_credentials = *std::move(memstore_credentials);
  coordinator::CoordinatorOptions co;
  co.world_size = options.world_size;
  co.heartbeat_timeout_s = options.heartbeat_timeout_s;
  co.join_timeout_s = options.join_timeout_s;
  impl->state = std::make_shared<CoordinatorState>(
      co, coordinator::MakeDecisionPolicy(*spec, options.decision),
      [] { return MonotonicSeconds(); });
  if (registry != nullptr) {
    Metrics& m = impl->metrics;
    m.registry = registry;
    m.workers_alive = &registry->Gauge("mnemo_coordinator_workers_alive",
                                       "Workers joined and not finished");
    m.decisions_sync =
        &registry->Counter("mnemo_coordinator_decisions_total",
                           "Sync/skip decisions taken", {{"decision", "sync"}});
    m.decisions_skip =
        &registry->Counter("mnemo_coordinator_decisions_total",
                           "Sync/skip decisions taken", {{"decision", "skip"}});
    // The decision for boundary 0, taken at construction (no report can
    // have arrived yet): the counters then equal the state's totals.
    m.decisions_sync->Increment(
        static_cast<double>(impl->state->decisions_sync()));
    m.decisions_skip->Increment(
        static_cast<double>(impl->state->decisions_skip()));
    m.reports = &registry->Counter("mnemo_coordinator_reports_total",
                                   "Per-batch reports received");
    m.duplicate_reports = &registry->Counter(
        "mnemo_coordinator_duplicate_reports_total",
        "Per-batch reports ignored as repeats (retried calls, late reports)");
    m.reported_batches = &registry->Counter(
        "mnemo_coordinator_reported_batches_total",
        "Training batches the reports covered (a window report covers K)");
    m.heavy_load_batches = &registry->Counter(
        "mnemo_coordinator_heavy_load_batches_total",
        "Batches the workers ran in heavy-load mode (DepTGL Eq. 9), as "
        "reported");
    m.pruned_events = &registry->Counter(
        "mnemo_coordinator_pruned_events_total",
        "Auxiliary replay events the workers pruned under heavy load (DepTGL "
        "Eq. 10-11), as reported");
    m.barrier_wait = &registry->Histogram(
        "mnemo_coordinator_barrier_wait_seconds",
        "Time a worker waited at a barrier", {}, LatencyBucketsSeconds());
    m.grad_norm = &registry->Gauge("mnemo_coordinator_grad_norm",
                                   "Last reported gradient L2 norm");
    m.grad_norm_ema = &registry->Gauge(
        "mnemo_coordinator_grad_norm_ema",
        "Exponential moving average of the gradient norm the last decision "
        "used");
    for (int r = 0; r < options.world_size; ++r) {
      m.batch_seconds.push_back(&registry->Histogram(
          "mnemo_coordinator_batch_seconds", "Reported batch times per rank",
          {{"rank", std::to_string(r)}}, LatencyBucketsSeconds()));
      m.compute_seconds.push_back(&registry->Histogram(
          "mnemo_coordinator_compute_seconds",
          "Reported compute time of a batch per rank, waits excluded",
          {{"rank", std::to_string(r)}}, LatencyBucketsSeconds()));
    }
  }
  impl->service = std::make_unique<CoordinatorServiceImpl>(impl->state, options,
                                                           &impl->metrics);

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(NormalizeAddress(options.listen), *credentials,
                           &impl->port);
  builder.RegisterService(impl->service.get());
  // Workers send keepalive pings every 5 s (that is how they notice a
  // coordinator whose host vanished during a long barrier); the default
  // server policy would answer pings that frequent on a quiet connection
  // with GOAWAY "too_many_pings".
  builder.AddChannelArgument(
      GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 4000);
  // A port already in use is an error, not a second server sharing it
  // (gRPC sets SO_REUSEPORT by default: clients would be split between two
  // coordinators).
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  impl->server = builder.BuildAndStart();
  if (impl->server == nullptr || impl->port == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", options.listen));
  }
  if (auto* health = impl->server->GetHealthCheckService()) {
    health->SetServingStatus(v1::Coordinator::service_full_name(), true);
  }
  Impl* raw = impl.get();
  impl->liveness = std::thread([raw] {
    while (!raw->stop.load()) {
      // A failure reaches the workers through their waits and heartbeats.
      absl::Status job = raw->state->CheckLiveness();
      if (!job.ok()) raw->service->CloseRendezvous(job);
      raw->service->UpdateGauges();
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  });
  impl->memstore_probe = std::thread([raw] { raw->ProbeMemstores(); });
  return std::unique_ptr<CoordinatorServer>(
      new CoordinatorServer(std::move(impl)));
}

CoordinatorServer::~CoordinatorServer() { Shutdown(); }

int CoordinatorServer::port() const { return impl_->port; }
std::string CoordinatorServer::address() const {
  std::string host = NormalizeAddress(impl_->options.listen);
  host = host.substr(0, host.rfind(':'));
  return absl::StrCat(host, ":", impl_->port);
}
coordinator::CoordinatorState& CoordinatorServer::state() {
  return *impl_->state;
}

void CoordinatorServer::Shutdown(double grace_seconds) {
  {
    absl::MutexLock lock(&impl_->mu);
    if (impl_->shut_down) return;
    impl_->shut_down = true;
  }
  impl_->stop = true;
  if (impl_->liveness.joinable()) impl_->liveness.join();
  if (impl_->memstore_probe.joinable()) impl_->memstore_probe.join();
  // End barrier waits, decision streams and rendezvous waits so Shutdown
  // does not wait on them.
  impl_->state->Abort(
      absl::UnavailableError("the coordinator is shutting down"));
  impl_->service->CloseRendezvous(
      absl::UnavailableError("the coordinator is shutting down"));
  if (auto* health = impl_->server->GetHealthCheckService()) health->Shutdown();
  impl_->server->Shutdown(
      std::chrono::system_clock::now() +
      std::chrono::milliseconds(static_cast<int64_t>(grace_seconds * 1000)));
}

}  // namespace mnemo::services
