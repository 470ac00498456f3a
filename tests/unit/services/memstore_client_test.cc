// The gRPC client as a NodeStateStore: the shared store contract suite over
// an in-process server on 127.0.0.1:0, plus sharding, streaming and
// failure behaviour.
#include "services/memstore_client.h"

#include <dlfcn.h>
#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <thread>

#include "mnemo/v1/memstore.pb.h"
#include "services/memstore_service.h"
#include "services/metrics.h"
#include "tests/unit/memstore/store_contract.h"
#include "util/status_matchers.h"

// Counts the threads this process starts: the test binary's pthread_create
// comes before the C library's for every library that starts threads.
std::atomic<int64_t> g_threads_started{0};
extern "C" int pthread_create(pthread_t* thread, const pthread_attr_t* attr,
                              void* (*start)(void*), void* arg) {
  using Create =
      int (*)(pthread_t*, const pthread_attr_t*, void* (*)(void*), void*);
  static const Create real =
      reinterpret_cast<Create>(dlsym(RTLD_NEXT, "pthread_create"));
  g_threads_started.fetch_add(1);
  return real(thread, attr, start, arg);
}

namespace mnemo::services {
namespace {

namespace fs = std::filesystem;

fs::path TempDir(const std::string& tag) {
  static std::atomic<int> counter{0};
  fs::path d =
      fs::temp_directory_path() / ("mnemo_client_" + std::to_string(getpid()) +
                                   "_" + tag + "_" + std::to_string(counter++));
  fs::remove_all(d);
  return d;
}

// S shards, each a real store behind an in-process server.
struct Cluster {
  std::vector<fs::path> dirs;
  std::vector<std::unique_ptr<memstore::NodeStateStore>> stores;
  std::vector<std::unique_ptr<MemstoreServer>> servers;
  std::vector<std::string> addresses;

  // `listen`: shard i's address (default: a free port on 127.0.0.1).
  static absl::StatusOr<std::unique_ptr<Cluster>> Start(
      int dim, int shards, int64_t max_message_bytes = 4 << 20,
      int64_t hot_capacity_bytes = 0,
      const std::vector<std::string>& listen = {}) {
    auto c = std::make_unique<Cluster>();
    for (int s = 0; s < shards; ++s) {
      c->dirs.push_back(TempDir("shard" + std::to_string(s)));
      memstore::NodeStateStoreOptions so;
      so.dim = dim;
      so.data_dir = c->dirs.back().string();
      so.hot_capacity_bytes = hot_capacity_bytes;
      auto store = memstore::Open(so);
      if (!store.ok()) return store.status();
      MemstoreServerOptions o;
      o.shard_id = s;
      o.num_shards = shards;
      o.max_message_bytes = max_message_bytes;
      o.checkpoint_root = (c->dirs.back() / "checkpoints").string();
      o.allow_absolute_checkpoint_paths = true;
      if (s < static_cast<int>(listen.size())) o.listen = listen[s];
      auto server = MemstoreServer::Start(store->get(), o);
      if (!server.ok()) return server.status();
      c->addresses.push_back((*server)->address());
      c->stores.push_back(*std::move(store));
      c->servers.push_back(*std::move(server));
    }
    return c;
  }
  ~Cluster() {
    for (auto& s : servers) s->Shutdown();
    for (auto& s : stores) (void)s->Close();
    servers.clear();
    stores.clear();
    for (auto& d : dirs) fs::remove_all(d);
  }
};

// The client owning its cluster, so the contract suite can drop it.
class ClusterClient : public memstore::NodeStateStore {
 public:
  ClusterClient(std::unique_ptr<Cluster> c, std::unique_ptr<MemstoreClient> m)
      : cluster_(std::move(c)), client_(std::move(m)) {}
  ~ClusterClient() override {
    client_.reset();
    cluster_.reset();
  }
  absl::Status Pull(absl::Span<const int64_t> ids,
                    memstore::PulledStates* out) override {
    return client_->Pull(ids, out);
  }
  absl::Status Push(absl::Span<const int64_t> ids,
                    absl::Span<const float> states,
                    absl::Span<const uint64_t> versions,
                    absl::Span<const double> times, int32_t writer) override {
    return client_->Push(ids, states, versions, times, writer);
  }
  absl::StatusOr<memstore::NodeStateView> Get(int64_t id) override {
    return client_->Get(id);
  }
  absl::StatusOr<std::vector<memstore::NodeStateView>> ListRecent(
      int64_t n) override {
    return client_->ListRecent(n);
  }
  absl::StatusOr<memstore::StoreStats> Stats() override {
    return client_->Stats();
  }
  absl::Status Checkpoint(const std::string& dir) override {
    return client_->Checkpoint(dir);
  }
  absl::Status Close() override { return client_->Close(); }
  int dim() const override { return client_->dim(); }

