// mnemo train: the embedded default (all roles in one process), or with
// --workers N a local launcher that starts a coordinator, N memory-store
// shards and N trainers on loopback.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "services/cli/commands.h"
#include "services/cli/flags.h"
#include "services/cli/launcher.h"
#include "services/cli/run_command.h"
#include "services/cli/train_flags.h"
#include "services/memstore_client.h"
#include "services/metrics.h"
#include "services/trainer_metrics.h"
#include "trainer/data/event_log.h"
#include "trainer/data/registry.h"
#include "trainer/model/model_spec.h"
#include "trainer/runtime/checkpoint/resume_point.h"
#include "trainer/runtime/train.h"
#include "util/file.h"
#include "util/proc.h"
#include "util/usage_error.h"

namespace mnemo {
namespace {

// The signal that interrupted the launcher (0: none).
volatile int g_interrupted = 0;
void OnInterrupt(int signo) { g_interrupted = signo; }

// Whether the server at `address` gives no answer to its health check
// within a second: hung (stopped, or frozen), where one that answers
// NOT_SERVING or refuses connections is alive and shutting down.
void WarnIfError(const absl::Status& s) {
  if (!s.ok()) {
    std::fprintf(stderr, "mnemo train: warning: %s\n",
                 std::string(s.message()).c_str());
  }
}

bool Hung(const std::string& address) {
  auto h = services::CheckHealth(address, 1.0);
  return !h.ok() && absl::IsDeadlineExceeded(h.status());
}

// Removes the checkpoint files (*.pt.tmp: util/file.h's atomic writes) that
// trainers stopped mid-write left under `out_dir` (empty: none); only once
// every process of the job has exited, so that nobody writes them.
void RemoveUnfinishedCheckpoints(const std::string& out_dir) {
  namespace fs = std::filesystem;
  if (out_dir.empty()) return;
  std::error_code ec;
  std::vector<fs::path> unfinished;
  for (auto it = fs::recursive_directory_iterator(
           out_dir, fs::directory_options::skip_permission_denied, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() > 7 && name.compare(name.size() - 7, 7, ".pt.tmp") == 0) {
      unfinished.push_back(it->path());
    }
  }
  for (const fs::path& p : unfinished) {
    if (fs::remove(p, ec)) {
      std::fprintf(stderr,
                   "mnemo train: removed %s (a checkpoint being written when "
                   "the job stopped)\n",
                   p.c_str());
    }
  }
}

// The most workers the local launcher starts: each is a trainer process
// and a memory-store shard on this one host.
constexpr int kMaxLocalWorkers = 256;

// Starts coordinator, shards and trainers as child processes and waits.
// Launcher-only settings of `mnemo train --workers N`.
struct LaunchFlags {
  int workers = 1;
  bool pin = false;     // pin trainer r to its own share of the CPUs
  double timeout = 30;  // passed to the trainers (--timeout)
  // Trainer metrics: this process, or trainer r at port + r.
  std::string metrics_listen;
  // --gpus: trainer r on GPU gpu_list[r] (empty: --device as given).
  std::string gpus;
  std::vector<int> gpu_list;
  // Each shard's hot tier (--hot-capacity-bytes of mnemo memstore; 0:
  // unlimited): beyond it states live in the shard's RocksDB cold tier.
  int64_t memstore_hot_bytes = 0;
  // Each shard's --mmap-reads: false keeps the cold tier's file pages out
  // of the shards' resident memory (reads by pread).
  bool memstore_mmap_reads = true;
};

// --gpus "0,1,3": distinct GPU indices, at least one per trainer.
absl::Status ParseGpus(LaunchFlags* lf, runtime::TrainOptions* o) {
  if (lf->gpus.empty()) {
    if (lf->workers > 1 && o->compute.device.cuda() &&
        o->compute.device.index >= 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--device ", runtime::DeviceName(o->compute.device),
          " with --workers ", lf->workers,
          " would put every trainer on one GPU (NCCL cannot run two ranks on "
          "one GPU): use --device cuda (trainer r on GPU r) or --gpus"));
    }
    return absl::OkStatus();
  }
  for (absl::string_view part : absl::StrSplit(lf->gpus, ',')) {
    int g = -1;
    if (!absl::SimpleAtoi(part, &g) || g < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--gpus must be a list of GPU indices such as 0,1, got '", lf->gpus,
          "'"));
    }
    if (std::find(lf->gpu_list.begin(), lf->gpu_list.end(), g) !=
        lf->gpu_list.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--gpus ", lf->gpus, ": GPU ", g,
          " is named twice (NCCL cannot run two ranks on one GPU)"));
    }
    lf->gpu_list.push_back(g);
  }
  if (static_cast<int>(lf->gpu_list.size()) < lf->workers) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--gpus ", lf->gpus, " names ", lf->gpu_list.size(),
        " GPUs for --workers ", lf->workers,
        " (one process per GPU: NCCL cannot run two ranks on one GPU)"));
  }
  if (o->compute.device.cuda() && o->compute.device.index >= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--gpus and --device ", runtime::DeviceName(o->compute.device),
        " both choose the GPU: give one of them"));
  }
  o->compute.device.kind = runtime::Device::Kind::kCuda;
  if (lf->workers == 1) o->compute.device.index = lf->gpu_list[0];
  return absl::OkStatus();
}

