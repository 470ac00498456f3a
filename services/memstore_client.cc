#include "services/memstore_client.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "mnemo/v1/memstore.grpc.pb.h"
#include "services/grpc_util.h"
#include "services/memstore_client_calls.h"
#include "services/pull_wire.h"
#include "util/executor.h"
#include "util/status_macros.h"

namespace mnemo::services {

static_assert(std::endian::native == std::endian::little,
              "the wire format is little-endian float32/float64/uint64");

namespace {

namespace v1 = ::mnemo::v1;
using Clock = std::chrono::system_clock;

constexpr int64_t kMessageSlack = 1024;

// Pulls whose states exceed this are streamed even when they would fit one
// message: a unary answer can only be copied out once it has fully arrived,
// a stream's chunks are copied out while the next ones travel.
constexpr int64_t kStreamAboveBytes = 2 << 20;
// Target size of the chunks of a streamed pull.
constexpr int64_t kStreamChunkBytes = 1 << 20;
// States one streamed pull request asks for at most: the shard reads a
// request's states into one buffer before streaming it (and its pool keeps
// that buffer for the next pull), so a pull of every state (an
// evaluation's, by each worker at once) would otherwise hold the shard's
// whole memory once per puller.
constexpr int64_t kStreamedPullStates = 65536;

memstore::NodeStateView FromProto(const v1::NodeState& n) {
  memstore::NodeStateView v;
  v.id = n.dense_id();
  v.state.resize(n.state().size() / sizeof(float));
  std::memcpy(v.state.data(), n.state().data(), v.state.size() * sizeof(float));
  v.version = n.version();
  v.time = n.time();
  v.updates = n.updates();
  v.writer = n.writer();
  v.hot = n.hot();
  return v;
}

RemoteNodeState RemoteFromProto(const v1::NodeState& n, int shard) {
  RemoteNodeState r;
  r.view = FromProto(n);
  r.original_id = n.original_id();
  r.kind = n.kind();
  r.shard = shard;
  return r;
}

}  // namespace

class MemstoreClient::Impl {
 public:
  Impl(MemstoreClientOptions o,
       const std::shared_ptr<grpc::ChannelCredentials>& credentials)
      : o_(std::move(o)) {
    for (const auto& a : o_.addresses) {
      auto channel = MakeMemstoreChannel(a, credentials);
      stubs_.push_back(v1::Memstore::NewStub(channel));
      channels_.push_back(channel);
    }
  }

  int num_shards() const { return static_cast<int>(stubs_.size()); }
  int dim() const { return dim_; }