 private:
  std::unique_ptr<Cluster> cluster_;
  std::unique_ptr<MemstoreClient> client_;
};

memstore::testing::StoreFactory GrpcFactory(int shards, int64_t max_message,
                                            int64_t hot_capacity) {
  return [=](int dim)
             -> absl::StatusOr<std::unique_ptr<memstore::NodeStateStore>> {
    auto c = Cluster::Start(dim, shards, max_message, hot_capacity);
    if (!c.ok()) return c.status();
    MemstoreClientOptions o;
    o.addresses = (*c)->addresses;
    o.max_message_bytes = max_message;
    o.deadline_seconds = 10;
    auto client = MemstoreClient::Connect(o);  // dim from shard 0
    if (!client.ok()) return client.status();
    return std::make_unique<ClusterClient>(*std::move(c), *std::move(client));
  };
}

using memstore::testing::StoreBackend;
MNEMO_INSTANTIATE_STORE_CONTRACT(
    Grpc, StoreBackend{"OneShard", GrpcFactory(1, 4 << 20, 0)},
    StoreBackend{"ThreeShardsSmallMessagesTiered", GrpcFactory(3, 4096, 512)});

std::vector<float> StateOf(int64_t id, int dim, double t) {
  std::vector<float> s(dim);
  for (int k = 0; k < dim; ++k) s[k] = id * 0.5f + k + static_cast<float>(t);
  return s;
}

TEST(MemstoreClientTest, ShardsByPluggableFunctionAndStreamsLargeBatches) {
  constexpr int kDim = 16;
  auto c = Cluster::Start(kDim, 2, /*max_message_bytes=*/8192);
  ASSERT_THAT(c, IsOk());
  MemstoreClientOptions o;
  o.addresses = (*c)->addresses;
  o.dim = kDim;
  o.max_message_bytes = 8192;
  o.shard_of = [](int64_t id, int n) { return id < 1000 ? 0 : 1; };
  auto client = MemstoreClient::Connect(o);
  ASSERT_THAT(client, IsOk());
  // 2000 states of 64 bytes: ~16 messages' worth, both directions.
  std::vector<int64_t> ids;
  std::vector<float> states;
  std::vector<uint64_t> versions;
  std::vector<double> times;
  for (int64_t i = 0; i < 2000; ++i) {
    ids.push_back((i * 7919) % 2000);
    auto s = StateOf(ids.back(), kDim, 1.0);
    states.insert(states.end(), s.begin(), s.end());
    versions.push_back(1);
    times.push_back(1.0);
  }
  ASSERT_THAT((*client)->Push(ids, states, versions, times, 0), IsOk());
  memstore::PulledStates p;
  ASSERT_THAT((*client)->Pull(ids, &p), IsOk());
  EXPECT_EQ(p.states, states);
  // The pluggable function decided placement: ids < 1000 on shard 0.
  auto per = (*client)->StatsPerShard();
  ASSERT_THAT(per, IsOk());
  EXPECT_EQ((*per)[0].stats.hot_states, 1000);
  EXPECT_EQ((*per)[1].stats.hot_states, 1000);
  auto shard1 = (*c)->stores[1]->Get(1500);
  ASSERT_THAT(shard1, IsOk());
  EXPECT_EQ(shard1->state, StateOf(1500, kDim, 1.0));
  // Lookups by original id fan out (no id map: original = dense).
  auto r = (*client)->GetByOriginalId(1500);
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ(r->shard, 1);
  EXPECT_THAT((*client)->GetByOriginalId(5000),
              StatusIs(absl::StatusCode::kNotFound, "never updated"));
}

// Calls that span shards run on the client's own workers: no thread is
// started per call.
TEST(MemstoreClientTest, ShardedCallsStartNoThreads) {
  constexpr int kDim = 16;
  auto c = Cluster::Start(kDim, 3);
  ASSERT_THAT(c, IsOk());
  MemstoreClientOptions o;
  o.addresses = (*c)->addresses;
  o.dim = kDim;
  auto client = MemstoreClient::Connect(o);
  ASSERT_THAT(client, IsOk());
  std::vector<int64_t> ids;
  std::vector<float> states;
  std::vector<uint64_t> versions;
  std::vector<double> times;
  for (int64_t i = 0; i < 300; ++i) {
    ids.push_back(i);
    auto st = StateOf(i, kDim, 1.0);
    states.insert(states.end(), st.begin(), st.end());
    versions.push_back(i + 1);
    times.push_back(1.0);
  }
  memstore::PulledStates out;
  // Warm-up: channels connect, gRPC starts its own threads.
  ASSERT_THAT((*client)->Push(ids, states, versions, times, 0), IsOk());
  ASSERT_THAT((*client)->Pull(ids, &out), IsOk());
  const int64_t before = g_threads_started.load();
  std::thread([] {}).join();
  ASSERT_GE(g_threads_started.load(), before + 1)
      << "the pthread_create counter does not see std::thread";
  for (int round = 0; round < 20; ++round) {
    for (auto& v : versions) v += 1000;
    ASSERT_THAT((*client)->Push(ids, states, versions, times, 0), IsOk());
    ASSERT_THAT((*client)->Pull(ids, &out), IsOk());
  }
  ASSERT_THAT((*client)->Stats(), IsOk());
  // A thread per shard call would be 80 over these 40 sharded calls. The
  // in-process servers' gRPC and RocksDB may start one now and then (under
  // load), hence the slack.
  EXPECT_LE(g_threads_started.load(), before + 1 + 4);
}

// Pulls above a few MiB that fit one message still travel as a stream
// (copied out chunk by chunk, straight from gRPC's buffers): every field
// arrives, in request order, with duplicates and never-updated ids, on one
// shard and scattered over two.
TEST(MemstoreClientTest, LargePullsMatchTheStoreOnOneAndTwoShards) {
  constexpr int kDim = 100;
  constexpr int64_t kIds = 12000;  // ~4.9 MB of states
  for (int shards : {1, 2}) {
    SCOPED_TRACE(shards);
    auto c = Cluster::Start(kDim, shards, /*max_message_bytes=*/64 << 20);
    ASSERT_THAT(c, IsOk());
    MemstoreClientOptions o;
    o.addresses = (*c)->addresses;
    o.dim = kDim;
    o.max_message_bytes = 64 << 20;
    auto client = MemstoreClient::Connect(o);
    ASSERT_THAT(client, IsOk());
    std::vector<int64_t> ids;
    std::vector<float> states;
    std::vector<uint64_t> versions;
    std::vector<double> times;
    for (int64_t i = 0; i < kIds; ++i) {
      ids.push_back(i);
      auto st = StateOf(i, kDim, 1.0);
      states.insert(states.end(), st.begin(), st.end());
      // Versions that need all 8 bytes, and repeated times.
      versions.push_back((uint64_t{1} << 62) + i);
      times.push_back(1.0 + i % 3);
    }
    ASSERT_THAT((*client)->Push(ids, states, versions, times, 0), IsOk());
    // A second push of every third id: a higher version there (at an
    // earlier time), its second update.
    std::vector<int64_t> again;
    std::vector<float> again_states;
    std::vector<uint64_t> again_versions;
    std::vector<double> again_times;
    for (int64_t i = 0; i < kIds; i += 3) {
      again.push_back(i);
      auto st = StateOf(i, kDim, 9.0);
      again_states.insert(again_states.end(), st.begin(), st.end());
      again_versions.push_back((uint64_t{1} << 63) + i);
      again_times.push_back(0.5);
    }
    ASSERT_THAT(
        (*client)->Push(again, again_states, again_versions, again_times, 1),
        IsOk());
    // Shuffled, with duplicates and ids never pushed.
    std::vector<int64_t> want;
    for (int64_t i = 0; i < kIds + 500; ++i)
      want.push_back((i * 7919) % (kIds + 400));
    memstore::PulledStates p;
    ASSERT_THAT((*client)->Pull(want, &p), IsOk());
    ASSERT_EQ(p.states.size(), want.size() * kDim);
    ASSERT_EQ(p.version.size(), want.size());
    ASSERT_EQ(p.time.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      const int64_t id = want[i];
      const int s = static_cast<int>(id % shards);
      memstore::PulledStates e;
      ASSERT_THAT((*c)->stores[s]->Pull(std::vector<int64_t>{id}, &e), IsOk());
      ASSERT_EQ(p.version[i], e.version[0]) << id;
      ASSERT_EQ(p.time[i], e.time[0]) << id;
      ASSERT_EQ(std::vector<float>(p.states.begin() + i * kDim,
                                   p.states.begin() + (i + 1) * kDim),
                e.states)
          << id;
      const uint64_t want_version = id >= kIds    ? 0
                                    : id % 3 == 0 ? (uint64_t{1} << 63) + id
                                                  : (uint64_t{1} << 62) + id;
      ASSERT_EQ(p.version[i], want_version) << id;
      ASSERT_EQ(p.time[i], id >= kIds    ? 0.0
                           : id % 3 == 0 ? 0.5
                                         : 1.0 + id % 3)
          << id;
    }
  }
}

TEST(MemstoreClientTest, DeadServerFailsWithUnavailableWithinTheDeadline) {
  const int port = FreeTcpPort();
  MemstoreClientOptions o;
  o.addresses = {"127.0.0.1:" + std::to_string(port)};
  o.dim = 4;
  o.deadline_seconds = 1.0;
  auto client = MemstoreClient::Connect(o);
  ASSERT_THAT(client, IsOk());
  const auto t0 = std::chrono::steady_clock::now();
  memstore::PulledStates p;
  EXPECT_THAT((*client)->Pull(std::vector<int64_t>{1, 2}, &p),
              StatusIs(absl::StatusCode::kUnavailable, "shard 0"));
  EXPECT_THAT((*client)->Checkpoint("x"),
              StatusIs(absl::StatusCode::kUnavailable, "Checkpoint"));
  const double s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
          .count();
  EXPECT_LT(s, 2.5);
  EXPECT_THAT(CheckHealth(o.addresses[0], 0.5),
              StatusIs(absl::StatusCode::kUnavailable, ""));
}

// A trainer started before its memory stores (docker-compose starts them
// together; a shard opening RocksDB listens a second later) waits for them
// at Connect() instead of failing its first call.
TEST(MemstoreClientTest, ConnectWaitsForAShardThatStartsLater) {
  const int port = FreeTcpPort();
  MemstoreClientOptions o;
  o.addresses = {"127.0.0.1:" + std::to_string(port)};
  o.deadline_seconds = 2;
  o.connect_wait_seconds = 30;
  absl::StatusOr<std::unique_ptr<MemstoreClient>> client;
  std::thread connect([&] { client = MemstoreClient::Connect(o); });
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  auto late = Cluster::Start(6, 1, 4 << 20, 0, o.addresses);
  ASSERT_THAT(late, IsOk());
  connect.join();
  ASSERT_THAT(client, IsOk());
  EXPECT_EQ((*client)->dim(), 6);  // asked at Connect(), dim 0 in the options
  client->reset();
  late->reset();

  // Without the wait, the same late shard fails Connect(); with a wait that
  // runs out, the error names the shard and comes when the wait ends.
  o.connect_wait_seconds = 0;
  EXPECT_THAT(MemstoreClient::Connect(o),
              StatusIs(absl::StatusCode::kUnavailable, "shard 0"));
  o.connect_wait_seconds = -1;  // bad options: nothing is dialled
  EXPECT_THAT(MemstoreClient::Connect(o),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "connect_wait_seconds >= 0"));
  o.connect_wait_seconds = 1;
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_THAT(MemstoreClient::Connect(o),
              StatusIs(absl::StatusCode::kUnavailable, "shard 0"));
  const double s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
          .count();
  EXPECT_LT(s, 5);
}

TEST(MemstoreClientTest, WrongDimIsRejectedByTheServer) {
  auto c = Cluster::Start(8, 1);
  ASSERT_THAT(c, IsOk());
  MemstoreClientOptions o;
  o.addresses = (*c)->addresses;
  o.dim = 4;
  auto client = MemstoreClient::Connect(o);
  ASSERT_THAT(client, IsOk());
  memstore::PulledStates p;
  EXPECT_THAT((*client)->Pull(std::vector<int64_t>{1}, &p),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "request dim 4 does not match the store's dim 8"));
  EXPECT_THAT(CheckHealth((*c)->addresses[0], 2), IsOk());
  EXPECT_TRUE(*CheckHealth((*c)->addresses[0], 2));
}