// `passthrough`: the arguments every trainer gets (ours minus the
// launcher's own flags).
int Launch(const TrainFlags& f, const LaunchFlags& lf,
           const std::vector<std::string>& passthrough) {
  const int workers = lf.workers;
  const runtime::TrainOptions& o = f.options;
  // From the first moment: a signal while the job starts stops it with
  // 128 + N as well.
  signal(SIGINT, OnInterrupt);
  signal(SIGTERM, OnInterrupt);
  signal(SIGHUP, OnInterrupt);  // a closed terminal stops the job too
  // The memstore record width depends on the data's edge features.
  data::ResolveOptions ro;
  ro.search_dirs = o.data.data_dirs;
  data::Format fmt = data::Format::kAuto;
  auto path = data::ResolveDataset(o.data.dataset, ro, &fmt);
  if (!path.ok()) {
    std::fprintf(stderr, "mnemo train: %s\n",
                 std::string(path.status().message()).c_str());
    return 1;
  }
  data::LoadOptions lo;
  auto parsed = data::ParseFormat(o.data.format);
  lo.format = parsed.ok() && *parsed != data::Format::kAuto ? *parsed : fmt;
  lo.skip_bad_lines = o.data.skip_bad_lines;
  lo.max_events = o.data.max_events;
  auto log = data::LoadEventLog(*path, lo);
  if (!log.ok()) {
    std::fprintf(stderr, "mnemo train: %s\n",
                 std::string(log.status().message()).c_str());
    return 1;
  }
  const int64_t record_dim =
      model::LayoutOf(o.model, log->edge_feature_dim).RecordFloats();

  namespace fs = std::filesystem;
  const fs::path job_dir =
      o.run.out_dir.empty()
          ? fs::temp_directory_path() / absl::StrCat("mnemo-job-", getpid())
          : fs::path(o.run.out_dir) / "cluster";
  std::error_code ec;
  fs::create_directories(job_dir, ec);
  // Without --out the shards' directories live in a temporary directory of
  // this job's that goes when the job does: finished, failed or stopped by
  // a signal (declared before the processes, which are stopped first).
  // With --out they stay in OUT/cluster.
  struct TempJobDir {
    fs::path path;
    ~TempJobDir() {
      std::error_code ec;
      if (path.empty()) return;
      fs::remove_all(path, ec);
      if (ec) {
        std::fprintf(stderr, "mnemo train: cannot remove %s: %s\n",
                     path.c_str(), ec.message().c_str());
      }
    }
  } temp_job_dir;
  if (o.run.out_dir.empty()) {
    temp_job_dir.path = job_dir;
    // Also when this launcher is killed (SIGKILL: no destructor runs).
    WarnIfError(RemoveWhenProcessEnds(job_dir.string()));
  }
  // The shards answer queries by original node id while the job runs.
  const std::string id_map = (job_dir / "id_map.csv").string();
  if (absl::Status ms = data::SaveIdMap(*log, id_map); !ms.ok()) {
    std::fprintf(stderr, "mnemo train: %s\n",
                 std::string(ms.message()).c_str());
    return 1;
  }
  // Trainers run this executable; shards and the coordinator the
  // service-only `mnemo`, which loads no LibTorch (where there is one).
  const std::string exe = SelfExe(), service_exe = ServiceExe();
  // The coordinator's port, then one per shard, all distinct.
  const std::vector<int> ports = services::FreeTcpPorts(1 + workers);
  if (ports.empty()) {
    std::fprintf(stderr,
                 "mnemo train: cannot find %d free TCP ports on "
                 "127.0.0.1\n",
                 1 + workers);
    return 1;
  }
  const int coord_port = ports[0];
  std::vector<std::string> shard_addrs;
  for (int i = 0; i < workers; ++i) {
    shard_addrs.push_back(absl::StrCat("127.0.0.1:", ports[1 + i]));
  }
  const std::string coord_addr = absl::StrCat("127.0.0.1:", coord_port);

  services::ProcessGroup group;
  // A bounded working set's spill stores: where --memory-spill-dir says,
  // else in a directory of this job's that goes when the job does, also
  // when it fails or is stopped by a signal (a trainer stopped by one
  // cannot remove its own; at scale they hold gigabytes).
  struct SpillDir {
    fs::path path;
    ~SpillDir() {
      std::error_code ec;
      if (!path.empty()) fs::remove_all(path, ec);
    }
  } spill_dir;
  std::vector<std::string> spill_args;
  if (o.working_set.budget_bytes > 0 && o.working_set.spill_dir.empty()) {
    std::string tmpl =
        (fs::temp_directory_path() / "mnemo-spill-XXXXXX").string();
    if (mkdtemp(tmpl.data()) == nullptr) {
      std::fprintf(stderr,
                   "mnemo train: --memory-cache-bytes: cannot create a spill "
                   "directory under %s: %s\n",
                   fs::temp_directory_path().c_str(), std::strerror(errno));
      return 1;
    }
    spill_dir.path = tmpl;
    WarnIfError(RemoveWhenProcessEnds(tmpl));
    spill_args = {"--memory-spill-dir", tmpl};
  }
  // Stopped by signal N (also while the job starts): 128 + N, as if it had
  // killed us.
  auto fail = [&](const std::string& msg) {
    if (g_interrupted) {
      std::fprintf(stderr,
                   "mnemo train: stopped by signal %d; stopping every "
                   "process\n",
                   int{g_interrupted});
    } else {
      std::fprintf(stderr, "mnemo train: %s; stopping every process\n",
                   msg.c_str());
    }
    group.TerminateAll(5);
    RemoveUnfinishedCheckpoints(o.run.out_dir);
    return g_interrupted ? 128 + g_interrupted : 1;
  };
  if (g_interrupted) return fail("interrupted");  // while loading the data
  std::vector<int> shards;
  for (int i = 0; i < workers; ++i) {
    const fs::path dir = job_dir / absl::StrCat("memstore-", i);
    fs::remove_all(dir, ec);
    auto c = group.Spawn(
        absl::StrCat("memstore ", i),
        {service_exe,
         "memstore",
         "--listen",
         shard_addrs[i],
         "--data-dir",
         dir.string(),
         "--dim",
         std::to_string(record_dim),
         "--shard-id",
         std::to_string(i),
         "--num-shards",
         std::to_string(workers),
         "--write-policy",
         "write-back",
         "--max-message-bytes",
         std::to_string(64 << 20),
         "--id-map",
         id_map,
         "--hot-capacity-bytes",
         std::to_string(lf.memstore_hot_bytes),
         lf.memstore_mmap_reads ? "--mmap-reads" : "--no-mmap-reads"});
    if (!c.ok()) return fail(std::string(c.status().message()));
    shards.push_back(*c);
  }
  auto coord =
      group.Spawn("coordinator",
                  {service_exe, "coordinator", "--listen", coord_addr,
                   "--world-size", std::to_string(workers), "--memstores",
                   absl::StrJoin(shard_addrs, ","), "--policy", f.policy,
                   "--tau-grad", absl::StrCat(o.policy.deptgl.tau_grad),
                   // Local trainers join within a second of starting: one that
                   // has not after this long is hung or dead, and is named.
                   "--join-timeout", "15"});
  if (!coord.ok()) return fail(std::string(coord.status().message()));
  // The shards and the coordinator must answer within kStartUpSeconds of
  // being started, all together: with the grace a frozen one gets before
  // SIGKILL, a job whose server dies or hangs while starting ends within
  // 30 s, naming it. One that exits is noticed at once.
  constexpr double kStartUpSeconds = 20;
  const double start_deadline = MonotonicSeconds() + kStartUpSeconds;
  struct Server {
    std::string name, address;
    int child;
  };
  std::vector<Server> servers;
  for (int i = 0; i < workers; ++i) {
    servers.push_back(
        {absl::StrCat("memstore ", i), shard_addrs[i], shards[i]});
  }
  servers.push_back({"the coordinator", coord_addr, *coord});
  auto answers = [](const std::string& address, double timeout) {
    auto h = services::CheckHealth(address, timeout);
    return h.ok() && *h;
  };
  for (const auto& [name, address, child] : servers) {
    bool up = false;
    while (!up && !g_interrupted) {
      if (absl::Status c = group.Check(); !c.ok()) {
        return fail(absl::StrCat(c.message(), " while starting"));
      }
      const double left = start_deadline - MonotonicSeconds();
      if (left <= 0) break;
      up = answers(address, std::min(1.0, left));
      if (!up) usleep(50000);
    }
    if (!up) {
      return fail(absl::StrFormat(
          "%s (%s) did not answer its health check within %g s of starting "
          "(hung, or too slow?)",
          name, address, kStartUpSeconds));
    }
  }
  // Each trainer gets its share of the CPUs: threads (unless --threads is
  // given) and, with --pin, the CPUs themselves.
  const std::vector<int> cpus = UsableCpus();
  const int share = std::max<int>(1, cpus.size() / workers);
  std::vector<int> trainers;
  for (int r = 0; r < workers; ++r) {
    std::vector<std::string> args = {exe, "trainer"};
    args.insert(args.end(), passthrough.begin(), passthrough.end());
    args.insert(args.end(), spill_args.begin(), spill_args.end());
    if (o.compute.threads == 0) {
      args.insert(args.end(), {"--threads", std::to_string(share)});
    }
    if (lf.pin) {
      std::string list;
      for (int i = 0; i < share; ++i) {
        absl::StrAppend(&list, i ? "," : "",
                        cpus[(r * share + i) % cpus.size()]);
      }
      args.insert(args.end(), {"--cpus", list});
    }
    if (lf.metrics_listen.empty()) {
      // Off, even where a shared --config file turns it on.
      args.push_back("--metrics-listen=");
    } else {
      const size_t colon = lf.metrics_listen.rfind(':');
      const int port = std::atoi(lf.metrics_listen.c_str() + colon + 1);
      args.insert(args.end(), {"--metrics-listen",
                               absl::StrCat(lf.metrics_listen.substr(0, colon),
                                            ":", port == 0 ? 0 : port + r)});
    }
    if (!lf.gpu_list.empty()) {
      args.insert(args.end(),
                  {"--device", absl::StrCat("cuda:", lf.gpu_list[r])});
    }
    args.insert(args.end(), {"--rank", std::to_string(r), "--world-size",
                             std::to_string(workers), "--coordinator",
                             coord_addr, "--progress", "lines",
                             // The coordinator has answered: one that
                             // does not let a trainer join is hung.
                             "--connect-timeout", "15"});
    auto c =
        group.Spawn(absl::StrCat("trainer ", r), args,
                    // One host: the local rank is the rank (the GPU `--device
                    // cuda` takes), whatever LOCAL_RANK this process inherited.
                    {absl::StrCat("RANK=", r), absl::StrCat("LOCAL_RANK=", r),
                     absl::StrCat("WORLD_SIZE=", workers)});
    if (!c.ok()) return fail(std::string(c.status().message()));
    trainers.push_back(*c);
  }
  std::vector<int> awaited = trainers;
  awaited.push_back(*coord);
  absl::Status s = group.Wait(awaited, &g_interrupted);
  if (!s.ok()) {
    // A stopped or hung process shows as its peers' errors: name the
    // children that are stopped (SIGSTOP), and the running servers whose
    // health check gets no answer at all. A server that answers NOT_SERVING
    // or refuses the connection is shutting down because the job failed
    // (the coordinator does, once it has named the worker it lost), and is
    // not blamed.
    std::string msg(s.message());
    std::vector<std::string> causes;
    if (!g_interrupted) {
      for (const std::string& name : group.Stopped()) {
        causes.push_back(absl::StrCat(
            name, " is stopped (SIGSTOP?): alive, answering nothing"));
      }
      for (const auto& [name, address, child] : servers) {
        if (!group.Running(child)) continue;
        if (Hung(address)) {
          causes.push_back(absl::StrCat(name, " (", address,
                                        ") does not answer its health check"));
        }
      }
    }
    if (!causes.empty()) {
      absl::StrAppend(&msg, "; likely cause: ", absl::StrJoin(causes, "; "));
    }
    return fail(msg);
  }
  group.TerminateAll(10);  // the memstores: clean shutdown
  std::printf("mnemo train: %d workers finished\n", workers);
  return 0;
}