  // Runs fn(s) for s in `shards`, in parallel when more than one: the first
  // shard on the calling thread, the others on the client's fan-out workers
  // (started once, not per call; a caller waiting for its shards runs
  // queued shard calls itself, so calls from several threads share them).
  // Returns the first error in shard order.
  absl::Status FanOut(const std::vector<int>& shards,
                      const std::function<absl::Status(int)>& fn) {
    if (shards.size() == 1) return fn(shards[0]);
    std::vector<absl::Status> status(shards.size());
    std::atomic<int64_t> pending(static_cast<int64_t>(shards.size()) - 1);
    for (size_t k = 1; k < shards.size(); ++k) {
      fan_out_.Submit([&, k] {
        status[k] = fn(shards[k]);
        pending.fetch_sub(1);
      });
    }
    status[0] = fn(shards[0]);
    fan_out_.RunUntilZero(&pending);
    for (const auto& s : status) {
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  }
  void set_dim(int d) { dim_ = d; }

  int ShardOf(int64_t id) const {
    if (o_.shard_of) return o_.shard_of(id, num_shards());
    return static_cast<int>(id % num_shards());
  }

  absl::Status CheckOpen() const {
    absl::MutexLock l(&mu_);
    if (closed_) return absl::FailedPreconditionError("client is closed");
    return absl::OkStatus();
  }
  void MarkClosed() {
    absl::MutexLock l(&mu_);
    closed_ = true;
  }

  void SetShard(int shard, v1::ShardRef* ref) const {
    ref->set_shard_id(shard);
    ref->set_num_shards(num_shards());
  }

  // Runs `attempt(ctx)` with the call's deadline, retrying idempotent calls
  // on UNAVAILABLE with backoff while the deadline allows, at most
  // max_attempts times.
  absl::Status Call(
      int shard, const char* method, bool idempotent,
      const std::function<grpc::Status(grpc::ClientContext*)>& attempt) const {
    return CallWithin(shard, method, idempotent, o_.deadline_seconds,
                      o_.max_attempts, attempt);
  }
  // Call with its own time (all attempts together) and attempt limit; each
  // attempt still gets at most deadline_seconds.
  absl::Status CallWithin(
      int shard, const char* method, bool idempotent, double seconds,
      int max_attempts,
      const std::function<grpc::Status(grpc::ClientContext*)>& attempt) const {
    const auto now = Clock::now();
    seconds = std::min(seconds, 1e7);  // about 4 months; inf would overflow
    const auto deadline =
        now + std::chrono::microseconds(static_cast<int64_t>(seconds * 1e6));
    const auto per_attempt = std::chrono::microseconds(
        static_cast<int64_t>(o_.deadline_seconds * 1e6));
    double backoff = o_.initial_backoff_seconds;
    thread_local std::mt19937_64 rng(std::random_device{}());
    for (int n = 1;; ++n) {
      grpc::ClientContext ctx;
      ctx.set_deadline(std::min(deadline, Clock::now() + per_attempt));
      const grpc::Status s = attempt(&ctx);
      if (s.ok()) return absl::OkStatus();
      const double jittered =
          backoff * std::uniform_real_distribution<double>(0.5, 1.0)(rng);
      const auto wake =
          Clock::now() +
          std::chrono::microseconds(static_cast<int64_t>(jittered * 1e6));
      if (!idempotent || s.error_code() != grpc::StatusCode::UNAVAILABLE ||
          n >= max_attempts || wake >= deadline) {
        absl::StatusCode code = static_cast<absl::StatusCode>(s.error_code());
        return ExplainConnectionError(
            absl::Status(code, absl::StrFormat("memstore shard %d (%s) %s: %s",
                                               shard, o_.addresses[shard],
                                               method, s.error_message())),
            o_.security);
      }
      std::this_thread::sleep_until(wake);
      backoff = std::min(backoff * 2, o_.max_backoff_seconds);
    }
  }

  // Each shard's statistics, its Stats call retried within `seconds` and
  // `attempts` (Call's limits, or Connect()'s wait for late shards).
  absl::StatusOr<std::vector<ShardStats>> StatsPerShard(double seconds,
                                                        int attempts) {
    const int S = num_shards();
    std::vector<ShardStats> out(S);
    RETURN_IF_ERROR(FanOut(AllShards(), [&](int s) {
      v1::StatsRequest req;
      SetShard(s, req.mutable_shard());
      v1::StatsResponse r;
      RETURN_IF_ERROR(CallWithin(s, "Stats", true, seconds, attempts,
                                 [&](grpc::ClientContext* c) {
                                   return stubs_[s]->Stats(c, req, &r);
                                 }));
      ShardStats& o = out[s];
      o.shard_id = r.shard_id();
      o.num_shards = r.num_shards();
      o.address = o_.addresses[s];
      o.max_message_bytes = r.max_message_bytes();
      o.has_id_map = r.has_id_map();
      memstore::StoreStats& t = o.stats;
      t.dim = r.dim();
      t.write_policy = r.write_policy();
      t.hot_states = r.hot_states();
      t.cold_states = r.cold_states();
      t.hot_bytes = r.hot_bytes();
      t.hot_capacity_bytes = r.hot_capacity_bytes();
      t.pulls = r.pulls();
      t.pushes = r.pushes();
      t.states_pulled = r.states_pulled();
      t.states_pushed = r.states_pushed();
      t.states_accepted = r.states_accepted();
      t.hot_hits = r.hot_hits();
      t.cold_hits = r.cold_hits();
      t.misses = r.misses();
      t.spills = r.spills();
      t.promotions = r.promotions();
      t.spill_writes = r.spill_writes();
      t.rocksdb_bytes = r.rocksdb_bytes();
      t.checkpoints = r.checkpoints();
      return absl::OkStatus();
    }));
    return out;
  }

  // States per message in each direction: state, version, time and the
  // id's varint.
  int64_t StatesPerMessage() const {
    return std::max<int64_t>(
        1, (o_.max_message_bytes - kMessageSlack) / (int64_t{dim_} * 4 + 26));
  }
  int64_t IdsPerMessage() const {
    return std::max<int64_t>(1, (o_.max_message_bytes - kMessageSlack) / 10);
  }

  // Pulls `ids` from one shard into out rows: row `pos[i]` for id i, or row
  // i when `pos` is null. The answer's states go straight from the received
  // gRPC buffers into `out` (pull_wire.h).
  absl::Status PullShard(int shard, absl::Span<const int64_t> ids,
                         const int64_t* pos, memstore::PulledStates* out) {
    const int64_t per_msg = StatesPerMessage();
    const int64_t row_bytes = int64_t{dim_} * sizeof(float);
    // Checks one answer (or chunk) for ids [base, base + count) and copies
    // it into `out`.
    auto scatter = [&](const PullResponseView& r, int64_t base,
                       int64_t count) -> absl::Status {
      if (r.offset() < 0 || r.count() < 0 || r.offset() > count ||
          r.count() > count - r.offset() ||
          static_cast<int64_t>(r.states_bytes()) != r.count() * row_bytes ||
          static_cast<int64_t>(r.time_bytes()) != r.count() * 8 ||
          static_cast<int64_t>(r.version_bytes()) != r.count() * 8) {
        return absl::InternalError(absl::StrFormat(
            "memstore shard %d sent a malformed pull chunk", shard));
      }
      r.CopyTo(dim_, base + r.offset(), pos, out);
      return absl::OkStatus();
    };
    auto request = [&](int64_t base, int64_t count, v1::PullRequest* req) {
      SetShard(shard, req->mutable_shard());
      req->set_dim(dim_);
      req->mutable_ids()->Add(ids.begin() + base, ids.begin() + base + count);
    };
    const int64_t n = ids.size();
    if (n <= per_msg && n * row_bytes <= kStreamAboveBytes) {
      v1::PullRequest req;
      request(0, n, &req);
      grpc::ByteBuffer resp;
      RETURN_IF_ERROR(Call(shard, "Pull", true, [&](grpc::ClientContext* ctx) {
        return CallPull(channels_[shard].get(), ctx, req, &resp);
      }));
      PullResponseView view;
      absl::Status s = view.Parse(resp);
      if (!s.ok()) {
        return absl::InternalError(absl::StrFormat(
            "memstore shard %d sent a malformed pull answer", shard));
      }
      return scatter(view, 0, n);
    }
    // Streamed: as many ids per request as one message holds, answered in
    // chunks of about kStreamChunkBytes, each copied out while the next ones
    // are on the way. Each request is one consistent read of the store.
    const int64_t chunk_states =
        std::clamp<int64_t>(kStreamChunkBytes / (row_bytes + 16), 1, per_msg);
    const int64_t group = std::min(IdsPerMessage(), kStreamedPullStates);
    for (int64_t base = 0; base < n; base += group) {
      const int64_t count = std::min<int64_t>(group, n - base);
      v1::PullRequest req;
      request(base, count, &req);
      req.set_max_chunk_states(static_cast<int32_t>(chunk_states));
      absl::Status scatter_status;
      RETURN_IF_ERROR(
          Call(shard, "PullStream", true, [&](grpc::ClientContext* ctx) {
            int64_t got = 0;
            grpc::Status s = ReadPullStream(
                channels_[shard].get(), ctx, req,
                [&](const PullResponseView& chunk) {
                  RETURN_IF_ERROR(scatter(chunk, base, count));
                  got += chunk.count();
                  return absl::OkStatus();
                },
                &scatter_status);
            // A bad chunk cancelled the call: its error, returned below, is
            // the reason (not the cancellation, nor a retry).
            if (!scatter_status.ok()) return grpc::Status::OK;
            if (s.ok() && got != count) {
              return grpc::Status(grpc::StatusCode::INTERNAL,
                                  absl::StrFormat("stream ended after %d of "
                                                  "%d states",
                                                  got, count));
            }
            return s;
          }));
      RETURN_IF_ERROR(scatter_status);
    }
    return absl::OkStatus();
  }

  // Pushes rows of the caller's arrays: row `pos[i]` for id i (or row i).
  absl::Status PushShard(int shard, absl::Span<const int64_t> ids,
                         const int64_t* pos, absl::Span<const float> states,
                         absl::Span<const uint64_t> versions,
                         absl::Span<const double> times, int32_t writer) {
    const int64_t per_msg = StatesPerMessage();
    const PushRows rows{ids, pos, states, versions, times, dim_};
    auto fill = [&](int64_t begin, int64_t count, v1::PushRequest* req) {
      SetShard(shard, req->mutable_shard());
      req->set_dim(dim_);
      req->set_writer(writer);
      FillPushRequest(rows, begin, count, req);
    };
    const int64_t n = ids.size();
    if (n <= per_msg) {
      v1::PushRequest req;
      fill(0, n, &req);
      v1::PushResponse resp;
      return Call(shard, "Push", true, [&](grpc::ClientContext* ctx) {
        return stubs_[shard]->Push(ctx, req, &resp);
      });
    }
    return Call(shard, "PushStream", true, [&](grpc::ClientContext* ctx) {
      v1::PushResponse resp;
      auto writer_stream = stubs_[shard]->PushStream(ctx, &resp);
      for (int64_t begin = 0; begin < n; begin += per_msg) {
        v1::PushRequest req;
        fill(begin, std::min(per_msg, n - begin), &req);
        if (!writer_stream->Write(req)) break;  // Finish() says why
      }
      writer_stream->WritesDone();
      return writer_stream->Finish();
    });
  }

  // Splits ids by shard: shard -> (ids, their positions in the request).
  struct Split {
    std::vector<int> shards;  // shards with ids, ascending
    std::vector<std::vector<int64_t>> ids, pos;
  };
  Split SplitByShard(absl::Span<const int64_t> ids) const {
    Split sp;
    sp.ids.resize(num_shards());
    sp.pos.resize(num_shards());
    for (size_t i = 0; i < ids.size(); ++i) {
      const int s = ids[i] < 0 ? 0 : ShardOf(ids[i]);
      sp.ids[s].push_back(ids[i]);
      sp.pos[s].push_back(i);
    }
    for (int s = 0; s < num_shards(); ++s) {
      if (!sp.ids[s].empty()) sp.shards.push_back(s);
    }
    return sp;
  }

  std::vector<int> AllShards() const {
    std::vector<int> all(num_shards());
    for (int i = 0; i < num_shards(); ++i) all[i] = i;
    return all;
  }

  absl::Status ValidateShards(absl::Span<const int64_t> ids) const {
    if (!o_.shard_of) return absl::OkStatus();
    for (int64_t id : ids) {
      if (id < 0) continue;
      const int s = ShardOf(id);
      if (s < 0 || s >= num_shards()) {
        return absl::InternalError(
            absl::StrFormat("shard function maps id %d to shard %d of %d", id,
                            s, num_shards()));
      }
    }
    return absl::OkStatus();
  }

  const MemstoreClientOptions o_;
  std::vector<std::unique_ptr<v1::Memstore::Stub>> stubs_;
  std::vector<std::shared_ptr<grpc::Channel>> channels_;
  // Last member: its workers stop before the stubs they call go.
  Executor fan_out_{
      std::max<int>(0, static_cast<int>(o_.addresses.size()) - 1)};

 private:
  int dim_ = 0;
  mutable absl::Mutex mu_;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

MemstoreClient::MemstoreClient(std::unique_ptr<Impl> impl)
    : impl_(std::move(impl)) {}
MemstoreClient::~MemstoreClient() = default;

absl::StatusOr<std::unique_ptr<MemstoreClient>> MemstoreClient::Connect(
    MemstoreClientOptions options) {
  if (options.addresses.empty()) {
    return absl::InvalidArgumentError("no memory-store address given");
  }
  if (options.dim < 0 || options.deadline_seconds <= 0 ||
      options.max_attempts < 1 || options.max_message_bytes < 4096 ||
      !(options.connect_wait_seconds >= 0)) {
    return absl::InvalidArgumentError(
        "memstore client: dim >= 0, deadline > 0, max_attempts >= 1, "
        "max_message_bytes >= 4096 and connect_wait_seconds >= 0 required");
  }
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::ChannelCredentials> credentials,
                   MakeChannelCredentials(options.security));
  const int dim = options.dim;
  auto impl = std::make_unique<Impl>(std::move(options), credentials);
  impl->set_dim(dim);
  std::unique_ptr<MemstoreClient> client(new MemstoreClient(std::move(impl)));
  Impl& c = *client->impl_;
  if (const double wait = c.o_.connect_wait_seconds; wait > 0 || dim == 0) {
    // Shards that start after this client (docker-compose, a restarted pod)
    // refuse connections until they listen: with a wait, ask each until it
    // answers. The same answers give the width when it is not given.
    ASSIGN_OR_RETURN(
        auto stats,
        wait > 0 ? c.StatsPerShard(wait, std::numeric_limits<int>::max())
                 : c.StatsPerShard(c.o_.deadline_seconds, c.o_.max_attempts));
    if (dim == 0) c.set_dim(stats[0].stats.dim);
  }
  return client;
}

int MemstoreClient::dim() const { return impl_->dim(); }
int MemstoreClient::num_shards() const { return impl_->num_shards(); }

absl::Status MemstoreClient::Pull(absl::Span<const int64_t> ids,
                                  memstore::PulledStates* out) {
  RETURN_IF_ERROR(impl_->CheckOpen());
  RETURN_IF_ERROR(impl_->ValidateShards(ids));
  const int64_t n = ids.size();
  out->states.resize(n * dim());
  out->version.resize(n);
  out->time.resize(n);
  if (n == 0) return absl::OkStatus();
  if (impl_->num_shards() == 1) return impl_->PullShard(0, ids, nullptr, out);
  Impl::Split sp = impl_->SplitByShard(ids);
  return impl_->FanOut(sp.shards, [&](int s) {
    return impl_->PullShard(s, sp.ids[s], sp.pos[s].data(), out);
  });
}

absl::Status MemstoreClient::Push(absl::Span<const int64_t> ids,
                                  absl::Span<const float> states,
                                  absl::Span<const uint64_t> versions,
                                  absl::Span<const double> times,
                                  int32_t writer) {
  RETURN_IF_ERROR(impl_->CheckOpen());
  RETURN_IF_ERROR(impl_->ValidateShards(ids));
  const int64_t n = ids.size();
  if (static_cast<int64_t>(states.size()) != n * dim() ||
      static_cast<int64_t>(versions.size()) != n ||
      static_cast<int64_t>(times.size()) != n) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "push of %d ids needs %d state values, %d versions and %d times, got "
        "%d, %d and %d",
        n, n * dim(), n, n, states.size(), versions.size(), times.size()));
  }
  if (n == 0) return absl::OkStatus();
  if (impl_->num_shards() == 1) {
    return impl_->PushShard(0, ids, nullptr, states, versions, times, writer);
  }
  // Several shards: validate here, so a bad push changes no shard.
  RETURN_IF_ERROR(
      memstore::ValidatePush(ids, states, versions, times, writer, dim()));
  Impl::Split sp = impl_->SplitByShard(ids);
  return impl_->FanOut(sp.shards, [&](int s) {
    return impl_->PushShard(s, sp.ids[s], sp.pos[s].data(), states, versions,
                            times, writer);
  });
}

