// `mnemo serve` as a user runs it: a run trained by `mnemo train`, served by
// the real binary, called over gRPC. Exactness (ingesting the test period
// gives the run's test AP), queries, dynamic batching, bad requests and new
// nodes.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "mnemo/v1/inference.grpc.pb.h"
#include "services/memstore_client.h"
// cli_test_util.h first: it names ::testing before mnemo::testing exists.
#include "tests/unit/services/cli_test_util.h"
// NOLINT
#include "tests/integration/memstore_launcher.h"
#include "trainer/data/event_log.h"

namespace mnemo {
namespace {

namespace fs = std::filesystem;
using cli_testing::Mnemo;
using cli_testing::ReadFile;
using cli_testing::SharedData;
using testing::MemstoreProcess;

constexpr int64_t kEvents = 6000;

// A number after `"key": ` in the summary's "test" object.
double TestFigure(const std::string& summary, const std::string& key) {
  const size_t test = summary.find("\"test\"");
  std::smatch m;
  const std::string rest = summary.substr(test);
  EXPECT_TRUE(
      std::regex_search(rest, m, std::regex("\"" + key + "\": ([-0-9.eE+]+)")))
      << key;
  return std::stod(m[1]);
}

class ServeTest : public ::testing::Test {
 protected:
  // One run for every test: TGN on Wikipedia's first 6,000 events.
  static void SetUpTestSuite() {
    dir_ = new fs::path(fs::temp_directory_path() /
                        ("mnemo_serve_" + std::to_string(getpid())));
    fs::create_directories(*dir_);
    data_ = new std::string(SharedData() + "/wikipedia.txt.gz");
    const auto r = Mnemo(
        absl::StrCat("train --data ", *data_, " --max-events ", kEvents,
                     " --epochs 2 --threads 2 --progress none --memory-dim 32 "
                     "--time-dim 32 --embedding-dim 32 --out ",
                     (*dir_ / "run").string()));
    ASSERT_EQ(r.code, 0) << r.output;
    summary_ = new std::string(ReadFile((*dir_ / "run" / "summary.json")));
    data::LoadOptions lo;
    lo.max_events = kEvents;
    auto log = data::LoadEventLog(*data_, lo);
    ASSERT_TRUE(log.ok()) << log.status();
    log_ = new data::EventLog(*std::move(log));
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
    delete data_;
    delete summary_;
    delete log_;
  }

  // Starts `mnemo serve --from RUN args...`.
  void Serve(std::vector<std::string> args) {
    args.insert(args.begin(), {"--from", (*dir_ / "run").string(), "--data",
                               *data_, "--threads", "2"});
    auto p = MemstoreProcess::StartCommand(
        MemstoreProcess::Binary(), "serve", args,
        (*dir_ / absl::StrCat("serve-", ++starts_, ".log")).string(), 120);
    ASSERT_TRUE(p.ok()) << p.status();
    server_ = *std::move(p);
    stub_ = v1::Inference::NewStub(grpc::CreateChannel(
        server_->address(), grpc::InsecureChannelCredentials()));
  }

  v1::Event EventAt(int64_t e) const {
    v1::Event ev;
    ev.set_src(log_->original_ids[log_->src[e]]);
    ev.set_dst(log_->original_ids[log_->dst[e]]);
    ev.set_t(log_->t[e] + log_->time_offset);
    for (int j = 0; j < log_->edge_feature_dim; ++j) {
      ev.add_features(log_->edge_feature(e)[j]);
    }
    return ev;
  }

  grpc::Status Score(int64_t src, const std::vector<int64_t>& dst,
                     v1::ScoreResponse* out) {
    v1::ScoreRequest req;
    req.set_src(src);
    for (int64_t d : dst) req.add_dst(d);
    grpc::ClientContext ctx;
    return stub_->Score(&ctx, req, out);
  }

