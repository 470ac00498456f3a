// What a serving process (`mnemo serve`) knows of node ids, the limits on
// its requests, and its requests decoded (inference_requests.h): plain
// structs, no protobuf and no LibTorch, shared by the gRPC side and the
// model's side.
#ifndef MNEMO_SERVICES_SERVING_IDS_H_
#define MNEMO_SERVICES_SERVING_IDS_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"

namespace mnemo::services {

// The node ids a serving process knows: the run's (dense ids 0..N-1, from
// its id map) and the new nodes ingestion added after them, up to a fixed
// room. A query may name a node it does not know: it reads as a new node
// (zero memory, no neighbours) through one spare row, stranger(), that
// nothing ever writes.
class ServingIds {
 public:
  // `original_ids`: dense id -> the dataset's id (EventLog::original_ids).
  ServingIds(std::vector<int64_t> original_ids, int64_t max_new_nodes);

  // The dense id of `original`, if known.
  std::optional<int32_t> Find(int64_t original) const;
  int64_t original(int32_t dense) const { return originals_[dense]; }
  int64_t size() const { return static_cast<int64_t>(originals_.size()); }
  int64_t run_nodes() const { return run_nodes_; }
  int64_t new_nodes() const { return size() - run_nodes_; }
  int64_t max_new_nodes() const { return max_new_; }
  // The rows a memory needs: every node that may come, and the spare one.
  int64_t rows() const { return run_nodes_ + max_new_ + 1; }
  int32_t stranger() const { return static_cast<int32_t>(rows() - 1); }
  // Adds new nodes (unknown, distinct, and fitting the room: what
  // DecodeIngest checked), dense ids size(), size() + 1, ...
  void Add(const std::vector<int64_t>& originals);

 private:
  std::vector<int64_t> originals_;
  absl::flat_hash_map<int64_t, int32_t> dense_;
  int64_t run_nodes_ = 0, max_new_ = 0;
};

struct RequestLimits {
  int64_t max_batch = 1000;         // events per Ingest request
  int64_t max_candidates = 100000;  // per Score / TopK
  int edge_feature_dim = 0;         // the data's edge feature width
  double time_offset = 0;           // the data's first timestamp
  // Whether a node the ids do not know may be scored or ingested (false for
  // a model with parameters per trained node, DySAT: NOT_FOUND).
  bool unknown_nodes = true;
  // An ingested event more than this past the memory's time is refused (a
  // unit mistake would move the memory's clock beyond every later event;
  // 0: no limit).
  double max_time_gap = 0;
  // The largest feature magnitude accepted (0: no limit): far beyond the
  // run's data, a feature overflows the memory it is mailed into.
  float max_feature_abs = 0;
};

// A Score or TopK request. Times are the data's own less time_offset (the
// training log's clock).
struct DecodedQuery {
  int32_t src = 0;
  std::vector<int32_t> dst;  // Score's candidates, or TopK's (empty: all)
  double t = 0;
  int k = 0;  // TopK
};

// An Ingest request: its events, in order, in dense ids (new nodes take
// the ids ServingIds::Add will give them), the times on the log's clock.
struct DecodedBatch {
  std::vector<int32_t> src, dst;
  std::vector<double> t;
  std::vector<float> features;    // [n x edge_feature_dim], zeros where none
  std::vector<int32_t> negative;  // -1: the server draws it
  // The ids of nodes first seen here, in the order their dense ids follow.
  std::vector<int64_t> new_nodes;
  bool online_figures = false;  // the ack carries the online AP and MRR
  int64_t size() const { return static_cast<int64_t>(src.size()); }
};

}  // namespace mnemo::services

#endif  // MNEMO_SERVICES_SERVING_IDS_H_
