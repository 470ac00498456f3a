#include "trainer/runtime/train_enums.h"

#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "util/enum_names.h"

namespace mnemo::runtime {

namespace {
constexpr EnumName<Protocol> kProtocolNames[] = {
    {Protocol::kTgnReference, "tgn-reference"},
    {Protocol::kMnemo, "mnemo"},
    {Protocol::kTgb, "tgb"}};
constexpr EnumName<Precision> kPrecisionNames[] = {{Precision::kFp32, "fp32"},
                                                   {Precision::kBf16, "bf16"}};
constexpr EnumName<GradComm> kGradCommNames[] = {{GradComm::kFp32, "fp32"},
                                                 {GradComm::kBf16, "bf16"}};
constexpr EnumName<PushScope> kPushScopeNames[] = {
    {PushScope::kAdvanced, "advanced"}, {PushScope::kOwned, "owned"}};
constexpr EnumName<SyncScope> kSyncScopeNames[] = {
    {SyncScope::kReads, "reads"}, {SyncScope::kFrontier, "frontier"}};
}  // namespace

absl::StatusOr<Protocol> ParseProtocol(std::string_view name) {
  return ParseEnum(kProtocolNames, "--protocol", name);
}
std::string_view ProtocolName(Protocol protocol) {
  return EnumToName(kProtocolNames, protocol);
}

absl::StatusOr<Precision> ParsePrecision(std::string_view name) {
  return ParseEnum(kPrecisionNames, "--precision", name);
}
std::string_view PrecisionName(Precision precision) {
  return EnumToName(kPrecisionNames, precision);
}

absl::StatusOr<GradComm> ParseGradComm(std::string_view name) {
  return ParseEnum(kGradCommNames, "--grad-comm", name);
}
std::string_view GradCommName(GradComm comm) {
  return EnumToName(kGradCommNames, comm);
}

absl::StatusOr<PushScope> ParsePushScope(std::string_view name) {
  return ParseEnum(kPushScopeNames, "--push-scope", name);
}
std::string_view PushScopeName(PushScope scope) {
  return EnumToName(kPushScopeNames, scope);
}

absl::StatusOr<SyncScope> ParseSyncScope(std::string_view name) {
  return ParseEnum(kSyncScopeNames, "--sync-scope", name);
}
std::string_view SyncScopeName(SyncScope scope) {
  return EnumToName(kSyncScopeNames, scope);
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
  return absl::InvalidArgumentError(
      absl::StrCat("--device must be cpu, cuda or cuda:N (N a GPU index >= 0), "
                   "got '",
                   std::string(name), "'"));
}

std::string DeviceName(const Device& device) {
  if (!device.cuda()) return "cpu";
  return device.index < 0 ? "cuda" : absl::StrCat("cuda:", device.index);
}

}  // namespace mnemo::runtime