// A --resume of a run that has nothing left to train: it finished its
// --epochs or stopped early (--patience). Its outputs stand (testing it
// again would rewrite summary.json; 0, said so); where one is missing (a
// disk that filled as they were written) the run goes on to test its best
// epoch and write them (nullopt). nullopt also for a run with epochs to
// train.
std::optional<int> FinishedRun(const runtime::TrainOptions& o,
                               const runtime::ResumePoint& point) {
  if (o.run.resume_dir.empty()) return std::nullopt;
  const bool stopped = point.stop.StoppedEarly(o.optim.patience);
  if (!stopped && point.epoch < o.optim.epochs) return std::nullopt;
  const std::string why =
      stopped ? absl::StrFormat(
                    "the run stopped early after epoch %d (%s): validation "
                    "had not improved for %d epochs, --patience %d; best "
                    "epoch %d",
                    point.epoch, point.describe,
                    point.stop.rounds_without_improvement, o.optim.patience,
                    point.stop.best_epoch)
              : absl::StrFormat("the run already trained %d epochs (%s)",
                                point.epoch, point.describe);
  std::vector<std::string> missing;
  for (const char* output : {"summary.json", "metrics.csv", "id_map.csv"}) {
    std::error_code ec;
    if (!std::filesystem::exists(std::filesystem::path(o.run.out_dir) / output,
                                 ec)) {
      missing.push_back(output);
    }
  }
  if (missing.empty()) {
    std::printf(
        "mnemo train: --resume %s: %s; nothing to train, and its "
        "summary.json stands (raise %s to continue it)\n",
        o.run.resume_dir.c_str(), why.c_str(),
        stopped ? "--patience" : "--epochs");
    return 0;
  }
  std::printf(
      "mnemo train: --resume %s: %s, but it has no %s: testing its best "
      "epoch again to write its outputs\n",
      o.run.resume_dir.c_str(), why.c_str(),
      absl::StrJoin(missing, " or ").c_str());
  std::fflush(stdout);
  return std::nullopt;
}

}  // namespace

