#include "services/memstore_service.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <numeric>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "mnemo/v1/memstore.grpc.pb.h"
#include "services/grpc_util.h"
#include "services/metrics.h"
#include "services/pull_wire.h"
#include "util/executor.h"
#include "util/proc.h"
#include "util/status_macros.h"

namespace mnemo::services {

static_assert(std::endian::native == std::endian::little,
              "the wire format is little-endian float32/float64/uint64");

// ---------------------------------------------------------------- IdMap

absl::StatusOr<IdMap> IdMap::Load(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot read"));
  IdMap map;
  std::vector<int64_t> dense_ids;
  std::vector<int64_t> lines;  // [i]: the line of entry i, for errors
  bool contiguous = true;
  std::string line;
  int64_t lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    // A UTF-8 byte-order mark is not part of the header.
    if (lineno == 1 && line.rfind("\xEF\xBB\xBF", 0) == 0) line.erase(0, 3);
    if (line.empty()) continue;
    std::vector<absl::string_view> f = absl::StrSplit(line, ',');
    if (lineno == 1) {
      if (f.size() < 2 || f[0] != "dense_id" || f[1] != "original_id") {
        return absl::InvalidArgumentError(absl::StrCat(
            path, ":1: expected header dense_id,original_id[,kind]"));
      }
      continue;
    }
    int64_t dense = 0, original = 0;
    if (f.size() < 2 || f.size() > 3 || !absl::SimpleAtoi(f[0], &dense) ||
        !absl::SimpleAtoi(f[1], &original) || dense < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ":", lineno, ": expected dense_id,original_id[,kind], got '",
          line, "'"));
    }
    const absl::string_view k = f.size() == 3 ? f[2] : absl::string_view();
    if (map.kinds_.empty()) map.kinds_.emplace_back();  // kind 0: empty
    size_t kind = 0;
    while (kind < map.kinds_.size() && map.kinds_[kind] != k) ++kind;
    if (kind == map.kinds_.size()) {
      if (map.kinds_.size() == 256) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ":", lineno, ": more than 255 distinct kinds"));
      }
      map.kinds_.emplace_back(k);
    }
    if (dense != static_cast<int64_t>(map.original_.size())) contiguous = false;
    if (map.original_.size() >= std::numeric_limits<uint32_t>::max()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ":", lineno, ": more than 2^32 - 1 entries"));
    }
    dense_ids.push_back(dense);
    lines.push_back(lineno);
    map.original_.push_back(original);
    map.kind_.push_back(static_cast<uint8_t>(kind));
    map.dense_end_ = std::max(map.dense_end_, dense + 1);
  }
  const size_t n = map.original_.size();
  if (!contiguous) {
    // Order the columns by dense id; a repeated one is an error.
    std::vector<uint32_t> order(n);
    std::iota(order.begin(), order.end(), 0u);
    std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
      return dense_ids[a] < dense_ids[b];
    });
    for (size_t i = 1; i < n; ++i) {
      if (dense_ids[order[i]] == dense_ids[order[i - 1]]) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ":", lines[order[i]], ": duplicate dense id ",
                         dense_ids[order[i]]));
      }
    }
    std::vector<int64_t> original(n);
    std::vector<uint8_t> kind(n);
    map.dense_.resize(n);
    for (size_t i = 0; i < n; ++i) {
      map.dense_[i] = dense_ids[order[i]];
      original[i] = map.original_[order[i]];
      kind[i] = map.kind_[order[i]];
    }
    map.original_ = std::move(original);
    map.kind_ = std::move(kind);
  }
  map.by_original_.resize(n);
  std::iota(map.by_original_.begin(), map.by_original_.end(), 0u);
  std::sort(map.by_original_.begin(), map.by_original_.end(),
            [&](uint32_t a, uint32_t b) {
              return map.original_[a] != map.original_[b]
                         ? map.original_[a] < map.original_[b]
                         : a < b;
            });
  return map;
}

int64_t IdMap::IndexOf(int64_t dense_id) const {
  if (dense_.empty()) {
    return dense_id >= 0 && dense_id < static_cast<int64_t>(original_.size())
               ? dense_id
               : -1;
  }
  auto it = std::lower_bound(dense_.begin(), dense_.end(), dense_id);
  if (it == dense_.end() || *it != dense_id) return -1;
  return it - dense_.begin();
}

std::vector<int64_t> IdMap::DenseIds(int64_t original_id,
                                     const std::string& kind) const {
  std::vector<int64_t> out;
  auto it =
      std::lower_bound(by_original_.begin(), by_original_.end(), original_id,
                       [&](uint32_t i, int64_t v) { return original_[i] < v; });
  for (; it != by_original_.end() && original_[*it] == original_id; ++it) {
    if (kind.empty() || kinds_[kind_[*it]] == kind) {
      out.push_back(dense_.empty() ? int64_t{*it} : dense_[*it]);
    }
  }
  return out;
}

std::optional<IdMap::Entry> IdMap::Find(int64_t dense_id) const {
  const int64_t i = IndexOf(dense_id);
  if (i < 0) return std::nullopt;
  return Entry{original_[i], kinds_[kind_[i]]};
}

namespace {

namespace fs = std::filesystem;
namespace v1 = ::mnemo::v1;
using memstore::NodeStateStore;

// Payload bytes per state in a pull answer or a push: state, version, time.
int64_t BytesPerState(int dim) { return int64_t{dim} * 4 + 8 + 8; }
// Upper bound of a NodeState's encoding beyond its state bytes (every other
// field at its largest, and the enclosing repeated-field tag and length).
constexpr int64_t kNodeStateOverhead = 96;
constexpr int64_t kMessageSlack = 1024;

// ---------------------------------------------------------------- Pull buffers

// Reusable pull results. A pull answer is sent straight from the store's
// result (pull_wire.h), so the result lives until gRPC has written it; then
// it comes back here, keeping its memory: the next pull of a similar size
// neither allocates nor page-faults, and the store's resize() does not
// zero-fill. Idle buffers are bounded in number and size.
class PullBufferPool : public std::enable_shared_from_this<PullBufferPool> {
 public:
  PullBufferPool(int max_idle, int64_t max_idle_bytes)
      : max_idle_(max_idle), max_idle_bytes_(max_idle_bytes) {}

