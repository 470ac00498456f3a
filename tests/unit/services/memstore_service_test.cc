// The memory-store gRPC service over a real store, through raw stubs:
// request validation (each rejected request changes nothing), streaming,
// lookups by original id, health, reflection and metrics.
#include "services/memstore_service.h"

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include "grpc/health/v1/health.grpc.pb.h"
#include "mnemo/v1/memstore.grpc.pb.h"
#include "services/grpc_util.h"
#include "services/metrics.h"
#include "util/status_matchers.h"

namespace mnemo::services {
namespace {

namespace fs = std::filesystem;
namespace v1 = ::mnemo::v1;
constexpr int kDim = 4;

std::string Floats(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4);
}
std::string Doubles(const std::vector<double>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 8);
}
std::string Uint64s(const std::vector<uint64_t>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 8);
}
template <typename T>
std::vector<T> Unpack(const std::string& bytes) {
  std::vector<T> v(bytes.size() / sizeof(T));
  std::memcpy(v.data(), bytes.data(), v.size() * sizeof(T));
  return v;
}

class MemstoreServiceTest : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("mnemo_svc_" + std::to_string(getpid()) + "_" +
            testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    server_.reset();
    store_.reset();
    fs::remove_all(dir_);
  }

  void Start(MemstoreServerOptions o = {}) {
    memstore::NodeStateStoreOptions so;
    so.dim = kDim;
    so.data_dir = (dir_ / "data").string();
    auto store = memstore::Open(so);
    ASSERT_THAT(store, IsOk());
    store_ = *std::move(store);
    o.checkpoint_root = (dir_ / "ckpt").string();
    auto server = MemstoreServer::Start(store_.get(), std::move(o), &metrics_);
    ASSERT_THAT(server, IsOk());
    server_ = *std::move(server);
    channel_ = grpc::CreateChannel(server_->address(),
                                   grpc::InsecureChannelCredentials());
    stub_ = v1::Memstore::NewStub(channel_);
  }

  // A push of `ids` at time t, version 2t + 1 (t >= 0).
  v1::PushRequest PushOf(std::vector<int64_t> ids, double t) {
    v1::PushRequest r;
    r.set_dim(kDim);
    std::vector<float> s;
    std::vector<uint64_t> versions;
    std::vector<double> times;
    for (int64_t id : ids) {
      r.add_ids(id);
      for (int k = 0; k < kDim; ++k) s.push_back(id + 0.5f * k + t);
      versions.push_back(static_cast<uint64_t>(2 * t) + 1);
      times.push_back(t);
    }
    r.set_states(Floats(s));
    r.set_version(Uint64s(versions));
    r.set_time(Doubles(times));
    return r;
  }

  grpc::Status Push(const v1::PushRequest& r) {
    grpc::ClientContext ctx;
    v1::PushResponse resp;
    return stub_->Push(&ctx, r, &resp);
  }

  grpc::Status Pull(const std::vector<int64_t>& ids, v1::PullResponse* resp,
                    int dim = kDim, int shard = 0) {
    v1::PullRequest r;
    r.set_dim(dim);
    r.mutable_shard()->set_shard_id(shard);
    for (int64_t id : ids) r.add_ids(id);
    grpc::ClientContext ctx;
    return stub_->Pull(&ctx, r, resp);
  }

  // The stored states of ids 0..9, to compare before and after.
  std::string Snapshot() {
    v1::PullResponse resp;
    EXPECT_TRUE(Pull({0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, &resp).ok());
    return resp.states() + resp.time() + resp.version();
  }

  fs::path dir_;
  MetricsRegistry metrics_;
  std::unique_ptr<memstore::NodeStateStore> store_;
  std::unique_ptr<MemstoreServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Memstore::Stub> stub_;
};

void ExpectStatus(const grpc::Status& s, grpc::StatusCode code,
                  const std::string& substr) {
  EXPECT_EQ(s.error_code(), code) << s.error_message();
  EXPECT_NE(s.error_message().find(substr), std::string::npos)
      << "message: " << s.error_message();
}

// A second server on a port in use is refused (gRPC's default SO_REUSEPORT
// would let both listen and split the clients between them).
TEST_F(MemstoreServiceTest, APortInUseIsRefused) {
  Start();
  memstore::NodeStateStoreOptions so;
  so.dim = kDim;  // a RAM store
  auto other = memstore::Open(so);
  ASSERT_THAT(other, IsOk());
  MemstoreServerOptions o;
  o.listen = server_->address();
  MetricsRegistry metrics;
  auto second = MemstoreServer::Start(other->get(), o, &metrics);
  EXPECT_THAT(second,
              StatusIs(absl::StatusCode::kUnavailable, "cannot listen on"));
}

