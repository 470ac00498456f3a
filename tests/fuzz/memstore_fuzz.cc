// Fuzzes the memory-store service's request decoding
// (services/memstore_service.h): raw request bodies sent to an in-process
// MemstoreServer on loopback through a grpc::GenericStub.
//
// Input: byte 0 picks the method (mod 9); the rest is the request body. For
// PushStream the rest is a sequence of messages, each a 2-byte
// little-endian length and that many bytes (a length past the end takes
// what is left). Every call must end with a status that is not UNKNOWN,
// within a deadline. The server (dim 4, a RAM store, a small id map, a
// 64 KiB message limit) starts at the first input and is restarted with an
// empty store every kRestartEvery inputs, so the store cannot grow without
// bound.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "memstore/node_state_store.h"
#include "mnemo/v1/memstore.pb.h"
#include "services/memstore_service.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

namespace v1 = ::mnemo::v1;
using mnemo::fuzz::Fail;

constexpr int kDim = 4;
constexpr int kRestartEvery = 4096;
constexpr auto kDeadline = std::chrono::seconds(60);

constexpr const char* kMethods[] = {
    "Pull",     "PullStream", "Push",  "PushStream", "Get",
    "BatchGet", "ListRecent", "Stats", "Checkpoint",
};
constexpr int kNumMethods = sizeof(kMethods) / sizeof(kMethods[0]);
constexpr int kPushStream = 3;

// A call of any shape: writes `requests`, half-closes, reads every answer.
class Call final
    : public grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  Call(grpc::GenericStub* stub, const std::string& method,
       std::vector<grpc::ByteBuffer> requests)
      : requests_(std::move(requests)) {
    ctx_.set_deadline(std::chrono::system_clock::now() + kDeadline);
    stub->PrepareBidiStreamingCall(&ctx_, method, grpc::StubOptions(), this);
    StartRead(&answer_);
    if (requests_.empty()) {
      StartWritesDone();
    } else {
      StartWrite(&requests_[0]);
    }
    StartCall();
  }

  void OnWriteDone(bool ok) override {
    if (!ok) return;  // the call is over; OnDone follows
    if (++next_ < requests_.size()) {
      StartWrite(&requests_[next_]);
    } else {
      StartWritesDone();
    }
  }

  void OnReadDone(bool ok) override {
    if (ok) StartRead(&answer_);
  }

  void OnDone(const grpc::Status& status) override {
    std::lock_guard<std::mutex> l(mu_);
    status_ = status;
    done_ = true;
    cv_.notify_one();
  }

  grpc::Status Await() {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [this] { return done_; });
    return status_;
  }

 private:
  grpc::ClientContext ctx_;
  std::vector<grpc::ByteBuffer> requests_;
  size_t next_ = 0;
  grpc::ByteBuffer answer_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  grpc::Status status_;
};

class Fixture {
 public:
  Fixture() {
    // Original ids 7 and 8 are both a user and an item; 9 only a user.
    mnemo::fuzz::MemFile id_map("id_map.csv");
    id_map.Write(
        "dense_id,original_id,kind\n"
        "0,7,user\n1,7,item\n2,8,user\n3,8,item\n4,9,user\n5,100,item\n");
    auto map = mnemo::services::IdMap::Load(id_map.path());
    if (!map.ok()) Fail(map.status().ToString());
    id_map_ = *std::move(map);
  }

  // The stub of a running server (restarted every kRestartEvery calls).
  grpc::GenericStub* Stub() {
    if (calls_++ % kRestartEvery == 0) Restart();
    return stub_.get();
  }

 private:
  void Restart() {
    stub_.reset();
    channel_.reset();
    server_.reset();
    store_.reset();
    mnemo::memstore::NodeStateStoreOptions so;
    so.dim = kDim;
    auto store = mnemo::memstore::Open(so);
    if (!store.ok()) Fail(store.status().ToString());
    store_ = *std::move(store);
    mnemo::services::MemstoreServerOptions o;
    o.listen = "127.0.0.1:0";
    o.max_message_bytes = 64 << 10;
    o.max_batch = 1 << 12;
    o.executor_threads = 2;
    o.id_map = id_map_;
    o.num_nodes = 1 << 16;  // beyond the map: pushes of unmapped ids work
    auto server = mnemo::services::MemstoreServer::Start(store_.get(), o);
    if (!server.ok()) Fail(server.status().ToString());
    server_ = *std::move(server);
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(-1);
    args.SetMaxSendMessageSize(-1);
    channel_ = grpc::CreateCustomChannel(
        server_->address(), grpc::InsecureChannelCredentials(), args);
    stub_ = std::make_unique<grpc::GenericStub>(channel_);
  }

  mnemo::services::IdMap id_map_;
  int64_t calls_ = 0;
  std::unique_ptr<mnemo::memstore::NodeStateStore> store_;
  std::unique_ptr<mnemo::services::MemstoreServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<grpc::GenericStub> stub_;
};