  std::shared_ptr<memstore::PulledStates> Get() {
    memstore::PulledStates* p = nullptr;
    {
      absl::MutexLock l(&mu_);
      if (!idle_.empty()) {
        p = idle_.back().release();
        idle_.pop_back();
        idle_bytes_ -= Bytes(*p);
      }
    }
    if (p == nullptr) p = new memstore::PulledStates;
    return std::shared_ptr<memstore::PulledStates>(
        p, [pool = shared_from_this()](memstore::PulledStates* p) {
          pool->Put(p);
        });
  }

 private:
  static int64_t Bytes(const memstore::PulledStates& p) {
    return p.states.capacity() * sizeof(float) +
           p.version.capacity() * sizeof(uint64_t) +
           p.time.capacity() * sizeof(double);
  }
  void Put(memstore::PulledStates* p) {
    std::unique_ptr<memstore::PulledStates> own(p);
    const int64_t bytes = Bytes(*p);
    absl::MutexLock l(&mu_);
    if (static_cast<int>(idle_.size()) < max_idle_ &&
        idle_bytes_ + bytes <= max_idle_bytes_) {
      idle_bytes_ += bytes;
      idle_.push_back(std::move(own));
    }
  }

  const int max_idle_;
  const int64_t max_idle_bytes_;
  absl::Mutex mu_;
  std::vector<std::unique_ptr<memstore::PulledStates>> idle_
      ABSL_GUARDED_BY(mu_);
  int64_t idle_bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

// ---------------------------------------------------------------- Metrics

// Store counters and sizes, read from Stats() at scrape time.
class StoreCollectable : public prometheus::Collectable {
 public:
  explicit StoreCollectable(NodeStateStore* store) : store_(store) {}
  void Detach() {
    absl::MutexLock l(&mu_);
    store_ = nullptr;
  }
  std::vector<prometheus::MetricFamily> Collect() const override {
    absl::MutexLock l(&mu_);
    if (!store_) return {};
    auto s = store_->Stats();
    if (!s.ok()) return {};
    const double hits = s->hot_hits + s->cold_hits;
    return {
        GaugeFamily("mnemo_memstore_hot_states", "States held in RAM.",
                    s->hot_states),
        GaugeFamily("mnemo_memstore_cold_states",
                    "States spilled to the RocksDB cold tier.", s->cold_states),
        GaugeFamily("mnemo_memstore_hot_bytes", "Bytes of state held in RAM.",
                    s->hot_bytes),
        GaugeFamily("mnemo_memstore_hot_capacity_bytes",
                    "Capacity of the hot tier in bytes (0: unlimited).",
                    s->hot_capacity_bytes),
        GaugeFamily("mnemo_memstore_rocksdb_size_bytes",
                    "Live bytes on disk (RocksDB's SST and WAL files, the push "
                    "journal).",
                    s->rocksdb_bytes),
        GaugeFamily("mnemo_memstore_hot_hit_ratio",
                    "Share of pulled stored states served from RAM.",
                    hits > 0 ? s->hot_hits / hits : 0),
        CounterFamily("mnemo_memstore_hot_hits_total",
                      "Pulled ids served from RAM.", s->hot_hits),
        CounterFamily("mnemo_memstore_cold_hits_total",
                      "Pulled ids served from RocksDB.", s->cold_hits),
        CounterFamily("mnemo_memstore_misses_total",
                      "Pulled ids never updated.", s->misses),
        CounterFamily("mnemo_memstore_accepted_states_total",
                      "Pushed states that won newest-wins (by version).",
                      s->states_accepted),
        CounterFamily("mnemo_memstore_spills_total",
                      "States moved from RAM to RocksDB.", s->spills),
        CounterFamily("mnemo_memstore_spill_writes_total",
                      "Spilled states written to RocksDB (the others were "
                      "clean: RocksDB held them already).",
                      s->spill_writes),
        CounterFamily("mnemo_memstore_promotions_total",
                      "States moved from RocksDB back to RAM.", s->promotions),
        CounterFamily("mnemo_memstore_checkpoints_total", "Checkpoints taken.",
                      s->checkpoints),
    };
  }

 private:
  mutable absl::Mutex mu_;  // held across Stats() so Detach() waits for it
  NodeStateStore* store_ ABSL_GUARDED_BY(mu_);
};

class ServiceMetrics {
 public:
  explicit ServiceMetrics(MetricsRegistry* registry) : registry_(registry) {
    states_pulled_ = &registry->Counter("mnemo_memstore_states_pulled_total",
                                        "States sent to clients by pulls.");
    states_pushed_ =
        &registry->Counter("mnemo_memstore_states_pushed_total",
                           "States received from clients by pushes.");
    bytes_pulled_ = &registry->Counter(
        "mnemo_memstore_pulled_bytes_total",
        "State, version and time payload bytes sent to clients by pulls.");
    bytes_pushed_ = &registry->Counter(
        "mnemo_memstore_pushed_bytes_total",
        "State, version and time payload bytes received from clients by "
        "pushes.");
  }

  void Pulled(int64_t states, int64_t bytes) {
    states_pulled_->Increment(states);
    bytes_pulled_->Increment(bytes);
  }
  void Pushed(int64_t states, int64_t bytes) {
    states_pushed_->Increment(states);
    bytes_pushed_->Increment(bytes);
  }
  // A call refused before any handler (its bearer token): counted in
  // mnemo_memstore_requests_total with code UNAUTHENTICATED. The method
  // label is one of the service's methods, or "other" (the path is the
  // client's to choose: labels stay a small fixed set).
  static void Refused(MetricsRegistry* registry, absl::string_view path) {
    static constexpr absl::string_view kPrefix = "/mnemo.v1.Memstore/";
    std::string method = "other";
    if (absl::ConsumePrefix(&path, kPrefix)) {
      for (const char* m : {"Pull", "PullStream", "Push", "PushStream", "Get",
                            "BatchGet", "ListRecent", "Stats", "Checkpoint"}) {
        if (path == m) method = m;
      }
    }
    registry
        ->Counter("mnemo_memstore_requests_total",
                  "Memory-store RPCs finished, by method and status code.",
                  {{"method", method},
                   {"code", absl::StatusCodeToString(
                                absl::StatusCode::kUnauthenticated)}})
        .Increment();
  }
  // One finished RPC.
  void Done(const char* method, const absl::Status& status, double seconds) {
    registry_
        ->Histogram("mnemo_memstore_request_duration_seconds",
                    "Latency of memory-store RPCs, by method.",
                    {{"method", method}}, LatencyBucketsSeconds())
        .Observe(seconds);
    registry_
        ->Counter("mnemo_memstore_requests_total",
                  "Memory-store RPCs finished, by method and status code.",
                  {{"method", method},
                   {"code", absl::StatusCodeToString(status.code())}})
        .Increment();
  }