TEST_F(MemstoreServiceTest, PushThenPullRoundTrips) {
  Start();
  ASSERT_TRUE(Push(PushOf({3, 1}, 2.0)).ok());
  v1::PullResponse resp;
  ASSERT_TRUE(Pull({1, 3, 5}, &resp).ok());
  ASSERT_EQ(resp.count(), 3);
  std::vector<float> s(3 * kDim);
  std::memcpy(s.data(), resp.states().data(), s.size() * 4);
  EXPECT_EQ(s[0], 1 + 2.0f);
  EXPECT_EQ(s[kDim + 1], 3 + 0.5f + 2.0f);
  EXPECT_EQ(s[2 * kDim], 0.0f);
  EXPECT_EQ(Unpack<double>(resp.time()), (std::vector<double>{2.0, 2.0, 0.0}));
  EXPECT_EQ(Unpack<uint64_t>(resp.version()), (std::vector<uint64_t>{5, 5, 0}));
}

TEST_F(MemstoreServiceTest, RejectsBadRequestsWithoutChangingData) {
  MemstoreServerOptions o;
  o.max_batch = 16;
  o.shard_id = 1;
  o.num_shards = 2;
  Start(o);
  auto good = PushOf({0, 2, 4}, 1.0);
  good.mutable_shard()->set_shard_id(1);
  ASSERT_TRUE(Push(good).ok());
  // Pull with the right shard for the snapshot.
  auto snapshot = [&] {
    v1::PullResponse resp;
    EXPECT_TRUE(Pull({0, 1, 2, 3, 4}, &resp, kDim, 1).ok());
    return resp.states() + resp.time() + resp.version();
  };
  const std::string before = snapshot();
  auto base = PushOf({0, 1, 2}, 5.0);
  base.mutable_shard()->set_shard_id(1);

  auto bad = base;
  bad.set_dim(kDim + 1);
  ExpectStatus(Push(bad), grpc::StatusCode::INVALID_ARGUMENT,
               "dim 5 does not match the store's dim 4");
  bad = base;
  bad.mutable_states()->resize(bad.states().size() - 4);
  ExpectStatus(Push(bad), grpc::StatusCode::INVALID_ARGUMENT,
               "states holds 44 bytes; 3 ids of dim 4 need 48 bytes");
  bad = base;
  bad.add_ids(7);
  ExpectStatus(Push(bad), grpc::StatusCode::INVALID_ARGUMENT,
               "4 ids of dim 4 need 64 bytes");
  bad = base;
  bad.mutable_time()->append("12345678");
  ExpectStatus(Push(bad), grpc::StatusCode::INVALID_ARGUMENT,
               "time holds 32 bytes");
  bad = base;
  bad.mutable_version()->resize(16);
  ExpectStatus(Push(bad), grpc::StatusCode::INVALID_ARGUMENT,
               "version holds 16 bytes; 3 ids need 24 bytes");
  bad = base;
  std::memset(bad.mutable_version()->data() + 8, 0, 8);
  ExpectStatus(Push(bad), grpc::StatusCode::INVALID_ARGUMENT,
               "version of node 1 (index 1) is 0");
  bad = base;
  const float nan = std::nanf("");
  std::memcpy(bad.mutable_states()->data() + (kDim + 2) * 4, &nan, 4);
  ExpectStatus(Push(bad), grpc::StatusCode::INVALID_ARGUMENT,
               "state of node 1 (index 1) holds a non-finite value");
  bad = base;
  const double inf = INFINITY;
  std::memcpy(bad.mutable_time()->data() + 16, &inf, 8);
  ExpectStatus(Push(bad), grpc::StatusCode::INVALID_ARGUMENT,
               "time of node 2 (index 2)");
  bad = base;
  bad.set_ids(1, -5);
  ExpectStatus(Push(bad), grpc::StatusCode::INVALID_ARGUMENT,
               "negative node id -5");
  bad = base;
  bad.set_writer(-1);
  ExpectStatus(Push(bad), grpc::StatusCode::INVALID_ARGUMENT,
               "negative writer");
  bad = PushOf(std::vector<int64_t>(17, 3), 5.0);
  bad.mutable_shard()->set_shard_id(1);
  ExpectStatus(Push(bad), grpc::StatusCode::RESOURCE_EXHAUSTED,
               "carries 17 ids, more than the limit of 16");
  bad = base;
  bad.mutable_shard()->set_shard_id(0);
  ExpectStatus(Push(bad), grpc::StatusCode::NOT_FOUND,
               "request for shard 0 of 0 reached shard 1 of 2");
  bad = base;
  bad.mutable_shard()->set_num_shards(3);
  ExpectStatus(Push(bad), grpc::StatusCode::NOT_FOUND,
               "shard 1 of 3 reached shard 1 of 2");

  v1::PullResponse resp;
  ExpectStatus(Pull({1}, &resp, kDim + 2, 1),
               grpc::StatusCode::INVALID_ARGUMENT, "request dim 6");
  ExpectStatus(Pull({1}, &resp, kDim, 0), grpc::StatusCode::NOT_FOUND,
               "reached shard 1 of 2");
  ExpectStatus(Pull(std::vector<int64_t>(17, 1), &resp, kDim, 1),
               grpc::StatusCode::RESOURCE_EXHAUSTED, "limit of 16");
  ExpectStatus(Pull({1, -2}, &resp, kDim, 1),
               grpc::StatusCode::INVALID_ARGUMENT, "negative node id -2");
  EXPECT_EQ(snapshot(), before);
}