absl::StatusOr<memstore::NodeStateView> MemstoreClient::Get(int64_t id) {
  RETURN_IF_ERROR(impl_->CheckOpen());
  if (id < 0) {
    return absl::InvalidArgumentError(absl::StrCat("negative node id ", id));
  }
  RETURN_IF_ERROR(impl_->ValidateShards({id}));
  const int shard = impl_->ShardOf(id);
  v1::GetRequest req;
  impl_->SetShard(shard, req.mutable_shard());
  req.set_dense_id(id);
  v1::NodeState resp;
  RETURN_IF_ERROR(impl_->Call(shard, "Get", true, [&](grpc::ClientContext* c) {
    return impl_->stubs_[shard]->Get(c, req, &resp);
  }));
  return FromProto(resp);
}

absl::StatusOr<RemoteNodeState> MemstoreClient::GetByOriginalId(
    int64_t original_id, const std::string& kind) {
  RETURN_IF_ERROR(impl_->CheckOpen());
  const int S = impl_->num_shards();
  std::vector<absl::StatusOr<v1::NodeState>> found(S);
  RETURN_IF_ERROR(impl_->FanOut(impl_->AllShards(), [&](int s) {
    v1::GetRequest req;
    impl_->SetShard(s, req.mutable_shard());
    req.set_original_id(original_id);
    req.set_kind(kind);
    v1::NodeState resp;
    absl::Status st = impl_->Call(s, "Get", true, [&](grpc::ClientContext* c) {
      return impl_->stubs_[s]->Get(c, req, &resp);
    });
    if (st.ok()) {
      found[s] = resp;
    } else {
      found[s] = st;
    }
    return st.code() == absl::StatusCode::kNotFound ? absl::OkStatus() : st;
  }));
  for (int s = 0; s < S; ++s) {
    if (found[s].ok()) return RemoteFromProto(*found[s], s);
  }
  return found[0].status();  // NOT_FOUND from shard 0; message says why
}

