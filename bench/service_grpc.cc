// bench_memstore_grpc: pull/push throughput of the memory-store service over
// gRPC on loopback (dim 100; batch sizes 1..65536; hot and cold tiers),
// against a real `mnemo memstore` process, and the raw loopback TCP
// throughput of this machine (one socket, large writes) as the physical
// reference. Writes bench/results/memstore_grpc.json.
//
// Usage: bench_memstore_grpc [--quick] [--out PATH] [--batches=1,16,...]
//        [--tiers=hot,cold] [--seconds=S] [--repeat=N]   ($MNEMO_BIN
//        overrides the mnemo binary)
//
// --repeat=N measures raw TCP and every tier N times in turn; the goal ratio
// is the median of the N per-repetition ratios (loopback TCP alone varies
// 1.7-3.4 GB/s between runs on a 2-core VM).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "bench/bench_util.h"
#include "services/memstore_client.h"
#include "tests/integration/memstore_launcher.h"
#include "util/json.h"
#include "util/proc.h"

namespace {

namespace fs = std::filesystem;
using mnemo::MonotonicSeconds;
constexpr int kDim = 100;

// Moves `total` bytes over one loopback TCP connection in `chunk`-byte
// writes; returns bytes per second as seen by the receiver.
double RawTcpBytesPerSecond(int64_t total, int64_t chunk) {
  int ls = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  bind(ls, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  listen(ls, 1);
  getsockname(ls, reinterpret_cast<sockaddr*>(&a), &len);
  double seconds = 0;
  std::thread receiver([&] {
    int c = accept(ls, nullptr, nullptr);
    std::vector<char> buf(chunk);
    int64_t got = 0;
    const double t0 = MonotonicSeconds();
    while (got < total) {
      ssize_t n = recv(c, buf.data(), buf.size(), 0);
      if (n <= 0) break;
      got += n;
    }
    seconds = MonotonicSeconds() - t0;
    close(c);
  });
  int s = socket(AF_INET, SOCK_STREAM, 0);
  connect(s, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  std::vector<char> buf(chunk, 'x');
  for (int64_t sent = 0; sent < total;) {
    ssize_t n = send(s, buf.data(), std::min<int64_t>(chunk, total - sent), 0);
    if (n <= 0) break;
    sent += n;
  }
  receiver.join();
  close(s);
  close(ls);
  return total / seconds;
}

struct Result {
  int repetition = 0;
  std::string tier, op;
  int64_t batch = 0, calls = 0;
  double seconds = 0, states_per_s = 0, bytes_per_s = 0, ms_per_call = 0;
};

// Repeats `op` until `min_seconds` (and at least 3 calls) have passed.
template <typename Op>
Result Measure(const std::string& tier, const std::string& name, int64_t batch,
               double min_seconds, Op op) {
  op();  // warm-up
  Result r{0, tier, name, batch};
  const double t0 = MonotonicSeconds();
  do {
    op();
    ++r.calls;
    r.seconds = MonotonicSeconds() - t0;
  } while (r.seconds < min_seconds || r.calls < 3);
  const double states = static_cast<double>(batch) * r.calls;
  r.states_per_s = states / r.seconds;
  // state + version + time payload
  r.bytes_per_s = r.states_per_s * (kDim * 4 + 16);
  r.ms_per_call = 1e3 * r.seconds / r.calls;
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  std::vector<int64_t> batches = {1, 16, 256, 4096, 65536};
  std::vector<std::string> tiers = {"hot", "cold"};
  double seconds = 0;
  int repeat = 1;
  std::string out = std::string(MNEMO_RESULTS_DIR) + "/memstore_grpc.json";
  std::string command;
  for (int i = 0; i < argc; ++i)
    command += (i ? " " : "") + std::string(argv[i]);
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--quick") {
      quick = true;
    } else if (a == "--out" && i + 1 < argc) {
      out = argv[++i];
    } else if (a.rfind("--out=", 0) == 0) {
      out = a.substr(6);
    } else if (a.rfind("--batches=", 0) == 0) {
      batches.clear();
      for (absl::string_view b : absl::StrSplit(a.substr(10), ',')) {
        int64_t v = 0;
        if (!absl::SimpleAtoi(b, &v) || v < 1) {
          std::fprintf(stderr, "bench_memstore_grpc: bad batch size in %s\n",
                       a.c_str());
          return 2;
        }
        batches.push_back(v);
      }
    } else if (a.rfind("--tiers=", 0) == 0) {
      tiers = absl::StrSplit(a.substr(8), ',');
      for (const std::string& t : tiers) {
        if (t != "hot" && t != "cold") {
          std::fprintf(stderr, "bench_memstore_grpc: unknown tier %s\n",
                       t.c_str());
          return 2;
        }
      }
    } else if (a.rfind("--repeat=", 0) == 0) {
      if (!absl::SimpleAtoi(a.substr(9), &repeat) || repeat < 1) {
        std::fprintf(stderr, "bench_memstore_grpc: bad %s\n", a.c_str());
        return 2;
      }
    } else if (a.rfind("--seconds=", 0) == 0) {
      if (!absl::SimpleAtod(a.substr(10), &seconds) || !(seconds > 0)) {
        std::fprintf(stderr, "bench_memstore_grpc: bad %s\n", a.c_str());
        return 2;
      }
    } else {
      std::fprintf(stderr,
                   "bench_memstore_grpc: unknown argument %s (usage: "
                   "bench_memstore_grpc [--quick] [--out PATH] "
                   "[--batches=1,16,...] [--tiers=hot,cold] [--seconds=S] "
                   "[--repeat=N])\n",
                   a.c_str());
      return 2;
    }
  }
  const double min_seconds = seconds > 0 ? seconds : quick ? 0.2 : 1.0;
  const int64_t kMaxMessage = 64 << 20;

  const std::string bin =
      mnemo::testing::MemstoreProcess::Binary(MNEMO_BIN_DEFAULT);
  const fs::path dir =
      fs::temp_directory_path() / ("mnemo_bench_" + std::to_string(getpid()));
  std::vector<Result> results;
  struct Run {
    double raw = 0, pull_65536_hot = 0;
  };
  std::vector<Run> runs(repeat);
  for (int rep = 0; rep < repeat; ++rep) {
    if (repeat > 1) std::printf("-- repetition %d of %d\n", rep + 1, repeat);
    std::printf("raw loopback TCP ...\n");
    runs[rep].raw =
        RawTcpBytesPerSecond(quick ? (256ll << 20) : (1ll << 30), 4 << 20);
    std::printf("  %.2f GB/s\n", runs[rep].raw / 1e9);
    for (const std::string& tier : tiers) {
      fs::remove_all(dir);
      std::vector<std::string> args = {"--data-dir",
                                       (dir / tier).string(),
                                       "--dim",
                                       std::to_string(kDim),
                                       "--max-message-bytes",
                                       std::to_string(kMaxMessage),
                                       "--threads",
                                       "2"};
      if (tier == "cold") {
        // Everything spills and stays in RocksDB.
        args.insert(args.end(),
                    {"--hot-capacity-bytes", "1", "--promotion", "never"});
      }
      auto server = mnemo::testing::MemstoreProcess::Start(
          bin, args, (dir.string() + "_" + tier + ".log"));
      if (!server.ok()) {
        std::fprintf(stderr, "%s\n", server.status().ToString().c_str());
        return 1;
      }
      mnemo::services::MemstoreClientOptions o;
      o.addresses = {(*server)->address()};
      o.dim = kDim;
      o.max_message_bytes = kMaxMessage;
      o.deadline_seconds = 60;
      auto client = mnemo::services::MemstoreClient::Connect(o);
      if (!client.ok()) return 1;
      uint64_t version = 1;
      for (int64_t batch : batches) {
        std::vector<int64_t> ids(batch);
        for (int64_t i = 0; i < batch; ++i) ids[i] = i * 7;
        std::vector<float> states(batch * kDim, 0.5f);
        std::vector<uint64_t> versions(batch);
        std::vector<double> times(batch);
        auto push = [&] {
          std::fill(versions.begin(), versions.end(), version);
          std::fill(times.begin(), times.end(), static_cast<double>(version));
          ++version;
          if (!(*client)->Push(ids, states, versions, times, 0).ok()) {
            std::abort();
          }
        };
        results.push_back(Measure(tier, "push", batch, min_seconds, push));
        mnemo::memstore::PulledStates p;
        results.push_back(Measure(tier, "pull", batch, min_seconds, [&] {
          if (!(*client)->Pull(ids, &p).ok()) std::abort();
        }));
        results[results.size() - 2].repetition = rep;
        results.back().repetition = rep;
        if (tier == "hot" && batch == 65536) {
          runs[rep].pull_65536_hot = results.back().bytes_per_s;
        }
        for (int k = 0; k < 2; ++k) {
          const Result& r = results[results.size() - 2 + k];
          std::printf(
              "%-4s %-4s batch %6lld: %12.0f states/s %8.3f GB/s "
              "%9.3f ms/call\n",
              tier.c_str(), r.op.c_str(), (long long)batch, r.states_per_s,
              r.bytes_per_s / 1e9, r.ms_per_call);
        }
      }
      auto stats = (*client)->Stats();
      if (stats.ok()) {
        std::printf(
            "  %s tier: %lld hot, %lld cold states, hot hits %lld, "
            "cold hits %lld\n",
            tier.c_str(), (long long)stats->hot_states,
            (long long)stats->cold_states, (long long)stats->hot_hits,
            (long long)stats->cold_hits);
      }
      (*server)->Kill(SIGTERM);
    }
  }
  fs::remove_all(dir);

  using mnemo::bench::Median;
  std::vector<double> raws, pulls, ratios;
  for (const Run& r : runs) {
    raws.push_back(r.raw);
    pulls.push_back(r.pull_65536_hot);
    ratios.push_back(r.pull_65536_hot / r.raw);
  }
  const double raw = Median(raws);
  const double pull_65536_hot = Median(pulls);
  const double ratio = Median(ratios);
  mnemo::JsonWriter w;
  w.BeginObject();
  w.Field("benchmark", "memstore_grpc");
  w.Field("command", command);
  w.Field("date", mnemo::NowIso8601());
  w.Field("host", mnemo::HostName());
  w.Field("cpu", mnemo::CpuModel());
  w.Field("nproc", static_cast<int64_t>(std::thread::hardware_concurrency()));
  w.Field("dim", kDim);
  w.Field("max_message_bytes", kMaxMessage);
  w.Field("payload_bytes_per_state", kDim * 4 + 16);
  w.Field("repeat", static_cast<int64_t>(repeat));
  w.Field("raw_loopback_tcp_bytes_per_s", raw);
  w.Field("goal",
          "hot pull of 65536 states >= 0.5 x raw loopback TCP (median of the "
          "per-repetition ratios)");
  w.Field("pull_65536_hot_bytes_per_s", pull_65536_hot);
  w.Field("pull_65536_hot_vs_raw_tcp", ratio);
  w.Key("runs");
  w.BeginArray();
  for (const Run& r : runs) {
    w.BeginObject();
    w.Field("raw_loopback_tcp_bytes_per_s", r.raw);
    w.Field("pull_65536_hot_bytes_per_s", r.pull_65536_hot);
    w.Field("pull_65536_hot_vs_raw_tcp", r.pull_65536_hot / r.raw);
    w.EndObject();
  }
  w.EndArray();
  w.Key("results");
  w.BeginArray();
  for (const auto& r : results) {
    w.BeginObject();
    w.Field("repetition", static_cast<int64_t>(r.repetition));
    w.Field("tier", r.tier);
    w.Field("op", r.op);
    w.Field("batch", r.batch);
    w.Field("calls", r.calls);
    w.Field("seconds", r.seconds);
    w.Field("states_per_s", r.states_per_s);
    w.Field("bytes_per_s", r.bytes_per_s);
    w.Field("ms_per_call", r.ms_per_call);
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
  std::ofstream(out) << w.str() << "\n";
  for (size_t i = 0; i < runs.size() && runs.size() > 1; ++i) {
    std::printf(
        "repetition %zu: pull 65536 hot %.2f GB/s, raw TCP %.2f GB/s, "
        "%.2fx\n",
        i + 1, runs[i].pull_65536_hot / 1e9, runs[i].raw / 1e9, ratios[i]);
  }
  std::printf(
      "pull 65536 hot: %.2f GB/s = %.2f x raw TCP (%.2f GB/s; medians of %d)"
      "; wrote %s\n",
      pull_65536_hot / 1e9, ratio, raw / 1e9, repeat, out.c_str());
  return 0;
}