TEST_F(MemstoreServiceTest, OversizedMessagesAreRefused) {
  MemstoreServerOptions o;
  o.max_message_bytes = 4096;
  Start(o);
  // A push message over the limit: gRPC refuses it before the handler.
  std::vector<int64_t> ids(300);
  for (int i = 0; i < 300; ++i) ids[i] = i;
  ExpectStatus(Push(PushOf(ids, 1.0)), grpc::StatusCode::RESOURCE_EXHAUSTED,
               "");
  // A unary pull whose answer would not fit.
  v1::PullResponse resp;
  ExpectStatus(Pull(ids, &resp), grpc::StatusCode::RESOURCE_EXHAUSTED,
               "use PullStream");
  EXPECT_EQ(Snapshot(), std::string(10 * kDim * 4 + 80 + 80, '\0'));
}

TEST_F(MemstoreServiceTest, StreamsChunkBelowTheMessageSize) {
  MemstoreServerOptions o;
  o.max_message_bytes = 4096;
  Start(o);
  // PushStream: 250 states in chunks of 50.
  {
    grpc::ClientContext ctx;
    v1::PushResponse resp;
    auto w = stub_->PushStream(&ctx, &resp);
    for (int c = 0; c < 5; ++c) {
      std::vector<int64_t> ids;
      for (int i = 0; i < 50; ++i) ids.push_back(c * 50 + i);
      ASSERT_TRUE(w->Write(PushOf(ids, 3.0)));
    }
    w->WritesDone();
    ASSERT_TRUE(w->Finish().ok());
    EXPECT_EQ(resp.received(), 250);
  }
  // PullStream answers in several chunks, each below 4096 bytes.
  v1::PullRequest r;
  r.set_dim(kDim);
  for (int i = 249; i >= 0; --i) r.add_ids(i);
  grpc::ClientContext ctx;
  auto reader = stub_->PullStream(&ctx, r);
  v1::PullResponse chunk;
  int64_t next = 0, chunks = 0;
  while (reader->Read(&chunk)) {
    EXPECT_EQ(chunk.offset(), next);
    EXPECT_LT(chunk.ByteSizeLong(), 4096u);
    std::vector<float> s(chunk.count() * kDim);
    std::memcpy(s.data(), chunk.states().data(), s.size() * 4);
    for (int64_t i = 0; i < chunk.count(); ++i) {
      EXPECT_EQ(s[i * kDim], 249 - (next + i) + 3.0f);
    }
    next += chunk.count();
    ++chunks;
  }
  ASSERT_TRUE(reader->Finish().ok());
  EXPECT_EQ(next, 250);
  EXPECT_GT(chunks, 1);
}

