// The coordinator service over real gRPC on loopback: joining, refusal of a
// different configuration, barriers, decisions, failure propagation, health
// and metrics.
#include "services/coordinator_service.h"

#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <thread>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "mnemo/v1/coordinator.grpc.pb.h"
#include "services/coordinator_client.h"
#include "services/grpc_util.h"
#include "services/memstore_client.h"
#include "services/metrics.h"
#include "tests/fuzz/coordinator_driver.h"
#include "tests/unit/services/certificates.h"
#include "util/proc.h"
#include "util/status_matchers.h"

namespace mnemo::services {
namespace {

CoordinatorClientOptions ClientOptions(const std::string& address, int rank,
                                       const std::string& hash) {
  CoordinatorClientOptions o;
  o.address = address;
  o.rank = rank;
  o.config_hash = hash;
  o.config_text = "cfg " + hash;
  o.rpc_timeout_s = 5;
  o.connect_timeout_s = 5;
  o.wait_timeout_s = 10;
  return o;
}

TEST(CoordinatorServiceTest, JoinBarrierDecisionsAndMetrics) {
  MetricsRegistry metrics;
  CoordinatorServerOptions so;
  so.world_size = 2;
  so.memstore_addresses = {"127.0.0.1:1", "127.0.0.1:2"};
  auto server = CoordinatorServer::Start(so, &metrics);
  ASSERT_THAT(server, IsOk());
  const std::string addr = (*server)->address();
  auto health = CheckHealth(addr, 2.0);
  ASSERT_THAT(health, IsOk());
  EXPECT_TRUE(*health);

  ClusterSpecInfo spec0, spec1;
  auto c0 = CoordinatorClient::Connect(ClientOptions(addr, 0, "aaaa"), &spec0);
  ASSERT_THAT(c0, IsOk());
  EXPECT_EQ(spec0.world_size, 2);
  EXPECT_EQ(spec0.memstore_addresses.size(), 2u);
  EXPECT_EQ(spec0.policy, "vanilla");
  auto c1 = CoordinatorClient::Connect(ClientOptions(addr, 1, "aaaa"), &spec1);
  ASSERT_THAT(c1, IsOk());

  // Boundary 0 is decided up front; boundary 1 once both reported batch 0.
  EXPECT_THAT((*c0)->WaitDecision(0), IsOk());
  coordinator::BatchReport r;
  r.batch = 0;
  r.grad_norm = 2;
  r.rank = 0;
  ASSERT_THAT((*c0)->Report(r), IsOk());
  r.rank = 1;
  ASSERT_THAT((*c1)->Report(r), IsOk());
  auto d = (*c1)->WaitDecision(1);
  ASSERT_THAT(d, IsOk());
  EXPECT_TRUE(*d);

  absl::Status b0;
  std::thread t([&] { b0 = (*c0)->Barrier("x"); });
  EXPECT_THAT((*c1)->Barrier("x"), IsOk());
  t.join();
  EXPECT_THAT(b0, IsOk());

  const std::string text = metrics.TextExposition();
  EXPECT_THAT(text, ::testing::HasSubstr("mnemo_coordinator_workers_alive 2"));
  EXPECT_THAT(text, ::testing::HasSubstr("mnemo_coordinator_decisions_total"));
  EXPECT_THAT(text, ::testing::HasSubstr("mnemo_coordinator_batch_seconds"));

  // A reported error ends the job: waits end with it, naming the worker.
  (*c1)->ReportError("disk full");
  auto late = (*c0)->WaitDecision(5);
  EXPECT_THAT(late, StatusIs(absl::StatusCode::kAborted, "worker 1 failed"));
  EXPECT_THAT((*c0)->Barrier("y"),
              StatusIs(absl::StatusCode::kAborted, "disk full"));
  EXPECT_THAT((*server)->state().job_status(),
              StatusIs(absl::StatusCode::kAborted, "disk full"));
}

// A TCP relay on 127.0.0.1 in front of `upstream_port` that can freeze: it
// then stops forwarding but keeps every connection open, like a coordinator
// whose process hangs or whose host dropped off the network (no RST, no FIN).
class FreezableProxy {
 public:
  explicit FreezableProxy(int upstream_port) : upstream_port_(upstream_port) {
    listen_fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = 0;
    socklen_t len = sizeof(a);
    if (bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
        listen(listen_fd_, 16) != 0 ||
        getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      ADD_FAILURE() << "proxy cannot listen";
      return;
    }
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { Loop(); });
  }
  ~FreezableProxy() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    for (auto [a, b] : pairs_) {
      close(a);
      close(b);
    }
    close(listen_fd_);
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  void Freeze() { frozen_ = true; }

