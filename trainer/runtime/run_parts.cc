#include "trainer/runtime/run_parts.h"

namespace mnemo::runtime {

std::optional<data::NeighborSampler> RunParts::MakeSampler(
    const data::TemporalGraph* graph, uint64_t seed) const {
  const batch::BatchNeeds needs = model->needs();
  if (!needs.neighbors && !needs.mail_to_neighbors) return std::nullopt;
  return data::NeighborSampler(graph, o.model.neighbors, SamplingStrategy(),
                               seed);
}

plan::NeighborReads RunParts::NeighborReads(
    const data::TemporalGraph* graph) const {
  const batch::BatchNeeds needs = model->needs();
  plan::NeighborReads r;
  if (SamplingStrategy() != data::NeighborStrategy::kRecent) return r;
  if (needs.neighbors && needs.snapshots == 0) {
    r.graph = graph;
  } else if (needs.mail_to_neighbors) {
    r.graph = graph;
    r.endpoints_only = true;
  }
  r.neighbors = o.model.neighbors;
  return r;
}

}  // namespace mnemo::runtime