// A large PullStream sends chunks while the store is still reading the rest
// (PullWithProgress): every chunk in order with its rows, and a client that
// cancels after the first chunk leaves a server that answers the next call.
TEST_F(MemstoreServiceTest, PullStreamSendsEveryRowWhileReadingAndCancels) {
  Start();
  constexpr int kN = 20000;
  std::vector<int64_t> ids;
  for (int i = 0; i < kN; ++i) ids.push_back((i * 7919) % kN);
  ASSERT_TRUE(Push(PushOf(ids, 2.0)).ok());
  v1::PullRequest r;
  r.set_dim(kDim);
  for (int64_t id : ids) r.add_ids(id);
  r.add_ids(kN + 5);  // never pushed: zeros
  r.set_max_chunk_states(64);
  {
    grpc::ClientContext ctx;
    auto reader = stub_->PullStream(&ctx, r);
    v1::PullResponse chunk;
    int64_t next = 0;
    while (reader->Read(&chunk)) {
      ASSERT_EQ(chunk.offset(), next);
      const auto s = Unpack<float>(chunk.states());
      ASSERT_EQ(static_cast<int64_t>(s.size()), chunk.count() * kDim);
      for (int64_t i = 0; i < chunk.count(); ++i) {
        const int64_t row = next + i;
        const float want = row < kN ? ids[row] + 2.0f : 0.0f;
        ASSERT_EQ(s[i * kDim], want) << "row " << row;
      }
      next += chunk.count();
    }
    ASSERT_TRUE(reader->Finish().ok());
    EXPECT_EQ(next, kN + 1);
  }
  for (int round = 0; round < 3; ++round) {
    grpc::ClientContext ctx;
    auto reader = stub_->PullStream(&ctx, r);
    v1::PullResponse chunk;
    ASSERT_TRUE(reader->Read(&chunk));
    ctx.TryCancel();
    while (reader->Read(&chunk)) {
    }
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  }
  v1::PullResponse one;
  ASSERT_TRUE(Pull({ids[0]}, &one).ok());
  EXPECT_EQ(Unpack<float>(one.states())[0], ids[0] + 2.0f);
}

// A chunk without ids is valid, also first (found by tests/fuzz: the
// server copied it from an empty buffer's null pointer).
TEST_F(MemstoreServiceTest, EmptyPushStreamChunksAreFine) {
  Start();
  grpc::ClientContext ctx;
  v1::PushResponse resp;
  auto w = stub_->PushStream(&ctx, &resp);
  v1::PushRequest empty;
  empty.set_dim(kDim);
  ASSERT_TRUE(w->Write(empty));
  ASSERT_TRUE(w->Write(PushOf({1, 2}, 3.0)));
  ASSERT_TRUE(w->Write(empty));
  ASSERT_TRUE(w->WritesDone());
  ASSERT_TRUE(w->Finish().ok());
  EXPECT_EQ(resp.received(), 2);
  v1::PullResponse pulled;
  ASSERT_TRUE(Pull({1, 2}, &pulled).ok());
  EXPECT_EQ(Unpack<uint64_t>(pulled.version()), (std::vector<uint64_t>{7, 7}));
}

TEST_F(MemstoreServiceTest, InvalidPushStreamChunkRejectsTheWholePush) {
  Start();
  const std::string before = Snapshot();
  grpc::ClientContext ctx;
  v1::PushResponse resp;
  auto w = stub_->PushStream(&ctx, &resp);
  ASSERT_TRUE(w->Write(PushOf({1, 2}, 1.0)));
  auto bad = PushOf({3}, 1.0);
  bad.set_dim(7);
  w->Write(bad);
  w->WritesDone();
  ExpectStatus(w->Finish(), grpc::StatusCode::INVALID_ARGUMENT,
               "request dim 7");
  EXPECT_EQ(Snapshot(), before);
}

TEST_F(MemstoreServiceTest, CancelledPushStreamAppliesNothing) {
  Start();
  const std::string before = Snapshot();
  {
    grpc::ClientContext ctx;
    v1::PushResponse resp;
    auto w = stub_->PushStream(&ctx, &resp);
    ASSERT_TRUE(w->Write(PushOf({1, 2}, 1.0)));
    ASSERT_TRUE(w->Write(PushOf({3}, 1.0)));
    // Make sure the server has read the chunks, then cancel without
    // half-closing.
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    ctx.TryCancel();
    EXPECT_EQ(w->Finish().error_code(), grpc::StatusCode::CANCELLED);
  }
  {
    // Past its deadline with chunks received: nothing either.
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::milliseconds(300));
    v1::PushResponse resp;
    auto w = stub_->PushStream(&ctx, &resp);
    ASSERT_TRUE(w->Write(PushOf({4, 5}, 2.0)));
    std::this_thread::sleep_for(std::chrono::milliseconds(600));
    EXPECT_EQ(w->Finish().error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  }
  // The server's side of both calls has ended before we look.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(Snapshot(), before);
  // A stream that half-closes still commits.
  grpc::ClientContext ctx;
  v1::PushResponse resp;
  auto w = stub_->PushStream(&ctx, &resp);
  ASSERT_TRUE(w->Write(PushOf({1, 2}, 1.0)));
  w->WritesDone();
  ASSERT_TRUE(w->Finish().ok());
  EXPECT_EQ(resp.received(), 2);
  EXPECT_NE(Snapshot(), before);
}