absl::StatusOr<std::vector<RemoteNodeState>> MemstoreClient::ListRecentNodes(
    int64_t n) {
  RETURN_IF_ERROR(impl_->CheckOpen());
  if (n < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("ListRecent: n must be >= 0, got ", n));
  }
  if (n == 0) return std::vector<RemoteNodeState>{};
  const int S = impl_->num_shards();
  std::vector<v1::ListRecentResponse> resp(S);
  RETURN_IF_ERROR(impl_->FanOut(impl_->AllShards(), [&](int s) {
    v1::ListRecentRequest req;
    impl_->SetShard(s, req.mutable_shard());
    req.set_n(n);
    return impl_->Call(s, "ListRecent", true, [&](grpc::ClientContext* c) {
      return impl_->stubs_[s]->ListRecent(c, req, &resp[s]);
    });
  }));
  std::vector<RemoteNodeState> all;
  for (int s = 0; s < S; ++s) {
    for (const auto& node : resp[s].nodes()) {
      all.push_back(RemoteFromProto(node, s));
    }
  }
  // As the store orders them: highest version first, ties by ascending id.
  std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) {
    if (a.view.version != b.view.version) {
      return a.view.version > b.view.version;
    }
    return a.view.id < b.view.id;
  });
  if (static_cast<int64_t>(all.size()) > n) all.resize(n);
  return all;
}

