#include "services/coordinator_client.h"

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "mnemo/v1/coordinator.grpc.pb.h"
#include "services/grpc_util.h"
#include "util/proc.h"

namespace mnemo::services {
namespace {
void SetDeadline(grpc::ClientContext* ctx, double seconds) {
  ctx->set_deadline(
      std::chrono::system_clock::now() +
      std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000)));
}
}  // namespace

class CoordinatorClient::Impl {
 public:
  CoordinatorClientOptions options;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::Coordinator::Stub> stub;
  std::thread heartbeat, watcher;
  std::atomic<bool> stop{false};
  std::unique_ptr<grpc::ClientContext> watch_ctx;
  double heartbeat_period_s = 1;

  runtime::DecisionBoard decisions;
  absl::Mutex mu;
  absl::Status failure ABSL_GUARDED_BY(mu);
  // Long waits in flight (barriers): cancelled when the job fails or the
  // coordinator is lost (Fail).
  std::set<grpc::ClientContext*> waiting ABSL_GUARDED_BY(mu);

  void Fail(absl::Status s) {
    absl::MutexLock lock(&mu);
    if (failure.ok()) failure = s;
    for (grpc::ClientContext* ctx : waiting) ctx->TryCancel();
    decisions.End(std::move(s));
  }
  absl::Status failure_status() {
    absl::MutexLock lock(&mu);
    return failure;
  }

  void HeartbeatLoop() {
    while (!stop.load()) {
      grpc::ClientContext ctx;
      SetDeadline(&ctx, options.rpc_timeout_s);
      v1::HeartbeatRequest req;
      req.set_rank(options.rank);
      v1::JobStatus resp;
      grpc::Status s = stub->Heartbeat(&ctx, req, &resp);
      if (stop.load()) break;
      if (!s.ok()) {
        Fail(absl::UnavailableError(
            absl::StrCat("the coordinator at ", options.address,
                         " does not answer heartbeats: ", s.error_message())));
        return;
      }
      if (resp.code() != 0) {
        Fail(absl::Status(static_cast<absl::StatusCode>(resp.code()),
                          resp.message()));
        return;
      }
      for (int i = 0; i < 10 && !stop.load(); ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(
            static_cast<int64_t>(heartbeat_period_s * 100)));
      }
    }
  }

  void WatchLoop() {
    v1::WatchDecisionsRequest req;
    req.set_rank(options.rank);
    auto reader = stub->WatchDecisions(watch_ctx.get(), req);
    v1::Decision d;
    while (reader->Read(&d)) decisions.Put(d.boundary(), d.sync());
    grpc::Status s = reader->Finish();
    if (!stop.load()) {
      Fail(s.ok() ? absl::UnavailableError("the coordinator ended the job")
                  : FromGrpcStatus(s));
    }
  }
};

CoordinatorClient::CoordinatorClient(std::unique_ptr<Impl> impl)
    : impl_(std::move(impl)) {}

absl::StatusOr<std::unique_ptr<CoordinatorClient>> CoordinatorClient::Connect(
    const CoordinatorClientOptions& options, ClusterSpecInfo* spec) {
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 5000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5000);
  auto channel = MakeSecureChannel(options.address, options.security, args);
  if (!channel.ok()) return channel.status();
  impl->channel = *std::move(channel);
  impl->stub = v1::Coordinator::NewStub(impl->channel);
  v1::JoinRequest req;
  req.set_rank(options.rank);
  req.set_address(options.my_address);
  req.set_host(HostName());
  req.set_config_hash(options.config_hash);
  req.set_config_text(options.config_text);
  v1::JoinResponse resp;
  const double give_up = MonotonicSeconds() + options.connect_timeout_s;
  grpc::Status s;
  while (true) {
    grpc::ClientContext ctx;
    SetDeadline(&ctx, std::min(options.rpc_timeout_s,
                               std::max(0.1, give_up - MonotonicSeconds())));
    ctx.set_wait_for_ready(true);
    s = impl->stub->Join(&ctx, req, &resp);
    if (s.ok() ||
        (s.error_code() != grpc::StatusCode::UNAVAILABLE &&
         s.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED) ||
        MonotonicSeconds() >= give_up) {
      break;
    }
  }
  if (!s.ok()) {
    absl::Status st = FromGrpcStatus(s);
    std::string why;
    if (st.code() == absl::StatusCode::kUnavailable ||
        st.code() == absl::StatusCode::kDeadlineExceeded) {
      // Join waits for the connection (wait_for_ready), so a connection
      // that keeps failing ends in DEADLINE_EXCEEDED without saying why:
      // one call that does not wait gets the connection's last error.
      grpc::ClientContext probe;
      SetDeadline(&probe, 2);
      grpc::health::v1::HealthCheckRequest hreq;
      grpc::health::v1::HealthCheckResponse hresp;
      const absl::Status hs =
          FromGrpcStatus(grpc::health::v1::Health::NewStub(impl->channel)
                             ->Check(&probe, hreq, &hresp));
      if (IsTransportSecurityError(hs)) {
        why = absl::StrCat(
            "; the connection fails: ",
            ExplainConnectionError(hs, options.security).message());
      }
    }
    return absl::Status(
        st.code(),
        absl::StrCat("joining the coordinator at ", options.address,
                     " as rank ", options.rank, ": ", st.message(), why));
  }
  const v1::ClusterSpec& cs = resp.spec();
  spec->world_size = cs.world_size();
  spec->memstore_addresses.assign(cs.memstore_addresses().begin(),
                                  cs.memstore_addresses().end());
  spec->policy = cs.policy();
  spec->config_hash = cs.config_hash();
  spec->heartbeat_period_s =
      cs.heartbeat_period_seconds() > 0 ? cs.heartbeat_period_seconds() : 1;
  impl->heartbeat_period_s = spec->heartbeat_period_s;
  impl->watch_ctx = std::make_unique<grpc::ClientContext>();
  Impl* raw = impl.get();
  impl->heartbeat = std::thread([raw] { raw->HeartbeatLoop(); });
  impl->watcher = std::thread([raw] { raw->WatchLoop(); });
  return std::unique_ptr<CoordinatorClient>(
      new CoordinatorClient(std::move(impl)));
}