TEST_F(MemstoreServiceTest, GetByOriginalIdUsesTheIdMap) {
  std::ofstream(dir_ / "id_map.csv")
      << "dense_id,original_id,kind\n0,100,user\n1,100,item\n2,7,user\n";
  auto map = IdMap::Load((dir_ / "id_map.csv").string());
  ASSERT_THAT(map, IsOk());
  MemstoreServerOptions o;
  o.id_map = *std::move(map);
  Start(o);
  ASSERT_TRUE(Push(PushOf({0, 1, 2}, 4.0)).ok());
  auto get = [&](int64_t original, const std::string& kind,
                 v1::NodeState* out) {
    v1::GetRequest r;
    r.set_original_id(original);
    r.set_kind(kind);
    grpc::ClientContext ctx;
    return stub_->Get(&ctx, r, out);
  };
  v1::NodeState n;
  ASSERT_TRUE(get(7, "", &n).ok());
  EXPECT_EQ(n.dense_id(), 2);
  EXPECT_EQ(n.original_id(), 7);
  EXPECT_EQ(n.kind(), "user");
  EXPECT_EQ(n.version(), 9u);
  EXPECT_EQ(n.time(), 4.0);
  EXPECT_EQ(n.updates(), 1u);
  EXPECT_EQ(n.writer(), 0);
  EXPECT_EQ(n.state().size(), kDim * 4u);
  ExpectStatus(get(100, "", &n), grpc::StatusCode::INVALID_ARGUMENT,
               "names both a user and an item");
  ASSERT_TRUE(get(100, "item", &n).ok());
  EXPECT_EQ(n.dense_id(), 1);
  ExpectStatus(get(55, "", &n), grpc::StatusCode::NOT_FOUND,
               "original id 55 is not in the job's id map");
  ExpectStatus(get(7, "thing", &n), grpc::StatusCode::INVALID_ARGUMENT,
               "kind must be");

  v1::BatchGetRequest b;
  b.add_original_ids(7);
  b.add_original_ids(55);
  b.add_original_ids(100);
  v1::BatchGetResponse br;
  grpc::ClientContext ctx;
  ASSERT_TRUE(stub_->BatchGet(&ctx, b, &br).ok());
  ASSERT_EQ(br.nodes_size(), 3);  // 7, and 100 as user and as item
  ASSERT_EQ(br.missing_original_ids_size(), 1);
  EXPECT_EQ(br.missing_original_ids(0), 55);
}

TEST_F(MemstoreServiceTest, IdsOutsideTheJobAreRefused) {
  // The id map's 3 dense ids bound the job's ids; nothing is stored.
  std::ofstream(dir_ / "id_map.csv")
      << "dense_id,original_id\n0,100\n1,101\n2,102\n";
  auto map = IdMap::Load((dir_ / "id_map.csv").string());
  ASSERT_THAT(map, IsOk());
  EXPECT_EQ(map->dense_end(), 3);
  MemstoreServerOptions o;
  o.id_map = *map;
  Start(o);
  ASSERT_TRUE(Push(PushOf({0, 2}, 1.0)).ok());
  auto snapshot = [&] {
    v1::PullResponse r;
    EXPECT_TRUE(Pull({0, 1, 2}, &r).ok());
    return r.states() + r.time() + r.version();
  };
  const std::string before = snapshot();
  ExpectStatus(Push(PushOf({1, 3}, 2.0)), grpc::StatusCode::INVALID_ARGUMENT,
               "node id 3 at index 1 is out of range: the job has 3 nodes");
  v1::PullResponse resp;
  ExpectStatus(Pull({7}, &resp), grpc::StatusCode::INVALID_ARGUMENT,
               "node id 7 at index 0 is out of range");
  v1::GetRequest g;
  g.set_dense_id(3);
  v1::NodeState n;
  grpc::ClientContext ctx;
  ExpectStatus(stub_->Get(&ctx, g, &n), grpc::StatusCode::INVALID_ARGUMENT,
               "out of range");
  EXPECT_EQ(snapshot(), before);

  // An explicit bound below the map's ids is a configuration error.
  o.num_nodes = 2;
  EXPECT_THAT(MemstoreServer::Start(store_.get(), o),
              StatusIs(absl::StatusCode::kInvalidArgument, "num_nodes 2"));
}

