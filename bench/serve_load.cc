// bench_serve_load: `mnemo serve` under a closed-loop load on loopback.
//
// Queries: C clients (threads, a channel each) call Score with K random
// candidates from the data's destinations for a random source, each
// sending its next call when the last is answered, for S seconds per
// point; p50/p99 latency and calls/s at each concurrency, with dynamic
// batching and without (--no-batching), against the same run.
// Ingestion: the data's test period streamed through Ingest in the
// evaluation's batches of 200 (predict, then update), events/s, without and
// with --journal, beside the run's own test pass and training's forward pass
// (from its summary.json).
//
// Usage: bench_serve_load --from RUN_DIR --data PATH [--max-events N]
//        [--seconds S] [--candidates K] [--concurrency 1,8,64]
//        [--threads T] [--shards N] [--address HOST:PORT] [--out JSON]
//        ($MNEMO_BIN: the mnemo binary; --address: Score against a server
//        already running, printed only)
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "bench/bench_util.h"
#include "mnemo/v1/inference.grpc.pb.h"
#include "tests/integration/memstore_launcher.h"
#include "trainer/data/event_log.h"
#include "trainer/runtime/eval/metrics.h"

namespace {

using mnemo::bench::Now;
using mnemo::testing::MemstoreProcess;

struct Args {
  std::string from, data, out = "bench/results/serve.json";
  // A server already running (a profile of it, say): only Score is
  // measured against it, at each --concurrency, and printed.
  std::string address;
  int64_t max_events = 0;
  double seconds = 10;
  int candidates = 100;
  std::vector<int> concurrency = {1, 8, 64};
  int threads = 0;
  int shards = 2;  // the pass through memory-store shards (0: none)
};

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(q * v.size()));
  return v[i];
}

// A number after "key": in a JSON text (the run's summary.json).
double JsonNumber(const std::string& text, const std::string& key) {
  std::smatch m;
  if (!std::regex_search(text, m,
                         std::regex("\"" + key + "\": ([-0-9.eE+]+)"))) {
    return 0;
  }
  return std::stod(m[1]);
}

std::unique_ptr<MemstoreProcess> StartServe(
    const Args& a, const std::vector<std::string>& more,
    const std::string& log) {
  std::vector<std::string> args = {"--from", a.from, "--data", a.data};
  if (a.threads > 0) {
    args.push_back("--threads");
    args.push_back(std::to_string(a.threads));
  }
  args.insert(args.end(), more.begin(), more.end());
  auto p = MemstoreProcess::StartCommand(MemstoreProcess::Binary(), "serve",
                                         args, log, 600);
  if (!p.ok()) {
    std::fprintf(stderr, "%s\n", p.status().ToString().c_str());
    std::exit(1);
  }
  return *std::move(p);
}

struct Point {
  int clients = 0;
  bool batching = true;
  int64_t calls = 0, errors = 0;
  double seconds = 0, p50_ms = 0, p99_ms = 0, calls_per_s = 0;
};