 private:
  MetricsRegistry* registry_;
  prometheus::Counter *states_pulled_, *states_pushed_, *bytes_pulled_,
      *bytes_pushed_;
};

// ---------------------------------------------------------------- Service

// Every method is raw: the service parses the request itself, so a body
// that is not the method's message is INVALID_ARGUMENT naming the method
// (generated handlers answer UNIMPLEMENTED, and a bad PushStream chunk would
// hang the stream until its deadline). Pull and PullStream answers are
// encoded by pull_wire.h without copying the states (same bytes on the
// wire).
using ServiceBase = v1::Memstore::WithRawCallbackMethod_Pull<
    v1::Memstore::WithRawCallbackMethod_PullStream<
        v1::Memstore::WithRawCallbackMethod_Push<
            v1::Memstore::WithRawCallbackMethod_PushStream<
                v1::Memstore::WithRawCallbackMethod_Get<
                    v1::Memstore::WithRawCallbackMethod_BatchGet<
                        v1::Memstore::WithRawCallbackMethod_ListRecent<
                            v1::Memstore::WithRawCallbackMethod_Stats<
                                v1::Memstore::WithRawCallbackMethod_Checkpoint<
                                    v1::Memstore::CallbackService>>>>>>>>>;

// The message `T` in `buffer`; INVALID_ARGUMENT naming `method` otherwise.
template <typename T>
absl::Status ParseRequest(const grpc::ByteBuffer& buffer, const char* method,
                          T* out) {
  grpc::ByteBuffer copy(buffer);  // Deserialize consumes its input
  grpc::Status s = grpc::SerializationTraits<T>::Deserialize(&copy, out);
  if (!s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(method, ": the request body is not a ",
                     T::descriptor()->full_name(), ": ", s.error_message()));
  }
  return absl::OkStatus();
}

class MemstoreService final : public ServiceBase {
 public:
  MemstoreService(NodeStateStore* store, const MemstoreServerOptions& options,
                  MetricsRegistry* registry)
      : store_(store),
        o_(options),
        dim_(store->dim()),
        id_end_(options.num_nodes > 0 ? options.num_nodes
                                      : options.id_map.dense_end()),
        chunk_states_(
            std::max<int64_t>(1, (options.max_message_bytes - kMessageSlack) /
                                     BytesPerState(store->dim()))),
        metrics_(registry),
        executor_(std::make_unique<Executor>(options.executor_threads)),
        buffers_(std::make_shared<PullBufferPool>(
            options.executor_threads + 1,
            std::max<int64_t>(2 * options.max_message_bytes, 64 << 20))) {}

  // Runs the queued work and stops the executor (after the server stopped).
  void StopExecutor() { executor_.reset(); }
  Executor& executor() { return *executor_; }
  ServiceMetrics& metrics() { return metrics_; }
  int64_t chunk_states() const { return chunk_states_; }
  int dim() const { return dim_; }

  // ---- unary RPCs

  grpc::ServerUnaryReactor* Pull(grpc::CallbackServerContext* ctx,
                                 const grpc::ByteBuffer* request,
                                 grpc::ByteBuffer* resp) override {
    return RunUnary(ctx, "Pull", [this, request, resp] {
      v1::PullRequest req;
      RETURN_IF_ERROR(ParseRequest(*request, "Pull", &req));
      RETURN_IF_ERROR(ValidatePull(req, /*stream=*/false));
      std::shared_ptr<memstore::PulledStates> p = buffers_->Get();
      RETURN_IF_ERROR(StorePull(req, p.get()));
      *resp = EncodePullResponse(std::move(p), dim_, 0, 0, req.ids_size());
      return absl::OkStatus();
    });
  }

  grpc::ServerUnaryReactor* Push(grpc::CallbackServerContext* ctx,
                                 const grpc::ByteBuffer* request,
                                 grpc::ByteBuffer* response) override {
    return RunParsed<v1::PushRequest, v1::PushResponse>(
        ctx, "Push", request, response,
        [this](const v1::PushRequest* req,
               v1::PushResponse* resp) -> absl::Status {
          RETURN_IF_ERROR(ValidatePushChunk(*req, 0, req->writer()));
          const int64_t n = req->ids_size();
          RETURN_IF_ERROR(StorePush(absl::MakeConstSpan(req->ids().data(), n),
                                    req->states().data(), req->version().data(),
                                    req->time().data(), n, req->writer()));
          resp->set_received(n);
          return absl::OkStatus();
        });
  }

  grpc::ServerUnaryReactor* Get(grpc::CallbackServerContext* ctx,
                                const grpc::ByteBuffer* request,
                                grpc::ByteBuffer* response) override {
    return RunParsed<v1::GetRequest, v1::NodeState>(
        ctx, "Get", request, response,
        [this](const v1::GetRequest* req, v1::NodeState* resp) -> absl::Status {
          RETURN_IF_ERROR(CheckShard(req->shard()));
          RETURN_IF_ERROR(CheckKind(req->kind()));
          int64_t dense = 0;
          switch (req->key_case()) {
            case v1::GetRequest::kDenseId:
              dense = req->dense_id();
              break;
            case v1::GetRequest::kOriginalId: {
              ASSIGN_OR_RETURN(dense, Resolve(req->original_id(), req->kind()));
              break;
            }
            default:
              return absl::InvalidArgumentError(
                  "Get: set original_id or dense_id");
          }
          RETURN_IF_ERROR(CheckIds({dense}));
          ASSIGN_OR_RETURN(memstore::NodeStateView v, store_->Get(dense));
          FillNode(v, resp);
          return absl::OkStatus();
        });
  }