 private:
  void Loop() {
    char buf[1 << 16];
    while (!stop_.load()) {
      if (frozen_.load()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        continue;
      }
      std::vector<pollfd> fds = {{listen_fd_, POLLIN, 0}};
      for (auto [a, b] : pairs_) {
        fds.push_back({a, POLLIN, 0});
        fds.push_back({b, POLLIN, 0});
      }
      if (poll(fds.data(), fds.size(), 20) <= 0 || frozen_.load()) continue;
      if (fds[0].revents & POLLIN) {
        const int in = accept(listen_fd_, nullptr, nullptr);
        const int out = socket(AF_INET, SOCK_STREAM, 0);
        sockaddr_in up{};
        up.sin_family = AF_INET;
        up.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        up.sin_port = htons(upstream_port_);
        if (connect(out, reinterpret_cast<sockaddr*>(&up), sizeof(up)) != 0) {
          close(in);
          close(out);
        } else {
          pairs_.emplace_back(in, out);
        }
      }
      std::vector<bool> dead(pairs_.size(), false);
      for (size_t i = 1; i < fds.size(); ++i) {
        if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        const auto [a, b] = pairs_[(i - 1) / 2];
        const int from = fds[i].fd, to = from == a ? b : a;
        const ssize_t n = read(from, buf, sizeof(buf));
        for (ssize_t done = 0; n > 0 && done < n;) {
          const ssize_t w = write(to, buf + done, n - done);
          if (w <= 0) break;
          done += w;
        }
        if (n <= 0) dead[(i - 1) / 2] = true;
      }
      for (size_t p = dead.size(); p-- > 0;) {
        if (!dead[p]) continue;
        close(pairs_[p].first);
        close(pairs_[p].second);
        pairs_.erase(pairs_.begin() + p);
      }
    }
  }

  const int upstream_port_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false}, frozen_{false};
  std::thread thread_;
  std::vector<std::pair<int, int>> pairs_;  // only the loop thread
};

double CounterValue(MetricsRegistry& m, const std::string& name,
                    const MetricLabels& labels = {}) {
  return m.Counter(name, "", labels).Value();
}

// Ranks report concurrently (several threads per rank, nobody waiting for
// decisions): every decision is counted exactly once. Before, each Report
// call added the change of the state's totals around its own call, so
// concurrent calls counted the same decision several times.
// The trainers' rendezvous runs through the coordinator's gRPC service with
// c10d::Store's semantics: waits end when the key is set, or name the
// missing keys at their timeout.

