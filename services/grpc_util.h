// gRPC glue shared by the mnemo services and clients: status conversion and
// address normalization. The only place absl::Status meets grpc::Status.
#ifndef MNEMO_SERVICES_GRPC_UTIL_H_
#define MNEMO_SERVICES_GRPC_UTIL_H_

#include <grpcpp/support/status.h>

#include <string>

#include "absl/status/status.h"

namespace mnemo::services {

// Same code and message (the canonical codes are shared).
grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

// "host:port" as given; a bare ":port" (or "port") becomes
// "127.0.0.1:port", so services bind to loopback unless told otherwise.
std::string NormalizeAddress(const std::string& address);

}  // namespace mnemo::services

#endif  // MNEMO_SERVICES_GRPC_UTIL_H_
