#include "services/inference_requests.h"

#include <cmath>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "util/status_macros.h"

namespace mnemo::services {

namespace {

// `t` (the data's clock) on the log's, or the refusal naming `field`.
absl::StatusOr<double> LogTime(double t, const RequestLimits& limits,
                               double now, const std::string& field) {
  if (!std::isfinite(t)) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": not a finite time (", t, ")"));
  }
  const double rebased = t - limits.time_offset;
  if (rebased < now) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: %.17g is before the memory's time %.17g (the newest event "
        "applied): the memory holds no earlier state",
        field, t, now + limits.time_offset));
  }
  return rebased;
}

absl::StatusOr<double> QueryTime(bool has_t, double t,
                                 const RequestLimits& limits, double now) {
  if (!has_t) return now;
  return LogTime(t, limits, now, "t");
}

// A query's node: known, or read as a new node through the spare row.
absl::StatusOr<int32_t> QueryNode(int64_t original, const ServingIds& ids,
                                  const RequestLimits& limits,
                                  const std::string& field) {
  if (std::optional<int32_t> d = ids.Find(original)) return *d;
  if (!limits.unknown_nodes) {
    return absl::NotFoundError(absl::StrCat(
        field, ": node ", original,
        " is not in the run's id map, and this model keeps parameters per "
        "trained node (it cannot score a new one)"));
  }
  return ids.stranger();
}

absl::Status CandidateCount(int64_t n, const RequestLimits& limits,
                            const char* field, bool may_be_empty) {
  if (n == 0 && !may_be_empty) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": no candidates (give at least one)"));
  }
  if (n > limits.max_candidates) {
    return absl::ResourceExhaustedError(absl::StrCat(
        field, ": ", n, " candidates, more than the server's --max-candidates ",
        limits.max_candidates));
  }
  return absl::OkStatus();
}

