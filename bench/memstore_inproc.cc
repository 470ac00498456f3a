// In-process memory-store throughput: pulls and pushes of dim-100 states in
// batches of 1..65536 against the hot tier (RAM), the cold tier (RocksDB,
// kNever promotion), and pushes under write-through (with and without sync)
// and write-back; RocksDB's own db_bench runs beside it as the reference.
//
//   bench_memstore_inproc [--out=bench/results/memstore_inproc.json]
//                         [--dir=/tmp/mnemo_bench_memstore] [--states=1000000]
//                         [--seconds=1.0] [--no-db-bench] [--repeat=1]
//                         [--only=TIER[,TIER...]]
//                         [--batches=1,16,256,4096,65536]
//                         [--journal-limit-bytes=N]
//
// Each repetition runs the chosen tiers with db_bench beside the two it is
// compared with: fillseq right after the write-through tier, readrandom
// over fillseq's DB (one thread, then two) right after the cold tier, so
// each pair runs under the same machine load, minutes apart at most. Each
// durable tier and each db_bench write starts from a settled disk: sync(2)
// first, so no earlier tier's write-back runs during the measurement. The
// goals are ratios to db_bench: write-through push (batches of 4,096) >=
// 1.5x fillseq and cold pull (batches of 4,096) >= 2x readrandom, each the
// median over the repetitions of the ratio within a repetition. The cold
// tier is read twice: as configured by default (a large pull split among
// the CPUs) and by the pulling thread alone (tier cold-1-thread); both are
// shown against readrandom, and the default also against readrandom on
// two threads. Tier write-through-recovery times the restart of a
// write-through store after a crash: a child process pushes batches of 4,096
// until it has appended twice the journal limit (what the journal holds in
// the steady state when pushes start to wait; with a materialization in
// flight it can hold about twice that) and exits without closing the store;
// the bench then times Open(), which replays the journal.
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "bench/bench_util.h"
#include "memstore/journal.h"
#include "memstore/node_state_store.h"
#include "util/json.h"
#include "util/proc.h"

extern char** environ;