absl::StatusOr<std::vector<memstore::NodeStateView>> MemstoreClient::ListRecent(
    int64_t n) {
  ASSIGN_OR_RETURN(auto nodes, ListRecentNodes(n));
  std::vector<memstore::NodeStateView> out;
  out.reserve(nodes.size());
  for (auto& r : nodes) out.push_back(std::move(r.view));
  return out;
}

absl::StatusOr<std::vector<ShardStats>> MemstoreClient::StatsPerShard() {
  RETURN_IF_ERROR(impl_->CheckOpen());
  return impl_->StatsPerShard(impl_->o_.deadline_seconds,
                              impl_->o_.max_attempts);
}

absl::StatusOr<memstore::StoreStats> MemstoreClient::Stats() {
  ASSIGN_OR_RETURN(auto shards, StatsPerShard());
  memstore::StoreStats sum = shards[0].stats;
  for (size_t i = 1; i < shards.size(); ++i) {
    const memstore::StoreStats& t = shards[i].stats;
    sum.hot_states += t.hot_states;
    sum.cold_states += t.cold_states;
    sum.hot_bytes += t.hot_bytes;
    sum.hot_capacity_bytes += t.hot_capacity_bytes;
    sum.pulls = std::max(sum.pulls, t.pulls);
    sum.pushes = std::max(sum.pushes, t.pushes);
    sum.states_pulled += t.states_pulled;
    sum.states_pushed += t.states_pushed;
    sum.states_accepted += t.states_accepted;
    sum.hot_hits += t.hot_hits;
    sum.cold_hits += t.cold_hits;
    sum.misses += t.misses;
    sum.spills += t.spills;
    sum.promotions += t.promotions;
    sum.spill_writes += t.spill_writes;
    sum.rocksdb_bytes += t.rocksdb_bytes;
    sum.checkpoints += t.checkpoints;
  }
  return sum;
}

