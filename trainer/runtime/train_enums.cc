#include "trainer/runtime/train_enums.h"

#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace mnemo::runtime {
namespace {

absl::Status NotOneOf(std::string_view flag, std::string_view accepted,
                      std::string_view got) {
  return absl::InvalidArgumentError(
      absl::StrCat(std::string(flag), " must be ", std::string(accepted),
                   ", got '", std::string(got), "'"));
}

}  // namespace

absl::StatusOr<Protocol> ParseProtocol(std::string_view name) {
  if (name == "tgn-reference") return Protocol::kTgnReference;
  if (name == "mnemo") return Protocol::kMnemo;
  return NotOneOf("--protocol", "tgn-reference or mnemo", name);
}

std::string_view ProtocolName(Protocol protocol) {
  switch (protocol) {
    case Protocol::kTgnReference:
      return "tgn-reference";
    case Protocol::kMnemo:
      return "mnemo";
  }
  return "unknown";
}

absl::StatusOr<Precision> ParsePrecision(std::string_view name) {
  if (name == "fp32") return Precision::kFp32;
  if (name == "bf16") return Precision::kBf16;
  return NotOneOf("--precision", "fp32 or bf16", name);
}

std::string_view PrecisionName(Precision precision) {
  switch (precision) {
    case Precision::kFp32:
      return "fp32";
    case Precision::kBf16:
      return "bf16";
  }
  return "unknown";
}

absl::StatusOr<PushScope> ParsePushScope(std::string_view name) {
  if (name == "advanced") return PushScope::kAdvanced;
  if (name == "owned") return PushScope::kOwned;
  return NotOneOf("--push-scope", "advanced or owned", name);
}

std::string_view PushScopeName(PushScope scope) {
  switch (scope) {
    case PushScope::kAdvanced:
      return "advanced";
    case PushScope::kOwned:
      return "owned";
  }
  return "unknown";
}

absl::StatusOr<SyncScope> ParseSyncScope(std::string_view name) {
  if (name == "reads") return SyncScope::kReads;
  if (name == "frontier") return SyncScope::kFrontier;
  return NotOneOf("--sync-scope", "reads or frontier", name);
}

std::string_view SyncScopeName(SyncScope scope) {
  switch (scope) {
    case SyncScope::kReads:
      return "reads";
    case SyncScope::kFrontier:
      return "frontier";
  }
  return "unknown";
}

absl::StatusOr<Device> ParseDevice(std::string_view name) {
  Device d;
  if (name == "cpu") return d;
  if (name == "cuda") {
    d.kind = Device::Kind::kCuda;
    return d;
  }
  int index = -1;
  const std::string_view digits =
      name.substr(0, 5) == "cuda:" ? name.substr(5) : std::string_view();
  if (!digits.empty() &&
      digits.find_first_not_of("0123456789") == std::string_view::npos &&
      absl::SimpleAtoi(absl::string_view(digits.data(), digits.size()),
                       &index)) {
    d.kind = Device::Kind::kCuda;
    d.index = index;
    return d;
  }
  return NotOneOf("--device", "cpu, cuda or cuda:N (N a GPU index >= 0)", name);
}

std::string DeviceName(const Device& device) {
  if (!device.cuda()) return "cpu";
  return device.index < 0 ? "cuda" : absl::StrCat("cuda:", device.index);
}

}  // namespace mnemo::runtime
