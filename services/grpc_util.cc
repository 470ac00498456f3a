#include "services/grpc_util.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/security/auth_metadata_processor.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

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

// PEM parsing with OpenSSL (what gRPC's TLS runs on here), to name what is
// wrong with a certificate or key before gRPC says only "cannot listen".
struct OpenSslFree {
  void operator()(X509* x) const { X509_free(x); }
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
  void operator()(BIO* b) const { BIO_free(b); }
};
template <typename T>
using OpenSslPtr = std::unique_ptr<T, OpenSslFree>;

// Never asks for a passphrase (OpenSSL would prompt on the terminal).
int NoPassphrase(char*, int, int, void*) { return 0; }

// The first certificate in `pem` (the chain's own), or INVALID_ARGUMENT.
absl::StatusOr<OpenSslPtr<X509>> ParseCertificate(const std::string& pem,
                                                  const std::string& path,
                                                  const char* flag) {
  OpenSslPtr<BIO> bio(
      BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  OpenSslPtr<X509> x(
      bio ? PEM_read_bio_X509(bio.get(), nullptr, NoPassphrase, nullptr)
          : nullptr);
  ERR_clear_error();  // the thread's error queue is gRPC's too
  if (!x) {
    return absl::InvalidArgumentError(absl::StrCat(
        flag, ": ", path,
        " holds no PEM certificate (-----BEGIN CERTIFICATE-----)"));
  }
  return x;
}

absl::StatusOr<OpenSslPtr<EVP_PKEY>> ParseKey(const std::string& pem,
                                              const std::string& path,
                                              const char* flag) {
  OpenSslPtr<BIO> bio(
      BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  OpenSslPtr<EVP_PKEY> k(
      bio ? PEM_read_bio_PrivateKey(bio.get(), nullptr, NoPassphrase, nullptr)
          : nullptr);
  ERR_clear_error();
  if (!k) {
    return absl::InvalidArgumentError(absl::StrCat(
        flag, ": ", path,
        " holds no PEM private key, or an encrypted one (mnemo needs the key "
        "without a passphrase)"));
  }
  return k;
}

// INVALID_ARGUMENT naming both files when `key` is not the private key of
// the certificate `cert` (gRPC would only fail to start its listener, or
// its handshakes).
absl::Status CheckKeyPair(const std::string& cert, const std::string& cert_path,
                          const char* cert_flag, const std::string& key,
                          const std::string& key_path, const char* key_flag) {
  ASSIGN_OR_RETURN(auto x, ParseCertificate(cert, cert_path, cert_flag));
  ASSIGN_OR_RETURN(auto k, ParseKey(key, key_path, key_flag));
  const int match = X509_check_private_key(x.get(), k.get());
  ERR_clear_error();
  if (match != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        key_flag, " ", key_path, " does not match the certificate in ",
        cert_flag, " ", cert_path,
        ": it is the key of another certificate (give the key that was "
        "made with this certificate, or the certificate of this key)"));
  }
  return absl::OkStatus();
}

std::string PrintTime(const ASN1_TIME* t) {
  OpenSslPtr<BIO> bio(BIO_new(BIO_s_mem()));
  if (!bio || ASN1_TIME_print(bio.get(), t) != 1) return "?";
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, n > 0 ? n : 0);
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
  BearerTokenProcessor(const std::string& token,
                       std::function<void(absl::string_view)> on_refused)
      : expected_("Bearer " + token), on_refused_(std::move(on_refused)) {}
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
    if (it == metadata.end() || !ConstantTimeEquals(it->second, expected_)) {
      if (on_refused_) {
        on_refused_(
            path == metadata.end()
                ? absl::string_view()
                : absl::string_view(path->second.data(), path->second.size()));
      }
      return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                          it == metadata.end()
                              ? "this server requires a bearer token (give "
                                "the client --auth-token-file)"
                              : "the bearer token is not this server's");
    }
    consumed->insert({std::string(it->first.data(), it->first.size()),
                      std::string(it->second.data(), it->second.size())});
    return grpc::Status::OK;
  }

 private:
  const std::string expected_;
  const std::function<void(absl::string_view)> on_refused_;
};

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const ServerSecurity& security,
    std::function<void(absl::string_view method_path)> on_refused) {
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
  RETURN_IF_ERROR(CheckKeyPair(cert, security.cert_file, "--tls-cert", key,
                               security.key_file, "--tls-key"));
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
        std::make_shared<BearerTokenProcessor>(token, std::move(on_refused)));
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
    RETURN_IF_ERROR(CheckKeyPair(cert, security.cert_file, "--tls-cert", key,
                                 security.key_file, "--tls-key"));
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