  static fs::path* dir_;
  static std::string* data_;
  static std::string* summary_;
  static data::EventLog* log_;
  int starts_ = 0;
  std::unique_ptr<MemstoreProcess> server_;
  std::unique_ptr<v1::Inference::Stub> stub_;
};

fs::path* ServeTest::dir_ = nullptr;
std::string* ServeTest::data_ = nullptr;
std::string* ServeTest::summary_ = nullptr;
data::EventLog* ServeTest::log_ = nullptr;

// The run's test pass, as a client: the test period's events, in the
// evaluation's batches of 200, with the negatives the server draws (the
// evaluation's). The online AP over them is the run's test AP.
TEST_F(ServeTest, IngestingTheTestPeriodGivesTheRunsTestAp) {
  Serve({"--no-replay-test", "--online-window", "100000"});
  const double want = TestFigure(*summary_, "ap");
  const int64_t test_events =
      static_cast<int64_t>(TestFigure(*summary_, "events"));
  ASSERT_GT(test_events, 0);
  grpc::ClientContext ctx;
  auto stream = stub_->Ingest(&ctx);
  v1::IngestAck ack;
  int64_t sent = 0;
  for (int64_t b = kEvents - test_events; b < kEvents; b += 200) {
    v1::IngestRequest req;
    for (int64_t e = b; e < std::min(kEvents, b + 200); ++e) {
      *req.add_events() = EventAt(e);
    }
    req.set_online_figures(true);
    ASSERT_TRUE(stream->Write(req));
    ASSERT_TRUE(stream->Read(&ack));
    sent += req.events_size();
    EXPECT_EQ(ack.events(), req.events_size());
    EXPECT_EQ(ack.version().events_applied(), sent);
  }
  stream->WritesDone();
  ASSERT_TRUE(stream->Finish().ok());
  EXPECT_NEAR(ack.online_ap(), want, 1e-6);
  EXPECT_EQ(ack.version().time(), log_->t[kEvents - 1] + log_->time_offset);
}

// The replay at start is the same pass, on the server's side.
TEST_F(ServeTest, TheReplayAtStartGivesTheRunsTestAp) {
  Serve({});
  std::smatch m;
  const std::string log = server_->Log();
  ASSERT_TRUE(std::regex_search(
      log, m,
      std::regex("test period replayed \\(([0-9]+) events.*AP "
                 "([0-9.]+)")))
      << log;
  EXPECT_EQ(std::stoll(m[1]),
            static_cast<int64_t>(TestFigure(*summary_, "events")));
  EXPECT_NEAR(std::stod(m[2]), TestFigure(*summary_, "ap"), 1e-6);
}

// A query scores a link as ingestion scores the same event before applying
// it: Score(src, [dst, negative], t) is the ingested event's positive and
// negative logits (one model row either way), and a lone candidate's score
// is the same.
TEST_F(ServeTest, ScoreIsWhatIngestionPredicts) {
  Serve({"--no-replay-test"});
  const int64_t test_events =
      static_cast<int64_t>(TestFigure(*summary_, "events"));
  const int64_t e = kEvents - test_events;  // the test period's first
  const v1::Event ev = EventAt(e);
  const int64_t negative = log_->original_ids[log_->dst[e + 7]];
  v1::ScoreRequest req;
  req.set_src(ev.src());
  req.add_dst(ev.dst());
  req.add_dst(negative);
  req.set_t(ev.t());
  v1::ScoreResponse both, alone;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub_->Score(&ctx, req, &both).ok());
  }
  req.clear_dst();
  req.add_dst(ev.dst());
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub_->Score(&ctx, req, &alone).ok());
  }
  grpc::ClientContext ctx;
  auto stream = stub_->Ingest(&ctx);
  v1::IngestRequest in;
  *in.add_events() = ev;
  in.mutable_events(0)->set_negative(negative);
  ASSERT_TRUE(stream->Write(in));
  v1::IngestAck ack;
  ASSERT_TRUE(stream->Read(&ack));
  stream->WritesDone();
  ASSERT_TRUE(stream->Finish().ok());
  EXPECT_NEAR(both.logit(0), ack.positive_logit(0), 1e-6);
  EXPECT_NEAR(both.logit(1), ack.negative_logit(0), 1e-6);
  EXPECT_NEAR(alone.logit(0), ack.positive_logit(0), 1e-6);
  EXPECT_EQ(ack.negative(0), negative);
}