Point Load(const std::string& address, int clients, double seconds,
           int candidates, const std::vector<int64_t>& sources,
           const std::vector<int64_t>& destinations) {
  std::vector<std::vector<double>> lat(clients);
  std::atomic<int64_t> errors{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> ts;
  double t_end = 0;
  for (int c = 0; c < clients; ++c) {
    ts.emplace_back([&, c] {
      grpc::ChannelArguments ca;
      ca.SetInt("mnemo.client", c);  // a connection of its own
      auto stub = mnemo::v1::Inference::NewStub(grpc::CreateCustomChannel(
          address, grpc::InsecureChannelCredentials(), ca));
      std::mt19937_64 rng(1234 + c);
      std::uniform_int_distribution<size_t> src(0, sources.size() - 1),
          dst(0, destinations.size() - 1);
      while (!go.load()) std::this_thread::yield();
      while (Now() < t_end) {
        mnemo::v1::ScoreRequest req;
        req.set_src(sources[src(rng)]);
        for (int k = 0; k < candidates; ++k) {
          req.add_dst(destinations[dst(rng)]);
        }
        mnemo::v1::ScoreResponse resp;
        grpc::ClientContext ctx;
        const double t0 = Now();
        const grpc::Status s = stub->Score(&ctx, req, &resp);
        const double t1 = Now();
        if (!s.ok()) {
          ++errors;
          continue;
        }
        lat[c].push_back(t1 - t0);
      }
    });
  }
  // A warm-up second is not counted: connections made, threads started.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const double t0 = Now();
  t_end = t0 + seconds;
  go = true;
  for (auto& t : ts) t.join();
  const double took = Now() - t0;
  std::vector<double> all;
  for (auto& l : lat) all.insert(all.end(), l.begin(), l.end());
  Point p;
  p.clients = clients;
  p.calls = static_cast<int64_t>(all.size());
  p.errors = errors;
  p.seconds = took;
  p.p50_ms = Percentile(all, 0.5) * 1e3;
  p.p99_ms = Percentile(all, 0.99) * 1e3;
  p.calls_per_s = static_cast<double>(all.size()) / took;
  return p;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&](const char* name) -> const char* {
      if (arg != name || i + 1 >= argc) return nullptr;
      return argv[++i];
    };
    if (const char* v = value("--from")) {
      a.from = v;
    } else if (const char* v = value("--data")) {
      a.data = v;
    } else if (const char* v = value("--out")) {
      a.out = v;
    } else if (const char* v = value("--max-events")) {
      a.max_events = std::atoll(v);
    } else if (const char* v = value("--seconds")) {
      a.seconds = std::atof(v);
    } else if (const char* v = value("--candidates")) {
      a.candidates = std::atoi(v);
    } else if (const char* v = value("--address")) {
      a.address = v;
    } else if (const char* v = value("--shards")) {
      a.shards = std::atoi(v);
    } else if (const char* v = value("--threads")) {
      a.threads = std::atoi(v);
    } else if (const char* v = value("--concurrency")) {
      a.concurrency.clear();
      for (absl::string_view p : absl::StrSplit(v, ',')) {
        int c = 0;
        if (absl::SimpleAtoi(p, &c) && c > 0) a.concurrency.push_back(c);
      }
    } else {
      std::fprintf(stderr,
                   "usage: bench_serve_load --from RUN_DIR --data PATH "
                   "[--max-events N] [--seconds S] [--candidates K] "
                   "[--concurrency 1,8,64] [--threads T] [--shards N] "
                   "[--address HOST:PORT] [--out JSON]\n");
      return 2;
    }
  }
  if (a.from.empty() || a.data.empty()) {
    std::fprintf(stderr, "bench_serve_load: --from and --data are required\n");
    return 2;
  }
  mnemo::data::LoadOptions lo;
  lo.max_events = a.max_events;
  auto log = mnemo::data::LoadEventLog(a.data, lo);
  if (!log.ok()) {
    std::fprintf(stderr, "%s\n", log.status().ToString().c_str());
    return 1;
  }
  std::vector<int64_t> sources, destinations;
  {
    std::vector<uint8_t> is_src(log->num_nodes), is_dst(log->num_nodes);
    for (int64_t e = 0; e < log->num_events(); ++e) {
      is_src[log->src[e]] = is_dst[log->dst[e]] = 1;
    }
    for (int64_t v = 0; v < log->num_nodes; ++v) {
      if (is_src[v]) sources.push_back(log->original_ids[v]);
      if (is_dst[v]) destinations.push_back(log->original_ids[v]);
    }
  }
  std::ifstream sf(a.from + "/summary.json");
  std::stringstream ss;
  ss << sf.rdbuf();
  const std::string summary = ss.str();
  const int64_t test_events =
      static_cast<int64_t>(JsonNumber(summary, "test_events"));
  const double test_seconds = JsonNumber(summary, "test_seconds");
  const double forward_seconds = JsonNumber(summary, "forward");
  // Epochs trained: one "epoch" entry each in the summary's history.
  double epochs_trained = 0;
  for (size_t at = summary.find("\"epoch\": "); at != std::string::npos;
       at = summary.find("\"epoch\": ", at + 1)) {
    ++epochs_trained;
  }
  const int64_t train_events =
      static_cast<int64_t>(JsonNumber(summary, "train_events"));

  if (!a.address.empty()) {
    for (int c : a.concurrency) {
      const Point p =
          Load(a.address, c, a.seconds, a.candidates, sources, destinations);
      std::printf(
          "Score, %d candidates, %2d clients, %s: p50 %7.2f ms  p99 %7.2f ms  "
          "%8.1f calls/s  (%lld calls, %lld errors)\n",
          a.candidates, c, a.address.c_str(), p.p50_ms, p.p99_ms, p.calls_per_s,
          static_cast<long long>(p.calls), static_cast<long long>(p.errors));
    }
    return 0;
  }
  std::vector<std::string> rows;
  // Score from 1, 8 and 64 clients against a server started with `more`;
  // `shards` memory-store shards hold its memory (0: it does).
  auto score_pass = [&](const std::vector<std::string>& more, bool batching,
                        int shards, const std::string& log) {
    auto server = StartServe(a, more, log);
    const std::vector<int> clients =
        shards > 0 ? std::vector<int>{1, 8} : a.concurrency;
    for (int c : clients) {
      Point p = Load(server->address(), c, a.seconds, a.candidates, sources,
                     destinations);
      std::printf(
          "Score, %d candidates, %2d clients, batching %-3s, shards %d: p50 "
          "%7.2f ms  p99 %7.2f ms  %8.1f calls/s  (%lld calls, %lld errors)\n",
          a.candidates, c, batching ? "on" : "off", shards, p.p50_ms, p.p99_ms,
          p.calls_per_s, static_cast<long long>(p.calls),
          static_cast<long long>(p.errors));
      std::fflush(stdout);
      rows.push_back(absl::StrFormat(
          "{\"kind\": \"score\", \"candidates\": %d, \"clients\": %d, "
          "\"batching\": %s, \"shards\": %d, \"calls\": %d, \"errors\": "
          "%d, \"seconds\": %.3f, \"p50_ms\": %.4f, \"p99_ms\": %.4f, "
          "\"calls_per_s\": %.2f}",
          a.candidates, c, batching ? "true" : "false", shards, p.calls,
          p.errors, p.seconds, p.p50_ms, p.p99_ms, p.calls_per_s));
    }
  };
  score_pass({}, true, 0, a.out + ".batching.log");
  score_pass({"--no-batching"}, false, 0, a.out + ".alone.log");

  // Ingestion: the test period, in batches of 200, from the end of
  // validation (where the run's test pass began), through a server started
  // with `more`.
  const double test_eps =
      test_seconds > 0 ? static_cast<double>(test_events) / test_seconds : 0;
  const double forward_eps =
      forward_seconds > 0
          ? static_cast<double>(train_events) * epochs_trained / forward_seconds
          : 0;
  auto ingest_pass = [&](std::vector<std::string> more, bool journal,
                         int shards) -> bool {
    more.push_back("--no-replay-test");
    auto server = StartServe(a, more, a.out + ".ingest.log");
    auto stub = mnemo::v1::Inference::NewStub(grpc::CreateChannel(
        server->address(), grpc::InsecureChannelCredentials()));
    grpc::ClientContext ctx;
    auto stream = stub->Ingest(&ctx);
    const int64_t n = log->num_events();
    std::vector<mnemo::v1::IngestRequest> batches;
    for (int64_t b = n - test_events; b < n; b += 200) {
      mnemo::v1::IngestRequest req;
      for (int64_t e = b; e < std::min(n, b + 200); ++e) {
        mnemo::v1::Event* ev = req.add_events();
        ev->set_src(log->original_ids[log->src[e]]);
        ev->set_dst(log->original_ids[log->dst[e]]);
        ev->set_t(log->t[e] + log->time_offset);
        for (int j = 0; j < log->edge_feature_dim; ++j) {
          ev->add_features(log->edge_feature(e)[j]);
        }
      }
      batches.push_back(std::move(req));
    }
    const double t0 = Now();
    mnemo::v1::IngestAck ack;
    // The acks' scores: the test period's AP, computed here (the server's
    // online AP covers its last --online-window events).
    std::vector<float> scores;
    std::vector<uint8_t> labels;
    for (const auto& req : batches) {
      if (!stream->Write(req) || !stream->Read(&ack)) break;
      for (int i = 0; i < ack.positive_logit_size(); ++i) {
        scores.push_back(ack.positive_logit(i));
        labels.push_back(1);
        scores.push_back(ack.negative_logit(i));
        labels.push_back(0);
      }
    }
    const double took = Now() - t0;
    stream->WritesDone();
    const grpc::Status s = stream->Finish();
    if (!s.ok()) {
      std::fprintf(stderr, "Ingest: %s\n", s.error_message().c_str());
      return false;
    }
    const double ingest_eps = static_cast<double>(test_events) / took;
    const double stream_ap = mnemo::runtime::AveragePrecision(scores, labels);
    std::printf(
        "Ingest (test period, %lld events, batches of 200, journal %s, "
        "shards %d): %.0f events/s, AP %.9f; the run's test pass %.0f "
        "events/s; training's forward pass %.0f events/s\n",
        static_cast<long long>(test_events), journal ? "on" : "off", shards,
        ingest_eps, stream_ap, test_eps, forward_eps);
    rows.push_back(absl::StrFormat(
        "{\"kind\": \"ingest\", \"journal\": %s, \"shards\": %d, "
        "\"events\": %d, \"events_per_s\": %.1f, \"stream_ap\": %.9f, "
        "\"run_test_ap\": %.9f, \"run_test_pass_events_per_s\": %.1f, "
        "\"train_forward_events_per_s\": %.1f}",
        journal ? "true" : "false", shards, test_events, ingest_eps, stream_ap,
        JsonNumber(summary, "ap"), test_eps, forward_eps));
    return true;
  };
  const std::string journal_dir = a.out + ".journal";
  std::filesystem::remove_all(journal_dir);
  if (!ingest_pass({}, false, 0)) return 1;
  // With a journal: every batch fdatasync'ed before its ack.
  if (!ingest_pass({"--journal", journal_dir}, true, 0)) return 1;

  // Through memory-store shards (`serve --memstore`, write-through, their
  // default): each batch pulls the states it reads, an ingested one pushes
  // what it changed before its ack. Their record width is what a first,
  // refused start names.
  if (a.shards > 0) {
    std::vector<std::unique_ptr<MemstoreProcess>> shards(a.shards);
    auto start_shards = [&](int dim) {
      std::string addresses;
      for (int i = 0; i < a.shards; ++i) {
        const std::string dir = a.out + ".shard-" + std::to_string(i);
        shards[i].reset();
        std::filesystem::remove_all(dir);
        auto p = MemstoreProcess::Start(
            MemstoreProcess::Binary(),
            {"--listen", "127.0.0.1:0", "--data-dir", dir, "--dim",
             std::to_string(dim), "--shard-id", std::to_string(i),
             "--num-shards", std::to_string(a.shards)},
            dir + ".log");
        if (!p.ok()) {
          std::fprintf(stderr, "%s\n", p.status().ToString().c_str());
          std::exit(1);
        }
        shards[i] = *std::move(p);
        addresses += (i > 0 ? "," : "") + shards[i]->address();
      }
      return addresses;
    };
    std::string addresses = start_shards(1);
    auto refused = MemstoreProcess::StartCommand(
        MemstoreProcess::Binary(), "serve",
        {"--from", a.from, "--data", a.data, "--no-replay-test", "--memstore",
         addresses},
        a.out + ".refused.log", 600);
    std::smatch m;
    const std::string said =
        refused.ok() ? "" : std::string(refused.status().message());
    if (!std::regex_search(said, m, std::regex("--dim ([0-9]+)"))) {
      std::fprintf(stderr, "no record width from serve: %s\n", said.c_str());
      return 1;
    }
    addresses = start_shards(std::stoi(m[1]));
    score_pass({"--memstore", addresses}, true, a.shards,
               a.out + ".shards.log");
    if (!ingest_pass({"--memstore", addresses}, false, a.shards)) return 1;
    for (int i = 0; i < a.shards; ++i) {
      shards[i].reset();
      std::filesystem::remove_all(a.out + ".shard-" + std::to_string(i));
    }
  }
  std::filesystem::remove_all(journal_dir);
  const std::string fields = absl::StrFormat(
      "\"run\": \"%s\", \"data\": \"%s\", \"seconds_per_point\": %g", a.from,
      a.data, a.seconds);
  return mnemo::bench::WriteRowsJson(a.out, argc, argv, fields, rows) ? 0 : 1;
}