std::vector<std::string> ServerCertificateWarnings(
    const ServerSecurity& security) {
  std::vector<std::string> out;
  if (security.cert_file.empty()) return out;
  auto pem = ReadSecret(security.cert_file, "--tls-cert");
  if (!pem.ok()) return out;
  auto x = ParseCertificate(*pem, security.cert_file, "--tls-cert");
  if (!x.ok()) return out;
  const ASN1_TIME* not_before = X509_get0_notBefore(x->get());
  const ASN1_TIME* not_after = X509_get0_notAfter(x->get());
  if (X509_cmp_current_time(not_after) < 0) {
    out.push_back(absl::StrCat(
        "--tls-cert ", security.cert_file, " expired on ", PrintTime(not_after),
        ": clients will refuse the TLS handshake (certificate has expired) "
        "until it is renewed"));
  }
  if (X509_cmp_current_time(not_before) > 0) {
    out.push_back(absl::StrCat(
        "--tls-cert ", security.cert_file, " is not valid before ",
        PrintTime(not_before),
        ": clients will refuse the TLS handshake until then (or this "
        "host's clock is wrong)"));
  }
  ERR_clear_error();
  return out;
}

// gRPC's words (1.51, OpenSSL) for a connection that failed in or right
// after the TLS handshake: "failed to connect to all addresses; last error:
// UNAVAILABLE: ipv4:HOST:PORT: Socket closed" for a server that closed it
// (a TLS server's answer to a plaintext client, or to a TLS client without
// the certificate it requires), "Ssl handshake failed: ... certificate
// verify failed" for a server certificate the client does not trust, and
// "... wrong version number" for a TLS client and a plaintext server.
// "Socket closed" alone (no "failed to connect") is a connection lost
// during a call: a server that died, not a security mismatch.
bool IsTransportSecurityError(const absl::Status& status) {
  if (status.code() != absl::StatusCode::kUnavailable) return false;
  const std::string m = absl::AsciiStrToLower(status.message());
  if (absl::StrContains(m, "handshake")) return true;
  if (!absl::StrContains(m, "failed to connect")) return false;
  for (const char* marker : {"socket closed", "connection reset",
                             "end of tcp stream", "broken pipe"}) {
    if (absl::StrContains(m, marker)) return true;
  }
  return false;
}

absl::Status ExplainConnectionError(const absl::Status& status,
                                    const ClientSecurity& security) {
  if (!IsTransportSecurityError(status) ||
      absl::StrContains(status.message(), "(likely cause: ")) {
    return status;
  }
  const std::string m = absl::AsciiStrToLower(status.message());
  std::string cause;
  if (!security.tls()) {
    cause =
        "the server requires TLS, and this client speaks plaintext: give "
        "--tls-ca (the CA of the server's certificate)";
  } else if (absl::StrContains(m, "wrong version number") ||
             absl::StrContains(m, "http request") ||
             absl::StrContains(m, "packet length too long")) {
    cause =
        "the server does not speak TLS: it was started without --tls-cert "
        "and --tls-key (or drop --tls-ca here)";
  } else if (absl::StrContains(m, "verify failed") ||
             absl::StrContains(m, "unknown ca") ||
             absl::StrContains(m, "expired")) {
    cause = absl::StrCat(
        "the server's certificate is not signed by --tls-ca ", security.ca_file,
        ", does not name the address dialled, or has expired or is not yet "
        "valid");
  } else if (security.cert_file.empty()) {
    cause =
        "the server requires a client certificate (mutual TLS): give "
        "--tls-cert and --tls-key, a certificate signed by the CA of the "
        "server's --tls-client-ca";
  } else {
    cause = absl::StrCat(
        "the server refused this client's certificate --tls-cert ",
        security.cert_file,
        ": it is not signed by the CA of the server's --tls-client-ca");
  }
  return absl::Status(
      status.code(),
      absl::StrCat(status.message(), " (likely cause: ", cause, ")"));
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeSecureChannel(
    const std::string& address, const ClientSecurity& security,
    const grpc::ChannelArguments& args) {
  ASSIGN_OR_RETURN(auto creds, MakeChannelCredentials(security));
  return grpc::CreateCustomChannel(NormalizeAddress(address), creds, args);
}

}  // namespace mnemo::services