TEST_F(ServeTest, TopKRanksAsScoreScoresAndBatchingChangesNoAnswer) {
  Serve({"--max-delay-us", "2000"});
  const int64_t src = log_->original_ids[log_->src[kEvents - 1]];
  std::vector<int64_t> candidates;
  for (int64_t e = kEvents - 1; candidates.size() < 20; --e) {
    const int64_t d = log_->original_ids[log_->dst[e]];
    if (std::find(candidates.begin(), candidates.end(), d) ==
        candidates.end()) {
      candidates.push_back(d);
    }
  }
  v1::ScoreResponse alone;
  ASSERT_TRUE(Score(src, candidates, &alone).ok());
  ASSERT_EQ(alone.logit_size(), 20);
  for (int i = 0; i < 20; ++i) {
    EXPECT_TRUE(std::isfinite(alone.logit(i)));
    EXPECT_NEAR(alone.probability(i), 1 / (1 + std::exp(-alone.logit(i))),
                1e-6);
  }
  // TopK: the best five of the same candidates, best first.
  v1::TopKRequest tk;
  tk.set_src(src);
  tk.set_k(5);
  for (int64_t c : candidates) tk.add_candidates(c);
  v1::TopKResponse top;
  grpc::ClientContext ctx;
  ASSERT_TRUE(stub_->TopK(&ctx, tk, &top).ok());
  ASSERT_EQ(top.dst_size(), 5);
  std::vector<int> order(20);
  for (int i = 0; i < 20; ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return alone.logit(a) > alone.logit(b);
  });
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(top.dst(i), candidates[order[i]]) << i;
    EXPECT_NEAR(top.logit(i), alone.logit(order[i]), 1e-5);
  }
  // Eight clients at once (batched together within the 2 ms delay): each
  // gets what it got alone.
  std::vector<std::thread> clients;
  std::vector<v1::ScoreResponse> answers(8);
  std::vector<grpc::Status> codes(8);
  for (int c = 0; c < 8; ++c) {
    clients.emplace_back(
        [&, c] { codes[c] = Score(src, candidates, &answers[c]); });
  }
  for (auto& t : clients) t.join();
  for (int c = 0; c < 8; ++c) {
    ASSERT_TRUE(codes[c].ok()) << codes[c].error_message();
    for (int i = 0; i < 20; ++i) {
      EXPECT_NEAR(answers[c].logit(i), alone.logit(i), 1e-5) << c << " " << i;
    }
  }
  // Every destination of the data when no candidates are given.
  v1::TopKRequest all;
  all.set_src(src);
  all.set_k(3);
  grpc::ClientContext ctx2;
  v1::TopKResponse best;
  ASSERT_TRUE(stub_->TopK(&ctx2, all, &best).ok());
  EXPECT_EQ(best.dst_size(), 3);
  EXPECT_GE(best.logit(0), best.logit(1));
  EXPECT_GE(best.logit(0), top.logit(0) - 1e-5);
}

TEST_F(ServeTest, BadRequestsNameTheFieldAndApplyNothing) {
  Serve({"--max-new-nodes", "1"});
  const int64_t src = log_->original_ids[log_->src[0]];
  const int64_t dst = log_->original_ids[log_->dst[0]];
  v1::ScoreResponse r;
  grpc::Status s = Score(src, {}, &r);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("dst"), std::string::npos)
      << s.error_message();
  {
    v1::ScoreRequest req;
    req.set_src(src);
    req.add_dst(dst);
    req.set_t(-1);  // before the memory's time
    grpc::ClientContext ctx;
    s = stub_->Score(&ctx, req, &r);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(s.error_message().find("t: "), std::string::npos)
        << s.error_message();
  }
  {
    v1::TopKRequest req;
    req.set_src(src);
    req.set_k(0);
    grpc::ClientContext ctx;
    v1::TopKResponse out;
    s = stub_->TopK(&ctx, req, &out);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    req.set_k(1);
    req.add_candidates(-12345);
    grpc::ClientContext ctx2;
    s = stub_->TopK(&ctx2, req, &out);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
    EXPECT_NE(s.error_message().find("candidates[0]"), std::string::npos);
  }
  // What the memory stands at before the bad batches.
  ASSERT_TRUE(Score(src, {dst}, &r).ok());
  const v1::MemoryVersion before = r.version();
  const double now = before.time();
  auto ingest = [&](const v1::IngestRequest& req) {
    grpc::ClientContext ctx;
    auto stream = stub_->Ingest(&ctx);
    stream->Write(req);
    stream->WritesDone();
    v1::IngestAck ack;
    while (stream->Read(&ack)) {
    }
    return stream->Finish();
  };
  {
    // Out of order in the middle of a batch: nothing of it applied.
    v1::IngestRequest req;
    for (double t : {now + 5, now + 7, now + 6}) {
      v1::Event* e = req.add_events();
      e->set_src(src);
      e->set_dst(dst);
      e->set_t(t);
    }
    s = ingest(req);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(s.error_message().find("events[2].t"), std::string::npos)
        << s.error_message();
  }
  {
    v1::IngestRequest req;
    v1::Event* e = req.add_events();
    e->set_src(src);
    e->set_dst(dst);
    e->set_t(now + 1);
    e->add_features(1.0f);  // the data has no edge features
    s = ingest(req);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(s.error_message().find("events[0].features"), std::string::npos)
        << s.error_message();
  }
  {
    // A timestamp in another unit: far past the data's whole time span.
    v1::IngestRequest req;
    v1::Event* e = req.add_events();
    e->set_src(src);
    e->set_dst(dst);
    e->set_t(now * 1000 + 1);
    s = ingest(req);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(s.error_message().find("--max-time-gap"), std::string::npos)
        << s.error_message();
  }
  {
    // Two new nodes where there is room for one.
    v1::IngestRequest req;
    v1::Event* e = req.add_events();
    e->set_src(-1);
    e->set_dst(-2);
    e->set_t(now + 1);
    s = ingest(req);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
    EXPECT_NE(s.error_message().find("--max-new-nodes"), std::string::npos)
        << s.error_message();
  }
  ASSERT_TRUE(Score(src, {dst}, &r).ok());
  EXPECT_EQ(r.version().events_applied(), before.events_applied());
  EXPECT_EQ(r.version().time(), before.time());
}

