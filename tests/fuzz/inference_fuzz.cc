// Fuzzes the decoding of mnemo.v1.Inference requests (services/
// inference_requests.h), as `mnemo serve` decodes every call before its
// model sees it.
//
// Input: byte 0 picks the request (mod 4: Score, TopK, Ingest, Embed) and
// byte 1 the serving process (its edge feature width, 0..3, and whether
// unknown nodes may come); the rest is the serialized request. The ids know
// 40 nodes, original ids 1000..1039, with room for 3 new ones; the memory
// stands at t 50 of the data's clock (first timestamp 10); an event may
// come at most 100 past it, with features of magnitude at most 8.
//
// Invariants: a refusal carries a documented code (INVALID_ARGUMENT,
// NOT_FOUND, RESOURCE_EXHAUSTED) and a message; an accepted request
// decodes into dense ids the memory has rows for, times on the log's
// clock not before the memory's and in order, features of the data's
// width and bound, events within the time gap, and new nodes that are
// distinct, unknown and within the room.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "mnemo/v1/inference.pb.h"
#include "services/inference_requests.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

using mnemo::fuzz::Fail;
using mnemo::services::ServingIds;

constexpr int64_t kNodes = 40, kFirstId = 1000, kRoom = 3;
constexpr double kNow = 40, kOffset = 10;  // t 50 on the data's clock
constexpr double kGap = 100;
constexpr float kMaxFeature = 8;

ServingIds Ids() {
  std::vector<int64_t> originals;
  for (int64_t i = 0; i < kNodes; ++i) originals.push_back(kFirstId + i);
  return ServingIds(originals, kRoom);
}

void CheckRefusal(const absl::Status& s) {
  const absl::StatusCode c = s.code();
  if (c != absl::StatusCode::kInvalidArgument &&
      c != absl::StatusCode::kNotFound &&
      c != absl::StatusCode::kResourceExhausted) {
    Fail(absl::StrCat("undocumented code: ", s.ToString()));
  }
  if (s.message().empty()) Fail("a refusal without a message");
}

void CheckNode(int32_t d, const ServingIds& ids, bool query) {
  if (d < 0 || d >= ids.rows()) Fail(absl::StrCat("dense id ", d));
  if (!query && d == ids.stranger()) Fail("an event on the spare row");
}