  grpc::ServerUnaryReactor* BatchGet(grpc::CallbackServerContext* ctx,
                                     const grpc::ByteBuffer* request,
                                     grpc::ByteBuffer* response) override {
    return RunParsed<v1::BatchGetRequest, v1::BatchGetResponse>(
        ctx, "BatchGet", request, response,
        [this](const v1::BatchGetRequest* req,
               v1::BatchGetResponse* resp) -> absl::Status {
          RETURN_IF_ERROR(CheckShard(req->shard()));
          RETURN_IF_ERROR(CheckKind(req->kind()));
          RETURN_IF_ERROR(
              CheckAnswerFits("BatchGet", req->original_ids_size()));
          for (int64_t original : req->original_ids()) {
            std::vector<int64_t> dense =
                o_.id_map.empty() ? std::vector<int64_t>{original}
                                  : o_.id_map.DenseIds(original, req->kind());
            bool found = false;
            for (int64_t d : dense) {
              if (d < 0) continue;
              auto v = store_->Get(d);
              if (v.ok()) {
                FillNode(*v, resp->add_nodes());
                found = true;
              } else if (v.status().code() != absl::StatusCode::kNotFound) {
                return v.status();
              }
            }
            if (!found) resp->add_missing_original_ids(original);
          }
          return absl::OkStatus();
        });
  }

  grpc::ServerUnaryReactor* ListRecent(grpc::CallbackServerContext* ctx,
                                       const grpc::ByteBuffer* request,
                                       grpc::ByteBuffer* response) override {
    return RunParsed<v1::ListRecentRequest, v1::ListRecentResponse>(
        ctx, "ListRecent", request, response,
        [this](const v1::ListRecentRequest* req,
               v1::ListRecentResponse* resp) -> absl::Status {
          RETURN_IF_ERROR(CheckShard(req->shard()));
          if (req->n() < 0) {
            return absl::InvalidArgumentError(
                absl::StrCat("ListRecent: n must be >= 0, got ", req->n()));
          }
          if (req->n() == 0) return absl::OkStatus();
          ASSIGN_OR_RETURN(auto views, store_->ListRecent(req->n()));
          RETURN_IF_ERROR(CheckAnswerFits("ListRecent", views.size()));
          for (const auto& v : views) FillNode(v, resp->add_nodes());
          return absl::OkStatus();
        });
  }

  grpc::ServerUnaryReactor* Stats(grpc::CallbackServerContext* ctx,
                                  const grpc::ByteBuffer* request,
                                  grpc::ByteBuffer* response) override {
    return RunParsed<v1::StatsRequest, v1::StatsResponse>(
        ctx, "Stats", request, response,
        [this](const v1::StatsRequest* req,
               v1::StatsResponse* resp) -> absl::Status {
          RETURN_IF_ERROR(CheckShard(req->shard()));
          ASSIGN_OR_RETURN(memstore::StoreStats s, store_->Stats());
          resp->set_shard_id(o_.shard_id);
          resp->set_num_shards(o_.num_shards);
          resp->set_dim(s.dim);
          resp->set_write_policy(s.write_policy);
          resp->set_hot_states(s.hot_states);
          resp->set_cold_states(s.cold_states);
          resp->set_hot_bytes(s.hot_bytes);
          resp->set_hot_capacity_bytes(s.hot_capacity_bytes);
          resp->set_pulls(s.pulls);
          resp->set_pushes(s.pushes);
          resp->set_states_pulled(s.states_pulled);
          resp->set_states_pushed(s.states_pushed);
          resp->set_states_accepted(s.states_accepted);
          resp->set_hot_hits(s.hot_hits);
          resp->set_cold_hits(s.cold_hits);
          resp->set_misses(s.misses);
          resp->set_spills(s.spills);
          resp->set_promotions(s.promotions);
          resp->set_spill_writes(s.spill_writes);
          resp->set_rocksdb_bytes(s.rocksdb_bytes);
          resp->set_checkpoints(s.checkpoints);
          resp->set_max_message_bytes(o_.max_message_bytes);
          resp->set_has_id_map(!o_.id_map.empty());
          return absl::OkStatus();
        });
  }

  grpc::ServerUnaryReactor* Checkpoint(grpc::CallbackServerContext* ctx,
                                       const grpc::ByteBuffer* request,
                                       grpc::ByteBuffer* response) override {
    return RunParsed<v1::CheckpointRequest, v1::CheckpointResponse>(
        ctx, "Checkpoint", request, response,
        [this](const v1::CheckpointRequest* req,
               v1::CheckpointResponse* resp) -> absl::Status {
          RETURN_IF_ERROR(CheckShard(req->shard()));
          ASSIGN_OR_RETURN(std::string path, CheckpointPath(req->name()));
          RETURN_IF_ERROR(store_->Checkpoint(path));
          resp->set_path(path);
          return absl::OkStatus();
        });
  }

  // ---- streaming RPCs (reactors below)

  grpc::ServerWriteReactor<grpc::ByteBuffer>* PullStream(
      grpc::CallbackServerContext* ctx,
      const grpc::ByteBuffer* request) override;
  grpc::ServerReadReactor<grpc::ByteBuffer>* PushStream(
      grpc::CallbackServerContext* ctx, grpc::ByteBuffer* response) override;

  // ---- validation and store access, shared by the handlers

  absl::Status CheckShard(const v1::ShardRef& ref) const {
    if (ref.shard_id() != o_.shard_id ||
        (ref.num_shards() != 0 && ref.num_shards() != o_.num_shards)) {
      return absl::NotFoundError(absl::StrFormat(
          "request for shard %d of %d reached shard %d of %d", ref.shard_id(),
          ref.num_shards(), o_.shard_id, o_.num_shards));
    }
    return absl::OkStatus();
  }