// Embeddings: the model's width, the same for a node alone or among others
// (one model batch either way), a stranger's too.
TEST_F(ServeTest, EmbedAnswersWhatTheModelEmbeds) {
  Serve({});
  std::vector<int64_t> nodes;
  for (int64_t e = kEvents - 1; nodes.size() < 7; --e) {
    nodes.push_back(log_->original_ids[log_->src[e]]);
    nodes.push_back(log_->original_ids[log_->dst[e]]);
  }
  nodes.push_back(-31337);  // no node of the data
  auto embed = [&](const std::vector<int64_t>& which, v1::EmbedResponse* out) {
    v1::EmbedRequest req;
    for (int64_t v : which) req.add_nodes(v);
    grpc::ClientContext ctx;
    return stub_->Embed(&ctx, req, out);
  };
  v1::EmbedResponse all;
  ASSERT_TRUE(embed(nodes, &all).ok());
  EXPECT_EQ(all.dim(), 32);  // --embedding-dim of the run
  ASSERT_EQ(all.embedding_size(), static_cast<int>(nodes.size()) * all.dim());
  for (float x : all.embedding()) ASSERT_TRUE(std::isfinite(x));
  for (size_t i : {size_t{0}, size_t{4}, nodes.size() - 1}) {
    v1::EmbedResponse one;
    ASSERT_TRUE(embed({nodes[i]}, &one).ok());
    ASSERT_EQ(one.embedding_size(), all.dim());
    for (int j = 0; j < all.dim(); ++j) {
      EXPECT_NEAR(one.embedding(j), all.embedding(i * all.dim() + j), 1e-5)
          << i << " " << j;
    }
  }
  v1::EmbedResponse none;
  EXPECT_EQ(embed({}, &none).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(ServeTest, NewNodesAreScoredAsNewAndIngested) {
  Serve({});
  const int64_t dst = log_->original_ids[log_->dst[kEvents - 1]];
  const int64_t stranger = -777;  // no node of the data
  v1::ScoreResponse r;
  ASSERT_TRUE(Score(stranger, {dst}, &r).ok());
  ASSERT_TRUE(std::isfinite(r.logit(0)));
  const int64_t applied = r.version().events_applied();
  grpc::ClientContext ctx;
  auto stream = stub_->Ingest(&ctx);
  v1::IngestRequest req;
  v1::Event* e = req.add_events();
  e->set_src(stranger);
  e->set_dst(dst);
  e->set_t(r.version().time() + 10);
  e->set_negative(dst);
  ASSERT_TRUE(stream->Write(req));
  v1::IngestAck ack;
  ASSERT_TRUE(stream->Read(&ack));
  stream->WritesDone();
  ASSERT_TRUE(stream->Finish().ok());
  EXPECT_EQ(ack.negative(0), dst);
  // Scored against itself as its negative: the same logit.
  EXPECT_EQ(ack.positive_logit(0), ack.negative_logit(0));
  EXPECT_EQ(ack.version().events_applied(), applied + 1);
  // Now a node with memory: its score moved.
  v1::ScoreResponse after;
  ASSERT_TRUE(Score(stranger, {dst}, &after).ok());
  EXPECT_EQ(after.version().events_applied(), applied + 1);
  EXPECT_NE(after.logit(0), r.logit(0));
}

// One GET /metrics from 127.0.0.1:`port` (the whole answer; "" when the
// connection failed).
std::string Scrape(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    if (fd >= 0) close(fd);
    return "";
  }
  timeval tv{30, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  const std::string req = "GET /metrics HTTP/1.0\r\n\r\n";
  send(fd, req.data(), req.size(), MSG_NOSIGNAL);
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = recv(fd, buf, sizeof(buf), 0)) > 0) out.append(buf, n);
  close(fd);
  return out;
}

