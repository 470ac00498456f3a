#include "services/grpc_util.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"

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

}  // namespace mnemo::services
