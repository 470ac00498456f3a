// gRPC glue shared by the mnemo services and clients: status conversion,
// address normalization and transport security (TLS, mutual TLS and a
// shared bearer token). The only place absl::Status meets grpc::Status.
#ifndef MNEMO_SERVICES_GRPC_UTIL_H_
#define MNEMO_SERVICES_GRPC_UTIL_H_

#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/support/channel_arguments.h>
#include <grpcpp/support/status.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "services/security.h"

namespace mnemo::services {

// Same code and message (the canonical codes are shared).
grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

// "host:port" as given; a bare ":port" (or "port") becomes
// "127.0.0.1:port", so services bind to loopback unless told otherwise.
std::string NormalizeAddress(const std::string& address);

// Server credentials for `security`: INVALID_ARGUMENT naming the flag for
// an inconsistent set (a key without a certificate, a token or client CA
// without TLS), for a file that holds no PEM certificate or key, and for a
// key that is not the certificate's (naming both files); NOT_FOUND for a
// file that cannot be read. `on_refused`, when given, is called (on gRPC's
// threads) with the method path of every call refused for its bearer
// token, before any handler sees it: what a server's own request counters
// would otherwise miss.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const ServerSecurity& security,
    std::function<void(absl::string_view method_path)> on_refused = nullptr);
// Channel credentials for `security`, errors as above.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>>
MakeChannelCredentials(const ClientSecurity& security);

// What is wrong with the server's certificate (--tls-cert, its first
// certificate) that does not stop the server from starting but makes every
// client refuse the handshake: past its notAfter date, or before its
// notBefore date. One line each; none without TLS or when all is well
// (MakeServerCredentials reports unreadable files).
std::vector<std::string> ServerCertificateWarnings(
    const ServerSecurity& security);

// `status` of a call made with `security`, with the likely cause added
// when it is a connection that failed during the TLS handshake or was
// closed by the server before any answer ("Socket closed", "Handshake read
// failed", "certificate verify failed", ...): a server that requires TLS
// from a plaintext client, a server that requires a client certificate
// (mutual TLS), a server certificate that --tls-ca did not sign, or a
// server that does not speak TLS. Anything else is returned unchanged.
absl::Status ExplainConnectionError(const absl::Status& status,
                                    const ClientSecurity& security);
// True when `status` is such a transport-security failure.
bool IsTransportSecurityError(const absl::Status& status);

// A channel to `address` (NormalizeAddress) with `security`; `args` are
// passed on.
absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeSecureChannel(
    const std::string& address, const ClientSecurity& security,
    const grpc::ChannelArguments& args = {});

}  // namespace mnemo::services

#endif  // MNEMO_SERVICES_GRPC_UTIL_H_
