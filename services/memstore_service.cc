#include "services/memstore_service.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>

#include <bit>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "mnemo/v1/memstore.grpc.pb.h"
#include "services/grpc_util.h"
#include "services/memstore_metrics.h"
#include "services/memstore_streams.h"
#include "services/metrics.h"
#include "services/pull_buffer_pool.h"
#include "services/pull_wire.h"
#include "util/executor.h"
#include "util/proc.h"
#include "util/status_macros.h"

namespace mnemo::services {

static_assert(std::endian::native == std::endian::little,
              "the wire format is little-endian float32/float64/uint64");

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

// `data` as n values of T: in place when aligned, else copied to *copy.
template <typename T>
absl::Span<const T> Aligned(const std::string& data, int64_t n,
                            std::vector<T>* copy) {
  if (reinterpret_cast<uintptr_t>(data.data()) % alignof(T) == 0) {
    return absl::MakeConstSpan(reinterpret_cast<const T*>(data.data()), n);
  }
  copy->resize(n);
  std::memcpy(copy->data(), data.data(), n * sizeof(T));
  return *copy;
}

// The arrays of a push message whose field sizes are checked, as the store
// takes them (copied when misaligned).
struct PushArrays {
  PushArrays(const v1::PushRequest& req, int dim)
      : ids(req.ids().data(), req.ids_size()),
        states(
            Aligned(req.states(), int64_t{req.ids_size()} * dim, &state_copy)),
        versions(Aligned(req.version(), req.ids_size(), &version_copy)),
        times(Aligned(req.time(), req.ids_size(), &time_copy)) {}
  PushArrays(const PushArrays&) = delete;
  PushArrays& operator=(const PushArrays&) = delete;

  std::vector<float> state_copy;
  std::vector<uint64_t> version_copy;
  std::vector<double> time_copy;
  absl::Span<const int64_t> ids;
  absl::Span<const float> states;
  absl::Span<const uint64_t> versions;
  absl::Span<const double> times;
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

class MemstoreService final : public ServiceBase, public StreamHost {
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
  Executor& executor() override { return *executor_; }
  MemstoreMetrics& metrics() override { return metrics_; }
  int64_t chunk_states() const override { return chunk_states_; }
  int dim() const override { return dim_; }

  // ---- unary RPCs

  grpc::ServerUnaryReactor* Pull(grpc::CallbackServerContext* ctx,
                                 const grpc::ByteBuffer* request,
                                 grpc::ByteBuffer* resp) override {
    return RunUnary(ctx, "Pull", [this, request, resp] {
      v1::PullRequest req;
      RETURN_IF_ERROR(ParseRequest(*request, "Pull", &req));
      RETURN_IF_ERROR(ValidatePull(req, /*stream=*/false));
      std::shared_ptr<memstore::PulledStates> p = buffers_->Get();
      RETURN_IF_ERROR(StorePull(req, p.get(), nullptr));
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
          RETURN_IF_ERROR(CheckPushMessage(*req, 0, req->writer()));
          const PushArrays a(*req, dim_);
          RETURN_IF_ERROR(memstore::ValidatePush(a.ids, a.states, a.versions,
                                                 a.times, req->writer(), dim_));
          RETURN_IF_ERROR(
              StorePush(a.ids, a.states, a.versions, a.times, req->writer()));
          resp->set_received(req->ids_size());
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

  // ---- validation and store access, shared by the handlers and (as a
  // StreamHost) the stream reactors

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

  std::shared_ptr<memstore::PulledStates> GetPullBuffer() override {
    return buffers_->Get();
  }

  absl::Status ValidatePull(const v1::PullRequest& req,
                            bool stream) const override {
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
                         const std::function<void(int64_t)>& ready) override {
    const int64_t n = req.ids_size();
    const auto ids = absl::MakeConstSpan(req.ids().data(), n);
    RETURN_IF_ERROR(ready ? store_->PullWithProgress(ids, p, ready)
                          : store_->Pull(ids, p));
    metrics_.Pulled(n, n * BytesPerState(dim_));
    return absl::OkStatus();
  }

  absl::Status CheckPushMessage(const v1::PushRequest& req, int64_t first_index,
                                int32_t writer) const override {
    RETURN_IF_ERROR(CheckShard(req.shard()));
    RETURN_IF_ERROR(CheckDim(req.dim()));
    const int64_t n = req.ids_size();
    RETURN_IF_ERROR(CheckBatch(first_index + n));
    // (A negative writer is memstore::ValidatePush's to report.)
    if (req.writer() >= 0 && req.writer() != writer) {
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
    return CheckIds(absl::MakeConstSpan(req.ids().data(), n));
  }

  absl::Status StorePush(absl::Span<const int64_t> ids,
                         absl::Span<const float> states,
                         absl::Span<const uint64_t> versions,
                         absl::Span<const double> times,
                         int32_t writer) override {
    RETURN_IF_ERROR(store_->Push(ids, states, versions, times, writer));
    const int64_t n = ids.size();
    metrics_.Pushed(n, n * BytesPerState(dim_));
    return absl::OkStatus();
  }

 private:
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
  MemstoreMetrics metrics_;
  std::unique_ptr<Executor> executor_;
  const std::shared_ptr<PullBufferPool> buffers_;
};

grpc::ServerWriteReactor<grpc::ByteBuffer>* MemstoreService::PullStream(
    grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request) {
  return NewPullStreamReactor(this, request);
}

grpc::ServerReadReactor<grpc::ByteBuffer>* MemstoreService::PushStream(
    grpc::CallbackServerContext* ctx, grpc::ByteBuffer* response) {
  return NewPushStreamReactor(this, ctx, response);
}

}  // namespace

// ---------------------------------------------------------------- Server

class MemstoreServer::Impl {
 public:
  MemstoreServerOptions options;
  std::unique_ptr<MetricsRegistry> own_metrics;
  std::shared_ptr<StoreStatsCollectable> collectable;
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

int64_t MinMessageBytes(int dim) { return BytesPerState(dim) + kMessageSlack; }

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
  if (options.max_message_bytes < MinMessageBytes(store->dim()) ||
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
        MemstoreMetrics::Refused(metrics, path);
      });
  if (!credentials.ok()) return credentials.status();
  impl->options = std::move(options);
  const MemstoreServerOptions& o = impl->options;
  impl->collectable = std::make_shared<StoreStatsCollectable>(store);
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