TEST_F(MemstoreServiceTest, IdMapErrorsNameTheLine) {
  std::ofstream(dir_ / "bad.csv") << "dense_id,original_id\n0,1\n1,x\n";
  EXPECT_THAT(IdMap::Load((dir_ / "bad.csv").string()),
              StatusIs(absl::StatusCode::kInvalidArgument, "bad.csv:3"));
  EXPECT_THAT(IdMap::Load((dir_ / "missing.csv").string()),
              StatusIs(absl::StatusCode::kNotFound, "missing.csv"));
}

TEST_F(MemstoreServiceTest, IdMapInAnyOrderWithGaps) {
  // Dense ids out of order and with a gap; one original id twice.
  std::ofstream(dir_ / "sparse.csv")
      << "dense_id,original_id,kind\n9,5,item\n2,5,user\n4,-3,user\n";
  auto map = IdMap::Load((dir_ / "sparse.csv").string());
  ASSERT_THAT(map, IsOk());
  EXPECT_EQ(map->dense_end(), 10);
  EXPECT_EQ(map->DenseIds(5, ""), (std::vector<int64_t>{2, 9}));
  EXPECT_EQ(map->DenseIds(5, "item"), (std::vector<int64_t>{9}));
  EXPECT_EQ(map->DenseIds(-3, ""), (std::vector<int64_t>{4}));
  EXPECT_TRUE(map->DenseIds(6, "").empty());
  ASSERT_TRUE(map->Find(4).has_value());
  EXPECT_EQ(map->Find(4)->original_id, -3);
  EXPECT_EQ(map->Find(9)->kind, "item");
  EXPECT_FALSE(map->Find(3).has_value());
  EXPECT_FALSE(map->Find(10).has_value());

  std::ofstream(dir_ / "dup.csv") << "dense_id,original_id\n3,1\n0,2\n3,4\n";
  EXPECT_THAT(IdMap::Load((dir_ / "dup.csv").string()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "dup.csv:4: duplicate dense id 3"));
}

TEST_F(MemstoreServiceTest, CheckpointNamesAreChecked) {
  Start();
  ASSERT_TRUE(Push(PushOf({1}, 1.0)).ok());
  auto ckpt = [&](const std::string& name, v1::CheckpointResponse* resp) {
    v1::CheckpointRequest r;
    r.set_name(name);
    grpc::ClientContext ctx;
    return stub_->Checkpoint(&ctx, r, resp);
  };
  v1::CheckpointResponse resp;
  ASSERT_TRUE(ckpt("first", &resp).ok());
  EXPECT_EQ(resp.path(), (dir_ / "ckpt" / "first").string());
  EXPECT_TRUE(fs::exists(resp.path()));
  ExpectStatus(ckpt("../escape", &resp), grpc::StatusCode::INVALID_ARGUMENT,
               "must be letters");
  ExpectStatus(ckpt("/tmp/abs", &resp), grpc::StatusCode::INVALID_ARGUMENT,
               "must be letters");
}