CoordinatorClient::~CoordinatorClient() {
  impl_->stop = true;
  impl_->watch_ctx->TryCancel();
  if (impl_->watcher.joinable()) impl_->watcher.join();
  if (impl_->heartbeat.joinable()) impl_->heartbeat.join();
}

absl::Status CoordinatorClient::Report(const coordinator::BatchReport& r) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx, impl_->options.rpc_timeout_s);
  v1::BatchReport req;
  req.set_rank(r.rank);
  req.set_batch(r.batch);
  req.set_grad_norm(r.grad_norm);
  req.set_batch_seconds(r.batch_seconds);
  req.set_events(r.events);
  req.set_targets(r.targets);
  req.set_auxiliaries(r.auxiliaries);
  req.set_epoch_batch(r.epoch_batch);
  req.set_last_of_epoch(r.last_of_epoch);
  req.set_grad_norm_ema(r.grad_norm_ema);
  req.set_compute_seconds(r.compute_seconds);
  req.set_batches(r.batches);
  req.set_heavy_load_batches(r.heavy_load_batches);
  req.set_pruned(r.pruned);
  v1::ReportResponse resp;
  grpc::Status s = impl_->stub->Report(&ctx, req, &resp);
  if (!s.ok()) {
    return absl::Status(
        FromGrpcStatus(s).code(),
        absl::StrCat("report to the coordinator: ", s.error_message()));
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> CoordinatorClient::WaitDecision(int64_t boundary) {
  return impl_->decisions.Wait(boundary, impl_->options.wait_timeout_s);
}

absl::Status CoordinatorClient::Barrier(const std::string& name) {
  return Barrier(name, impl_->options.wait_timeout_s);
}

absl::Status CoordinatorClient::Barrier(const std::string& name,
                                        double timeout_s) {
  grpc::ClientContext ctx;
  // timeout_s <= 0: no deadline. The call still ends if the coordinator is
  // lost: the heartbeat and decision-stream threads then Fail(), which
  // cancels every call registered in `waiting` (TryCancel before the call
  // has started cancels it as soon as it starts).
  if (timeout_s > 0) SetDeadline(&ctx, timeout_s);
  v1::BarrierRequest req;
  req.set_rank(impl_->options.rank);
  req.set_name(name);
  v1::BarrierResponse resp;
  {
    absl::MutexLock lock(&impl_->mu);
    if (!impl_->failure.ok()) return impl_->failure;
    impl_->waiting.insert(&ctx);
  }
  grpc::Status s = impl_->stub->Barrier(&ctx, req, &resp);
  {
    absl::MutexLock lock(&impl_->mu);
    impl_->waiting.erase(&ctx);
    if (!s.ok() && !impl_->failure.ok()) return impl_->failure;
  }
  if (!s.ok()) {
    return absl::Status(
        FromGrpcStatus(s).code(),
        absl::StrCat("barrier '", name, "': ", s.error_message()));
  }
  return absl::OkStatus();
}

void CoordinatorClient::ReportError(const std::string& message) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx, 3);
  v1::ErrorReport req;
  req.set_rank(impl_->options.rank);
  req.set_message(message);
  v1::ErrorResponse resp;
  (void)impl_->stub->ReportError(&ctx, req, &resp);
}

absl::Status CoordinatorClient::Finish() {
  grpc::ClientContext ctx;
  SetDeadline(&ctx, impl_->options.rpc_timeout_s);
  v1::FinishRequest req;
  req.set_rank(impl_->options.rank);
  v1::JobStatus resp;
  grpc::Status s = impl_->stub->Finish(&ctx, req, &resp);
  if (!s.ok()) return FromGrpcStatus(s);
  return absl::OkStatus();
}

absl::Status CoordinatorClient::job_status() { return impl_->failure_status(); }

absl::StatusOr<coordinator::KvReply> CoordinatorClient::Call(
    const coordinator::KvRequest& request) {
  v1::RendezvousRequest req;
  req.set_rank(impl_->options.rank);
  req.set_op(static_cast<v1::RendezvousRequest::Op>(request.op));
  for (const auto& k : request.keys) req.add_keys(k);
  req.set_value(request.value);
  req.set_expected(request.expected);
  req.set_amount(request.amount);
  req.set_timeout_seconds(request.timeout_s);
  grpc::ClientContext ctx;
  SetDeadline(&ctx, request.timeout_s + impl_->options.rpc_timeout_s);
  {
    absl::MutexLock lock(&impl_->mu);
    if (!impl_->failure.ok()) return impl_->failure;
    impl_->waiting.insert(&ctx);
  }
  v1::RendezvousResponse resp;
  grpc::Status s = impl_->stub->Rendezvous(&ctx, req, &resp);
  {
    absl::MutexLock lock(&impl_->mu);
    impl_->waiting.erase(&ctx);
    if (!s.ok() && !impl_->failure.ok()) return impl_->failure;
  }
  if (!s.ok()) {
    return absl::Status(FromGrpcStatus(s).code(),
                        absl::StrCat("rendezvous: ", s.error_message()));
  }
  coordinator::KvReply reply;
  reply.value = resp.value();
  reply.number = resp.number();
  reply.flag = resp.flag();
  return reply;
}

}  // namespace mnemo::services