// A worker with another configuration is refused, naming both hashes (the
// flags themselves where the workers sent their configuration text), and
// the job fails at once: the worker that joined first is not left waiting.
TEST(CoordinatorServiceTest, AWorkerWithOtherFlagsFailsTheJob) {
  MetricsRegistry metrics;
  CoordinatorServerOptions so;
  so.world_size = 2;
  so.memstore_addresses = {"127.0.0.1:1"};
  auto server = CoordinatorServer::Start(so, &metrics);
  ASSERT_THAT(server, IsOk());
  const std::string addr = (*server)->address();
  ClusterSpecInfo spec0, spec_bad, spec1;
  auto c0 = CoordinatorClient::Connect(ClientOptions(addr, 0, "aaaa"), &spec0);
  ASSERT_THAT(c0, IsOk());
  auto bad =
      CoordinatorClient::Connect(ClientOptions(addr, 1, "bbbb"), &spec_bad);
  EXPECT_THAT(bad, StatusIs(absl::StatusCode::kFailedPrecondition,
                            "run configuration bbbb, the job's aaaa"));
  auto c1 = CoordinatorClient::Connect(ClientOptions(addr, 1, "aaaa"), &spec1);
  EXPECT_THAT(c1, StatusIs(absl::StatusCode::kAborted,
                           "worker 1 was started with other flags"));
}
// Issue 53 item 7: requests that are not from a worker of the job (an
// empty Join, as `curl` with an empty gRPC frame sends; a rank out of
// range; a second join for a live rank, whatever its flags; an error
// reported by a rank that never joined) are refused, naming what is wrong,
// and the running job goes on: both workers still pass a barrier.
TEST(CoordinatorServiceTest,
     MalformedAndDuplicateJoinsLeaveTheRunningJobAlone) {
  CoordinatorServerOptions so;
  so.world_size = 2;
  so.memstore_addresses = {"127.0.0.1:1"};
  auto server = CoordinatorServer::Start(so);
  ASSERT_THAT(server, IsOk());
  const std::string addr = (*server)->address();
  ClusterSpecInfo spec0, spec1;
  auto c0 = CoordinatorClient::Connect(ClientOptions(addr, 0, "aaaa"), &spec0);
  ASSERT_THAT(c0, IsOk());
  auto c1 = CoordinatorClient::Connect(ClientOptions(addr, 1, "aaaa"), &spec1);
  ASSERT_THAT(c1, IsOk());

  auto stub = v1::Coordinator::NewStub(
      grpc::CreateChannel(addr, grpc::InsecureChannelCredentials()));
  auto join = [&](const v1::JoinRequest& req) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(5));
    v1::JoinResponse resp;
    return FromGrpcStatus(stub->Join(&ctx, req, &resp));
  };
  v1::JoinRequest req;
  EXPECT_THAT(join(req), StatusIs(absl::StatusCode::kInvalidArgument,
                                  "worker 0 sent no run configuration hash"));
  req.set_rank(99);
  req.set_config_hash("aaaa");
  EXPECT_THAT(join(req), StatusIs(absl::StatusCode::kInvalidArgument,
                                  "rank 99 is out of range"));
  req.set_rank(1);
  req.set_config_hash(std::string("a\0b", 3));
  EXPECT_THAT(join(req),
              StatusIs(absl::StatusCode::kInvalidArgument, "config_hash"));
  req.set_config_hash("aaaa");
  req.set_host(std::string(5000, 'h'));
  EXPECT_THAT(join(req), StatusIs(absl::StatusCode::kInvalidArgument, "host"));
  req.clear_host();
  for (const char* hash : {"aaaa", "bbbb"}) {
    req.set_config_hash(hash);
    req.set_address("intruder:1");
    EXPECT_THAT(join(req), StatusIs(absl::StatusCode::kAlreadyExists,
                                    "rank 1 has already joined"))
        << hash;
  }
  {
    grpc::ClientContext ctx;
    v1::ErrorReport report;
    report.set_rank(7);
    report.set_message("not a worker");
    v1::ErrorResponse resp;
    EXPECT_THAT(FromGrpcStatus(stub->ReportError(&ctx, report, &resp)),
                StatusIs(absl::StatusCode::kNotFound, "rank 7 has not joined"));
  }

  EXPECT_THAT((*server)->state().job_status(), IsOk());
  for (const auto& w : (*server)->state().workers()) {
    EXPECT_NE(w.address, "intruder:1") << "rank " << w.rank;
  }
  absl::Status b0;
  std::thread t([&] { b0 = (*c0)->Barrier("after"); });
  EXPECT_THAT((*c1)->Barrier("after"), IsOk());
  t.join();
  EXPECT_THAT(b0, IsOk());
  std::this_thread::sleep_for(std::chrono::seconds(2));  // ReportError's delay
  EXPECT_THAT((*server)->state().job_status(), IsOk());
}

// The fuzz target's seeds (tests/fuzz/coordinator_fuzz.cc) in the normal
// build: each keeps the driver's invariants against a running job (the
// empty Join among them failed it).
TEST(CoordinatorFuzzRegressionTest, SeedsKeepTheJobsInvariants) {
  for (const auto& [name, input] : fuzz::CoordinatorSeeds()) {
    SCOPED_TRACE(name);
    std::string error;
    auto job = fuzz::CoordinatorJob::Start(&error);
    ASSERT_NE(job, nullptr) << error;
    EXPECT_EQ(job->Drive(input), "");
  }
}

