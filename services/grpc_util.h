// gRPC glue shared by the mnemo services and clients: status conversion,
// address normalization and transport security (TLS, mutual TLS and a
// shared bearer token). The only place absl::Status meets grpc::Status.
#ifndef MNEMO_SERVICES_GRPC_UTIL_H_
#define MNEMO_SERVICES_GRPC_UTIL_H_

#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/support/channel_arguments.h>
#include <grpcpp/support/status.h>

#include <memory>
#include <string>

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
// without TLS), NOT_FOUND for a file that cannot be read.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const ServerSecurity& security);
// Channel credentials for `security`, errors as above.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>>
MakeChannelCredentials(const ClientSecurity& security);

// A channel to `address` (NormalizeAddress) with `security`; `args` are
// passed on.
absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeSecureChannel(
    const std::string& address, const ClientSecurity& security,
    const grpc::ChannelArguments& args = {});

}  // namespace mnemo::services

#endif  // MNEMO_SERVICES_GRPC_UTIL_H_