TEST_F(ServeTest, MetricsCountCallsAndIngestion) {
  Serve({"--metrics-listen", "127.0.0.1:0", "--no-replay-test"});
  std::smatch m;
  const std::string log = server_->Log();
  ASSERT_TRUE(std::regex_search(log, m, std::regex("metrics on port ([0-9]+)")))
      << log;
  const int port = std::stoi(m[1]);
  const int64_t first =
      kEvents - static_cast<int64_t>(TestFigure(*summary_, "events"));
  {
    grpc::ClientContext ctx;
    auto stream = stub_->Ingest(&ctx);
    v1::IngestRequest req;
    for (int64_t e = first; e < first + 50; ++e) *req.add_events() = EventAt(e);
    ASSERT_TRUE(stream->Write(req));
    v1::IngestAck ack;
    ASSERT_TRUE(stream->Read(&ack));
    // Not asked for: no online figures in the ack.
    EXPECT_TRUE(std::isnan(ack.online_ap()));
    stream->WritesDone();
    ASSERT_TRUE(stream->Finish().ok());
  }
  v1::ScoreResponse r;
  ASSERT_TRUE(Score(log_->original_ids[log_->src[0]],
                    {log_->original_ids[log_->dst[0]]}, &r)
                  .ok());
  ASSERT_FALSE(Score(log_->original_ids[log_->src[0]], {}, &r).ok());
  const std::string text = Scrape(port);
  for (const char* want :
       {"mnemo_serve_ingested_events_total 50",
        "mnemo_serve_requests_total{code=\"OK\",method=\"Ingest\"} 1",
        "mnemo_serve_requests_total{code=\"OK\",method=\"Score\"} 1",
        "mnemo_serve_requests_total{code=\"INVALID_ARGUMENT\",method="
        "\"Score\"} 1",
        "mnemo_serve_online_ap ", "mnemo_serve_memory_time ",
        "mnemo_serve_request_seconds_count{method=\"Score\"} 2"}) {
    EXPECT_NE(text.find(want), std::string::npos) << want << "\n" << text;
  }
}

// --journal: a server killed (SIGKILL) and started again stands where its
// last acknowledged batch left it; a cut write at the journal's end is cut
// off; a journal of another starting point is refused.
TEST_F(ServeTest, JournalRecoversWhatWasAcknowledged) {
  const std::string journal = (*dir_ / "journal").string();
  const std::vector<std::string> args = {"--no-replay-test", "--journal",
                                         journal};
  Serve(args);
  const int64_t first =
      kEvents - static_cast<int64_t>(TestFigure(*summary_, "events"));
  auto ingest = [&](int64_t from, int64_t n) {
    grpc::ClientContext ctx;
    auto stream = stub_->Ingest(&ctx);
    v1::IngestRequest req;
    for (int64_t e = from; e < from + n; ++e) *req.add_events() = EventAt(e);
    EXPECT_TRUE(stream->Write(req));
    v1::IngestAck ack;
    EXPECT_TRUE(stream->Read(&ack));
    stream->WritesDone();
    EXPECT_TRUE(stream->Finish().ok());
    return ack;
  };
  for (int b = 0; b < 3; ++b) ingest(first + 100 * b, 100);
  const int64_t src = log_->original_ids[log_->src[first + 300]];
  const std::vector<int64_t> dst = {log_->original_ids[log_->dst[first + 300]],
                                    log_->original_ids[log_->dst[first + 5]],
                                    log_->original_ids[log_->dst[first + 77]]};
  v1::ScoreResponse before;
  ASSERT_TRUE(Score(src, dst, &before).ok());
  ASSERT_EQ(before.version().events_applied(), 300);
  server_->Kill(SIGKILL);

  Serve(args);
  EXPECT_NE(server_->Log().find("journal: 3 batches applied again"),
            std::string::npos)
      << server_->Log();
  v1::ScoreResponse after;
  ASSERT_TRUE(Score(src, dst, &after).ok());
  EXPECT_EQ(after.version().events_applied(), 300);
  EXPECT_EQ(after.version().time(), before.version().time());
  for (int i = 0; i < 3; ++i) {
    EXPECT_NEAR(after.logit(i), before.logit(i), 1e-6) << i;
  }
  const v1::IngestAck fourth = ingest(first + 300, 100);
  EXPECT_EQ(fourth.version().events_applied(), 400);
  server_->Kill(SIGKILL);

  // A write the kill cut: its first bytes at the journal's end.
  {
    std::ofstream out(journal + "/ingest.journal",
                      std::ios::binary | std::ios::app);
    out.write("MNJ1\x40\x00", 6);
  }
  Serve(args);
  EXPECT_NE(server_->Log().find("journal: 4 batches applied again"),
            std::string::npos)
      << server_->Log();
  EXPECT_NE(server_->Log().find("never acknowledged"), std::string::npos);
  server_->Kill(SIGKILL);

  // The same journal for a memory that starts elsewhere: refused.
  const auto r =
      Mnemo("serve --from " + (*dir_ / "run").string() + " --data " + *data_ +
            " --journal " + journal + " --listen 127.0.0.1:0");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("holds the batches of"), std::string::npos)
      << r.output;

  // A byte changed in a batch with others after it: refused, not skipped.
  {
    std::fstream f(journal + "/ingest.journal",
                   std::ios::binary | std::ios::in | std::ios::out);
    f.seekg(0, std::ios::end);
    const std::streamoff middle = f.tellg() / 2;
    f.seekg(middle);
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x5a);
    f.seekp(middle);
    f.write(&c, 1);
  }
  const auto damaged = Mnemo("serve --from " + (*dir_ / "run").string() +
                             " --data " + *data_ + " --no-replay-test" +
                             " --journal " + journal + " --listen 127.0.0.1:0");
  EXPECT_EQ(damaged.code, 1) << damaged.output;
  EXPECT_NE(damaged.output.find("is damaged"), std::string::npos)
      << damaged.output;
}

