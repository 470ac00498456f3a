#include "coordinator/policy_spec.h"

#include "absl/strings/str_cat.h"

namespace mnemo::coordinator {
namespace {

struct NamedSpec {
  std::string_view name;
  TrainingPolicy policy;
  bool gradient_sync, prune;
};

// The one table of valid names, in help-text order.
constexpr NamedSpec kSpecs[] = {
    {"vanilla", TrainingPolicy::kVanilla, false, false},
    {"full-cache", TrainingPolicy::kFullCache, false, false},
    {"deptgl", TrainingPolicy::kDepTgl, true, true},
    {"deptgl:replay", TrainingPolicy::kDepTgl, false, false},
    {"deptgl:replay+sync", TrainingPolicy::kDepTgl, true, false},
    {"depbloom", TrainingPolicy::kDepBloom, false, false},
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

std::string_view TrainingPolicyName(TrainingPolicy policy) {
  switch (policy) {
    case TrainingPolicy::kVanilla:
      return "vanilla";
    case TrainingPolicy::kFullCache:
      return "full-cache";
    case TrainingPolicy::kDepTgl:
      return "deptgl";
    case TrainingPolicy::kDepBloom:
      return "depbloom";
  }
  return "unknown";
}

std::unique_ptr<DecisionPolicy> MakeDecisionPolicy(
    const PolicySpec& spec, const DecisionParams& params) {
  switch (spec.policy) {
    case TrainingPolicy::kFullCache:
      return MakeNeverSyncPolicy();
    case TrainingPolicy::kDepTgl:
      return spec.gradient_sync ? MakeGradientEmaPolicy(params.tau_g)
                                : MakeAlwaysSyncPolicy();
    case TrainingPolicy::kVanilla:
    case TrainingPolicy::kDepBloom:
      break;
  }
  return MakeAlwaysSyncPolicy();
}

}  // namespace mnemo::coordinator
