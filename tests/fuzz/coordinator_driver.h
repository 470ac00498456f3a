// Drives a coordinator that runs a job with raw requests to its RPCs
// (mnemo.v1.Coordinator, proto/mnemo/v1/coordinator.proto) and checks that
// what is refused leaves the job as it was. Shared by the libFuzzer target
// (tests/fuzz/coordinator_fuzz.cc, clang) and its regression cases in the
// normal build (tests/unit/services/coordinator_service_test.cc).
//
// The job: a CoordinatorServer on loopback, world size 3, ranks 0 and 1
// joined with configuration hash "job" (real CoordinatorClients: heartbeats
// and decision streams), rank 2 not yet. The input is a
// sequence of calls, each byte 0: the method (mod 9, kMethods), bytes 1-2:
// the body's length (little-endian; past the end: what is left), then the
// body (the request's serialized protobuf, or any bytes). Invariants:
//   - every call ends with a status other than UNKNOWN, and those that do
//     not wait (all but Barrier, WatchDecisions and Rendezvous) well within
//     their deadline;
//   - a Join that is not OK leaves the job's status and its workers (who
//     joined, from where) as they were, unless it is FAILED_PRECONDITION
//     for a rank that had not joined (a worker started with other flags
//     fails the job at once, by design); so does any WatchDecisions stream
//     that breaks, other than the workers' own;
//   - a Join with an empty body (no rank, no configuration hash) is
//     refused: INVALID_ARGUMENT.
#ifndef MNEMO_TESTS_FUZZ_COORDINATOR_DRIVER_H_
#define MNEMO_TESTS_FUZZ_COORDINATOR_DRIVER_H_

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "mnemo/v1/coordinator.pb.h"
#include "services/coordinator_client.h"
#include "services/coordinator_service.h"

namespace mnemo::fuzz {

inline constexpr const char* kCoordinatorMethods[] = {
    "Join",        "Heartbeat", "Barrier",   "Report",     "WatchDecisions",
    "ReportError", "Finish",    "GetStatus", "Rendezvous",
};
inline constexpr int kNumCoordinatorMethods = 9;
inline constexpr int kJoin = 0;
inline constexpr int kWatchDecisions = 4;
inline constexpr int kWorldSize = 3;
inline constexpr char kJobHash[] = "job";

// One call of any shape through a grpc::GenericStub: writes `request`,
// half-closes, reads every answer.
class GenericCall final
    : public grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  GenericCall(grpc::GenericStub* stub, const std::string& method,
              std::string_view request, std::chrono::milliseconds deadline) {
    grpc::Slice slice(request.data(), request.size());
    request_ = grpc::ByteBuffer(&slice, 1);
    ctx_.set_deadline(std::chrono::system_clock::now() + deadline);
    stub->PrepareBidiStreamingCall(&ctx_, method, grpc::StubOptions(), this);
    StartRead(&answer_);
    StartWrite(&request_);
    StartCall();
  }
  void OnWriteDone(bool ok) override {
    if (ok) StartWritesDone();
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
  grpc::ByteBuffer request_, answer_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  grpc::Status status_;
};

// A coordinator running the job above; Drive() feeds it one input.
class CoordinatorJob {
 public:
  // "" and a running job, or what went wrong starting it.
  static std::unique_ptr<CoordinatorJob> Start(std::string* error) {
    std::unique_ptr<CoordinatorJob> job(new CoordinatorJob);
    services::CoordinatorServerOptions o;
    o.listen = "127.0.0.1:0";
    o.world_size = kWorldSize;
    o.memstore_addresses = {};
    o.heartbeat_timeout_s = 3600;  // no worker is declared dead meanwhile
    o.warn = [](const std::string&) {};
    auto server = services::CoordinatorServer::Start(o);
    if (!server.ok()) {
      *error = server.status().ToString();
      return nullptr;
    }
    job->server_ = *std::move(server);
    job->channel_ = grpc::CreateChannel(job->server_->address(),
                                        grpc::InsecureChannelCredentials());
    job->stub_ = std::make_unique<grpc::GenericStub>(job->channel_);
    // Two real workers: joined, heartbeating, each with its decision
    // stream open (once decision 0 arrived through it).
    for (int rank : {0, 1}) {
      services::CoordinatorClientOptions co;
      co.address = job->server_->address();
      co.rank = rank;
      co.my_address = absl::StrCat("127.0.0.1:", 7000 + rank);
      co.config_hash = kJobHash;
      co.config_text = "flags";
      co.rpc_timeout_s = 10;
      co.connect_timeout_s = 10;
      co.wait_timeout_s = 10;
      services::ClusterSpecInfo spec;
      auto client = services::CoordinatorClient::Connect(co, &spec);
      if (!client.ok()) {
        *error = absl::StrCat("rank ", rank,
                              " cannot join: ", client.status().ToString());
        return nullptr;
      }
      if (auto d = (*client)->WaitDecision(0); !d.ok()) {
        *error = absl::StrCat(
            "rank ", rank, " has no decision stream: ", d.status().ToString());
        return nullptr;
      }
      job->workers_.push_back(*std::move(client));
    }
    return job;
  }

