// Training-policy names, parsed in one place for the whole project (the
// trainer's --policy, the coordinator's --policy, the cluster spec), and the
// coordinator decision policy each one uses. No torch, no gRPC.
//
//   name                 policy       gradient_sync  prune  decisions
//   vanilla              kVanilla     -              -      always-sync
//   full-cache           kFullCache   -              -      never-sync
//   deptgl               kDepTgl      yes            yes    gradient-ema
//   deptgl:replay        kDepTgl      -              -      always-sync
//   deptgl:replay+sync   kDepTgl      yes            -      gradient-ema
//   depbloom             kDepBloom    -              -      always-sync
//   pipetgl              kPipeTgl     -              -      always-sync
//   disttgl-epoch        kDistTglEpoch -             -      always-sync
#ifndef MNEMO_COORDINATOR_POLICY_SPEC_H_
#define MNEMO_COORDINATOR_POLICY_SPEC_H_

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "coordinator/coordinator_state.h"

namespace mnemo::coordinator {

enum class PolicyKind {
  kVanilla,
  kFullCache,
  kDepTgl,
  kDepBloom,
  kPipeTgl,
  kDistTglEpoch
};

struct PolicySpec {
  PolicyKind policy = PolicyKind::kVanilla;
  std::string name;  // as given, e.g. "deptgl:replay+sync"
  // DepTGL ablations: gradient-aware sync (Eq. 6-7; else refresh at every
  // boundary) and load-aware pruning (Eq. 8-11).
  bool gradient_sync = false, prune = false;
};

// Parses a training-policy name: vanilla, full-cache, deptgl (= sync +
// prune), deptgl:replay (neither), deptgl:replay+sync (sync, no prune),
// depbloom, pipetgl, disttgl-epoch. Names are case-sensitive. Errors:
// INVALID_ARGUMENT naming the valid names (PolicyNames()).
[[nodiscard]] absl::StatusOr<PolicySpec> ParsePolicySpec(std::string_view name);

// "vanilla, full-cache, deptgl, deptgl:replay, deptgl:replay+sync,
// depbloom, pipetgl, disttgl-epoch", for help texts and error messages.
std::string PolicyNames();

// The family name of a policy ("vanilla", "full-cache", "deptgl",
// "depbloom", "pipetgl", "disttgl-epoch"), without ablation suffix.
std::string_view PolicyKindName(PolicyKind policy);

// Knobs of the coordinator's decision policies.
struct DecisionParams {
  // DepTGL Eq. 7 threshold: skip a boundary while ||g|| < tau_g * EMA. 1.6
  // is the paper's reference configuration.
  double tau_g = 1.6;
};

// The coordinator's decision policy for a training policy: vanilla:
// always-sync; full-cache: never-sync; deptgl with gradient_sync:
// gradient-ema(tau_g); deptgl without it (replay): always-sync; depbloom
// pipetgl and disttgl-epoch: always-sync (they ask for no decisions). Never
// null.
std::unique_ptr<DecisionPolicy> MakeDecisionPolicy(
    const PolicySpec& spec, const DecisionParams& params);

}  // namespace mnemo::coordinator

#endif  // MNEMO_COORDINATOR_POLICY_SPEC_H_