  absl::Status CheckDim(int dim) const {
    if (dim != dim_) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "request dim %d does not match the store's dim %d", dim, dim_));
    }
    return absl::OkStatus();
  }

  absl::Status CheckBatch(int64_t n) const {
    if (n > o_.max_batch) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "request carries %d ids, more than the limit of %d per request", n,
          o_.max_batch));
    }
    return absl::OkStatus();
  }

  static absl::Status CheckKind(const std::string& kind) {
    if (!kind.empty() && kind != "user" && kind != "item") {
      return absl::InvalidArgumentError(absl::StrCat(
          "kind must be empty, 'user' or 'item', got '", kind, "'"));
    }
    return absl::OkStatus();
  }

  absl::Status CheckIds(absl::Span<const int64_t> ids) const {
    for (size_t i = 0; i < ids.size(); ++i) {
      if (ids[i] < 0) {
        return absl::InvalidArgumentError(
            absl::StrFormat("negative node id %d at index %d", ids[i], i));
      }
      if (id_end_ > 0 && ids[i] >= id_end_) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "node id %d at index %d is out of range: the job has %d nodes "
            "(dense ids 0..%d)",
            ids[i], i, id_end_, id_end_ - 1));
      }
    }
    return absl::OkStatus();
  }

  absl::Status CheckAnswerFits(const char* method, int64_t nodes) const {
    if (nodes * (int64_t{dim_} * 4 + kNodeStateOverhead) + kMessageSlack >
        o_.max_message_bytes) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "%s: an answer of %d nodes would exceed the max message size of %d "
          "bytes",
          method, nodes, o_.max_message_bytes));
    }
    return absl::OkStatus();
  }

  std::shared_ptr<memstore::PulledStates> GetPullBuffer() {
    return buffers_->Get();
  }

  absl::Status ValidatePull(const v1::PullRequest& req, bool stream) const {
    RETURN_IF_ERROR(CheckShard(req.shard()));
    RETURN_IF_ERROR(CheckDim(req.dim()));
    const int64_t n = req.ids_size();
    RETURN_IF_ERROR(CheckBatch(n));
    if (!stream && n > chunk_states_) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "Pull of %d states (%d bytes) would exceed the max message size of "
          "%d bytes (at most %d states); use PullStream",
          n, n * BytesPerState(dim_), o_.max_message_bytes, chunk_states_));
    }
    if (req.max_chunk_states() < 0) {
      return absl::InvalidArgumentError("max_chunk_states must be >= 0");
    }
    return CheckIds(absl::MakeConstSpan(req.ids().data(), n));
  }

  absl::Status StorePull(const v1::PullRequest& req, memstore::PulledStates* p,
                         const std::function<void(int64_t)>& ready = nullptr) {
    const int64_t n = req.ids_size();
    const auto ids = absl::MakeConstSpan(req.ids().data(), n);
    RETURN_IF_ERROR(ready ? store_->PullWithProgress(ids, p, ready)
                          : store_->Pull(ids, p));
    metrics_.Pulled(n, n * BytesPerState(dim_));
    return absl::OkStatus();
  }

  // Validates one push message; `first_index` is the index of its first id
  // in the whole push (for messages), `writer` the push's writer.
  absl::Status ValidatePushChunk(const v1::PushRequest& req,
                                 int64_t first_index, int32_t writer) const {
    RETURN_IF_ERROR(CheckShard(req.shard()));
    RETURN_IF_ERROR(CheckDim(req.dim()));
    const int64_t n = req.ids_size();
    RETURN_IF_ERROR(CheckBatch(first_index + n));
    if (req.writer() < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("negative writer rank ", req.writer()));
    }
    if (req.writer() != writer) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "push stream changes writer from %d to %d", writer, req.writer()));
    }
    const int64_t want_states = n * dim_ * int64_t{sizeof(float)};
    if (static_cast<int64_t>(req.states().size()) != want_states) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "states holds %d bytes; %d ids of dim %d need %d bytes",
          req.states().size(), n, dim_, want_states));
    }
    if (static_cast<int64_t>(req.version().size()) !=
        n * int64_t{sizeof(uint64_t)}) {
      return absl::InvalidArgumentError(
          absl::StrFormat("version holds %d bytes; %d ids need %d bytes",
                          req.version().size(), n, n * 8));
    }
    if (static_cast<int64_t>(req.time().size()) !=
        n * int64_t{sizeof(double)}) {
      return absl::InvalidArgumentError(
          absl::StrFormat("time holds %d bytes; %d ids need %d bytes",
                          req.time().size(), n, n * 8));
    }
    RETURN_IF_ERROR(CheckIds(absl::MakeConstSpan(req.ids().data(), n)));
    const char* s = req.states().data();
    for (int64_t i = 0; i < n * dim_; ++i) {
      float x;
      std::memcpy(&x, s + i * sizeof(float), sizeof(float));
      if (!std::isfinite(x)) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "state of node %d (index %d) holds a non-finite value (%f) at "
            "position %d",
            req.ids(i / dim_), first_index + i / dim_, x, i % dim_));
      }
    }
    const char* v = req.version().data();
    const char* t = req.time().data();
    for (int64_t i = 0; i < n; ++i) {
      uint64_t version;
      std::memcpy(&version, v + i * sizeof(uint64_t), sizeof(uint64_t));
      if (version == 0) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "version of node %d (index %d) is 0; versions start at 1",
            req.ids(i), first_index + i));
      }
      double x;
      std::memcpy(&x, t + i * sizeof(double), sizeof(double));
      if (!std::isfinite(x)) {
        return absl::InvalidArgumentError(
            absl::StrFormat("time of node %d (index %d) is %f", req.ids(i),
                            first_index + i, x));
      }
    }
    return absl::OkStatus();
  }

  // Pushes validated packed payloads (copied when misaligned).
  absl::Status StorePush(absl::Span<const int64_t> ids, const char* states,
                         const char* versions, const char* times, int64_t n,
                         int32_t writer) {
    std::vector<float> state_copy;
    std::vector<uint64_t> version_copy;
    std::vector<double> time_copy;
    const float* sp = Aligned(states, n * dim_, &state_copy);
    const uint64_t* vp = Aligned(versions, n, &version_copy);
    const double* tp = Aligned(times, n, &time_copy);
    RETURN_IF_ERROR(store_->Push(ids, absl::MakeConstSpan(sp, n * dim_),
                                 absl::MakeConstSpan(vp, n),
                                 absl::MakeConstSpan(tp, n), writer));
    metrics_.Pushed(n, n * BytesPerState(dim_));
    return absl::OkStatus();
  }

 private:
  // `data` as n values of T: in place when aligned, else copied to *copy.
  template <typename T>
  static const T* Aligned(const char* data, int64_t n, std::vector<T>* copy) {
    if (reinterpret_cast<uintptr_t>(data) % alignof(T) == 0) {
      return reinterpret_cast<const T*>(data);
    }
    copy->resize(n);
    std::memcpy(copy->data(), data, n * sizeof(T));
    return copy->data();
  }

  // RunUnary of fn(const Req*, Resp*) on the parsed request; the answer is
  // serialized into `response` when fn succeeds.
  template <typename Req, typename Resp, typename Fn>
  grpc::ServerUnaryReactor* RunParsed(grpc::CallbackServerContext* ctx,
                                      const char* method,
                                      const grpc::ByteBuffer* request,
                                      grpc::ByteBuffer* response, Fn fn) {
    return RunUnary(ctx, method, [method, request, response, fn] {
      Req req;
      RETURN_IF_ERROR(ParseRequest(*request, method, &req));
      Resp resp;
      RETURN_IF_ERROR(fn(&req, &resp));
      bool own = false;
      grpc::Status s =
          grpc::SerializationTraits<Resp>::Serialize(resp, response, &own);
      if (!s.ok()) {
        return absl::InternalError(absl::StrCat(
            method, ": cannot serialize the answer: ", s.error_message()));
      }
      return absl::OkStatus();
    });
  }

  template <typename Fn>
  grpc::ServerUnaryReactor* RunUnary(grpc::CallbackServerContext* ctx,
                                     const char* method, Fn fn) {
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    const double t0 = MonotonicSeconds();
    executor_->Submit([this, reactor, method, t0, fn = std::move(fn)] {
      const absl::Status s = fn();
      metrics_.Done(method, s, MonotonicSeconds() - t0);
      reactor->Finish(ToGrpcStatus(s));
    });
    return reactor;
  }

  absl::StatusOr<int64_t> Resolve(int64_t original,
                                  const std::string& kind) const {
    if (o_.id_map.empty()) return original;
    std::vector<int64_t> dense = o_.id_map.DenseIds(original, kind);
    if (dense.empty()) {
      return absl::NotFoundError(absl::StrCat(
          "original id ", original, kind.empty() ? "" : " of kind " + kind,
          " is not in the job's id map"));
    }
    if (dense.size() > 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "original id ", original,
          " names both a user and an item; set kind to 'user' or 'item'"));
    }
    return dense[0];
  }

  void FillNode(const memstore::NodeStateView& v, v1::NodeState* out) const {
    out->set_dense_id(v.id);
    const std::optional<IdMap::Entry> e = o_.id_map.Find(v.id);
    out->set_original_id(e ? e->original_id : v.id);
    if (e) out->set_kind(e->kind);
    out->set_dim(dim_);
    out->set_state(reinterpret_cast<const char*>(v.state.data()),
                   v.state.size() * sizeof(float));
    out->set_version(v.version);
    out->set_time(v.time);
    out->set_updates(v.updates);
    out->set_writer(v.writer);
    out->set_hot(v.hot);
  }

  absl::StatusOr<std::string> CheckpointPath(const std::string& name) const {
    if (!name.empty() && name[0] == '/' && o_.allow_absolute_checkpoint_paths) {
      return name;
    }
    if (o_.checkpoint_root.empty()) {
      return absl::FailedPreconditionError(
          "this server has no checkpoint directory");
    }
    std::string n = name;
    if (n.empty()) {
      n = "ckpt-" + NowIso8601();
      for (char& c : n) c = c == ':' ? '-' : c;
    }
    bool ok = n[0] != '.' && n.size() <= 200;
    for (char c : n) {
      ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '-' ||
                  c == '_' || c == '.');
    }
    if (!ok) {
      return absl::InvalidArgumentError(absl::StrCat(
          "checkpoint name '", name,
          "' must be letters, digits, '-', '_' or '.', not starting with "
          "'.'"));
    }
    std::error_code ec;
    fs::create_directories(o_.checkpoint_root, ec);
    if (ec) {
      return absl::InternalError(absl::StrCat(
          "cannot create ", o_.checkpoint_root, ": ", ec.message()));
    }
    return (fs::path(o_.checkpoint_root) / n).string();
  }

  NodeStateStore* const store_;
  const MemstoreServerOptions& o_;
  const int dim_;
  const int64_t id_end_;        // dense ids are < id_end_ (0: unbounded)
  const int64_t chunk_states_;  // states per PullStream chunk
  ServiceMetrics metrics_;
  std::unique_ptr<Executor> executor_;
  const std::shared_ptr<PullBufferPool> buffers_;
};