  ~CoordinatorJob() {
    workers_.clear();
    stub_.reset();
    channel_.reset();
    if (server_) server_->Shutdown(0.5);
  }

  // Sends the calls `input` encodes; "" when every invariant held, else
  // the first that did not.
  std::string Drive(std::string_view input) {
    bool watched = false;
    while (!input.empty()) {
      const int method =
          static_cast<uint8_t>(input[0]) % kNumCoordinatorMethods;
      input.remove_prefix(1);
      size_t len = input.size() >= 2
                       ? (static_cast<uint8_t>(input[0]) |
                          size_t{static_cast<uint8_t>(input[1])} << 8)
                       : input.size();
      input.remove_prefix(std::min<size_t>(2, input.size()));
      len = std::min(len, input.size());
      std::string error = One(method, input.substr(0, len));
      if (!error.empty()) return error;
      input.remove_prefix(len);
      watched = watched || method == kWatchDecisions;
    }
    if (watched) {
      // A broken stream is seen by the server shortly after the call ends.
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      const absl::Status job = server_->state().job_status();
      if (!job.ok() && absl::StrContains(job.message(), " is gone: ")) {
        return absl::StrCat(
            "a WatchDecisions stream that broke failed the "
            "job: ",
            job.message());
      }
    }
    return "";
  }

  services::CoordinatorServer& server() { return *server_; }

 private:
  CoordinatorJob() = default;

  static bool MayWait(int method) {
    const std::string name = kCoordinatorMethods[method];
    return name == "Barrier" || name == "WatchDecisions" ||
           name == "Rendezvous";
  }

  grpc::Status Call(int method, std::string_view body) {
    const auto deadline =
        std::chrono::milliseconds(MayWait(method) ? 50 : 10000);
    GenericCall call(
        stub_.get(),
        absl::StrCat("/mnemo.v1.Coordinator/", kCoordinatorMethods[method]),
        body, deadline);
    return call.Await();
  }

  // Who has joined, and from where: what a refused Join must not change.
  std::string Workers() {
    std::string out;
    for (const auto& w : server_->state().workers()) {
      absl::StrAppend(&out, w.rank, w.joined ? " joined" : " free",
                      w.finished ? " finished" : "", " from '", w.address,
                      "'; ");
    }
    return out;
  }

  std::string One(int method, std::string_view body) {
    const absl::Status job_before = server_->state().job_status();
    const std::string workers_before = Workers();
    std::vector<bool> live_before;
    for (const auto& w : server_->state().workers()) {
      live_before.push_back(w.joined && !w.finished);
    }
    const auto started = std::chrono::steady_clock::now();
    const grpc::Status s = Call(method, body);
    const double took = std::chrono::duration<double>(
                            std::chrono::steady_clock::now() - started)
                            .count();
    const std::string what = absl::StrCat(
        kCoordinatorMethods[method], " (", body.size(), " bytes) ended ",
        s.error_code(), " '", s.error_message(), "'");
    if (s.error_code() == grpc::StatusCode::UNKNOWN) {
      return absl::StrCat(what, ": UNKNOWN");
    }
    if (!MayWait(method) && took > 5) {
      return absl::StrCat(what, " after ", took, " s");
    }
    if (method != kJoin) return "";
    v1::JoinRequest join;
    const bool parsed = join.ParseFromArray(body.data(), body.size());
    if (body.empty() && s.error_code() != grpc::StatusCode::INVALID_ARGUMENT) {
      return absl::StrCat(what, ": an empty Join must be INVALID_ARGUMENT");
    }
    if (s.ok()) return "";
    // A rank no live worker holds (never joined, or finished).
    const bool rank_was_free = parsed && join.rank() >= 0 &&
                               join.rank() < kWorldSize &&
                               !live_before[join.rank()];
    if (s.error_code() == grpc::StatusCode::FAILED_PRECONDITION &&
        rank_was_free) {
      return "";  // another worker's flags: fails the job, by design
    }
    const absl::Status job_after = server_->state().job_status();
    // (An error a joined rank reported earlier fails the job 1.5 s later,
    // whatever came since: "worker N failed: ...".)
    if (job_before.ok() && !job_after.ok() &&
        !absl::StrContains(job_after.message(), " failed: ")) {
      return absl::StrCat(
          what, ": the refused Join failed the job: ", job_after.message());
    }
    if (Workers() != workers_before) {
      return absl::StrCat(what, ": the refused Join changed the workers from ",
                          workers_before, " to ", Workers());
    }
    return "";
  }