// A faulty peer: a real gRPC server that answers every Pull and PullStream
// with one chunk of two states whose state bytes hold only one.
class ShortPullAnswers final : public grpc::CallbackGenericService {
 public:
  explicit ShortPullAnswers(int dim) : dim_(dim) {}

  grpc::ServerGenericBidiReactor* CreateReactor(
      grpc::GenericCallbackServerContext*) override {
    class Reactor final : public grpc::ServerGenericBidiReactor {
     public:
      explicit Reactor(int dim) : dim_(dim) { StartRead(&request_); }
      void OnReadDone(bool ok) override {
        if (!ok) {
          Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "none"));
          return;
        }
        v1::PullResponse r;
        r.set_offset(0);
        r.set_count(2);
        r.set_states(std::string(dim_ * sizeof(float), '\0'));
        r.set_time(std::string(16, '\0'));
        r.set_version(std::string(16, '\0'));
        grpc::Slice slice(r.SerializeAsString());
        answer_ = grpc::ByteBuffer(&slice, 1);
        StartWriteAndFinish(&answer_, grpc::WriteOptions(), grpc::Status::OK);
      }
      void OnDone() override { delete this; }

     private:
      const int dim_;
      grpc::ByteBuffer request_, answer_;
    };
    return new Reactor(dim_);
  }

 private:
  const int dim_;
};