// Server side of PullStream: one store read on the executor, and the
// chunks, each a zero-copy view of that read (pull_wire.h). A chunk is sent
// as soon as the store reports its rows final (PullWithProgress), while the
// rest is still being read: the copy out of the store overlaps the network.
// The reactor finishes only after the read has returned and no queued
// Advance() is left, so it outlives every call into it.
class PullStreamReactor : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  PullStreamReactor(MemstoreService* svc, const grpc::ByteBuffer* request)
      : svc_(svc), request_(request), t0_(MonotonicSeconds()) {
    svc_->executor().Submit([this] { Begin(); });
  }

  void OnWriteDone(bool ok) override {
    {
      absl::MutexLock l(&mu_);
      writing_ = false;
      if (!ok) cancelled_ = true;
    }
    Advance();  // cheap: no copy, no store access
  }

  void OnDone() override { delete this; }

 private:
  void Begin() {
    absl::Status s = ParseRequest(*request_, "PullStream", &req_);
    if (s.ok()) s = svc_->ValidatePull(req_, /*stream=*/true);
    if (s.ok()) {
      int64_t chunk = svc_->chunk_states();
      if (req_.max_chunk_states() > 0) {
        chunk = std::min<int64_t>(chunk, req_.max_chunk_states());
      }
      std::shared_ptr<memstore::PulledStates> buffer = svc_->GetPullBuffer();
      {
        absl::MutexLock l(&mu_);
        n_ = req_.ids_size();
        chunk_ = chunk;
        pulled_ = buffer;
      }
      s = svc_->StorePull(req_, buffer.get(), [this](int64_t rows) {
        // Not Advance() here: gRPC would send the chunk on this thread,
        // between copies. Another executor thread starts the first write;
        // later ones start from OnWriteDone.
        absl::MutexLock l(&mu_);
        ready_ = rows;
        if (!writing_ && !kicked_ && NextChunkReadLocked()) {
          kicked_ = true;
          svc_->executor().Submit([this] { Advance(/*kick=*/true); });
        }
      });
    }
    // The read's end is published inside Advance's critical section: once
    // read_done_ is set another thread may finish the call (and OnDone
    // delete the reactor), so nothing here may touch `this` after it.
    Advance(/*kick=*/false, &s);
  }

  // The store has read every row of the next chunk.
  bool NextChunkReadLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return ready_ >= next_ + std::min(chunk_, n_ - next_);
  }

  // Starts the next write when its rows are ready and none is in flight,
  // or finishes the call once everything is sent (or failed) and the store
  // read has returned.
  // `kick`: the queued call of the read's progress callback, which clears
  // kicked_ in the same critical section (clearing it before would let
  // another thread finish the call, and OnDone delete the reactor, while
  // this one still runs). `read`: the store read's result, set by Begin
  // when the read returns, for the same reason.
  void Advance(bool kick = false, const absl::Status* read = nullptr) {
    absl::Status finish;
    bool write = false;
    {
      absl::MutexLock l(&mu_);
      if (kick) kicked_ = false;
      if (read != nullptr) {
        read_done_ = true;
        read_status_ = *read;
        if (read->ok()) ready_ = n_;
      }
      if (writing_ || finished_) return;
      if (cancelled_ || (read_done_ && !read_status_.ok())) {
        if (!read_done_) return;  // the store is still writing into pulled_
        finish = cancelled_
                     ? absl::CancelledError("PullStream: the client went away")
                     : read_status_;
      } else if (next_ >= n_) {
        if (!read_done_) return;
        finish = absl::OkStatus();
      } else {
        if (!NextChunkReadLocked()) return;
        const int64_t count = std::min(chunk_, n_ - next_);
        msg_ = EncodePullResponse(pulled_, svc_->dim(), next_, next_, count);
        next_ += count;
        writing_ = write = true;
      }
      if (!write) {
        // A queued kick still holds `this`: it finishes the call when it
        // runs.
        if (kicked_) return;
        finished_ = true;
        pulled_.reset();
      }
    }
    if (write) {
      StartWrite(&msg_);
    } else {
      svc_->metrics().Done("PullStream", finish, MonotonicSeconds() - t0_);
      Finish(ToGrpcStatus(finish));
    }
  }

  MemstoreService* const svc_;
  const grpc::ByteBuffer* const request_;
  const double t0_;
  v1::PullRequest req_;
  absl::Mutex mu_;
  std::shared_ptr<memstore::PulledStates> pulled_ ABSL_GUARDED_BY(mu_);
  int64_t n_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t chunk_ ABSL_GUARDED_BY(mu_) = 1;
  int64_t next_ ABSL_GUARDED_BY(mu_) = 0;   // first row not yet sent
  int64_t ready_ ABSL_GUARDED_BY(mu_) = 0;  // rows the store has finished
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool kicked_ ABSL_GUARDED_BY(mu_) = false;  // an Advance() is queued
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool read_done_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status read_status_ ABSL_GUARDED_BY(mu_);
  grpc::ByteBuffer msg_;  // the write in flight (written under mu_)
};

