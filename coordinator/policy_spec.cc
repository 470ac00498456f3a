#include "coordinator/policy_spec.h"

#include "absl/strings/str_cat.h"

namespace mnemo::coordinator {
namespace {

struct NamedSpec {
  std::string_view name;
  PolicyKind policy;
  bool gradient_sync, prune;
};

// The one table of valid names, in help-text order.
constexpr NamedSpec kSpecs[] = {
    {"vanilla", PolicyKind::kVanilla, false, false},
    {"full-cache", PolicyKind::kFullCache, false, false},
    {"deptgl", PolicyKind::kDepTgl, true, true},
    {"deptgl:replay", PolicyKind::kDepTgl, false, false},
    {"deptgl:replay+sync", PolicyKind::kDepTgl, true, false},
    {"depbloom", PolicyKind::kDepBloom, false, false},
    {"pipetgl", PolicyKind::kPipeTgl, false, false},
    {"disttgl-epoch", PolicyKind::kDistTglEpoch, false, false},
};

}  // namespace

absl::StatusOr<PolicySpec> ParsePolicySpec(std::string_view name) {
  for (const NamedSpec& s : kSpecs) {
    if (s.name != name) continue;
    PolicySpec spec;
    spec.policy = s.policy;
    spec.name = std::string(name);
    spec.gradient_sync = s.gradient_sync;
    spec.prune = s.prune;
    return spec;
  }
  // Debian's abseil has its own string_view: spell the name as a string.
  return absl::InvalidArgumentError(
      absl::StrCat("unknown training policy '", std::string(name),
                   "'; valid policies: ", PolicyNames()));
}

std::string PolicyNames() {
  std::string out;
  for (const NamedSpec& s : kSpecs) {
    if (!out.empty()) out += ", ";
    out += s.name;
  }
  return out;
}

std::string_view PolicyKindName(PolicyKind policy) {
  switch (policy) {
    case PolicyKind::kVanilla:
      return "vanilla";
    case PolicyKind::kFullCache:
      return "full-cache";
    case PolicyKind::kDepTgl:
      return "deptgl";
    case PolicyKind::kDepBloom:
      return "depbloom";
    case PolicyKind::kPipeTgl:
      return "pipetgl";
    case PolicyKind::kDistTglEpoch:
      return "disttgl-epoch";
  }
  return "unknown";
}

std::unique_ptr<DecisionPolicy> MakeDecisionPolicy(
    const PolicySpec& spec, const DecisionParams& params) {
  switch (spec.policy) {
    case PolicyKind::kFullCache:
      return MakeNeverSyncPolicy();
    case PolicyKind::kDepTgl:
      return spec.gradient_sync ? MakeGradientEmaPolicy(params.tau_g)
                                : MakeAlwaysSyncPolicy();
    case PolicyKind::kVanilla:
    case PolicyKind::kDepBloom:
    case PolicyKind::kPipeTgl:
    case PolicyKind::kDistTglEpoch:
      break;
  }
  return MakeAlwaysSyncPolicy();
}

}  // namespace mnemo::coordinator