// Two memory-store shards of serve's own (`--memstore`), started with the
// record width a first, refused start names.
class ServeThroughShardsTest : public ServeTest {
 protected:
  void SetUp() override {
    StartShards(1);
    auto refused = MemstoreProcess::StartCommand(
        MemstoreProcess::Binary(), "serve",
        {"--from", (*dir_ / "run").string(), "--data", *data_, "--memstore",
         Addresses()},
        (*dir_ / "serve-refused.log").string(), 120);
    ASSERT_FALSE(refused.ok());
    std::smatch m;
    const std::string message(refused.status().message());
    ASSERT_TRUE(std::regex_search(message, m,
                                  std::regex("start its shards with "
                                             "--dim ([0-9]+)")))
        << message;
    dim_ = std::stoi(m[1]);
    for (auto& shard : shards_) shard->Kill(SIGKILL);
    StartShards(dim_);
  }

  // Shards 0 and 1 with states of `dim` floats, in fresh directories.
  void StartShards(int dim) {
    ++shard_sets_;
    for (int i = 0; i < 2; ++i) {
      shards_[i].reset();
      ASSERT_NO_FATAL_FAILURE(StartShard(i, dim, "127.0.0.1:0"));
    }
  }
  void StartShard(int i, int dim, const std::string& listen) {
    const fs::path shard_dir =
        *dir_ / absl::StrCat("shards-", getpid(), "-", shard_sets_, "-", i);
    auto p = MemstoreProcess::Start(
        MemstoreProcess::Binary(),
        {"--listen", listen, "--data-dir", shard_dir.string(), "--dim",
         std::to_string(dim), "--shard-id", std::to_string(i), "--num-shards",
         "2"},
        shard_dir.string() + ".log");
    ASSERT_TRUE(p.ok()) << p.status();
    shards_[i] = *std::move(p);
  }
  std::string Addresses() const {
    return shards_[0]->address() + "," + shards_[1]->address();
  }

  // Ingests events [from, from + n) as one request of its own stream.
  grpc::Status IngestBatch(int64_t from, int64_t n, v1::IngestAck* ack) {
    grpc::ClientContext ctx;
    auto stream = stub_->Ingest(&ctx);
    v1::IngestRequest req;
    for (int64_t e = from; e < from + n; ++e) *req.add_events() = EventAt(e);
    req.set_online_figures(true);
    stream->Write(req);
    stream->Read(ack);
    stream->WritesDone();
    return stream->Finish();
  }

  int dim_ = 0;
  int shard_sets_ = 0;
  std::unique_ptr<MemstoreProcess> shards_[2];
};

// The run's test pass through the shards: every batch reads its states from
// them and writes what it changed back before its ack.
TEST_F(ServeThroughShardsTest, IngestingTheTestPeriodGivesTheRunsTestAp) {
  Serve({"--no-replay-test", "--online-window", "100000", "--memstore",
         Addresses()});
  EXPECT_NE(server_->Log().find("memory store: "), std::string::npos)
      << server_->Log();
  const double want = TestFigure(*summary_, "ap");
  const int64_t first =
      kEvents - static_cast<int64_t>(TestFigure(*summary_, "events"));
  v1::IngestAck ack;
  for (int64_t b = first; b < kEvents; b += 200) {
    const int64_t n = std::min<int64_t>(200, kEvents - b);
    ASSERT_TRUE(IngestBatch(b, n, &ack).ok());
    EXPECT_EQ(ack.version().events_applied(), b + n - first);
  }
  EXPECT_NEAR(ack.online_ap(), want, 1e-6);
  // Both shards served reads and took states.
  services::MemstoreClientOptions mo;
  mo.addresses = {shards_[0]->address(), shards_[1]->address()};
  auto client = services::MemstoreClient::Connect(mo);
  ASSERT_TRUE(client.ok()) << client.status();
  auto stats = (*client)->StatsPerShard();
  ASSERT_TRUE(stats.ok()) << stats.status();
  for (const services::ShardStats& shard : *stats) {
    EXPECT_GT(shard.stats.pulls, 0) << shard.address;
    EXPECT_GT(shard.stats.states_accepted, 0) << shard.address;
  }
  server_->Kill(SIGKILL);
  // Shards holding states serve did not write (a training job's) are not
  // taken.
  ASSERT_NO_FATAL_FAILURE(StartShards(dim_));
  mo.addresses = {shards_[0]->address(), shards_[1]->address()};
  client = services::MemstoreClient::Connect(mo);
  ASSERT_TRUE(client.ok()) << client.status();
  ASSERT_TRUE((*client)
                  ->Push({3}, std::vector<float>(dim_, 0.5f), {42}, {1.0}, 0)
                  .ok());
  const auto refused = Mnemo(
      absl::StrCat("serve --from ", (*dir_ / "run").string(), " --data ",
                   *data_, " --listen 127.0.0.1:0 --memstore ", Addresses()));
  EXPECT_EQ(refused.code, 1) << refused.output;
  EXPECT_NE(refused.output.find("holds states serve did not write"),
            std::string::npos)
      << refused.output;
}