// Server side of PushStream: validates and gathers the chunks as they
// arrive, applies them as one push on the executor at half-close. All or
// nothing: a stream the client cancels, or that passes its deadline,
// before half-close applies none of its chunks.
class PushStreamReactor : public grpc::ServerReadReactor<grpc::ByteBuffer> {
 public:
  PushStreamReactor(MemstoreService* svc, grpc::CallbackServerContext* ctx,
                    grpc::ByteBuffer* response)
      : svc_(svc), ctx_(ctx), response_(response), t0_(MonotonicSeconds()) {
    StartRead(&raw_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      // Reads end at half-close, or because the call was cancelled (by the
      // client, a deadline or a broken connection): only the first commits.
      if (ctx_->IsCancelled()) {
        Done(absl::CancelledError(
            absl::StrCat("PushStream cancelled before half-close: none of ",
                         ids_.size(), " received states applied")));
        return;
      }
      svc_->executor().Submit([this] {
        const int64_t n = ids_.size();
        absl::Status s =
            n == 0 ? absl::OkStatus()
                   : svc_->StorePush(
                         ids_, reinterpret_cast<char*>(states_.data()),
                         reinterpret_cast<char*>(versions_.data()),
                         reinterpret_cast<char*>(times_.data()), n, writer_);
        if (s.ok()) {
          v1::PushResponse resp;
          resp.set_received(n);
          bool own = false;
          grpc::Status gs =
              grpc::SerializationTraits<v1::PushResponse>::Serialize(
                  resp, response_, &own);
          if (!gs.ok()) s = absl::InternalError(gs.error_message());
        }
        Done(s);
      });
      return;
    }
    absl::Status parsed = ParseRequest(raw_, "PushStream", &msg_);
    if (!parsed.ok()) {
      Done(absl::InvalidArgumentError(
          absl::StrCat(parsed.message(), " (chunk after ", ids_.size(),
                       " states; none applied)")));
      return;
    }
    if (ids_.empty() && !started_) {
      writer_ = msg_.writer();
      started_ = true;
    }
    absl::Status s = svc_->ValidatePushChunk(msg_, ids_.size(), writer_);
    if (!s.ok()) {
      Done(s);
      return;
    }
    const int64_t n = msg_.ids_size();
    if (n > 0) {  // an empty chunk is valid (and memcpy of nothing from an
                  // empty vector's null data() is not)
      ids_.insert(ids_.end(), msg_.ids().begin(), msg_.ids().end());
      const size_t s0 = states_.size(), r0 = times_.size();
      states_.resize(s0 + n * svc_->dim());
      std::memcpy(states_.data() + s0, msg_.states().data(),
                  msg_.states().size());
      versions_.resize(r0 + n);
      std::memcpy(versions_.data() + r0, msg_.version().data(),
                  msg_.version().size());
      times_.resize(r0 + n);
      std::memcpy(times_.data() + r0, msg_.time().data(), msg_.time().size());
    }
    StartRead(&raw_);
  }

