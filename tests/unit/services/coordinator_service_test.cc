// The coordinator service over real gRPC on loopback: joining, refusal of a
// different configuration, barriers, decisions, failure propagation, health
// and metrics.
#include "services/coordinator_service.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <thread>

#include "services/coordinator_client.h"
#include "services/memstore_client.h"
#include "services/metrics.h"
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
  so.store_port = 4242;
  auto server = CoordinatorServer::Start(so, &metrics);
  ASSERT_THAT(server, IsOk());
  const std::string addr = (*server)->address();
  auto health = CheckHealth(addr, 2.0);
  ASSERT_THAT(health, IsOk());
  EXPECT_TRUE(*health);

  ClusterSpecInfo spec0, spec1, spec_bad;
  auto c0 = CoordinatorClient::Connect(ClientOptions(addr, 0, "aaaa"), &spec0);
  ASSERT_THAT(c0, IsOk());
  EXPECT_EQ(spec0.world_size, 2);
  EXPECT_EQ(spec0.memstore_addresses.size(), 2u);
  EXPECT_EQ(spec0.store_port, 4242);
  EXPECT_EQ(spec0.policy, "vanilla");
  // A worker with another configuration is refused, naming both hashes.
  auto bad =
      CoordinatorClient::Connect(ClientOptions(addr, 1, "bbbb"), &spec_bad);
  EXPECT_THAT(bad, StatusIs(absl::StatusCode::kFailedPrecondition, "bbbb"));
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

TEST(CoordinatorServiceTest, UnreachableCoordinatorFailsWithinTheDeadline) {
  ClusterSpecInfo spec;
  auto o = ClientOptions("127.0.0.1:" + std::to_string(FreeTcpPort()), 0, "h");
  o.connect_timeout_s = 1;
  o.rpc_timeout_s = 0.5;
  auto c = CoordinatorClient::Connect(o, &spec);
  EXPECT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), ::testing::HasSubstr("rank 0"));
}

}  // namespace
}  // namespace mnemo::services
