#include "services/grpc_util.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/security/auth_metadata_processor.h>

#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "util/status_macros.h"

namespace mnemo::services {

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      std::string(status.message()));
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      status.error_message());
}

std::string NormalizeAddress(const std::string& address) {
  if (absl::StartsWith(address, ":")) return "127.0.0.1" + address;
  bool all_digits = !address.empty();
  for (char c : address) all_digits = all_digits && absl::ascii_isdigit(c);
  if (all_digits) return "127.0.0.1:" + address;
  return address;
}

namespace {

// The contents of `path`, given as `flag`.
absl::StatusOr<std::string> ReadSecret(const std::string& path,
                                       const char* flag) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(absl::StrCat(flag, ": cannot read ", path));
  }
  std::stringstream ss;
  ss << in.rdbuf();
  if (ss.str().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": ", path, " is empty"));
  }
  return ss.str();
}

absl::StatusOr<std::string> ReadToken(const std::string& path) {
  ASSIGN_OR_RETURN(auto text, ReadSecret(path, "--auth-token-file"));
  std::string token(absl::StripAsciiWhitespace(text));
  for (char c : token) {
    if (c < 0x21 || c > 0x7e) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--auth-token-file: ", path,
          " must hold one token of printable characters without spaces"));
    }
  }
  if (token.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--auth-token-file: ", path, " holds no token"));
  }
  return token;
}

bool ConstantTimeEquals(grpc::string_ref a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < b.size(); ++i) {
    diff |= static_cast<unsigned char>(i < a.size() ? a.data()[i] : 0) ^
            static_cast<unsigned char>(b[i]);
  }
  return diff == 0;
}

// Requires "authorization: Bearer TOKEN" on every call except the gRPC
// health service's (probes carry no credentials).
class BearerTokenProcessor : public grpc::AuthMetadataProcessor {
 public:
  explicit BearerTokenProcessor(const std::string& token)
      : expected_("Bearer " + token) {}
  bool IsBlocking() const override { return false; }
  grpc::Status Process(const InputMetadata& metadata, grpc::AuthContext*,
                       OutputMetadata* consumed, OutputMetadata*) override {
    auto path = metadata.find(":path");
    if (path != metadata.end() &&
        absl::StartsWith(
            absl::string_view(path->second.data(), path->second.size()),
            "/grpc.health.v1.Health/")) {
      return grpc::Status::OK;
    }
    auto it = metadata.find("authorization");
    if (it == metadata.end()) {
      return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                          "this server requires a bearer token (give the "
                          "client --auth-token-file)");
    }
    if (!ConstantTimeEquals(it->second, expected_)) {
      return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                          "the bearer token is not this server's");
    }
    consumed->insert({std::string(it->first.data(), it->first.size()),
                      std::string(it->second.data(), it->second.size())});
    return grpc::Status::OK;
  }

 private:
  const std::string expected_;
};

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const ServerSecurity& security) {
  if (!security.tls()) {
    if (!security.client_ca_file.empty()) {
      return absl::InvalidArgumentError(
          "--tls-client-ca needs --tls-cert and --tls-key (mutual TLS is "
          "TLS)");
    }
    if (!security.token_file.empty()) {
      return absl::InvalidArgumentError(
          "--auth-token-file needs --tls-cert and --tls-key: a bearer token "
          "on a plaintext connection is readable by anyone on the network");
    }
    return grpc::InsecureServerCredentials();
  }
  if (security.cert_file.empty() || security.key_file.empty()) {
    return absl::InvalidArgumentError(
        "TLS needs both --tls-cert and --tls-key");
  }
  grpc::SslServerCredentialsOptions o;
  grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
  ASSIGN_OR_RETURN(auto cert, ReadSecret(security.cert_file, "--tls-cert"));
  ASSIGN_OR_RETURN(auto key, ReadSecret(security.key_file, "--tls-key"));
  pair.cert_chain = std::move(cert);
  pair.private_key = std::move(key);
  o.pem_key_cert_pairs.push_back(std::move(pair));
  if (!security.client_ca_file.empty()) {
    ASSIGN_OR_RETURN(auto ca,
                     ReadSecret(security.client_ca_file, "--tls-client-ca"));
    o.pem_root_certs = std::move(ca);
    o.client_certificate_request =
        GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  std::shared_ptr<grpc::ServerCredentials> creds =
      grpc::SslServerCredentials(o);
  if (!security.token_file.empty()) {
    ASSIGN_OR_RETURN(auto token, ReadToken(security.token_file));
    creds->SetAuthMetadataProcessor(
        std::make_shared<BearerTokenProcessor>(token));
  }
  return creds;
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>>
MakeChannelCredentials(const ClientSecurity& security) {
  if (!security.tls()) {
    if (!security.cert_file.empty() || !security.key_file.empty()) {
      return absl::InvalidArgumentError(
          "--tls-cert/--tls-key (mutual TLS) need --tls-ca, the CA of the "
          "servers' certificates");
    }
    if (!security.token_file.empty()) {
      return absl::InvalidArgumentError(
          "--auth-token-file needs --tls-ca: a bearer token on a plaintext "
          "connection is readable by anyone on the network");
    }
    return grpc::InsecureChannelCredentials();
  }
  grpc::SslCredentialsOptions o;
  ASSIGN_OR_RETURN(auto ca, ReadSecret(security.ca_file, "--tls-ca"));
  o.pem_root_certs = std::move(ca);
  if (security.cert_file.empty() != security.key_file.empty()) {
    return absl::InvalidArgumentError(
        "mutual TLS needs both --tls-cert and --tls-key");
  }
  if (!security.cert_file.empty()) {
    ASSIGN_OR_RETURN(auto cert, ReadSecret(security.cert_file, "--tls-cert"));
    ASSIGN_OR_RETURN(auto key, ReadSecret(security.key_file, "--tls-key"));
    o.pem_cert_chain = std::move(cert);
    o.pem_private_key = std::move(key);
  }
  std::shared_ptr<grpc::ChannelCredentials> creds = grpc::SslCredentials(o);
  if (!security.token_file.empty()) {
    ASSIGN_OR_RETURN(auto token, ReadToken(security.token_file));
    creds = grpc::CompositeChannelCredentials(
        creds, grpc::AccessTokenCredentials(token));
  }
  return creds;
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeSecureChannel(
    const std::string& address, const ClientSecurity& security,
    const grpc::ChannelArguments& args) {
  ASSIGN_OR_RETURN(auto creds, MakeChannelCredentials(security));
  return grpc::CreateCustomChannel(NormalizeAddress(address), creds, args);
}

}  // namespace mnemo::services