  std::unique_ptr<services::CoordinatorServer> server_;
  std::vector<std::unique_ptr<services::CoordinatorClient>> workers_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<grpc::GenericStub> stub_;
};

// One call of the input format: `method`'s index, then `body`.
inline std::string EncodeCall(int method, std::string_view body) {
  std::string out(1, static_cast<char>(method));
  out.push_back(static_cast<char>(body.size() & 0xff));
  out.push_back(static_cast<char>((body.size() >> 8) & 0xff));
  out.append(body);
  return out;
}

// Inputs that reach every method, and the malformed and duplicate joins
// that once failed a running job (an empty Join took rank 0 with no
// configuration hash, and every process blamed "worker 0 was started with
// other flags"): the fuzzer's seeds and the regression test's cases.
inline std::vector<std::pair<std::string, std::string>> CoordinatorSeeds() {
  auto join = [](int rank, const std::string& hash, const std::string& address,
                 const std::string& host) {
    v1::JoinRequest j;
    j.set_rank(rank);
    j.set_config_hash(hash);
    j.set_address(address);
    j.set_host(host);
    j.set_config_text("flags");
    return EncodeCall(kJoin, j.SerializeAsString());
  };
  v1::HeartbeatRequest heartbeat;
  heartbeat.set_rank(0);
  v1::BarrierRequest barrier;
  barrier.set_rank(1);
  barrier.set_name("epoch-1");
  v1::BatchReport report;
  report.set_rank(0);
  report.set_batch(1);
  report.set_grad_norm(0.5);
  v1::WatchDecisionsRequest watch;
  watch.set_rank(1);
  v1::ErrorReport error;
  error.set_rank(7);
  error.set_message("not a worker of this job");
  v1::FinishRequest finish;
  finish.set_rank(1);
  v1::RendezvousRequest kv;
  kv.set_op(v1::RendezvousRequest::SET);
  kv.add_keys("k");
  kv.set_value("v");
  v1::RendezvousRequest kv_get = kv;
  kv_get.set_op(v1::RendezvousRequest::GET);
  const std::string control("\x01\x02\n", 3);
  return {
      {"empty_join", EncodeCall(kJoin, "")},
      {"garbage_join", EncodeCall(kJoin, std::string("\xff\xff\xff", 3))},
      {"join_rank_99", join(99, kJobHash, "a", "h")},
      {"join_rank_negative", join(-1, kJobHash, "a", "h")},
      {"join_no_hash", join(2, "", "a", "h")},
      {"join_control_hash", join(2, control, "a", "h")},
      {"join_long_address", join(2, kJobHash, std::string(5000, 'a'), "h")},
      {"join_control_host", join(2, kJobHash, "a", control)},
      {"duplicate_join_same_flags", join(0, kJobHash, "intruder", "h")},
      {"duplicate_join_other_flags", join(1, "other", "intruder", "h")},
      {"join_rank_2", join(2, kJobHash, "127.0.0.1:7002", "h") +
                          join(2, kJobHash, "again", "h")},
      {"heartbeat", EncodeCall(1, heartbeat.SerializeAsString())},
      {"barrier", EncodeCall(2, barrier.SerializeAsString())},
      {"report", EncodeCall(3, report.SerializeAsString())},
      {"watch_decisions", EncodeCall(4, watch.SerializeAsString())},
      {"report_error_unknown_rank",
       EncodeCall(5, error.SerializeAsString()) + join(2, "", "a", "h")},
      {"finish_then_rejoin", EncodeCall(6, finish.SerializeAsString()) +
                                 join(1, kJobHash, "back", "h")},
      {"status", EncodeCall(7, "")},
      {"rendezvous", EncodeCall(8, kv.SerializeAsString()) +
                         EncodeCall(8, kv_get.SerializeAsString())},
      // A second decision stream claiming rank 0 (whose worker has one),
      // cut at its deadline: it failed the job ("worker 0 is gone").
      {"second_stream_for_a_rank",
       EncodeCall(kWatchDecisions, "") + EncodeCall(kJoin, "")},
      {"every_empty_call",
       EncodeCall(1, "") + EncodeCall(2, "") + EncodeCall(3, "") +
           EncodeCall(4, "") + EncodeCall(5, "") + EncodeCall(6, "") +
           EncodeCall(7, "") + EncodeCall(8, "") + EncodeCall(kJoin, "")},
  };
}

}  // namespace mnemo::fuzz

#endif  // MNEMO_TESTS_FUZZ_COORDINATOR_DRIVER_H_
