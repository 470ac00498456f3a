// TLS, mutual TLS and the bearer token on a real memory-store server, with
// certificates made by the openssl command for each run (no key is kept in
// the repository): who is refused, with which code, and that health checks
// stay reachable for probes.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "memstore/node_state_store.h"
#include "services/grpc_util.h"
#include "services/memstore_client.h"
#include "services/memstore_service.h"
#include "tests/unit/services/certificates.h"
#include "util/status_matchers.h"

namespace mnemo::services {
namespace {

namespace fs = std::filesystem;

constexpr int kDim = 4;

class SecurityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           absl::StrCat(
               "mnemo_security_", getpid(), "_",
               ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    certs_ = std::make_unique<test_support::Certificates>(dir_ / "pki");
    ASSERT_TRUE(certs_->ok()) << "openssl could not make the certificates";
    memstore::NodeStateStoreOptions so;
    so.dim = kDim;
    auto store = memstore::Open(so);
    ASSERT_THAT(store, IsOk());
    store_ = *std::move(store);
  }
  void TearDown() override {
    server_.reset();
    store_.reset();
    fs::remove_all(dir_);
  }

  absl::Status Start(const ServerSecurity& security) {
    MemstoreServerOptions o;
    o.security = security;
    auto server = MemstoreServer::Start(store_.get(), o);
    if (!server.ok()) return server.status();
    server_ = *std::move(server);
    return absl::OkStatus();
  }
  ServerSecurity TlsWithToken() const {
    ServerSecurity s;
    s.cert_file = (*certs_)("server.pem");
    s.key_file = (*certs_)("server.key");
    s.token_file = (*certs_)("token");
    return s;
  }
  // A Stats call through the real client.
  absl::Status Call(const ClientSecurity& security) {
    MemstoreClientOptions o;
    o.addresses = {server_->address()};
    o.dim = kDim;
    o.deadline_seconds = 5;
    o.max_attempts = 1;
    o.security = security;
    auto client = MemstoreClient::Connect(o);
    if (!client.ok()) return client.status();
    return (*client)->StatsPerShard().status();
  }

  fs::path dir_;
  std::unique_ptr<test_support::Certificates> certs_;
  std::unique_ptr<memstore::NodeStateStore> store_;
  std::unique_ptr<MemstoreServer> server_;
};

TEST_F(SecurityTest, TokenAndCertificateAreBothRequired) {
  ASSERT_THAT(Start(TlsWithToken()), IsOk());
  const test_support::Certificates& c = *certs_;
  ClientSecurity good;
  good.ca_file = c("ca.pem");
  good.token_file = c("token");
  EXPECT_THAT(Call(good), IsOk());

  ClientSecurity no_token = good;
  no_token.token_file.clear();
  EXPECT_THAT(Call(no_token), StatusIs(absl::StatusCode::kUnauthenticated,
                                       "requires a bearer token"));
  ClientSecurity wrong_token = good;
  wrong_token.token_file = c("wrong-token");
  EXPECT_THAT(Call(wrong_token), StatusIs(absl::StatusCode::kUnauthenticated,
                                          "not this server's"));
  // A client that trusts another CA does not get through the handshake.
  ClientSecurity wrong_ca = good;
  wrong_ca.ca_file = c("other-ca.pem");
  EXPECT_THAT(Call(wrong_ca), StatusIs(absl::StatusCode::kUnavailable, ""));
  // Nor does a plaintext client.
  EXPECT_THAT(Call(ClientSecurity{}),
              StatusIs(absl::StatusCode::kUnavailable, ""));

  // Probes reach the health service over TLS without the token.
  ClientSecurity probe;
  probe.ca_file = c("ca.pem");
  auto serving = CheckHealth(server_->address(), 5, "", probe);
  ASSERT_THAT(serving, IsOk());
  EXPECT_TRUE(*serving);
}

TEST_F(SecurityTest, MutualTlsRefusesClientsWithoutACertificate) {
  const test_support::Certificates& c = *certs_;
  ServerSecurity s = TlsWithToken();
  s.client_ca_file = c("ca.pem");
  ASSERT_THAT(Start(s), IsOk());
  ClientSecurity client;
  client.ca_file = c("ca.pem");
  client.token_file = c("token");
  EXPECT_THAT(Call(client), StatusIs(absl::StatusCode::kUnavailable, ""));
  client.cert_file = c("client.pem");
  client.key_file = c("client.key");
  EXPECT_THAT(Call(client), IsOk());
  // A certificate the server's client CA did not sign is refused.
  client.cert_file = c("other-ca.pem");
  client.key_file = c("other-ca.key");
  EXPECT_THAT(Call(client), StatusIs(absl::StatusCode::kUnavailable, ""));
}

TEST_F(SecurityTest, InconsistentSettingsNameTheFlag) {
  const test_support::Certificates& c = *certs_;
  ServerSecurity token_only;
  token_only.token_file = c("token");
  EXPECT_THAT(MakeServerCredentials(token_only).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "--auth-token-file needs --tls-cert"));
  ServerSecurity key_missing;
  key_missing.cert_file = c("server.pem");
  EXPECT_THAT(MakeServerCredentials(key_missing).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, "--tls-key"));
  ServerSecurity missing_file = TlsWithToken();
  missing_file.cert_file = c("nope.pem");
  EXPECT_THAT(MakeServerCredentials(missing_file).status(),
              StatusIs(absl::StatusCode::kNotFound, "--tls-cert: cannot read"));
  ClientSecurity client_token_only;
  client_token_only.token_file = c("token");
  EXPECT_THAT(MakeChannelCredentials(client_token_only).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "--auth-token-file needs --tls-ca"));
  std::ofstream(c("empty-token")) << "  \n";
  ClientSecurity empty_token;
  empty_token.ca_file = c("ca.pem");
  empty_token.token_file = c("empty-token");
  EXPECT_THAT(MakeChannelCredentials(empty_token).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, "holds no token"));
}

}  // namespace
}  // namespace mnemo::services