void WriteSeeds(const std::string& dir) {
  int index = 0;
  auto seed = [&](char kind, char server, const google::protobuf::Message& m) {
    std::string s = {kind, server};
    mnemo::fuzz::WriteSeed(dir, index++, s + m.SerializeAsString());
  };
  mnemo::v1::ScoreRequest score;
  score.set_src(kFirstId);
  score.add_dst(kFirstId + 1);
  score.add_dst(-5);
  score.set_t(60);
  seed(0, 1, score);
  mnemo::v1::TopKRequest topk;
  topk.set_src(kFirstId + 2);
  topk.set_k(3);
  topk.add_candidates(kFirstId + 3);
  seed(1, 5, topk);
  mnemo::v1::IngestRequest ingest;
  for (int i = 0; i < 4; ++i) {
    mnemo::v1::Event* e = ingest.add_events();
    e->set_src(kFirstId + i);
    e->set_dst(i == 3 ? 77 : kFirstId + 10 + i);
    e->set_t(50 + i);
    if (i % 2 == 0) e->set_negative(kFirstId + 20);
    for (int j = 0; j < 2; ++j) e->add_features(0.5f * j);
  }
  seed(2, 2 | 4, ingest);
  mnemo::v1::EmbedRequest embed;
  embed.add_nodes(kFirstId + 5);
  embed.add_nodes(99);
  seed(3, 4, embed);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  mnemo::fuzz::MaybeWriteSeedsAndExit(WriteSeeds);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const int kind = data[0] % 4;
  mnemo::services::RequestLimits limits;
  limits.edge_feature_dim = data[1] % 4;
  limits.unknown_nodes = (data[1] & 4) != 0;
  limits.time_offset = kOffset;
  limits.max_batch = 16;
  limits.max_candidates = 64;
  limits.max_time_gap = kGap;
  limits.max_feature_abs = kMaxFeature;
  const ServingIds ids = Ids();
  const char* body = reinterpret_cast<const char*>(data) + 2;
  const int body_size = static_cast<int>(size - 2);
  if (kind == 0 || kind == 1 || kind == 3) {
    absl::StatusOr<mnemo::services::DecodedQuery> q;
    int64_t asked = 0;
    if (kind == 0) {
      mnemo::v1::ScoreRequest r;
      if (!r.ParseFromArray(body, body_size)) return 0;
      q = mnemo::services::DecodeScore(r, ids, limits, kNow);
      asked = r.dst_size();
    } else if (kind == 3) {
      mnemo::v1::EmbedRequest r;
      if (!r.ParseFromArray(body, body_size)) return 0;
      q = mnemo::services::DecodeEmbed(r, ids, limits, kNow);
      asked = r.nodes_size();
      if (q.ok() && asked == 0) Fail("an Embed of no nodes accepted");
    } else {
      mnemo::v1::TopKRequest r;
      if (!r.ParseFromArray(body, body_size)) return 0;
      q = mnemo::services::DecodeTopK(r, ids, limits, kNow);
      asked = r.candidates_size();
      if (q.ok() && q->k < 1) Fail("k below 1 accepted");
    }
    if (!q.ok()) {
      CheckRefusal(q.status());
      return 0;
    }
    if (static_cast<int64_t>(q->dst.size()) != asked) Fail("candidates lost");
    if (asked > limits.max_candidates) Fail("past --max-candidates");
    if (!(q->t >= kNow)) Fail(absl::StrCat("query time ", q->t));
    if (kind != 3) CheckNode(q->src, ids, true);
    for (int32_t d : q->dst) CheckNode(d, ids, true);
    if (!limits.unknown_nodes && kind != 3 && q->src == ids.stranger()) {
      Fail("a stranger where none may come");
    }
    for (int32_t d : q->dst) {
      if (!limits.unknown_nodes && d == ids.stranger()) {
        Fail("a stranger where none may come");
      }
    }
    return 0;
  }
  mnemo::v1::IngestRequest r;
  if (!r.ParseFromArray(body, body_size)) return 0;
  auto b = mnemo::services::DecodeIngest(r, ids, limits, kNow);
  if (!b.ok()) {
    CheckRefusal(b.status());
    return 0;
  }
  const int64_t n = b->size();
  if (n != r.events_size() || n < 1 || n > limits.max_batch) {
    Fail(absl::StrCat("batch of ", n));
  }
  if (static_cast<int64_t>(b->t.size()) != n ||
      static_cast<int64_t>(b->dst.size()) != n ||
      static_cast<int64_t>(b->negative.size()) != n ||
      static_cast<int64_t>(b->features.size()) != n * limits.edge_feature_dim) {
    Fail("column sizes");
  }
  if (static_cast<int64_t>(b->new_nodes.size()) > kRoom) Fail("past the room");
  for (float x : b->features) {
    if (!(std::fabs(x) <= kMaxFeature)) Fail("a feature past the bound");
  }
  absl::flat_hash_set<int64_t> fresh;
  for (int64_t o : b->new_nodes) {
    if (ids.Find(o).has_value()) Fail("a known node made new");
    if (!fresh.insert(o).second) Fail("a new node twice");
  }
  if (!limits.unknown_nodes && !b->new_nodes.empty()) Fail("new nodes");
  double last = kNow;
  for (int64_t i = 0; i < n; ++i) {
    if (!(b->t[i] >= last)) Fail(absl::StrCat("time order at ", i));
    if (b->t[i] - kNow > kGap) Fail(absl::StrCat("past the time gap at ", i));
    last = b->t[i];
    CheckNode(b->src[i], ids, false);
    CheckNode(b->dst[i], ids, false);
    if (b->src[i] >= ids.size() + static_cast<int64_t>(b->new_nodes.size()) ||
        b->dst[i] >= ids.size() + static_cast<int64_t>(b->new_nodes.size())) {
      Fail("an id past the new nodes");
    }
    if (b->negative[i] < -1) Fail("negative id");
    if (b->negative[i] >= 0) CheckNode(b->negative[i], ids, false);
  }
  return 0;
}