absl::Status MemstoreClient::Checkpoint(const std::string& dir) {
  RETURN_IF_ERROR(impl_->CheckOpen());
  const int S = impl_->num_shards();
  return impl_->FanOut(impl_->AllShards(), [&](int s) {
    v1::CheckpointRequest req;
    impl_->SetShard(s, req.mutable_shard());
    req.set_name(S == 1 ? dir : absl::StrCat(dir, "-shard", s));
    v1::CheckpointResponse resp;
    return impl_->Call(s, "Checkpoint", false, [&](grpc::ClientContext* c) {
      return impl_->stubs_[s]->Checkpoint(c, req, &resp);
    });
  });
}

absl::Status MemstoreClient::Close() {
  RETURN_IF_ERROR(impl_->CheckOpen());
  impl_->MarkClosed();
  return absl::OkStatus();
}

absl::StatusOr<bool> CheckHealth(const std::string& address,
                                 double deadline_seconds,
                                 const std::string& service,
                                 const ClientSecurity& security) {
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::ChannelCredentials> credentials,
                   MakeChannelCredentials(security));
  auto stub = grpc::health::v1::Health::NewStub(
      MakeMemstoreChannel(address, credentials));
  grpc::ClientContext ctx;
  ctx.set_deadline(
      Clock::now() +
      std::chrono::microseconds(static_cast<int64_t>(deadline_seconds * 1e6)));
  grpc::health::v1::HealthCheckRequest req;
  req.set_service(service);
  grpc::health::v1::HealthCheckResponse resp;
  grpc::Status s = stub->Check(&ctx, req, &resp);
  if (s.error_code() == grpc::StatusCode::NOT_FOUND) return false;
  if (!s.ok()) return ExplainConnectionError(FromGrpcStatus(s), security);
  return resp.status() == grpc::health::v1::HealthCheckResponse::SERVING;
}

}  // namespace mnemo::services