// A body that is not the method's message is INVALID_ARGUMENT naming the
// method, for every method; nothing is stored.
TEST_F(MemstoreServiceTest, MalformedBodiesAreInvalidArgument) {
  Start();
  ASSERT_TRUE(Push(PushOf({1}, 1.0)).ok());
  const std::string before = Snapshot();
  grpc::GenericStub generic(channel_);
  // Field 1 with wire type 7 (invalid), then a truncated varint.
  const std::string junk("\x0f\xff\xff\xff", 4);
  for (const char* method : {"Pull", "PullStream", "Push", "PushStream", "Get",
                             "BatchGet", "ListRecent", "Stats", "Checkpoint"}) {
    SCOPED_TRACE(method);
    grpc::Slice slice(junk);
    grpc::ByteBuffer request(&slice, 1);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(10));
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    grpc::Status status;
    grpc::ByteBuffer response;
    const std::string path = std::string("/mnemo.v1.Memstore/") + method;
    const bool client_stream = std::string(method) == "PushStream";
    const bool server_stream = std::string(method) == "PullStream";
    if (!client_stream && !server_stream) {
      generic.UnaryCall(&ctx, path, grpc::StubOptions(), &request, &response,
                        [&](grpc::Status s) {
                          std::lock_guard<std::mutex> l(mu);
                          status = std::move(s);
                          done = true;
                          cv.notify_all();
                        });
      std::unique_lock<std::mutex> l(mu);
      cv.wait(l, [&] { return done; });
    } else {
      grpc::CompletionQueue cq;
      auto call = generic.PrepareCall(&ctx, path, &cq);
      void* tag;
      bool ok;
      call->StartCall(reinterpret_cast<void*>(1));
      cq.Next(&tag, &ok);
      call->Write(request, reinterpret_cast<void*>(2));
      cq.Next(&tag, &ok);
      call->WritesDone(reinterpret_cast<void*>(3));
      cq.Next(&tag, &ok);
      if (server_stream) {
        call->Read(&response, reinterpret_cast<void*>(4));
        cq.Next(&tag, &ok);
      }
      call->Finish(&status, reinterpret_cast<void*>(5));
      while (cq.Next(&tag, &ok) && tag != reinterpret_cast<void*>(5)) {
      }
      cq.Shutdown();
      while (cq.Next(&tag, &ok)) {
      }
    }
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << status.error_code() << " " << status.error_message();
    EXPECT_NE(status.error_message().find(std::string(method) +
                                          ": the request body is not a"),
              std::string::npos)
        << status.error_message();
  }
  EXPECT_EQ(Snapshot(), before);
}

TEST_F(MemstoreServiceTest, HealthReflectionAndMetrics) {
  Start();
  auto health = grpc::health::v1::Health::NewStub(channel_);
  for (std::string service : {"", "mnemo.v1.Memstore"}) {
    grpc::health::v1::HealthCheckRequest r;
    r.set_service(service);
    grpc::health::v1::HealthCheckResponse resp;
    grpc::ClientContext ctx;
    ASSERT_TRUE(health->Check(&ctx, r, &resp).ok());
    EXPECT_EQ(resp.status(), grpc::health::v1::HealthCheckResponse::SERVING);
  }
  ASSERT_TRUE(Push(PushOf({1, 2}, 1.0)).ok());
  v1::PullResponse pr;
  ASSERT_TRUE(Pull({1, 2, 3}, &pr).ok());
  ASSERT_FALSE(Pull({1}, &pr, 99).ok());
  const std::string text = metrics_.TextExposition();
  for (const char* want :
       {"mnemo_memstore_requests_total{code=\"OK\",method=\"Push\"} 1",
        "mnemo_memstore_requests_total{code=\"INVALID_ARGUMENT\",method="
        "\"Pull\"} 1",
        "mnemo_memstore_request_duration_seconds_bucket{method=\"Pull\"",
        "mnemo_memstore_states_pulled_total 3",
        "mnemo_memstore_states_pushed_total 2",
        "mnemo_memstore_pulled_bytes_total 96", "mnemo_memstore_hot_states 2",
        "mnemo_memstore_rocksdb_size_bytes",
        "mnemo_memstore_hot_hit_ratio 1"}) {
    EXPECT_NE(text.find(want), std::string::npos) << want << "\n" << text;
  }
  server_->Shutdown();
  grpc::health::v1::HealthCheckRequest r;
  grpc::health::v1::HealthCheckResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
  auto s = health->Check(&ctx, r, &resp);
  EXPECT_TRUE(!s.ok() ||
              resp.status() != grpc::health::v1::HealthCheckResponse::SERVING);
}

TEST_F(MemstoreServiceTest, MetricsAreServedOverHttp) {
  MetricsRegistry m;
  ASSERT_THAT(m.Serve(":0"), IsOk());
  EXPECT_GT(m.port(), 0);
  EXPECT_EQ(NormalizeAddress(":5000"), "127.0.0.1:5000");
  EXPECT_EQ(NormalizeAddress("5000"), "127.0.0.1:5000");
  EXPECT_EQ(NormalizeAddress("0.0.0.0:5000"), "0.0.0.0:5000");
}

}  // namespace
}  // namespace mnemo::services