grpc::ByteBuffer Buffer(std::string_view bytes) {
  grpc::Slice slice(bytes.data(), bytes.size());
  return grpc::ByteBuffer(&slice, 1);
}

// PushStream's messages: 2-byte length, then the bytes.
std::vector<std::string_view> SplitMessages(std::string_view body) {
  std::vector<std::string_view> out;
  while (!body.empty()) {
    size_t len = static_cast<uint8_t>(body[0]);
    if (body.size() >= 2) len |= size_t{static_cast<uint8_t>(body[1])} << 8;
    body.remove_prefix(std::min<size_t>(2, body.size()));
    len = std::min(len, body.size());
    out.push_back(body.substr(0, len));
    body.remove_prefix(len);
  }
  return out;
}

// ---- seeds

std::string Packed(const void* data, size_t bytes) {
  return std::string(static_cast<const char*>(data), bytes);
}

v1::PushRequest PushOf(const std::vector<int64_t>& ids, uint64_t version) {
  v1::PushRequest r;
  r.set_dim(kDim);
  std::vector<float> states;
  std::vector<uint64_t> versions;
  std::vector<double> times;
  for (int64_t id : ids) {
    r.add_ids(id);
    for (int k = 0; k < kDim; ++k) states.push_back(id + 0.5f * k);
    versions.push_back(version);
    times.push_back(1.5 * version);
  }
  r.set_states(Packed(states.data(), states.size() * sizeof(float)));
  r.set_version(Packed(versions.data(), versions.size() * 8));
  r.set_time(Packed(times.data(), times.size() * 8));
  return r;
}

std::string Seed(int method, const google::protobuf::MessageLite& m) {
  return std::string(1, static_cast<char>(method)) + m.SerializeAsString();
}

std::string LengthPrefixed(const std::string& bytes) {
  const char len[2] = {static_cast<char>(bytes.size() & 0xff),
                       static_cast<char>(bytes.size() >> 8)};
  return std::string(len, 2) + bytes;
}

void WriteSeeds(const std::string& dir) {
  std::vector<std::string> seeds;
  v1::PullRequest pull;
  pull.set_dim(kDim);
  for (int64_t id : {0, 1, 2, 5, 1}) pull.add_ids(id);
  seeds.push_back(Seed(0, pull));
  pull.set_max_chunk_states(2);
  pull.mutable_shard()->set_num_shards(1);
  seeds.push_back(Seed(1, pull));
  pull.set_dim(3);
  seeds.push_back(Seed(0, pull));
  seeds.push_back(Seed(2, PushOf({0, 1, 2}, 3)));
  v1::PushRequest bad = PushOf({4}, 0);
  bad.set_writer(1);
  seeds.push_back(Seed(2, bad));
  seeds.push_back(std::string(1, kPushStream) +
                  LengthPrefixed(PushOf({0, 3}, 5).SerializeAsString()) +
                  LengthPrefixed(PushOf({6}, 6).SerializeAsString()));
  v1::GetRequest get;
  get.set_dense_id(1);
  seeds.push_back(Seed(4, get));
  get.set_original_id(7);
  get.set_kind("item");
  seeds.push_back(Seed(4, get));
  v1::BatchGetRequest batch;
  for (int64_t id : {7, 8, 9, 100, 12345}) batch.add_original_ids(id);
  seeds.push_back(Seed(5, batch));
  batch.set_kind("user");
  seeds.push_back(Seed(5, batch));
  v1::ListRecentRequest recent;
  recent.set_n(3);
  seeds.push_back(Seed(6, recent));
  v1::StatsRequest stats;
  stats.mutable_shard()->set_shard_id(1);
  seeds.push_back(Seed(7, stats));
  v1::CheckpointRequest checkpoint;
  checkpoint.set_name("ckpt-1");
  seeds.push_back(Seed(8, checkpoint));
  for (size_t i = 0; i < seeds.size(); ++i) {
    mnemo::fuzz::WriteSeed(dir, static_cast<int>(i), seeds[i]);
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  mnemo::fuzz::MaybeWriteSeedsAndExit(WriteSeeds);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Fixture* fixture = new Fixture;
  if (size == 0) return 0;
  const int method = data[0] % kNumMethods;
  const std::string_view body(reinterpret_cast<const char*>(data) + 1,
                              size - 1);
  std::vector<grpc::ByteBuffer> requests;
  if (method == kPushStream) {
    const std::vector<std::string_view> messages = SplitMessages(body);
    for (std::string_view m : messages) requests.push_back(Buffer(m));
  } else {
    requests.push_back(Buffer(body));
  }
  const std::string name =
      absl::StrCat("/mnemo.v1.Memstore/", kMethods[method]);
  Call call(fixture->Stub(), name, std::move(requests));
  const grpc::Status s = call.Await();
  if (s.error_code() == grpc::StatusCode::UNKNOWN ||
      s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
    Fail(absl::StrCat(name, " answered ", s.error_code(), ": ",
                      s.error_message()));
  }
  return 0;
}