// A malformed pull answer is an error naming the shard, for a unary Pull
// and for a streamed one (where the client cancels the rest of the
// stream), never states taken from the wrong bytes.
TEST(MemstoreClientTest, MalformedPullAnswersAreErrors) {
  constexpr int kDim = 100;
  ShortPullAnswers service(kDim);
  grpc::ServerBuilder b;
  int port = 0;
  b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  b.RegisterCallbackGenericService(&service);
  std::unique_ptr<grpc::Server> server = b.BuildAndStart();
  ASSERT_NE(server, nullptr);
  MemstoreClientOptions o;
  o.addresses = {"127.0.0.1:" + std::to_string(port)};
  o.dim = kDim;
  o.deadline_seconds = 10;
  auto client = MemstoreClient::Connect(o);
  ASSERT_THAT(client, IsOk());
  // 10 states are one unary Pull; 8,000 (3.2 MB) are a PullStream.
  for (int64_t n : {10, 8000}) {
    SCOPED_TRACE(n);
    std::vector<int64_t> ids(n);
    for (int64_t i = 0; i < n; ++i) ids[i] = i;
    memstore::PulledStates p;
    EXPECT_THAT((*client)->Pull(ids, &p),
                StatusIs(absl::StatusCode::kInternal,
                         "memstore shard 0 sent a malformed pull chunk"));
  }
  server->Shutdown();
}

}  // namespace
}  // namespace mnemo::services