  void OnDone() override { delete this; }

 private:
  void Done(const absl::Status& s) {
    svc_->metrics().Done("PushStream", s, MonotonicSeconds() - t0_);
    Finish(ToGrpcStatus(s));
  }

  MemstoreService* const svc_;
  grpc::CallbackServerContext* const ctx_;
  grpc::ByteBuffer* const response_;
  const double t0_;
  grpc::ByteBuffer raw_;
  v1::PushRequest msg_;
  bool started_ = false;
  int32_t writer_ = 0;
  std::vector<int64_t> ids_;
  std::vector<float> states_;
  std::vector<uint64_t> versions_;
  std::vector<double> times_;
};

grpc::ServerWriteReactor<grpc::ByteBuffer>* MemstoreService::PullStream(
    grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request) {
  return new PullStreamReactor(this, request);
}

grpc::ServerReadReactor<grpc::ByteBuffer>* MemstoreService::PushStream(
    grpc::CallbackServerContext* ctx, grpc::ByteBuffer* response) {
  return new PushStreamReactor(this, ctx, response);
}

}  // namespace

// ---------------------------------------------------------------- Server

class MemstoreServer::Impl {
 public:
  MemstoreServerOptions options;
  std::unique_ptr<MetricsRegistry> own_metrics;
  std::shared_ptr<StoreCollectable> collectable;
  std::unique_ptr<MemstoreService> service;
  std::unique_ptr<grpc::Server> server;
  int port = 0;
  std::string address;
  absl::Mutex mu;
  bool shut_down ABSL_GUARDED_BY(mu) = false;
};

MemstoreServer::MemstoreServer(std::unique_ptr<Impl> impl)
    : impl_(std::move(impl)) {}

MemstoreServer::~MemstoreServer() { Shutdown(); }

absl::StatusOr<std::unique_ptr<MemstoreServer>> MemstoreServer::Start(
    memstore::NodeStateStore* store, MemstoreServerOptions options,
    MetricsRegistry* metrics) {
  if (store == nullptr || store->dim() <= 0) {
    return absl::InvalidArgumentError("MemstoreServer needs an open store");
  }
  if (options.num_shards < 1 || options.shard_id < 0 ||
      options.shard_id >= options.num_shards) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "shard id %d is not in [0, %d)", options.shard_id, options.num_shards));
  }
  if (options.max_message_bytes < BytesPerState(store->dim()) + kMessageSlack ||
      options.max_message_bytes > (int64_t{1} << 31) - 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "max message size %d bytes must hold one state of dim %d and be < "
        "2 GiB",
        options.max_message_bytes, store->dim()));
  }
  if (options.num_nodes < 0 ||
      (options.num_nodes > 0 &&
       options.id_map.dense_end() > options.num_nodes)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "num_nodes %d must be >= 0 and cover the id map's %d dense ids",
        options.num_nodes, options.id_map.dense_end()));
  }
  if (options.executor_threads < 1 || options.max_batch < 1) {
    return absl::InvalidArgumentError(
        "executor_threads and max_batch must be >= 1");
  }
  auto impl = std::make_unique<Impl>();
  if (metrics == nullptr) {
    impl->own_metrics = std::make_unique<MetricsRegistry>();
    metrics = impl->own_metrics.get();
  }
  // Calls refused for their token never reach a handler: counted here, in
  // the same series (the registry outlives the server).
  auto credentials = MakeServerCredentials(
      options.security, [metrics](absl::string_view path) {
        ServiceMetrics::Refused(metrics, path);
      });
  if (!credentials.ok()) return credentials.status();
  impl->options = std::move(options);
  const MemstoreServerOptions& o = impl->options;
  impl->collectable = std::make_shared<StoreCollectable>(store);
  metrics->AddCollectable(impl->collectable);
  impl->service = std::make_unique<MemstoreService>(store, o, metrics);

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  const std::string listen = NormalizeAddress(o.listen);
  builder.AddListeningPort(listen, *credentials, &impl->port);
  // A port already in use is an error, not a second server sharing it
  // (gRPC sets SO_REUSEPORT by default: clients would be split between two
  // shards).
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.SetMaxReceiveMessageSize(static_cast<int>(o.max_message_bytes));
  builder.SetMaxSendMessageSize(static_cast<int>(o.max_message_bytes));
  builder.RegisterService(impl->service.get());
  impl->server = builder.BuildAndStart();
  if (!impl->server || impl->port == 0) {
    impl->collectable->Detach();
    return absl::UnavailableError(absl::StrCat("cannot listen on ", listen));
  }
  if (auto* health = impl->server->GetHealthCheckService()) {
    health->SetServingStatus(v1::Memstore::service_full_name(), true);
  }
  std::string host = listen.substr(0, listen.rfind(':'));
  if (host == "0.0.0.0" || host == "[::]" || host == "::" || host.empty()) {
    host = "127.0.0.1";
  }
  impl->address = absl::StrCat(host, ":", impl->port);
  return std::unique_ptr<MemstoreServer>(new MemstoreServer(std::move(impl)));
}

int MemstoreServer::port() const { return impl_->port; }
std::string MemstoreServer::address() const { return impl_->address; }

void MemstoreServer::Shutdown(double grace_seconds) {
  {
    absl::MutexLock l(&impl_->mu);
    if (impl_->shut_down) return;
    impl_->shut_down = true;
  }
  if (auto* health = impl_->server->GetHealthCheckService()) {
    health->Shutdown();
  }
  impl_->server->Shutdown(
      std::chrono::system_clock::now() +
      std::chrono::milliseconds(static_cast<int64_t>(grace_seconds * 1000)));
  impl_->server->Wait();
  impl_->service->StopExecutor();
  impl_->collectable->Detach();
}

}  // namespace mnemo::services