// A shard killed while serving: reads and ingestion answer UNAVAILABLE and
// apply nothing; once it is back (its data kept) serve goes on where it
// was, and the test period still gives the run's test AP.
TEST_F(ServeThroughShardsTest, AShardDownIsUnavailableUntilItReturns) {
  Serve({"--no-replay-test", "--online-window", "100000", "--memstore",
         Addresses(), "--memstore-timeout", "1"});
  const double want = TestFigure(*summary_, "ap");
  const int64_t first =
      kEvents - static_cast<int64_t>(TestFigure(*summary_, "events"));
  v1::IngestAck ack;
  ASSERT_TRUE(IngestBatch(first, 200, &ack).ok());
  const int64_t src = log_->original_ids[log_->src[first + 200]];
  std::vector<int64_t> dst;
  for (int64_t e = first; e < first + 400; e += 7) {
    dst.push_back(log_->original_ids[log_->dst[e]]);
  }
  v1::ScoreResponse before;
  ASSERT_TRUE(Score(src, dst, &before).ok());

  const std::string address = shards_[1]->address();
  shards_[1]->Kill(SIGKILL);
  v1::ScoreResponse down;
  grpc::Status s = Score(src, dst, &down);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
  EXPECT_NE(s.error_message().find("memory store"), std::string::npos)
      << s.error_message();
  s = IngestBatch(first + 200, 200, &ack);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();

  // Back on its address with its data.
  const std::string port = address.substr(address.rfind(':') + 1);
  ASSERT_NO_FATAL_FAILURE(StartShard(1, dim_, "127.0.0.1:" + port));
  // Answered again once the client has reconnected (its reconnect backoff
  // is at most 1 s; a call before then is UNAVAILABLE still).
  v1::ScoreResponse after;
  for (int attempt = 0; attempt < 30; ++attempt) {
    s = Score(src, dst, &after);
    if (s.error_code() != grpc::StatusCode::UNAVAILABLE) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(after.version().events_applied(), 200);
  ASSERT_EQ(after.logit_size(), before.logit_size());
  for (int i = 0; i < after.logit_size(); ++i) {
    EXPECT_NEAR(after.logit(i), before.logit(i), 1e-6) << i;
  }
  for (int64_t b = first + 200; b < kEvents; b += 200) {
    const int64_t n = std::min<int64_t>(200, kEvents - b);
    ASSERT_TRUE(IngestBatch(b, n, &ack).ok());
    EXPECT_EQ(ack.version().events_applied(), b + n - first);
  }
  EXPECT_NEAR(ack.online_ap(), want, 1e-6);
}

// Serving while training: serve follows a 2-worker job's shards (the ones
// its launcher kept, started again on the job's data) and takes a newer
// checkpoint's parameters when the run writes one.
TEST_F(ServeThroughShardsTest, FollowReadsTheJobsMemoryAndReloads) {
  const fs::path job = *dir_ / "job";
  const std::string flags =
      absl::StrCat("--data ", *data_, " --max-events ", kEvents,
                   " --threads 2 --progress none --memory-dim 32 --time-dim "
                   "32 --embedding-dim 32");
  auto trained = Mnemo(absl::StrCat("train ", flags,
                                    " --epochs 2 --workers 2 "
                                    "--out ",
                                    job.string()));
  ASSERT_EQ(trained.code, 0) << trained.output;
  std::unique_ptr<MemstoreProcess> job_shards[2];
  for (int i = 0; i < 2; ++i) {
    const fs::path shard_dir = job / "cluster" / absl::StrCat("memstore-", i);
    auto p = MemstoreProcess::Start(
        MemstoreProcess::Binary(),
        {"--listen", "127.0.0.1:0", "--data-dir", shard_dir.string(), "--dim",
         std::to_string(dim_), "--shard-id", std::to_string(i), "--num-shards",
         "2"},
        shard_dir.string() + ".log");
    ASSERT_TRUE(p.ok()) << p.status();
    job_shards[i] = *std::move(p);
  }
  const std::string addresses =
      job_shards[0]->address() + "," + job_shards[1]->address();
  // Where the job's memory stands: its newest stored state.
  services::MemstoreClientOptions mo;
  mo.addresses = {job_shards[0]->address(), job_shards[1]->address()};
  auto client = services::MemstoreClient::Connect(mo);
  ASSERT_TRUE(client.ok()) << client.status();
  auto newest = (*client)->ListRecent(1);
  ASSERT_TRUE(newest.ok() && newest->size() == 1);
  const uint64_t step = newest->front().version >> 2;

  auto p = MemstoreProcess::StartCommand(
      MemstoreProcess::Binary(), "serve",
      {"--from", job.string(), "--data", *data_, "--threads", "2", "--follow",
       "--memstore", addresses, "--reload", "0.2"},
      (*dir_ / "serve-follow.log").string(), 120);
  ASSERT_TRUE(p.ok()) << p.status();
  server_ = *std::move(p);
  stub_ = v1::Inference::NewStub(grpc::CreateChannel(
      server_->address(), grpc::InsecureChannelCredentials()));
  const int64_t src = log_->original_ids[log_->src[100]];
  std::vector<int64_t> dst;
  for (int64_t e = 0; e < 400; e += 9) {
    dst.push_back(log_->original_ids[log_->dst[e]]);
  }
  v1::ScoreResponse before;
  grpc::Status s = Score(src, dst, &before);
  ASSERT_TRUE(s.ok()) << s.error_message() << server_->Log();
  EXPECT_EQ(before.version().model_epoch(), 2);
  EXPECT_EQ(before.version().job_epoch(), 2);
  EXPECT_EQ(before.version().job_events(),
            static_cast<int64_t>(step % (kEvents + 1)));
  EXPECT_EQ(before.version().time(), newest->front().time + log_->time_offset);
  // The job writes this memory: serve does not ingest.
  v1::IngestAck ack;
  s = IngestBatch(kEvents - 200, 100, &ack);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION)
      << s.error_message();

  // A third epoch, resumed in one process, writes a newer checkpoint.
  auto resumed = Mnemo(
      absl::StrCat("train ", flags, " --epochs 3 --resume ", job.string()));
  ASSERT_EQ(resumed.code, 0) << resumed.output;
  v1::ScoreResponse after;
  for (int attempt = 0; attempt < 100; ++attempt) {
    ASSERT_TRUE(Score(src, dst, &after).ok());
    if (after.version().model_epoch() == 3) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_EQ(after.version().model_epoch(), 3) << server_->Log();
  EXPECT_NE(server_->Log().find("epoch 3's parameters"), std::string::npos);
  bool changed = false;
  for (int i = 0; i < after.logit_size(); ++i) {
    changed = changed || after.logit(i) != before.logit(i);
  }
  EXPECT_TRUE(changed) << "the new parameters score as the old ones";
  // --follow needs shards, and --reload needs --follow.
  auto r = Mnemo(absl::StrCat("serve --from ", job.string(), " --follow"));
  EXPECT_EQ(r.code, 2) << r.output;
  r = Mnemo(absl::StrCat("serve --from ", job.string(), " --reload 1"));
  EXPECT_EQ(r.code, 2) << r.output;
}

TEST_F(ServeTest, SigtermStopsItCleanly) {
  Serve({});
  v1::ScoreResponse r;
  ASSERT_TRUE(Score(log_->original_ids[log_->src[0]],
                    {log_->original_ids[log_->dst[0]]}, &r)
                  .ok());
  const int status = server_->Kill(SIGTERM);
  ASSERT_TRUE(WIFEXITED(status)) << server_->Log();
  EXPECT_EQ(WEXITSTATUS(status), 0) << server_->Log();
  EXPECT_NE(server_->Log().find("shutting down"), std::string::npos);
}

TEST_F(ServeTest, UsageErrorsExitTwo) {
  auto r = Mnemo("serve");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("--from"), std::string::npos) << r.output;
  r = Mnemo("serve --from " + (*dir_ / "nothing-here").string());
  EXPECT_EQ(r.code, 2) << r.output;
  r = Mnemo("serve --from " + (*dir_ / "run").string() + " --max-batch 0");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("--max-batch"), std::string::npos) << r.output;
  r = Mnemo("serve --from " + (*dir_ / "run").string() +
            " --memstore 127.0.0.1:7000,no-port");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("--memstore: 'no-port' is not host:port"),
            std::string::npos)
      << r.output;
  struct Bad {
    const char* args;
    const char* names;  // the flag the error names
  };
  for (const Bad& bad :
       {Bad{" --memstore 127.0.0.1:7000 --memstore-timeout 0",
            "--memstore-timeout"},
        Bad{" --memstore 127.0.0.1:7000 --follow --reload -1", "--reload"},
        Bad{" --memstore 127.0.0.1:7000 --follow --journal /tmp/j",
            "--journal"}}) {
    r = Mnemo("serve --from " + (*dir_ / "run").string() + bad.args);
    EXPECT_EQ(r.code, 2) << bad.args << ": " << r.output;
    EXPECT_NE(r.output.find(bad.names), std::string::npos)
        << bad.args << ": " << r.output;
  }
}

}  // namespace
}  // namespace mnemo