TEST(CoordinatorServiceTest, RendezvousKeyValueStore) {
  CoordinatorServerOptions so;
  so.world_size = 2;
  auto server = CoordinatorServer::Start(so);
  ASSERT_THAT(server, IsOk());
  const std::string addr = (*server)->address();
  ClusterSpecInfo spec;
  auto c0 = CoordinatorClient::Connect(ClientOptions(addr, 0, "h"), &spec);
  auto c1 = CoordinatorClient::Connect(ClientOptions(addr, 1, "h"), &spec);
  ASSERT_THAT(c0, IsOk());
  ASSERT_THAT(c1, IsOk());
  using coordinator::KvRequest;
  auto call = [](CoordinatorClient* c, KvRequest::Op op,
                 std::vector<std::string> keys, std::string value = "",
                 std::string expected = "", int64_t amount = 0,
                 double timeout = 5) {
    KvRequest r;
    r.op = op;
    r.keys = std::move(keys);
    r.value = std::move(value);
    r.expected = std::move(expected);
    r.amount = amount;
    r.timeout_s = timeout;
    return c->Call(r);
  };
  // A GET waits for a SET from another worker.
  std::thread setter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    EXPECT_THAT(call(c1->get(), KvRequest::kSet, {"addr/1"},
                     std::string("host\0:1", 7)),
                IsOk());
  });
  auto got = call(c0->get(), KvRequest::kGet, {"addr/1"});
  setter.join();
  ASSERT_THAT(got, IsOk());
  EXPECT_EQ(got->value, std::string("host\0:1", 7));
  EXPECT_THAT(call(c0->get(), KvRequest::kGet, {"nobody"}, "", "", 0, 0.2),
              StatusIs(absl::StatusCode::kDeadlineExceeded, "nobody"));
  EXPECT_EQ(call(c0->get(), KvRequest::kAdd, {"n"}, "", "", 2)->number, 2);
  EXPECT_EQ(call(c1->get(), KvRequest::kAdd, {"n"}, "", "", 3)->number, 5);
  EXPECT_THAT(call(c0->get(), KvRequest::kAdd, {"addr/1"}),
              StatusIs(absl::StatusCode::kInvalidArgument, "not a number"));
  EXPECT_EQ(call(c0->get(), KvRequest::kCompareSet, {"cs"}, "a", "")->value,
            "a");
  EXPECT_EQ(call(c0->get(), KvRequest::kCompareSet, {"cs"}, "b", "x")->value,
            "a");
  EXPECT_EQ(call(c0->get(), KvRequest::kCompareSet, {"cs"}, "b", "a")->value,
            "b");
  EXPECT_TRUE(call(c0->get(), KvRequest::kCheck, {"n", "cs"})->flag);
  EXPECT_FALSE(call(c0->get(), KvRequest::kCheck, {"n", "nobody"})->flag);
  EXPECT_EQ(call(c0->get(), KvRequest::kNumKeys, {})->number, 3);
  EXPECT_TRUE(call(c0->get(), KvRequest::kDelete, {"cs"})->flag);
  EXPECT_FALSE(call(c0->get(), KvRequest::kDelete, {"cs"})->flag);
  EXPECT_THAT(call(c0->get(), KvRequest::kWait, {"n", "addr/1"}), IsOk());
  EXPECT_THAT(call(c0->get(), KvRequest::kSet, {"a", "b"}),
              StatusIs(absl::StatusCode::kInvalidArgument, "one key"));
  // A wait in progress ends when the coordinator shuts down.
  std::thread stopper([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    (*server)->Shutdown();
  });
  auto waited = call(c1->get(), KvRequest::kWait, {"never"}, "", "", 0, 30);
  stopper.join();
  EXPECT_FALSE(waited.ok());
}

