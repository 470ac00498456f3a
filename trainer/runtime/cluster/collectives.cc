#include "trainer/runtime/cluster/collectives.h"

#include <algorithm>
#include <deque>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "absl/strings/str_cat.h"
#include "trainer/platform/exceptions.h"
#include "trainer/platform/nccl_backend.h"
#include "util/status_macros.h"

namespace mnemo::runtime {

struct Collectives::Impl {
  c10::intrusive_ptr<c10d::Store> store;
  // ProcessGroupGloo or ProcessGroupNCCL, used through c10d's Backend
  // interface.
  c10::intrusive_ptr<c10d::Backend> group;
  CollectiveOptions::Backend backend = CollectiveOptions::Backend::kGloo;
  bool failed = false;  // a collective failed (NCCL: abort, not shut down)
  // Sums started and not yet waited for, in their order.
  std::vector<c10::intrusive_ptr<c10d::Work>> started;
  // Point-to-point sends and receives started and not yet waited for.
  std::vector<c10::intrusive_ptr<c10d::Work>> sends;
  std::deque<c10::intrusive_ptr<c10d::Work>> recvs;

  // Waits for `work`; a failure is an error naming `what`, and is recorded.
  absl::Status Wait(const c10::intrusive_ptr<c10d::Work>& work,
                    const char* what);
  // The work `start` starts; a failure to start is an error naming `what`,
  // and is recorded.
  template <typename F>
  absl::StatusOr<c10::intrusive_ptr<c10d::Work>> Start(F&& start,
                                                       const std::string& what);
};

template <typename F>
absl::StatusOr<c10::intrusive_ptr<c10d::Work>> Collectives::Impl::Start(
    F&& start, const std::string& what) {
  try {
    return start();
  } catch (const std::exception& e) {
    failed = true;
    return absl::UnavailableError(
        absl::StrCat(what, " failed to start (a peer is gone or timed out): ",
                     platform::ExceptionMessage(e)));
  }
}

namespace {

// c10d's Store over the coordinator's rendezvous key-value store. c10d
// reports failures as exceptions.
class RendezvousStoreAdapter : public c10d::Store {
 public:
  RendezvousStoreAdapter(coordinator::RendezvousKv* kv,
                         std::chrono::milliseconds timeout)
      : Store(timeout), kv_(kv) {}

  // A second handle on the same key-value store (c10d clones a store for
  // each backend it creates; kv_'s Call is thread-safe: the coordinator's
  // client is a gRPC stub, KvStore locks).
  c10::intrusive_ptr<c10d::Store> clone() override {
    return c10::make_intrusive<RendezvousStoreAdapter>(kv_, timeout_);
  }

  void set(const std::string& key, const std::vector<uint8_t>& value) override {
    coordinator::KvRequest r;
    r.op = coordinator::KvRequest::kSet;
    r.keys = {key};
    r.value = Text(value);
    Do(r);
  }
  std::vector<uint8_t> compareSet(
      const std::string& key, const std::vector<uint8_t>& expected,
      const std::vector<uint8_t>& desired) override {
    coordinator::KvRequest r;
    r.op = coordinator::KvRequest::kCompareSet;
    r.keys = {key};
    r.expected = Text(expected);
    r.value = Text(desired);
    return Bytes(Do(r).value);
  }
  std::vector<uint8_t> get(const std::string& key) override {
    coordinator::KvRequest r;
    r.op = coordinator::KvRequest::kGet;
    r.keys = {key};
    r.timeout_s = Seconds(timeout_);
    return Bytes(Do(r).value);
  }
  int64_t add(const std::string& key, int64_t value) override {
    coordinator::KvRequest r;
    r.op = coordinator::KvRequest::kAdd;
    r.keys = {key};
    r.amount = value;
    return Do(r).number;
  }
  bool deleteKey(const std::string& key) override {
    coordinator::KvRequest r;
    r.op = coordinator::KvRequest::kDelete;
    r.keys = {key};
    return Do(r).flag;
  }
  bool check(const std::vector<std::string>& keys) override {
    coordinator::KvRequest r;
    r.op = coordinator::KvRequest::kCheck;
    r.keys = keys;
    return Do(r).flag;
  }
  int64_t getNumKeys() override {
    coordinator::KvRequest r;
    r.op = coordinator::KvRequest::kNumKeys;
    return Do(r).number;
  }
  void wait(const std::vector<std::string>& keys) override {
    wait(keys, timeout_);
  }
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    coordinator::KvRequest r;
    r.op = coordinator::KvRequest::kWait;
    r.keys = keys;
    r.timeout_s = Seconds(timeout);
    Do(r);
  }