// The query's nodes `nodes` (the field `field`), known or read as new nodes,
// appended to `out`.
absl::Status QueryNodes(const google::protobuf::RepeatedField<int64_t>& nodes,
                        const ServingIds& ids, const RequestLimits& limits,
                        const char* field, std::vector<int32_t>* out) {
  out->reserve(out->size() + nodes.size());
  for (int i = 0; i < nodes.size(); ++i) {
    auto d =
        QueryNode(nodes.Get(i), ids, limits, absl::StrCat(field, "[", i, "]"));
    if (!d.ok()) return d.status();
    out->push_back(*d);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<DecodedQuery> DecodeScore(const v1::ScoreRequest& request,
                                         const ServingIds& ids,
                                         const RequestLimits& limits,
                                         double now) {
  DecodedQuery q;
  RETURN_IF_ERROR(CandidateCount(request.dst_size(), limits, "dst",
                                 /*may_be_empty=*/false));
  ASSIGN_OR_RETURN(q.src, QueryNode(request.src(), ids, limits, "src"));
  ASSIGN_OR_RETURN(q.t, QueryTime(request.has_t(), request.t(), limits, now));
  RETURN_IF_ERROR(QueryNodes(request.dst(), ids, limits, "dst", &q.dst));
  return q;
}

absl::StatusOr<DecodedQuery> DecodeTopK(const v1::TopKRequest& request,
                                        const ServingIds& ids,
                                        const RequestLimits& limits,
                                        double now) {
  DecodedQuery q;
  if (request.k() < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("k: must be at least 1, got ", request.k()));
  }
  q.k = request.k();
  RETURN_IF_ERROR(CandidateCount(request.candidates_size(), limits,
                                 "candidates", /*may_be_empty=*/true));
  ASSIGN_OR_RETURN(q.src, QueryNode(request.src(), ids, limits, "src"));
  ASSIGN_OR_RETURN(q.t, QueryTime(request.has_t(), request.t(), limits, now));
  q.dst.reserve(request.candidates_size());
  for (int i = 0; i < request.candidates_size(); ++i) {
    // A candidate the run never saw is one nobody can rank: refused rather
    // than ranked as a stranger among them.
    std::optional<int32_t> d = ids.Find(request.candidates(i));
    if (!d) {
      return absl::NotFoundError(absl::StrCat("candidates[", i, "]: node ",
                                              request.candidates(i),
                                              " is not a known node"));
    }
    q.dst.push_back(*d);
  }
  return q;
}

absl::StatusOr<DecodedQuery> DecodeEmbed(const v1::EmbedRequest& request,
                                         const ServingIds& ids,
                                         const RequestLimits& limits,
                                         double now) {
  DecodedQuery q;
  RETURN_IF_ERROR(CandidateCount(request.nodes_size(), limits, "nodes",
                                 /*may_be_empty=*/false));
  ASSIGN_OR_RETURN(q.t, QueryTime(request.has_t(), request.t(), limits, now));
  RETURN_IF_ERROR(QueryNodes(request.nodes(), ids, limits, "nodes", &q.dst));
  return q;
}

absl::StatusOr<DecodedBatch> DecodeIngest(const v1::IngestRequest& request,
                                          const ServingIds& ids,
                                          const RequestLimits& limits,
                                          double now) {
  const int n = request.events_size();
  if (n == 0) {
    return absl::InvalidArgumentError("events: an empty batch");
  }
  if (n > limits.max_batch) {
    return absl::ResourceExhaustedError(
        absl::StrCat("events: ", n,
                     " events, more than the server's "
                     "--max-batch ",
                     limits.max_batch));
  }
  DecodedBatch b;
  b.online_figures = request.online_figures();
  b.src.reserve(n);
  b.dst.reserve(n);
  b.t.reserve(n);
  b.negative.reserve(n);
  const int dim = limits.edge_feature_dim;
  b.features.assign(static_cast<size_t>(n) * dim, 0.0f);
  absl::flat_hash_map<int64_t, int32_t> fresh;  // new nodes of this batch
  auto node = [&](int64_t original,
                  const std::string& field) -> absl::StatusOr<int32_t> {
    if (std::optional<int32_t> d = ids.Find(original)) return *d;
    if (auto it = fresh.find(original); it != fresh.end()) return it->second;
    if (!limits.unknown_nodes) {
      return absl::NotFoundError(absl::StrCat(
          field, ": node ", original,
          " is not in the run's id map, and this model keeps parameters per "
          "trained node (it cannot take a new one)"));
    }
    if (ids.new_nodes() + static_cast<int64_t>(fresh.size()) >=
        ids.max_new_nodes()) {
      return absl::ResourceExhaustedError(absl::StrCat(
          field, ": node ", original, " would be new node ",
          ids.new_nodes() + static_cast<int64_t>(fresh.size()) + 1,
          ", past the room of --max-new-nodes ", ids.max_new_nodes()));
    }
    const int32_t d = static_cast<int32_t>(ids.size() + fresh.size());
    fresh.emplace(original, d);
    b.new_nodes.push_back(original);
    return d;
  };
  double last = now;
  for (int i = 0; i < n; ++i) {
    const v1::Event& e = request.events(i);
    const std::string at = absl::StrCat("events[", i, "]");
    if (!std::isfinite(e.t())) {
      return absl::InvalidArgumentError(
          absl::StrCat(at, ".t: not a finite time (", e.t(), ")"));
    }
    const double t = e.t() - limits.time_offset;
    if (t < last) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s.t: %.17g is before %s (%.17g): events are ingested in time "
          "order, none before the memory's time",
          at, e.t(),
          i == 0 ? std::string("the memory's time")
                 : absl::StrCat("events[", i - 1, "].t"),
          last + limits.time_offset));
    }
    if (limits.max_time_gap > 0 && t - now > limits.max_time_gap) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s.t: %.17g is %.17g past the memory's time %.17g, more than "
          "--max-time-gap %.17g (the run's data spans that much; a timestamp "
          "in another unit?)",
          at, e.t(), t - now, now + limits.time_offset, limits.max_time_gap));
    }
    last = t;
    auto src = node(e.src(), at + ".src");
    if (!src.ok()) return src.status();
    auto dst = node(e.dst(), at + ".dst");
    if (!dst.ok()) return dst.status();
    int32_t negative = -1;
    if (e.has_negative()) {
      std::optional<int32_t> d = ids.Find(e.negative());
      if (!d) {
        auto it = fresh.find(e.negative());
        if (it == fresh.end()) {
          return absl::InvalidArgumentError(absl::StrCat(
              at, ".negative: node ", e.negative(), " is not a known node"));
        }
        d = it->second;
      }
      negative = *d;
    }
    if (e.features_size() != 0 && e.features_size() != dim) {
      return absl::InvalidArgumentError(
          absl::StrCat(at, ".features: ", e.features_size(),
                       " values, but the data's edge features have ", dim,
                       " (give all of them, or none for zeros)"));
    }
    for (int j = 0; j < e.features_size(); ++j) {
      if (!std::isfinite(e.features(j))) {
        return absl::InvalidArgumentError(
            absl::StrCat(at, ".features[", j, "]: not finite"));
      }
      if (limits.max_feature_abs > 0 &&
          std::fabs(e.features(j)) > limits.max_feature_abs) {
        return absl::InvalidArgumentError(absl::StrCat(
            at, ".features[", j, "]: ", e.features(j),
            " is beyond the largest magnitude accepted, ",
            limits.max_feature_abs, " (1000 times the run's data's largest)"));
      }
      b.features[static_cast<size_t>(i) * dim + j] = e.features(j);
    }
    b.src.push_back(*src);
    b.dst.push_back(*dst);
    b.t.push_back(t);
    b.negative.push_back(negative);
  }
  return b;
}

}  // namespace mnemo::services
