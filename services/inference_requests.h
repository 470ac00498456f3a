// The requests of mnemo.v1.Inference (`mnemo serve`), decoded and checked
// against the serving process's id map and limits before anything runs:
// the one place a request's fields are read (torch-free, so the fuzz target
// reaches it). Every refusal names the field, and for an event its index.
// What they decode into (serving_ids.h) carries no protobuf, so that the
// model's side, built with LibTorch's headers, never includes protobuf's.
#ifndef MNEMO_SERVICES_INFERENCE_REQUESTS_H_
#define MNEMO_SERVICES_INFERENCE_REQUESTS_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "mnemo/v1/inference.pb.h"
#include "services/serving_ids.h"

namespace mnemo::services {

// `now`: the memory's time on the log's clock; a query's t before it is
// refused, a query without t reads at it.
absl::StatusOr<DecodedQuery> DecodeScore(const v1::ScoreRequest& request,
                                         const ServingIds& ids,
                                         const RequestLimits& limits,
                                         double now);
absl::StatusOr<DecodedQuery> DecodeTopK(const v1::TopKRequest& request,
                                        const ServingIds& ids,
                                        const RequestLimits& limits,
                                        double now);
// Embed: the nodes in DecodedQuery::dst.
absl::StatusOr<DecodedQuery> DecodeEmbed(const v1::EmbedRequest& request,
                                         const ServingIds& ids,
                                         const RequestLimits& limits,
                                         double now);
// Events in time order, none before `now`; nodes the ids do not know become
// new nodes while there is room (RESOURCE_EXHAUSTED naming --max-new-nodes
// past it); a given negative must be a known node.
absl::StatusOr<DecodedBatch> DecodeIngest(const v1::IngestRequest& request,
                                          const ServingIds& ids,
                                          const RequestLimits& limits,
                                          double now);

}  // namespace mnemo::services

#endif  // MNEMO_SERVICES_INFERENCE_REQUESTS_H_