namespace {

using namespace mnemo;
using namespace mnemo::memstore;
namespace fs = std::filesystem;

constexpr int kDim = 100;

struct Flags {
  std::string out = "bench/results/memstore_inproc.json";
  std::string dir = "/tmp/mnemo_bench_memstore";
  int64_t states = 1000000;
  double seconds = 1.0;
  bool db_bench = true;
  int repeat = 1;
  // Run only these tiers (e.g. write-through,cold), for profiling; db_bench
  // still runs beside them unless --no-db-bench.
  std::vector<std::string> only;
  std::vector<int64_t> batches = {1, 16, 256, 4096, 65536};
  // Write-through stores' NodeStateStoreOptions::journal_limit_bytes (0: the
  // default).
  int64_t journal_limit = 0;
  // Internal (write-through-recovery): run as the crashing child on this
  // data dir.
  std::string crash_child;
};

struct Result {
  std::string tier, op;
  int64_t batch = 0, states = 0;
  double seconds = 0;
};

void Die(const absl::Status& s, const char* what) {
  if (s.ok()) return;
  std::fprintf(stderr, "%s: %s\n", what, s.ToString().c_str());
  std::exit(1);
}

// Pushes random ids below `universe` in batches of `batch`, versions (and
// times) rising from *clock, for about `seconds` (at least one batch, at most
// `max_states`).
Result PushLoop(NodeStateStore& store, const std::string& tier, int64_t batch,
                int64_t universe, double seconds, int64_t max_states,
                uint64_t* clock, std::mt19937_64& rng) {
  std::vector<int64_t> ids(batch);
  std::vector<float> states(batch * kDim);
  std::vector<uint64_t> versions(batch);
  std::vector<double> times(batch);
  for (size_t i = 0; i < states.size(); ++i) states[i] = 0.001f * (i % 977);
  Result r{tier, "push", batch};
  const double start = MonotonicSeconds();
  do {
    for (int64_t i = 0; i < batch; ++i) {
      ids[i] = static_cast<int64_t>(rng() % universe);
      versions[i] = *clock;
      times[i] = static_cast<double>(*clock);
    }
    *clock += 1;
    Die(store.Push(ids, states, versions, times, 0), "push");
    r.states += batch;
    r.seconds = MonotonicSeconds() - start;
  } while (r.seconds < seconds && r.states < max_states);
  return r;
}

Result PullLoop(NodeStateStore& store, const std::string& tier, int64_t batch,
                int64_t universe, double seconds, std::mt19937_64& rng) {
  std::vector<int64_t> ids(batch);
  PulledStates out;
  Result r{tier, "pull", batch};
  const double start = MonotonicSeconds();
  do {
    for (int64_t i = 0; i < batch; ++i)
      ids[i] = static_cast<int64_t>(rng() % universe);
    Die(store.Pull(ids, &out), "pull");
    r.states += batch;
    r.seconds = MonotonicSeconds() - start;
  } while (r.seconds < seconds);
  return r;
}

// Fills ids [0, n) once, in batches of 65536.
void Fill(NodeStateStore& store, int64_t n, uint64_t* clock) {
  std::vector<float> states(65536 * kDim, 0.5f);
  for (int64_t begin = 0; begin < n; begin += 65536) {
    const int64_t m = std::min<int64_t>(65536, n - begin);
    std::vector<int64_t> ids(m);
    std::vector<uint64_t> versions(m, *clock);
    std::vector<double> times(m, static_cast<double>(*clock));
    for (int64_t i = 0; i < m; ++i) ids[i] = begin + i;
    *clock += 1;
    Die(store.Push(ids, absl::MakeSpan(states).subspan(0, m * kDim), versions,
                   times, 0),
        "fill");
  }
}

void Print(const Result& r) {
  const double sps = r.states / r.seconds;
  std::printf("%-22s %-5s batch %6lld  %12.0f states/s  %8.1f MB/s\n",
              r.tier.c_str(), r.op.c_str(), static_cast<long long>(r.batch),
              sps, sps * kDim * 4 / 1e6);
  std::fflush(stdout);
}

// The write-through store of tier write-through-recovery.
NodeStateStoreOptions RecoveryOptions(const std::string& dir,
                                      int64_t journal_limit) {
  NodeStateStoreOptions o;
  o.dim = kDim;
  o.data_dir = dir;
  o.write_policy = WritePolicy::kWriteThrough;
  if (journal_limit > 0) o.journal_limit_bytes = journal_limit;
  return o;
}

// Bytes of one journal record of `batch` states.
int64_t RecordBytes(int64_t batch) {
  return Journal::RecordBytes(static_cast<uint64_t>(batch), kDim);
}

// The crashing child: pushes batches of 4,096 random ids below `universe`
// into a write-through store at `dir` until twice the journal limit has been
// appended, then ends the process without closing the store.
[[noreturn]] void CrashChild(const std::string& dir, int64_t universe,
                             int64_t journal_limit) {
  const NodeStateStoreOptions o = RecoveryOptions(dir, journal_limit);
  auto store = Open(o);
  Die(store.status(), "crash child: open");
  std::mt19937_64 rng(7);
  uint64_t clock = 1;
  const int64_t batches = 2 * o.journal_limit_bytes / RecordBytes(4096) + 1;
  PushLoop(**store, "crash", 4096, universe, 1e9, batches * 4096, &clock, rng);
  std::_Exit(0);
}

// Journal bytes left in `dir` (DATA_DIR/journal/*.log).
int64_t JournalBytes(const std::string& dir) {
  std::error_code ec;
  int64_t bytes = 0;
  for (const auto& e : fs::directory_iterator(fs::path(dir) / "journal", ec))
    if (e.path().extension() == ".log") bytes += fs::file_size(e.path(), ec);
  return bytes;
}

// Restarts a write-through store after a crash with a full journal; the
// result's states are the journal's, its seconds those of Open().
Result Recovery(const std::string& dir, int64_t universe,
                int64_t journal_limit) {
  const std::string self = fs::read_symlink("/proc/self/exe").string();
  std::vector<std::string> args = {self, "--crash-child=" + dir,
                                   absl::StrCat("--states=", universe)};
  if (journal_limit > 0)
    args.push_back(absl::StrCat("--journal-limit-bytes=", journal_limit));
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  if (::posix_spawn(&pid, self.c_str(), nullptr, nullptr, argv.data(),
                    environ) != 0) {
    Die(absl::InternalError("cannot start the crash child"), "recovery");
  }
  int status = 0;
  pid_t waited = -1;
  do {
    waited = ::waitpid(pid, &status, 0);
  } while (waited < 0 && errno == EINTR);
  if (waited != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
    Die(absl::InternalError("the crash child failed"), "recovery");
  const int64_t journal = JournalBytes(dir);
  const double t0 = MonotonicSeconds();
  auto store = Open(RecoveryOptions(dir, journal_limit));
  Die(store.status(), "recovery: reopen");
  Result r{"write-through-recovery", "replay", 4096,
           journal / RecordBytes(4096) * 4096, MonotonicSeconds() - t0};
  std::printf("write-through-recovery: replayed %.0f MB of journal in %.2f s\n",
              journal / 1e6, r.seconds);
  Die((*store)->Close(), "recovery: close");
  return r;
}

// Runs db_bench, returns its ops/s for `benchmark` (0 when not found).
double DbBench(const std::string& args, const std::string& benchmark,
               std::string* command) {
  *command = "db_bench " + args;
  std::string cmd = "/usr/bin/db_bench " + args + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return 0;
  char line[1024];
  double ops = 0;
  while (std::fgets(line, sizeof line, p) != nullptr) {
    std::string l(line);
    if (l.rfind(benchmark, 0) == 0) {
      std::fputs(line, stdout);
      auto pos = l.find(" ops/sec");
      if (pos != std::string::npos) {
        auto begin = l.rfind(' ', pos - 1);
        ops = std::atof(l.substr(begin + 1, pos - begin - 1).c_str());
      }
    }
  }
  ::pclose(p);
  return ops;
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  std::string command = argv[0];
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    command += " " + a;
    auto val = [&](const char* name) -> const char* {
      std::string prefix = std::string(name) + "=";
      return a.rfind(prefix, 0) == 0 ? argv[i] + prefix.size() : nullptr;
    };
    if (auto v = val("--out"))
      f.out = v;
    else if (auto v = val("--dir"))
      f.dir = v;
    else if (auto v = val("--states"))
      f.states = std::atoll(v);
    else if (auto v = val("--seconds"))
      f.seconds = std::atof(v);
    else if (auto v = val("--only"))
      f.only = absl::StrSplit(v, ',', absl::SkipEmpty());
    else if (auto v = val("--repeat"))
      f.repeat = std::max(1, std::atoi(v));
    else if (auto v = val("--batches")) {  // e.g. --batches=4096,65536
      f.batches.clear();
      for (const char* p = v; *p != '\0';) {
        char* end = nullptr;
        f.batches.push_back(std::strtoll(p, &end, 10));
        if (end == p || f.batches.back() <= 0) {
          std::fprintf(stderr, "bad --batches %s\n", v);
          return 2;
        }
        p = *end == ',' ? end + 1 : end;
      }
    } else if (auto v = val("--journal-limit-bytes")) {
      f.journal_limit = std::atoll(v);
      if (f.journal_limit <= 0) {
        std::fprintf(stderr, "bad --journal-limit-bytes %s\n", v);
        return 2;
      }
    } else if (auto v = val("--crash-child")) {
      f.crash_child = v;
    } else if (a == "--no-db-bench")
      f.db_bench = false;
    else {
      std::fprintf(stderr, "unknown flag %s\n", a.c_str());
      return 2;
    }
  }
  if (!f.crash_child.empty())
    CrashChild(f.crash_child, f.states, f.journal_limit);
  std::error_code ec;
  fs::remove_all(f.dir, ec);
  fs::create_directories(f.dir);
  std::mt19937_64 rng(1);
  std::vector<Result> results;
  auto record = [&](Result r) {
    Print(r);
    results.push_back(std::move(r));
  };
  uint64_t clock = 1;

  auto want = [&](const std::string& tier) {
    return f.only.empty() ||
           std::find(f.only.begin(), f.only.end(), tier) != f.only.end();
  };
  // db_bench of each repetition: fillseq, readrandom on one and two threads.
  struct DbBenchRun {
    double fillseq = 0, readrandom = 0, readrandom2 = 0;
  };
  std::vector<DbBenchRun> db_runs;
  std::string fill_cmd, read_cmd, read2_cmd;
  // Settles the disk: what earlier tiers wrote is on it before the next
  // measurement starts (their dirty pages would otherwise be written back
  // during it).
  auto settle = [] { ::sync(); };
  for (int rep = 0; rep < f.repeat; ++rep) {
    if (f.repeat > 1)
      std::printf("-- repetition %d of %d\n", rep + 1, f.repeat);
    const std::string db = f.dir + "/db_bench";
    DbBenchRun run;
    bool filled = false;
    // fillseq, beside the write-through tier (it also makes readrandom's
    // DB).
    auto fill = [&] {
      if (!f.db_bench || filled) return;
      settle();
      run.fillseq = DbBench(absl::StrCat("--db=", db,
                                         " --benchmarks=fillseq"
                                         " --value_size=408"
                                         " --batch_size=4096 --num=1000000"
                                         " --threads=1"),
                            "fillseq", &fill_cmd);
      settle();
      filled = true;
    };
    if (want("hot")) {  // Hot: pure RAM, f.states states.
      NodeStateStoreOptions o;
      o.dim = kDim;
      auto store = Open(o);
      Die(store.status(), "open hot");
      Fill(**store, f.states, &clock);
      for (int64_t b : f.batches)
        record(PullLoop(**store, "hot", b, f.states, f.seconds, rng));
      for (int64_t b : f.batches)
        record(PushLoop(**store, "hot", b, f.states, f.seconds, INT64_MAX,
                        &clock, rng));
    }

    // Durable pushes into a RAM-sized hot tier over a RocksDB data_dir.
    struct Durable {
      std::string name;
      WritePolicy policy;
      bool sync;
    };
    for (const Durable& d :
         {Durable{"write-through", WritePolicy::kWriteThrough, false},
          Durable{"write-through-sync", WritePolicy::kWriteThrough, true},
          Durable{"write-back", WritePolicy::kWriteBack, false}}) {
      if (!want(d.name)) continue;
      NodeStateStoreOptions o;
      o.dim = kDim;
      o.data_dir = f.dir + "/" + d.name;
      o.write_policy = d.policy;
      o.sync = d.sync;
      if (f.journal_limit > 0 && d.policy == WritePolicy::kWriteThrough)
        o.journal_limit_bytes = f.journal_limit;
      settle();
      auto store = Open(o);
      Die(store.status(), "open durable");
      // Write-through without sync runs in materialization cycles (with
      // sync, its fdatasync per push sets the pace).
      const bool cycles = d.policy == WritePolicy::kWriteThrough && !d.sync;
      for (int64_t b : f.batches) {
        double seconds = f.seconds;
        if (b >= 4096 && cycles) {
          // Steady state: the journal has filled and been materialized once
          // before the clock starts, and the run spans several of its
          // cycles (each writes up to twice the journal limit).
          PushLoop(**store, d.name, b, f.states, 1e9,
                   2 * o.journal_limit_bytes / RecordBytes(b) * b, &clock, rng);
          seconds = std::max(3 * f.seconds, 10.0);
        } else if (b >= 4096) {
          seconds = 3 * f.seconds;
        }
        record(PushLoop(**store, d.name, b, f.states, seconds, INT64_MAX,
                        &clock, rng));
      }
      const double t0 = MonotonicSeconds();
      Die((*store)->Close(), "close");
      std::printf("%s close: %.2f s\n", d.name.c_str(),
                  MonotonicSeconds() - t0);
      fs::remove_all(o.data_dir, ec);
      if (d.name == "write-through") fill();
    }

    if (want("write-through-recovery")) {
      settle();
      record(Recovery(f.dir + "/recovery", f.states, f.journal_limit));
      fs::remove_all(f.dir + "/recovery", ec);
    }

    if (want("cold")) {  // Cold: every state spilled, kNever promotion.
      settle();
      NodeStateStoreOptions o;
      o.dim = kDim;
      o.data_dir = f.dir + "/cold";
      o.write_policy = WritePolicy::kWriteBack;
      o.hot_capacity_bytes = 1;  // one row
      o.promotion = PromotionPolicy::kNever;
      {
        auto store = Open(o);
        Die(store.status(), "open cold");
        const double t0 = MonotonicSeconds();
        Fill(**store, f.states, &clock);
        Result r{"cold-fill", "push", 65536, f.states, MonotonicSeconds() - t0};
        record(r);
        Die((*store)->Close(), "close cold");
      }
      // Once as configured by default (large reads split among the CPUs,
      // NodeStateStoreOptions::cold_read_threads), once by the pulling
      // thread alone.
      {
        NodeStateStoreOptions one = o;
        one.cold_read_threads = 0;
        auto store = Open(one);
        Die(store.status(), "reopen cold, one thread");
        for (int64_t b : f.batches)
          record(
              PullLoop(**store, "cold-1-thread", b, f.states, f.seconds, rng));
        Die((*store)->Close(), "close cold");
      }
      auto store = Open(o);
      Die(store.status(), "reopen cold");
      for (int64_t b : f.batches)
        record(PullLoop(**store, "cold", b, f.states, f.seconds, rng));
      auto stats = (*store)->Stats();
      Die(stats.status(), "stats");
      std::printf("cold: %lld cold states, %lld hot, rocksdb %lld bytes\n",
                  static_cast<long long>(stats->cold_states),
                  static_cast<long long>(stats->hot_states),
                  static_cast<long long>(stats->rocksdb_bytes));
      Die((*store)->Close(), "close cold");
      fs::remove_all(o.data_dir, ec);
    }

    if (f.db_bench) {
      fill();  // here when the write-through tier did not run
      // readrandom, beside the cold tier.
      run.readrandom = DbBench(absl::StrCat("--db=", db,
                                            " --benchmarks=readrandom"
                                            " --use_existing_db=1"
                                            " --value_size=408"
                                            " --num=1000000 --reads=300000"
                                            " --threads=1"),
                               "readrandom", &read_cmd);
      // Both CPUs, as the store's cold pulls use them.
      run.readrandom2 = DbBench(absl::StrCat("--db=", db,
                                             " --benchmarks=readrandom"
                                             " --use_existing_db=1"
                                             " --value_size=408"
                                             " --num=1000000 --reads=150000"
                                             " --threads=2"),
                                "readrandom", &read2_cmd);
      db_runs.push_back(run);
      fs::remove_all(db, ec);
    }
  }
  fs::remove_all(f.dir, ec);

  // Per (tier, op, batch): the rates of each repetition, in run order.
  auto rates = [&](const std::string& tier, const std::string& op, int64_t b) {
    std::vector<double> v;
    for (const Result& r : results)
      if (r.tier == tier && r.op == op && r.batch == b)
        v.push_back(r.states / r.seconds);
    return v;
  };
  using mnemo::bench::Median;

  JsonWriter w;
  w.BeginObject();
  w.Field("benchmark", "memstore_inproc");
  w.Field("command", command);
  w.Field("date", NowIso8601());
  w.Field("hostname", HostName());
  w.Field("cpu", CpuModel());
  w.Field("nproc", static_cast<int64_t>(::sysconf(_SC_NPROCESSORS_ONLN)));
  {
    double load[3] = {0, 0, 0};
    if (::getloadavg(load, 3) == 3) w.Field("loadavg_1min_at_end", load[0]);
  }
  w.Field("dim", kDim);
  w.Field("states", f.states);
  w.Field("journal_limit_bytes",
          RecoveryOptions(f.dir, f.journal_limit).journal_limit_bytes);
  w.Field("repeat", static_cast<int64_t>(f.repeat));
  w.Field("peak_rss_bytes", PeakRssBytes());
  w.Key("results");  // medians over the repetitions
  w.BeginArray();
  for (size_t i = 0; i < results.size(); ++i) {
    const Result& r = results[i];
    bool first = true;  // one entry per (tier, op, batch)
    for (size_t j = 0; j < i && first; ++j)
      first = !(results[j].tier == r.tier && results[j].op == r.op &&
                results[j].batch == r.batch);
    if (!first) continue;
    const std::vector<double> v = rates(r.tier, r.op, r.batch);
    const double sps = Median(v);
    w.BeginObject();
    w.Field("tier", r.tier);
    w.Field("op", r.op);
    w.Field("batch", r.batch);
    w.Field("states_per_s", sps);
    w.Field("bytes_per_s", sps * kDim * 4);
    w.Key("runs_states_per_s");
    w.BeginArray();
    for (double x : v) w.Number(x);
    w.EndArray();
    w.EndObject();
  }
  w.EndArray();
  std::vector<double> fills, reads, reads2;
  for (const DbBenchRun& run : db_runs) {
    fills.push_back(run.fillseq);
    reads.push_back(run.readrandom);
    reads2.push_back(run.readrandom2);
  }
  w.Key("db_bench");
  w.BeginObject();
  // NAME_command, NAME_ops_per_s (the median) and NAME_runs_ops_per_s.
  auto series = [&](const std::string& name, const std::string& cmd,
                    const std::vector<double>& runs) {
    w.Field(name + "_command", cmd);
    w.Field(name + "_ops_per_s", Median(runs));
    w.Key(name + "_runs_ops_per_s");
    w.BeginArray();
    for (double x : runs) w.Number(x);
    w.EndArray();
  };
  series("fillseq", fill_cmd, fills);
  series("readrandom", read_cmd, reads);
  series("readrandom_2_threads", read2_cmd, reads2);
  w.EndObject();

  // Goals: ratios to db_bench, each the median of the per-repetition ratios
  // (side by side under the same load). target 0: a ratio shown beside a
  // goal, with none of its own.
  auto goal = [&](const char* name, const std::vector<double>& ours,
                  const std::vector<double>& ref, const char* ref_name,
                  double target) {
    std::vector<double> ratios;
    for (size_t i = 0; i < ours.size() && i < ref.size(); ++i)
      if (ref[i] > 0) ratios.push_back(ours[i] / ref[i]);
    const double ratio = Median(ratios);
    w.Key(name);
    w.BeginObject();
    w.Field("states_per_s", Median(ours));
    w.Field(absl::StrCat("db_bench_", ref_name, "_ops_per_s"), Median(ref));
    w.Key("runs_ratio");
    w.BeginArray();
    for (double x : ratios) w.Number(x);
    w.EndArray();
    w.Field("ratio", ratio);
    if (target > 0) {
      w.Field("goal_ratio", target);
      w.Field("met", !ratios.empty() && ratio >= target);
    }
    w.EndObject();
    std::printf(
        "%s: median %.0f states/s, %s %.0f ops/s, ratio %.2fx%s%s\n", name,
        Median(ours), ref_name, Median(ref), ratio,
        target > 0 ? absl::StrFormat(" (goal %.1fx)", target).c_str() : "",
        ratios.empty() ? " not measured" : "");
  };
  {  // Restart after a crash with a full write-through journal.
    std::vector<double> seconds, bytes;
    for (const Result& r : results) {
      if (r.tier != "write-through-recovery") continue;
      seconds.push_back(r.seconds);
      bytes.push_back(static_cast<double>(r.states / 4096 * RecordBytes(4096)));
    }
    if (!seconds.empty()) {
      w.Key("write_through_recovery");
      w.BeginObject();
      w.Field("journal_limit_bytes",
              RecoveryOptions(f.dir, f.journal_limit).journal_limit_bytes);
      w.Field("journal_bytes", Median(bytes));
      w.Field("open_seconds", Median(seconds));
      w.Key("runs_open_seconds");
      w.BeginArray();
      for (double x : seconds) w.Number(x);
      w.EndArray();
      w.EndObject();
    }
  }
  w.Key("goals");
  w.BeginObject();
  goal("write_through_push_4096", rates("write-through", "push", 4096), fills,
       "fillseq", 1.5);
  goal("cold_pull_4096", rates("cold", "pull", 4096), reads, "readrandom", 2.0);
  // Beside it: the pulling thread reading alone, and db_bench on both CPUs.
  goal("cold_pull_4096_one_thread", rates("cold-1-thread", "pull", 4096), reads,
       "readrandom", 0);
  goal("cold_pull_4096_vs_2_threads", rates("cold", "pull", 4096), reads2,
       "readrandom_2_threads", 0);
  w.EndObject();
  w.EndObject();
  fs::create_directories(fs::path(f.out).parent_path(), ec);
  std::ofstream(f.out) << w.str() << "\n";
  std::printf("wrote %s\n", f.out.c_str());
  return 0;
}