TEST(CoordinatorServiceTest, ConcurrentReportsCountEachDecisionOnce) {
  MetricsRegistry metrics;
  CoordinatorServerOptions so;
  constexpr int kWorld = 4, kThreadsPerRank = 3, kBatches = 150;
  so.world_size = kWorld;
  auto server = CoordinatorServer::Start(so, &metrics);
  ASSERT_THAT(server, IsOk());
  std::vector<std::unique_ptr<CoordinatorClient>> clients;
  for (int r = 0; r < kWorld; ++r) {
    ClusterSpecInfo spec;
    auto c = CoordinatorClient::Connect(
        ClientOptions((*server)->address(), r, "aaaa"), &spec);
    ASSERT_THAT(c, IsOk());
    clients.push_back(std::move(*c));
  }
  std::vector<std::thread> threads;
  for (int r = 0; r < kWorld; ++r) {
    for (int t = 0; t < kThreadsPerRank; ++t) {
      threads.emplace_back([&, r, t] {
        for (int64_t b = t; b < kBatches; b += kThreadsPerRank) {
          coordinator::BatchReport rep;
          rep.rank = r;
          rep.batch = b;
          rep.grad_norm = 1;
          EXPECT_THAT(clients[r]->Report(rep), IsOk());
        }
      });
    }
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ((*server)->state().decisions_sync(), kBatches + 1);
  EXPECT_EQ(CounterValue(metrics, "mnemo_coordinator_decisions_total",
                         {{"decision", "sync"}}),
            kBatches + 1);  // boundary 0 included, like GetStatus
  EXPECT_EQ(CounterValue(metrics, "mnemo_coordinator_decisions_total",
                         {{"decision", "skip"}}),
            0);
  EXPECT_EQ(CounterValue(metrics, "mnemo_coordinator_reports_total"),
            kWorld * kBatches);
}

// A retried Report (the first call's answer was lost) does not count again.
TEST(CoordinatorServiceTest, RetriedReportsAreIgnored) {
  MetricsRegistry metrics;
  CoordinatorServerOptions so;
  so.world_size = 2;
  auto server = CoordinatorServer::Start(so, &metrics);
  ASSERT_THAT(server, IsOk());
  ClusterSpecInfo spec;
  auto c0 = CoordinatorClient::Connect(
      ClientOptions((*server)->address(), 0, "aaaa"), &spec);
  ASSERT_THAT(c0, IsOk());
  coordinator::BatchReport rep;
  rep.rank = 0;
  rep.batch = 0;
  ASSERT_THAT((*c0)->Report(rep), IsOk());
  ASSERT_THAT((*c0)->Report(rep), IsOk());
  EXPECT_EQ((*server)->state().decisions_sync(), 1);  // boundary 0 only
  EXPECT_EQ(CounterValue(metrics, "mnemo_coordinator_reports_total"), 1);
  EXPECT_EQ(CounterValue(metrics, "mnemo_coordinator_duplicate_reports_total"),
            1);
}

coordinator::BatchReport WindowReport(int rank, int64_t batch,
                                      int64_t epoch_batch, bool last_of_epoch,
                                      double grad_norm) {
  coordinator::BatchReport r;
  r.rank = rank;
  r.batch = batch;
  r.epoch_batch = epoch_batch;
  r.last_of_epoch = last_of_epoch;
  r.grad_norm = grad_norm;
  r.grad_norm_ema = 1.0;
  r.batch_seconds = 0.5;
  r.compute_seconds = 0.25;
  r.batches = 4;
  r.heavy_load_batches = 1;
  r.pruned = 5;
  return r;
}

// A deptgl coordinator (gradient-ema, tau_g 1.6) over real gRPC, with
// window reports (K = 4): the new report fields travel and reach the
// policy. Stable gradients skip; a spike syncs; an epoch's first boundary
// syncs.
TEST(CoordinatorServiceTest, GradientEmaCoordinatorDecidesFromWindowReports) {
  MetricsRegistry metrics;
  CoordinatorServerOptions so;
  so.world_size = 2;
  so.policy = "deptgl";
  auto server = CoordinatorServer::Start(so, &metrics);
  ASSERT_THAT(server, IsOk());
  EXPECT_EQ((*server)->state().policy_name(), "gradient-ema");
  std::vector<std::unique_ptr<CoordinatorClient>> c;
  for (int r = 0; r < 2; ++r) {
    ClusterSpecInfo spec;
    auto client = CoordinatorClient::Connect(
        ClientOptions((*server)->address(), r, "aaaa"), &spec);
    ASSERT_THAT(client, IsOk());
    EXPECT_EQ(spec.policy, "deptgl");
    c.push_back(std::move(*client));
  }
  // Epoch of 12 batches: windows end at 3, 7, 11.
  for (int r = 0; r < 2; ++r) {
    ASSERT_THAT(c[r]->Report(WindowReport(r, 3, 3, false, 1.0)), IsOk());
  }
  auto d = c[0]->WaitDecision(4);
  ASSERT_THAT(d, IsOk());
  EXPECT_FALSE(*d) << "stable gradient at r = 4: skip";
  for (int r = 0; r < 2; ++r) {
    ASSERT_THAT(c[r]->Report(WindowReport(r, 7, 7, false, 2.0)), IsOk());
  }
  d = c[1]->WaitDecision(8);
  ASSERT_THAT(d, IsOk());
  EXPECT_TRUE(*d) << "2.0 >= 1.6 x 1.0: sync";
  for (int r = 0; r < 2; ++r) {
    ASSERT_THAT(c[r]->Report(WindowReport(r, 11, 11, true, 1.0)), IsOk());
  }
  d = c[0]->WaitDecision(12);
  ASSERT_THAT(d, IsOk());
  EXPECT_TRUE(*d) << "the next epoch's first boundary: sync";

  auto& state = (*server)->state();
  EXPECT_EQ(state.decisions_skip(), 1);
  EXPECT_EQ(state.decisions_sync(), 3);  // boundaries 0, 8, 12
  const auto stats = state.rank_stats();
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(stats[r].reports, 3);
    EXPECT_EQ(stats[r].batches, 12);
    EXPECT_EQ(stats[r].heavy_load_batches, 3);
    EXPECT_EQ(stats[r].pruned, 15);
    EXPECT_DOUBLE_EQ(stats[r].last_compute_seconds, 0.25);
  }
  EXPECT_EQ(CounterValue(metrics, "mnemo_coordinator_reported_batches_total"),
            24);
  EXPECT_EQ(CounterValue(metrics, "mnemo_coordinator_heavy_load_batches_total"),
            6);
  EXPECT_EQ(CounterValue(metrics, "mnemo_coordinator_pruned_events_total"), 30);
  EXPECT_EQ(CounterValue(metrics, "mnemo_coordinator_decisions_total",
                         {{"decision", "skip"}}),
            1);
  const std::string text = metrics.TextExposition();
  EXPECT_THAT(text,
              ::testing::HasSubstr(
                  "mnemo_coordinator_compute_seconds_count{rank=\"1\"} 3"));
  EXPECT_THAT(text, ::testing::HasSubstr("mnemo_coordinator_grad_norm_ema 1"));

  // A malformed window report is refused over the wire too.
  coordinator::BatchReport bad = WindowReport(0, 15, 3, false, 1.0);
  bad.heavy_load_batches = 9;
  EXPECT_THAT(c[0]->Report(bad),
              StatusIs(absl::StatusCode::kInvalidArgument, "heavy-load"));
}