 private:
  static std::string Text(const std::vector<uint8_t>& v) {
    return std::string(v.begin(), v.end());
  }
  static std::vector<uint8_t> Bytes(const std::string& s) {
    return std::vector<uint8_t>(s.begin(), s.end());
  }
  static double Seconds(std::chrono::milliseconds t) {
    // c10d's kNoTimeout (0) waits without limit.
    return t.count() == 0 ? 1e9 : t.count() / 1000.0;
  }
  coordinator::KvReply Do(const coordinator::KvRequest& r) {
    absl::StatusOr<coordinator::KvReply> reply = kv_->Call(r);
    if (!reply.ok()) throw std::runtime_error(reply.status().ToString());
    return *std::move(reply);
  }

  coordinator::RendezvousKv* const kv_;
};

const char* BackendName(CollectiveOptions::Backend backend) {
  return backend == CollectiveOptions::Backend::kNccl ? "nccl" : "gloo";
}
}  // namespace

absl::Status Collectives::Impl::Wait(const c10::intrusive_ptr<c10d::Work>& work,
                                     const char* what) {
  try {
    work->wait();
  } catch (const std::exception& e) {
    failed = true;
    return absl::UnavailableError(
        absl::StrCat(what, " failed (a peer is gone or timed out): ",
                     platform::ExceptionMessage(e)));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Collectives>> Collectives::Connect(
    const CollectiveOptions& o) {
  if (o.world_size < 1 || o.rank < 0 || o.rank >= o.world_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rank ", o.rank, " is not in [0, world size ", o.world_size, ")"));
  }
  std::unique_ptr<Collectives> c(new Collectives());
  c->impl_ = std::make_unique<Impl>();
  c->rank_ = o.rank;
  c->world_size_ = o.world_size;
  try {
    c10::intrusive_ptr<c10d::Store> base;
    if (o.rendezvous != nullptr) {
      base =
          c10::make_intrusive<RendezvousStoreAdapter>(o.rendezvous, o.timeout);
    } else {
      c10d::TCPStoreOptions so;
      so.port = static_cast<uint16_t>(o.master_port);
      so.isServer = false;
      so.waitWorkers = false;
      so.timeout = o.timeout;
      base = c10::make_intrusive<c10d::TCPStore>(o.master_addr, so);
    }
    c->impl_->store = c10::make_intrusive<c10d::PrefixStore>(o.prefix, base);
    c->impl_->backend = o.backend;
    if (o.backend == CollectiveOptions::Backend::kNccl) {
      c->impl_->group = platform::MakeNcclBackend(c->impl_->store, o.rank,
                                                  o.world_size, o.timeout);
    } else {
      auto opts = c10d::ProcessGroupGloo::Options::create(o.timeout);
      opts->devices.push_back(
          c10d::ProcessGroupGloo::createDeviceForHostname(o.bind_host));
      opts->threads = 1;
      c->impl_->group = c10::make_intrusive<c10d::ProcessGroupGloo>(
          c->impl_->store, o.rank, o.world_size, opts);
    }
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat(
        "cannot form the ", BackendName(o.backend), " process group (rank ",
        o.rank, " of ", o.world_size, ", rendezvous ",
        o.rendezvous != nullptr
            ? std::string("through the coordinator")
            : absl::StrCat("store ", o.master_addr, ":", o.master_port),
        "): ", platform::ExceptionMessage(e)));
  }
  return c;
}

Collectives::~Collectives() {
  // An NCCL group is ended explicitly (its destructor otherwise warns, and
  // after a failed collective its implicit shutdown can block): aborted
  // after a failure, else shut down.
  if (impl_ == nullptr || impl_->group == nullptr ||
      impl_->backend != CollectiveOptions::Backend::kNccl) {
    return;
  }
  try {
    if (impl_->failed) {
      impl_->group->abort();
    } else {
      impl_->group->shutdown();
    }
  } catch (const std::exception&) {
  }
}

bool Collectives::Trivial() const {
  // One gloo rank has nothing to exchange. One NCCL rank still runs its
  // collectives: they are what a one-GPU check can exercise.
  return world_size_ == 1 &&
         impl_->backend != CollectiveOptions::Backend::kNccl;
}

const char* Collectives::backend_name() const {
  return BackendName(impl_->backend);
}

absl::Status Collectives::AllReduceSum(torch::Tensor& tensor) {
  if (Trivial()) return absl::OkStatus();
  std::vector<torch::Tensor> buf = {tensor};
  bytes_reduced_ += tensor.numel() * tensor.element_size();
  return impl_->Wait(impl_->group->allreduce(buf), "all-reduce");
}

absl::Status Collectives::StartAllReduceSum(const torch::Tensor& tensor) {
  if (Trivial()) return absl::OkStatus();
  std::vector<torch::Tensor> buf = {tensor};
  bytes_reduced_ += tensor.numel() * tensor.element_size();
  ASSIGN_OR_RETURN(auto work,
                   impl_->Start([&] { return impl_->group->allreduce(buf); },
                                "gradient all-reduce"));
  impl_->started.push_back(std::move(work));
  return absl::OkStatus();
}

absl::Status Collectives::WaitStarted() {
  std::vector<c10::intrusive_ptr<c10d::Work>> started;
  started.swap(impl_->started);
  for (const auto& work : started) {
    RETURN_IF_ERROR(impl_->Wait(work, "gradient all-reduce"));
  }
  return absl::OkStatus();
}

bool Collectives::reduces_on_host() const {
  return impl_->backend != CollectiveOptions::Backend::kNccl;
}

absl::Status Collectives::Broadcast(const std::vector<torch::Tensor>& tensors,
                                    int root) {
  if (Trivial() || tensors.empty()) return absl::OkStatus();
  c10d::BroadcastOptions bo;
  bo.rootRank = root;
  torch::NoGradGuard guard;
  bool flat = true;
  for (const auto& t : tensors) {
    flat = flat && t.scalar_type() == tensors[0].scalar_type() &&
           t.device() == tensors[0].device();
  }
  if (flat && tensors.size() > 1) {
    // One broadcast of the tensors laid end to end.
    std::vector<torch::Tensor> parts;
    parts.reserve(tensors.size());
    for (const auto& t : tensors) parts.push_back(t.reshape({-1}));
    std::vector<torch::Tensor> buf = {torch::cat(parts)};
    RETURN_IF_ERROR(impl_->Wait(impl_->group->broadcast(buf, bo), "broadcast"));
    int64_t offset = 0;
    for (const auto& t : tensors) {
      const int64_t n = t.numel();
      t.copy_(buf[0].narrow(0, offset, n).view_as(t));
      offset += n;
    }
    return absl::OkStatus();
  }
  for (const auto& t : tensors) {
    std::vector<torch::Tensor> buf = {t};
    RETURN_IF_ERROR(impl_->Wait(impl_->group->broadcast(buf, bo), "broadcast"));
  }
  return absl::OkStatus();
}

absl::Status Collectives::StartSend(const torch::Tensor& tensor, int dst,
                                    int tag) {
  std::vector<torch::Tensor> buf = {tensor};
  bytes_sent_ += tensor.numel() * tensor.element_size();
  ASSIGN_OR_RETURN(
      auto work, impl_->Start([&] { return impl_->group->send(buf, dst, tag); },
                              absl::StrCat("a send to rank ", dst)));
  impl_->sends.push_back(std::move(work));
  return absl::OkStatus();
}

absl::Status Collectives::WaitSends() {
  return WaitOldestSends(static_cast<int>(impl_->sends.size()));
}

absl::Status Collectives::WaitOldestSends(int n) {
  n = std::min<int>(n, static_cast<int>(impl_->sends.size()));
  std::vector<c10::intrusive_ptr<c10d::Work>> oldest(impl_->sends.begin(),
                                                     impl_->sends.begin() + n);
  impl_->sends.erase(impl_->sends.begin(), impl_->sends.begin() + n);
  for (const auto& work : oldest) {
    RETURN_IF_ERROR(impl_->Wait(work, "a point-to-point send"));
  }
  return absl::OkStatus();
}

absl::Status Collectives::Recv(torch::Tensor& tensor, int src, int tag) {
  std::vector<torch::Tensor> buf = {tensor};
  ASSIGN_OR_RETURN(
      auto work, impl_->Start([&] { return impl_->group->recv(buf, src, tag); },
                              absl::StrCat("a receive from rank ", src)));
  return impl_->Wait(work, "a point-to-point receive");
}

absl::Status Collectives::StartRecv(const torch::Tensor& tensor, int src,
                                    int tag) {
  std::vector<torch::Tensor> buf = {tensor};
  ASSIGN_OR_RETURN(
      auto work, impl_->Start([&] { return impl_->group->recv(buf, src, tag); },
                              absl::StrCat("a receive from rank ", src)));
  impl_->recvs.push_back(std::move(work));
  return absl::OkStatus();
}

absl::Status Collectives::WaitOldestRecv() {
  if (impl_->recvs.empty()) {
    return absl::FailedPreconditionError("no receive was started");
  }
  c10::intrusive_ptr<c10d::Work> work = impl_->recvs.front();
  impl_->recvs.pop_front();
  return impl_->Wait(work, "a point-to-point receive");
}

absl::Status Collectives::Barrier() {
  if (Trivial()) return absl::OkStatus();
  return impl_->Wait(impl_->group->barrier(), "barrier");
}

}  // namespace mnemo::runtime