int TrainMain(int argc, char** argv, int first) {
  TrainFlags f;
  LaunchFlags lf;
  FlagSet flags("train",
                "usage: mnemo train [--data NAME|PATH] [flags]\n\n"
                "Trains a temporal GNN (TGN, JODIE, APAN, TGAT or DySAT) on an "
                "event stream\nand evaluates it on the chronological 70/15/15 "
                "split (transductive and\nnew-node link prediction, AP and "
                "AUC). By default all roles run in this\none process; with "
                "--workers N it starts a coordinator, N memory-store\nshards "
                "and N trainers on loopback and stops them all on failure or "
                "Ctrl-C.\n--device cuda trains on a GPU (--gpus with "
                "--workers N: one each). Datasets\nby name are looked up in "
                "--data-dir, then $MNEMO_DATA_DIR, then ../shared/data.");
  AddTrainFlags(&flags, &f);
  flags.Int("workers", &lf.workers,
            absl::StrCat("trainer processes (1: everything in this process; "
                         "at most ",
                         kMaxLocalWorkers, ")"));
  flags.Bool("pin", &lf.pin,
             "with --workers N: pin each trainer to its own share of the "
             "CPUs (cores / N each, wrapping around when N > cores)");
  flags.HostPort("metrics-listen", &lf.metrics_listen,
                 "serve the trainer's Prometheus metrics (GET /metrics) on "
                 "this host:port; with --workers N trainer r serves on port + "
                 "r (empty: off)");
  flags.String("gpus", &lf.gpus,
               "GPUs to train on, one process each: trainer r on the r-th "
               "listed (implies --device cuda; CUDA_VISIBLE_DEVICES applies "
               "first), e.g. 0,1");
  flags.Int64("memstore-hot-bytes", &lf.memstore_hot_bytes,
              "with --workers N: bytes of node state each memory-store shard "
              "keeps in RAM, the rest in its RocksDB cold tier (0: "
              "unlimited)");
  flags.Bool("memstore-mmap-reads", &lf.memstore_mmap_reads,
             "with --workers N: shards read their cold tier through mmap "
             "(faster cold pulls; the mapped file pages count in their "
             "resident memory)");
  flags.Double("timeout", &lf.timeout,
               "with --workers N: seconds before a silent peer, store or "
               "coordinator fails the job (passed to every trainer)");
  std::vector<std::string> positional;
  if (auto rc = flags.ParseOrExitCode(argc, argv, first, &positional)) {
    return *rc;
  }
  absl::Status s = ResolveTrainFlags(&f);
  if (s.ok()) ApplyPolicyDefaults(flags, lf.workers, &f);
  if (s.ok() && lf.workers < 1) {
    s = absl::InvalidArgumentError(
        absl::StrCat("--workers must be >= 1, got ", lf.workers));
  }
  if (s.ok() && lf.workers > kMaxLocalWorkers) {
    // Each worker is a trainer and a memory-store shard on this host, with
    // two ports: more would only fail later, looking for ports.
    s = absl::InvalidArgumentError(
        absl::StrCat("--workers must be in [1, ", kMaxLocalWorkers,
                     "] (the local launcher runs every worker on this "
                     "host), got ",
                     lf.workers));
  }
  if (s.ok() && !lf.metrics_listen.empty() &&
      lf.metrics_listen.rfind(':') == std::string::npos) {
    s = absl::InvalidArgumentError(absl::StrCat(
        "--metrics-listen must be host:port, got '", lf.metrics_listen, "'"));
  }
  if (s.ok() && lf.workers > 1 && !lf.metrics_listen.empty()) {
    // Trainer r serves on port + r: the last one must still be a port.
    const int64_t port = std::atoll(lf.metrics_listen.c_str() +
                                    lf.metrics_listen.rfind(':') + 1);
    if (port > 0 && port + lf.workers - 1 > 65535) {
      s = absl::InvalidArgumentError(
          absl::StrCat("--metrics-listen '", lf.metrics_listen, "': trainer ",
                       lf.workers - 1, " would serve on port ",
                       port + lf.workers - 1, ", above 65535"));
    }
  }
  if (s.ok() && lf.workers == 1 && f.options.working_set.budget_bytes > 0) {
    s = absl::InvalidArgumentError(
        "--memory-cache-bytes bounds what a cluster worker holds, the rest "
        "living in the memory stores: run with --workers N (N >= 2)");
  }
  if (s.ok() && lf.memstore_hot_bytes < 0) {
    s = absl::InvalidArgumentError(
        absl::StrCat("--memstore-hot-bytes must be >= 0 (0: unlimited), got ",
                     lf.memstore_hot_bytes));
  }
  if (s.ok()) s = ParseGpus(&lf, &f.options);
  if (s.ok()) s = CheckSeconds("--timeout", lf.timeout);
  if (!s.ok()) {
    std::fprintf(stderr, "mnemo train: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  f.options.run.run_config = RunConfigText(f.options, f.policy);
  runtime::ResumePoint point;
  if (int rc = PrecheckRun(f, /*own_out=*/true, "mnemo train", &point)) {
    return rc;
  }
  if (std::optional<int> done = FinishedRun(f.options, point)) return *done;
  if (!f.options.run.resume_dir.empty()) {
    // The shards' state is not part of a checkpoint (node memory restarts
    // every epoch).
    std::printf("mnemo train: resuming from %s, epoch %d done%s\n",
                point.describe.c_str(), point.epoch,
                point.cluster == (lf.workers > 1) &&
                        (!point.cluster || point.workers == lf.workers)
                    ? ""
                    : absl::StrCat(" (", lf.workers,
                                   lf.workers == 1 ? " worker" : " workers",
                                   " now, ", point.workers,
                                   " then: the run will differ from an "
                                   "uninterrupted one)")
                          .c_str());
    std::fflush(stdout);
  }
  if (lf.workers > 1) {
    // Trainers get our own arguments minus the launcher's own flags
    // (--timeout they share; a --config file's launcher keys they skip).
    return Launch(f, lf,
                  flags.Forward(argc, argv, first,
                                {"workers", "pin", "metrics-listen", "gpus",
                                 "memstore-hot-bytes", "memstore-mmap-reads"}));
  }
  runtime::TrainCallbacks callbacks;
  callbacks.log = [](const std::string& line) {
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
  };
  services::MetricsRegistry registry;
  services::TrainerMetrics metrics(&registry, 0);
  if (!lf.metrics_listen.empty()) {
    if (absl::Status ms = metrics.Serve(lf.metrics_listen, &callbacks);
        !ms.ok()) {
      std::fprintf(stderr, "mnemo train: %s\n",
                   std::string(ms.message()).c_str());
      return 1;
    }
  }
  // A SIGTERM while a checkpoint is written leaves no .pt.tmp.
  RemoveTempFilesOnTermination();
  auto result = runtime::Train(f.options, callbacks);
  if (!result.ok()) {
    std::fprintf(stderr, "mnemo train: %s\n",
                 std::string(result.status().message()).c_str());
    return ExitCodeOf(result.status());
  }
  if (!f.options.run.out_dir.empty()) {
    std::printf("wrote %s/summary.json\n", f.options.run.out_dir.c_str());
  }
  return 0;
}

}  // namespace mnemo