// A report without `batches` (an older client) covers one batch.
TEST(CoordinatorServiceTest, UnsetBatchesMeansOne) {
  CoordinatorServerOptions so;
  so.world_size = 1;
  auto server = CoordinatorServer::Start(so);
  ASSERT_THAT(server, IsOk());
  auto stub = v1::Coordinator::NewStub(grpc::CreateChannel(
      (*server)->address(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  v1::BatchReport req;
  req.set_rank(0);
  req.set_batch(5);
  v1::ReportResponse resp;
  ASSERT_TRUE(stub->Report(&ctx, req, &resp).ok());
  EXPECT_EQ((*server)->state().rank_stats()[0].batches, 1);
  EXPECT_EQ((*server)->state().decisions_sync(), 2);  // boundaries 0 and 6
}

TEST(CoordinatorServiceTest, RefusesUnknownPoliciesAndBadTau) {
  CoordinatorServerOptions so;
  so.policy = "deptgl:sync";
  EXPECT_THAT(CoordinatorServer::Start(so),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "vanilla, full-cache, deptgl, deptgl:replay"));
  so.policy = "deptgl:replay+sync";
  so.decision.tau_g = 0;
  EXPECT_THAT(CoordinatorServer::Start(so),
              StatusIs(absl::StatusCode::kInvalidArgument, "--tau-grad"));
  so.decision.tau_g = 1.2;
  auto server = CoordinatorServer::Start(so);
  ASSERT_THAT(server, IsOk());
  EXPECT_EQ((*server)->state().policy_name(), "gradient-ema");
}

// Rank 0 evaluates for longer than the clients' wait timeout while rank 1
// waits at Barrier(name, 0): the wait outlasts it (no shorter gRPC deadline).
TEST(CoordinatorServiceTest, UnboundedBarrierOutlastsTheWaitTimeout) {
  CoordinatorServerOptions so;
  so.world_size = 2;
  auto server = CoordinatorServer::Start(so);
  ASSERT_THAT(server, IsOk());
  std::vector<std::unique_ptr<CoordinatorClient>> c;
  for (int r = 0; r < 2; ++r) {
    ClusterSpecInfo spec;
    auto o = ClientOptions((*server)->address(), r, "aaaa");
    o.wait_timeout_s = 0.5;
    auto client = CoordinatorClient::Connect(o, &spec);
    ASSERT_THAT(client, IsOk());
    c.push_back(std::move(*client));
  }
  // The one-argument form keeps the client's wait timeout.
  EXPECT_THAT(c[0]->Barrier("bounded"),
              StatusIs(absl::StatusCode::kDeadlineExceeded, "bounded"));
  absl::Status waited;
  std::thread waiter([&] { waited = c[1]->Barrier("evaluated-0", 0); });
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  EXPECT_THAT(c[0]->Barrier("evaluated-0", 0), IsOk());
  waiter.join();
  EXPECT_THAT(waited, IsOk());
}

// The coordinator shuts down while a worker waits at an unbounded barrier:
// the wait ends with an error within seconds.
TEST(CoordinatorServiceTest, CoordinatorShutdownEndsAnUnboundedBarrier) {
  CoordinatorServerOptions so;
  so.world_size = 2;
  auto server = CoordinatorServer::Start(so);
  ASSERT_THAT(server, IsOk());
  ClusterSpecInfo spec;
  auto c0 = CoordinatorClient::Connect(
      ClientOptions((*server)->address(), 0, "aaaa"), &spec);
  ASSERT_THAT(c0, IsOk());
  absl::Status waited;
  double ended_at = 0;
  std::thread waiter([&] {
    waited = (*c0)->Barrier("evaluated-0", 0);
    ended_at = MonotonicSeconds();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const double t0 = MonotonicSeconds();
  (*server)->Shutdown();
  waiter.join();
  EXPECT_THAT(waited, StatusIs(absl::StatusCode::kUnavailable, "shutting"));
  EXPECT_LT(ended_at - t0, 5);
}

// The coordinator hangs or its host vanishes (connections stay open, nothing
// answers) while a worker waits at an unbounded barrier: the client's
// heartbeat goes unanswered, and it cancels the barrier call.
TEST(CoordinatorServiceTest, LostCoordinatorEndsAnUnboundedBarrier) {
  CoordinatorServerOptions so;
  so.world_size = 2;
  so.heartbeat_period_s = 0.2;
  auto server = CoordinatorServer::Start(so);
  ASSERT_THAT(server, IsOk());
  FreezableProxy proxy((*server)->port());
  ClusterSpecInfo spec;
  auto o = ClientOptions(proxy.address(), 0, "aaaa");
  o.rpc_timeout_s = 1;
  auto c0 = CoordinatorClient::Connect(o, &spec);
  ASSERT_THAT(c0, IsOk());
  absl::Status waited;
  double ended_at = 0;
  std::thread waiter([&] {
    waited = (*c0)->Barrier("evaluated-0", 0);
    ended_at = MonotonicSeconds();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const double t0 = MonotonicSeconds();
  proxy.Freeze();
  waiter.join();
  EXPECT_THAT(waited, StatusIs(absl::StatusCode::kUnavailable,
                               "does not answer heartbeats"));
  EXPECT_LT(ended_at - t0, 5);
  EXPECT_THAT((*c0)->job_status(), StatusIs(absl::StatusCode::kUnavailable,
                                            "does not answer heartbeats"));
  c0->reset();
  (*server)->Shutdown(0.5);
}

// With a join timeout (a launched job, where every process starts
// together): once a worker has joined, the others must join and every
// memory-store shard answer a health check in time, or the job fails
// naming them (a shard or worker hung before it was first seen).
TEST(CoordinatorServiceTest, JoinTimeoutNamesWorkersAndShardsNeverSeen) {
  FreezableProxy silent(/*upstream_port=*/1);  // accepts nothing, says nothing
  silent.Freeze();
  for (const bool shard_case : {false, true}) {
    CoordinatorServerOptions so;
    so.world_size = shard_case ? 1 : 2;
    so.memstore_addresses = {shard_case ? silent.address() : ""};
    if (!shard_case) so.memstore_addresses.clear();
    so.join_timeout_s = 1;
    so.heartbeat_timeout_s = 60;
    so.warn = [](const std::string&) {};
    auto server = CoordinatorServer::Start(so);
    ASSERT_THAT(server, IsOk());
    ClusterSpecInfo spec;
    auto c0 = CoordinatorClient::Connect(
        ClientOptions((*server)->address(), 0, "aaaa"), &spec);
    ASSERT_THAT(c0, IsOk());
    const double t0 = MonotonicSeconds();
    while (MonotonicSeconds() - t0 < 10 &&
           (*server)->state().job_status().ok()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    EXPECT_LT(MonotonicSeconds() - t0, 6);
    EXPECT_THAT(
        (*server)->state().job_status(),
        StatusIs(absl::StatusCode::kUnavailable,
                 shard_case ? "memory-store shard 0 at " + silent.address() +
                                  " has not answered a health check "
                                  "within 1 s of the first worker"
                            : "worker 1 did not join within 1 s"));
    c0->reset();
    (*server)->Shutdown(0.5);
  }
}

// Decision streams open and break while reports take decisions: each
// stream's reactor unsubscribes and deletes itself in OnDone while a
// decision may be on its way to it (AddressSanitizer: heap-use-after-free
// before CoordinatorState::Unsubscribe waited for deliveries in flight).
TEST(CoordinatorServiceTest, DecisionStreamsComeAndGoWhileDecisionsAreTaken) {
  CoordinatorServerOptions so;
  so.world_size = 1;
  auto server = CoordinatorServer::Start(so);
  ASSERT_THAT(server, IsOk());
  ClusterSpecInfo spec;
  auto c0 = CoordinatorClient::Connect(
      ClientOptions((*server)->address(), 0, "aaaa"), &spec);
  ASSERT_THAT(c0, IsOk());
  std::atomic<bool> stop{false};
  std::thread reporter([&] {
    coordinator::BatchReport rep;
    for (rep.batch = 0; !stop.load() && rep.batch < 5000; ++rep.batch) {
      ASSERT_THAT((*c0)->Report(rep), IsOk());
    }
  });
  auto channel = grpc::CreateChannel((*server)->address(),
                                     grpc::InsecureChannelCredentials());
  auto stub = v1::Coordinator::NewStub(channel);
  std::vector<std::thread> watchers;
  for (int t = 0; t < 3; ++t) {
    watchers.emplace_back([&] {
      for (int i = 0; i < 60; ++i) {
        grpc::ClientContext ctx;
        v1::WatchDecisionsRequest req;
        req.set_rank(7);  // not a member: its stream breaking fails nothing
        auto reader = stub->WatchDecisions(&ctx, req);
        v1::Decision d;
        EXPECT_TRUE(reader->Read(&d));
        ctx.TryCancel();
        while (reader->Read(&d)) {
        }
        (void)reader->Finish();
      }
    });
  }
  for (auto& t : watchers) t.join();
  stop = true;
  reporter.join();
  EXPECT_THAT((*server)->state().job_status(), IsOk());
}

TEST(CoordinatorServiceTest, UnreachableCoordinatorFailsWithinTheDeadline) {
  ClusterSpecInfo spec;
  auto o = ClientOptions("127.0.0.1:" + std::to_string(FreeTcpPort()), 0, "h");
  o.connect_timeout_s = 1;
  o.rpc_timeout_s = 0.5;
  auto c = CoordinatorClient::Connect(o, &spec);
  EXPECT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), ::testing::HasSubstr("rank 0"));
}

// A gRPC server on 127.0.0.1 with only the health service, SERVING, over
// `security`: what the coordinator's probes of a memory store see.
struct HealthOnlyServer {
  explicit HealthOnlyServer(const ServerSecurity& security) {
    auto creds = MakeServerCredentials(security);
    if (!creds.ok()) return;
    grpc::EnableDefaultHealthCheckService(true);
    grpc::ServerBuilder b;
    b.AddListeningPort("127.0.0.1:0", *creds, &port);
    server = b.BuildAndStart();
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(port); }
  int port = 0;
  std::unique_ptr<grpc::Server> server;
};

// Collects the coordinator's warnings.
struct Warnings {
  std::function<void(const std::string&)> sink() {
    return [this](const std::string& w) {
      absl::MutexLock l(&mu);
      lines.push_back(w);
    };
  }
  // Waits up to `seconds` for a warning containing `text`.
  bool WaitFor(const std::string& text, double seconds) {
    for (int i = 0; i <= seconds * 20; ++i) {
      {
        absl::MutexLock l(&mu);
        for (const auto& w : lines) {
          if (w.find(text) != std::string::npos) return true;
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }
  std::vector<std::string> all() {
    absl::MutexLock l(&mu);
    return lines;
  }
  absl::Mutex mu;
  std::vector<std::string> lines;
};

// A coordinator that probes TLS memory stores in plaintext (no
// --memstore-tls-ca) warns, naming the shard and the flag: its probes never
// succeed, so the shards are not monitored. It was silent.
TEST(CoordinatorServiceTest, WarnsWhenTlsShardsAreProbedInPlaintext) {
  test_support::Certificates pki(
      std::filesystem::path(::testing::TempDir()) /
      ("mnemo_coord_tls_" + std::to_string(getpid())));
  ASSERT_TRUE(pki.ok()) << "openssl could not make the certificates";
  ServerSecurity tls;
  tls.cert_file = pki("server.pem");
  tls.key_file = pki("server.key");
  HealthOnlyServer shard(tls);
  ASSERT_TRUE(shard.server) << "the TLS health server did not start";
  Warnings warnings;
  CoordinatorServerOptions so;
  so.memstore_addresses = {shard.address()};
  so.heartbeat_timeout_s = 60;  // the TLS warning does not wait for it
  so.warn = warnings.sink();
  auto server = CoordinatorServer::Start(so);
  ASSERT_THAT(server, IsOk());
  EXPECT_TRUE(warnings.WaitFor("--memstore-tls-ca", 20))
      << ::testing::PrintToString(warnings.all());
  EXPECT_TRUE(
      warnings.WaitFor("memory-store shard 0 at " + shard.address(), 0));
  (*server)->Shutdown();

  // With the CA, the probes succeed: no warning.
  Warnings none;
  so.memstore_security.ca_file = pki("ca.pem");
  so.warn = none.sink();
  auto good = CoordinatorServer::Start(so);
  ASSERT_THAT(good, IsOk());
  std::this_thread::sleep_for(std::chrono::seconds(3));
  EXPECT_THAT(none.all(), ::testing::IsEmpty());
  (*good)->Shutdown();
  std::filesystem::remove_all(std::filesystem::path(::testing::TempDir()) /
                              ("mnemo_coord_tls_" + std::to_string(getpid())));
}

// A shard that never answers (not started, or gone) is warned about once
// the heartbeat timeout has passed: it is not monitored until it answers.
TEST(CoordinatorServiceTest, WarnsAboutAShardThatNeverAnswers) {
  Warnings warnings;
  CoordinatorServerOptions so;
  so.memstore_addresses = {"127.0.0.1:" + std::to_string(FreeTcpPort())};
  so.heartbeat_timeout_s = 1;
  so.warn = warnings.sink();
  auto server = CoordinatorServer::Start(so);
  ASSERT_THAT(server, IsOk());
  EXPECT_TRUE(warnings.WaitFor("has not answered a health check", 20))
      << ::testing::PrintToString(warnings.all());
  (*server)->Shutdown();
}

}  // namespace
}  // namespace mnemo::services
