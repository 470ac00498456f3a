#include "services/cli/train_flags.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <optional>
#include <string_view>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "coordinator/policy_spec.h"
#include "services/cli/commands.h"
#include "trainer/data/event_log.h"
#include "trainer/data/neighbor_sampler.h"
#include "trainer/model/model_spec.h"
#include "trainer/plan/batch_plan.h"
#include "trainer/runtime/depbloom_sizes.h"
#include "trainer/runtime/train_enums.h"
#include "util/enum_names.h"
#include "util/proc.h"
#include "util/status_macros.h"

namespace mnemo {

namespace {

// --neighbor-strategy: empty (or unset) leaves it to the model.
std::string_view NeighborStrategyText(
    const std::optional<data::NeighborStrategy>& strategy) {
  return strategy ? data::NeighborStrategyName(*strategy) : "default";
}

}  // namespace

// The choices among names are parsed here, once, as the text is read (from
// the command line or a --config file): a bad one is a usage error naming
// the flag and the accepted names, before anything starts.
namespace {
constexpr EnumName<ProgressMode> kProgressModeNames[] = {
    {ProgressMode::kAuto, "auto"},
    {ProgressMode::kBar, "bar"},
    {ProgressMode::kLines, "lines"},
    {ProgressMode::kNone, "none"}};
}  // namespace

absl::StatusOr<ProgressMode> ParseProgressMode(std::string_view name) {
  return ParseEnum(kProgressModeNames, "--progress", name);
}

std::string_view ProgressModeName(ProgressMode mode) {
  return EnumToName(kProgressModeNames, mode);
}

namespace {
constexpr EnumName<LrScaling> kLrScalingNames[] = {
    {LrScaling::kAuto, "auto"},
    {LrScaling::kNone, "none"},
    {LrScaling::kSqrt, "sqrt"},
    {LrScaling::kLinear, "linear"}};
}  // namespace

absl::StatusOr<LrScaling> ParseLrScaling(std::string_view name) {
  return ParseEnum(kLrScalingNames, "--lr-scaling", name);
}

std::string_view LrScalingName(LrScaling scaling) {
  return EnumToName(kLrScalingNames, scaling);
}

namespace {
// --eval-on: whether a cluster's workers share the evaluation.
constexpr EnumName<bool> kEvalOnNames[] = {{true, "all"}, {false, "leader"}};
absl::StatusOr<bool> ParseEvalOn(std::string_view name) {
  return ParseEnum(kEvalOnNames, "--eval-on", name);
}
std::string_view EvalOnName(bool shared) {
  return EnumToName(kEvalOnNames, shared);
}
}  // namespace

void AddTrainFlags(FlagSet* flags, TrainFlags* f) {
  runtime::TrainOptions& o = f->options;
  flags->String("data", &f->data,
                "dataset: a registry name (wikipedia, mathoverflow, "
                "collegemsg, bitcoin-alpha, uslegis, reddit, mooc, lastfm, "
                "askubuntu) or a path to an event file");
  flags->StringList("data-dir", &f->data_dirs,
                    "directory to look for datasets by name (repeatable; "
                    "before $MNEMO_DATA_DIR and ../shared/data)");
  // Checked as it is read (a usage error before anything starts), kept as
  // text: the loaders resolve "auto" per file.
  flags->Custom(
      "format", o.data.format,
      [format = &o.data.format](const std::string& s) -> absl::Status {
        auto parsed = data::ParseFormat(s);
        if (!parsed.ok()) return parsed.status();
        *format = s;
        return absl::OkStatus();
      },
      "file format: auto, snap, tgn, tgn-csv, jodie, konect, tuvw");
  flags->Bool("skip-bad-lines", &o.data.skip_bad_lines,
              "skip malformed lines (and report how many) instead of failing");
  flags->Int64("max-events", &o.data.max_events,
               "use only the first N events in time order (0: all)");
  flags->Choice("model", &o.model.kind, model::ParseModelKind, model::ModelName,
                "model: tgn, jodie, apan, tgat or dysat "
                "(docs/models-and-policies.md)");
  flags->String("profile", &o.run.profile_path,
                "write a per-operator profile (LibTorch's profiler: calls, "
                "self and total time per batch, input shapes) of "
                "--profile-batches training batches of the first epoch to "
                "this file");
  flags->Int64("profile-batches", &o.run.profile_batches,
               "training batches --profile records (after 10 warm-up "
               "batches)");
  flags->Int("epochs", &o.optim.epochs, "maximum number of training epochs");
  flags->Int64("batch-size", &o.optim.batch_size,
               "training batch size (events; in a cluster: the global batch, "
               "except under --policy depbloom: per worker, and derived "
               "from the data there unless given, see --window-events)");
  flags->Int64("eval-batch-size", &o.eval.batch_size,
               "evaluation batch size (0: 200 under --protocol "
               "tgn-reference, else --batch-size)");
  flags->Choice("eval-on", &o.eval.shared, ParseEvalOn, EvalOnName,
                "in a cluster, who evaluates: all (the workers share each "
                "validation and test, with the figures rank 0 alone would "
                "give; not with --memory-cache-bytes or --protocol tgb, "
                "where rank 0 evaluates) or leader (rank 0 evaluates, the "
                "others wait)");
  flags->Double("lr", &o.optim.lr,
                "Adam learning rate (at a 600-event global batch when "
                "--lr-scaling applies)");
  flags->Choice("lr-scaling", &f->lr_scaling, ParseLrScaling, LrScalingName,
                "how --lr follows the global batch: sqrt multiplies it by "
                "sqrt(global batch / 600), linear by global batch / 600; "
                "none keeps it; auto: under --policy depbloom (its global "
                "batch is --batch-size x workers) unless --lr is given, "
                "linear for "
                "--model jodie and sqrt for the others, else none");
  flags->Choice("protocol", &o.eval.protocol, runtime::ParseProtocol,
                runtime::ProtocolName,
                "evaluation protocol: tgn-reference (as twitter-research/tgn: "
                "negatives from unique destinations, best epoch by mean "
                "per-batch val AP, eval batches of 200, JODIE time statistics "
                "per role over all events), mnemo (no test-time data in "
                "training statistics) or tgb (the Temporal Graph Benchmark's "
                "one-vs-many ranking: MRR and Hits@10; see "
                "docs/training.md)");
  flags->Int64("tgb-negatives", &o.eval.tgb_negatives,
               "--protocol tgb: negatives per positive (0: every other "
               "destination; -1: the data set's, 0 for wikipedia as in "
               "tgbl-wiki, else 100, half historical and half random)");
  flags->Int64("tgb-seed", &o.eval.tgb_seed,
               "--protocol tgb: seed of the drawn negatives");
  flags->String("tgb-negatives-dir", &o.eval.tgb_negatives_dir,
                "--protocol tgb: directory of the negatives' files (read when "
                "present, else written; default: OUT/tgb_negatives)");
  flags->Int64("memory-dim", &o.model.memory_dim, "node memory width");
  flags->Int64("time-dim", &o.model.time_dim, "time encoding width");
  flags->Int64("embedding-dim", &o.model.embedding_dim,
               "node embedding width (TGN, TGAT, DySAT; JODIE uses "
               "--memory-dim)");
  flags->Int("neighbors", &o.model.neighbors,
             "temporal neighbours per node for graph attention (TGN; TGAT, "
             "DySAT: per layer)");
  flags->Custom(
      "neighbor-strategy",
      "",  // the model's
      [strategy =
           &o.model.neighbor_strategy](const std::string& s) -> absl::Status {
        if (s.empty()) {
          strategy->reset();
          return absl::OkStatus();
        }
        auto parsed = data::ParseNeighborStrategy(s);
        if (!parsed.ok()) return parsed.status();
        *strategy = *parsed;
        return absl::OkStatus();
      },
      "neighbour sampling: recent (k most recent) or uniform "
      "(empty: the model's, uniform for tgat and dysat, else recent)");
  flags->Int("heads", &o.model.heads,
             "attention heads (TGN, TGAT, DySAT, APAN)");
  flags->Double("dropout", &o.model.dropout,
                "dropout (TGN: attention; TGAT, APAN: attention and layers; "
                "-1: the model's, 0.1 for tgat, dysat and apan, else 0.2)");
  flags->Int("layers", &o.model.layers,
             "attention layers (TGAT, DySAT: 1 or 2)");
  flags->Int("mailbox", &o.model.mailbox, "mails kept per node (APAN, >= 2)");
  flags->Choice(
      "apan-mailbox", &o.model.apan_mailbox, model::ParseApanMailbox,
      model::ApanMailboxName,
      "APAN's mailbox: mnemo (attend over filled slots; a node's mail is the "
      "latest event's) or tgl (as TGL: every slot, empty ones too; the mail "
      "listed last in TGL's order)");
  flags->Int("snapshots", &o.model.snapshots,
             "graph snapshots before each event (DySAT, 1 to 1024)");
  flags->Double("snapshot-span", &o.model.snapshot_span,
                "time span of one snapshot in the data's time units (DySAT, "
                "> 0)");
  flags->Int("patience", &o.optim.patience,
             "early stopping: epochs without val AP improvement (0: off)");
  flags->Uint64("seed", &o.optim.seed,
                "seed for initialization, sampling and negatives (evaluation "
                "negatives use fixed seeds)");
  flags->Int("threads", &o.compute.threads,
             "intra-op CPU threads (0: every CPU this process may use; with "
             "--workers N each trainer gets its share, cores / N)");
  flags->String("cpus", &f->cpus,
                "run on these CPUs only (affinity), e.g. 0 or 2-3 or 0,4-5");
  flags->Choice("precision", &o.optim.precision, runtime::ParsePrecision,
                runtime::PrecisionName,
                "fp32, or bf16 (autocast with fp32 master weights)");
  flags->Choice("device", &o.compute.device, runtime::ParseDevice,
                runtime::DeviceName,
                "cpu, cuda or cuda:N: where the model, node memory and "
                "batches live (cuda: the GPU of the worker's LOCAL_RANK, "
                "else its rank, one process per GPU; gradients all-reduced "
                "with NCCL)");
  flags->Bool("tf32", &o.compute.tf32,
              "fp32 on a GPU: products (cuBLAS) and cuDNN in TF32, several "
              "times full fp32's rate at a 10-bit mantissa (no effect on "
              "the CPU)");
  flags->Double("bucket-mb", &o.gradients.bucket_mb,
                "a cluster's gradients travel in flat buckets of about this "
                "many MB, each all-reduced as soon as the backward pass has "
                "produced it (0: one bucket, after the backward pass; -1: "
                "the device's default, one bucket on the CPU, 0.25 on "
                "GPUs)");
  flags->Choice("grad-comm", &o.gradients.comm, runtime::ParseGradComm,
                runtime::GradCommName,
                "type of the gradient all-reduce: fp32, or bf16 (half the "
                "bytes; accumulated and stepped in fp32)");
  flags->Bool("allow-amx", &o.compute.allow_amx,
              "bf16 on CPUs with AMX: allow oneDNN's AMX kernels (faster; "
              "oneDNN 2.6's crashed with SIGILL on some shapes and LibTorch "
              "2.11's oneDNN 3.10 ones are not yet checked, so by default "
              "oneDNN is capped at AVX512_CORE_BF16)");
  flags->String(
      "policy", &f->policy,
      absl::StrCat("multi-worker policy: ", coordinator::PolicyNames(),
                   " (docs/models-and-policies.md)"));
  flags->Int("sync-every", &o.policy.deptgl.sync_every,
             "deptgl: global batches per synchronization window (K)");
  flags->Double("tau-grad", &o.policy.deptgl.tau_grad,
                "deptgl: skip a refresh while the gradient norm is below "
                "tau-grad x its EMA (Eq. 7)");
  flags->Double("tau-load", &o.policy.deptgl.tau_load,
                "deptgl: heavy-load mode (prune auxiliary events) when a "
                "batch took more than tau-load x the EMA of batch times "
                "(Eq. 9; 0: every batch after the first; the paper's 0.5 "
                "makes almost every batch heavy: "
                "bench/results/deptgl_tau_c.md)");
  flags->Double("ema-alpha", &o.policy.deptgl.ema_alpha,
                "deptgl: smoothing of the gradient-norm EMA (Eq. 6)");
  flags->Double("ema-beta", &o.policy.deptgl.ema_beta,
                "deptgl: smoothing of the batch-time EMA (Eq. 8)");
  flags->Choice("push-scope", &o.policy.deptgl.push_scope,
                runtime::ParsePushScope, runtime::PushScopeName,
                "deptgl: push every state a worker advanced (advanced) or "
                "only the states it owns (owned)");
  flags->Choice("sync-scope", &o.policy.deptgl.sync_scope,
                runtime::ParseSyncScope, runtime::SyncScopeName,
                "deptgl: a refresh pulls the paper's N_sync (frontier) or "
                "also the remote neighbours and negatives the window's "
                "targets read (reads)");
  flags->Int("refine-chunks", &o.policy.depbloom.refine_chunks,
             "intra-batch memory refinement IMR(k): micro-batches per "
             "training batch (1: off; 0: the policy's default, 4 for "
             "depbloom)");
  flags->Int64("window-events", &o.policy.depbloom.window_events,
               "depbloom: events per temporal window (sub-chains are "
               "partitioned per window; states merge at window ends). "
               "Unset or 0: derived from the N training events, min(80000, "
               "max(600, N / 8)), at least 8 windows an epoch, and with "
               "--batch-size unset the batch per worker too, min(2400, "
               "max(600 / W, window / (4 W))) for W workers, about 4 "
               "batches per worker and window: the paper's 80000 and 2400 "
               "from 640,000 training events on (up to 8 workers). Given by "
               "hand, the batch is 2400 unless --batch-size is given too "
               "(docs/models-and-policies.md)",
               "derived");
  flags->Choice("partitioner", &o.policy.depbloom.partitioner,
                plan::ParsePartitioner, plan::PartitionerName,
                "depbloom: metis (weighted min-cut), greedy (streaming) or "
                "time (consecutive batches dealt in turn)");
  flags->Choice("chain-assignment", &o.policy.depbloom.chain_assignment,
                plan::ParseChainAssignment, plan::ChainAssignmentName,
                "depbloom: the sub-chain of an event whose endpoints lie in "
                "two parts: source (the source's part), heavier (the part "
                "of the endpoint with more events in the window: a hub's "
                "events stay together) or follow (the part that breaks "
                "fewer of the endpoints' chains)");
  flags->Int64("piece-events", &o.policy.depbloom.piece_events,
               "depbloom with metis: cut each node's events in a "
               "window into pieces of at most this many before "
               "partitioning, so that a hub's early and late events may "
               "lie in different sub-chains (1: partition the events' "
               "dependency graph; 0: whole nodes, as in the paper)");
  flags->Double("imbalance", &o.policy.depbloom.imbalance,
                "depbloom: allowed load imbalance of a window's parts "
                "(delta)");
  flags->Int("urgent-batches", &o.policy.depbloom.urgent_batches,
             "depbloom: states read by the first N batches of the next "
             "window are urgent");
  flags->Int("pipeline-depth", &o.policy.depbloom.pipeline_depth,
             "depbloom: workers per sub-chain; each window's workers / G "
             "sub-chains are each run by a group of G workers as a pipeline "
             "(the next worker starts its batch once the batch before "
             "handed its memory update on); must divide --workers");
  flags->Bool("critical-path", &o.policy.depbloom.critical_path,
              "depbloom: push urgent states first and the rest in the "
              "background (--no-critical-path: everything at the "
              "boundary); pipetgl: hand the next batch's urgent states on "
              "first, the rest after (default off for pipetgl: PipeTGL "
              "hands every update on at once)");
  flags->String("plan-cache", &o.policy.plan_cache_dir,
                "cluster runs: directory caching planned batches (empty: "
                "none)");
  flags->Int64("memory-cache-bytes", &o.working_set.budget_bytes,
               "cluster runs: bytes of node state (memory, mails, times) "
               "each worker holds at once, in training and in rank 0's "
               "evaluation; the rest lives in the memory stores and in the "
               "worker's own spill store, so results equal an unbounded "
               "run's (0: every node's state)");
  flags->Choice("memory-eviction", &o.working_set.eviction, plan::ParseEviction,
                plan::EvictionName,
                "with --memory-cache-bytes: which state a full working set "
                "drops: belady (the one the plan reads furthest ahead) or "
                "lru (the one read least recently)");
  flags->String("memory-spill-dir", &o.working_set.spill_dir,
                "with --memory-cache-bytes: directory of the workers' spill "
                "stores (worker r in rank-r, emptied when it starts; empty: "
                "a temporary directory, removed when the job ends, under "
                "mnemo train also when it fails or is stopped by a signal)");
  flags->Int("memory-prefetch", &o.working_set.prefetch,
             "with --memory-cache-bytes: rank 0's evaluation pulls the "
             "predicted misses of up to N coming batches from the memory "
             "stores while the batches before them run, one pull per batch "
             "in flight (0: each batch's misses when it needs them)");
  flags->Bool("check-parameters", &o.checks.check_parameters,
              "cluster runs: verify after every step that all workers hold "
              "identical parameters (one extra small all-reduce per batch)");
  flags->String("out", &o.run.out_dir,
                "output directory: summary.json, metrics.csv, id_map.csv, "
                "checkpoints/");
  flags->String("resume", &o.run.resume_dir,
                "continue from the last checkpoint in this --out directory "
                "(refused where flags that define the result differ from "
                "the checkpoint's, naming them)");
  flags->StringList("resume-override", &o.run.resume_overrides,
                    "with --resume: flags this run changes on purpose although "
                    "the checkpoint was trained with other values, e.g. "
                    "lr,seed (repeatable; the run then differs from an "
                    "uninterrupted one); 'data': the data file's events "
                    "changed; 'unverified': a checkpoint without a checksum "
                    "among the run's files with one is from an older mnemo");
  flags->String("config", &o.run.config_path,
                "YAML file of 'flag-name: value' lines; flags override it");
  flags->Choice("progress", &f->progress, ParseProgressMode, ProgressModeName,
                "progress display: auto (bar on a terminal), bar, lines, none");
}

void ApplyPolicyDefaults(const FlagSet& flags, int world_size, TrainFlags* f) {
  const bool depbloom = f->spec.policy == coordinator::PolicyKind::kDepBloom;
  runtime::TrainOptions& o = f->options;
  // DepBloom trains large per-worker batches refined in 4 micro-batches
  // (the paper's LB+IMR(4)).
  // Where the user leaves them, depbloom's window and batch follow the
  // training events and workers (trainer/runtime/depbloom_sizes.h): the
  // engine derives them once the data is loaded. A window given by hand
  // keeps the paper's batch (as before the sizes were derived, so that
  // the benchmarks' runs, which give windows, train as they did).
  runtime::DepBloomOptions& d = o.policy.depbloom;
  const bool derive_window =
      depbloom && (!flags.WasSet("window-events") || d.window_events == 0);
  if (derive_window) d.window_events = 0;
  d.derive_batch = derive_window && !flags.WasSet("batch-size");
  if (depbloom && !flags.WasSet("batch-size")) {
    o.optim.batch_size = runtime::kPaperBatchPerWorker;
  }
  // PipeTGL hands every update on (the baseline); --critical-path applies
  // DepBloom's split to its handoffs.
  if (f->spec.policy == coordinator::PolicyKind::kPipeTgl &&
      !flags.WasSet("critical-path")) {
    d.critical_path = false;
  }
  // Adam's step at 8x the batch wants about sqrt(8)x the rate; JODIE, whose
  // memory learns slowly at the default rate, the full 8x: each chosen on
  // validation AP at convergence (docs/models-and-policies.md, DepBloom).
  LrScaling scaling = f->lr_scaling;
  if (scaling == LrScaling::kAuto) {
    if (!depbloom || flags.WasSet("lr")) {
      scaling = LrScaling::kNone;
    } else {
      scaling = o.model.kind == model::ModelKind::kJodie ? LrScaling::kLinear
                                                         : LrScaling::kSqrt;
    }
  }
  o.optim.lr_scale = 1;
  o.optim.lr_scale_power = 0;
  if (scaling != LrScaling::kNone && d.derive_batch) {
    // Scaled by the engine, to the batch it derives.
    o.optim.lr_scale_power = scaling == LrScaling::kSqrt ? 0.5 : 1;
  } else if (scaling != LrScaling::kNone && o.optim.batch_size > 0) {
    const int64_t global =
        o.optim.batch_size * (depbloom ? std::max(1, world_size) : 1);
    const double ratio = static_cast<double>(global) / kLrReferenceBatch;
    o.optim.lr_scale = scaling == LrScaling::kSqrt ? std::sqrt(ratio) : ratio;
    o.optim.lr *= o.optim.lr_scale;
  }
}

absl::Status ResolveTrainFlags(TrainFlags* f) {
  runtime::TrainOptions& o = f->options;
  o.data.dataset = f->data;
  if (!o.run.resume_dir.empty() && o.run.out_dir.empty())
    o.run.out_dir = o.run.resume_dir;
  {
    // --resume-override a,b --resume-override c: each a flag that defines
    // the result (a key of RunConfigText).
    std::vector<std::string> names;
    const std::string known = RunConfigText(o, f->policy);
    for (const std::string& item : o.run.resume_overrides) {
      for (absl::string_view part :
           absl::StrSplit(item, ',', absl::SkipEmpty())) {
        std::string name(absl::StripPrefix(part, "--"));
        // "unverified": a checkpoint without a checksum among the run's
        // files with one is taken as one from an older mnemo.
        if (name != "unverified" &&
            !runtime::HasRunConfigKey(known, runtime::RunConfigKeyOf(name))) {
          return absl::InvalidArgumentError(absl::StrCat(
              "--resume-override: '", name,
              "' is not a flag that defines a run's result (such as lr, "
              "seed, batch-size, heads, data) nor 'unverified'"));
        }
        names.push_back(name);
      }
    }
    if (!names.empty() && o.run.resume_dir.empty()) {
      return absl::InvalidArgumentError(
          "--resume-override needs --resume (a new run has nothing to "
          "override)");
    }
    o.run.resume_overrides = names;
  }
  o.data.data_dirs = DataSearchDirs(f->data_dirs);
  switch (f->progress) {
    case ProgressMode::kAuto:
      o.run.progress_bar = isatty(STDERR_FILENO);
      break;
    case ProgressMode::kBar:
      o.run.progress_bar = true;
      break;
    case ProgressMode::kLines:
      break;
    case ProgressMode::kNone:
      o.run.progress_interval_s = 1e18;
      break;
  }
  if (absl::Status v = runtime::ValidateTrainOptions(o); !v.ok()) return v;
  if (!f->cpus.empty()) {
    auto cpus = ParseCpuList(f->cpus);
    if (!cpus.ok()) return cpus.status();
    if (absl::Status s = PinToCpus(*cpus); !s.ok()) return s;
  }
  {
    auto spec = coordinator::ParsePolicySpec(f->policy);
    if (!spec.ok()) return spec.status();
    f->spec = *spec;
  }
  if (o.policy.depbloom.pipeline_depth < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--pipeline-depth must be >= 1, got ",
                     o.policy.depbloom.pipeline_depth));
  }
  if (o.policy.depbloom.window_events < 0 ||
      o.policy.depbloom.urgent_batches < 0 ||
      !(o.policy.depbloom.imbalance >= 0) ||
      o.policy.depbloom.piece_events < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--window-events must be >= 0 (0: derived from the data), "
        "--urgent-batches >= 0, "
        "--imbalance >= 0 and --piece-events >= 0; got ",
        o.policy.depbloom.window_events, ", ", o.policy.depbloom.urgent_batches,
        ", ", o.policy.depbloom.imbalance, ", ",
        o.policy.depbloom.piece_events));
  }
  if (o.working_set.budget_bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--memory-cache-bytes must be >= 0 (0: unbounded), got ",
                     o.working_set.budget_bytes));
  }
  if (o.working_set.prefetch < 0 || o.working_set.prefetch > 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("--memory-prefetch must be 0 to 64 batches, got ",
                     o.working_set.prefetch));
  }
  if (!(o.policy.deptgl.tau_grad > 0) ||
      !std::isfinite(o.policy.deptgl.tau_grad)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tau-grad must be > 0, got ", o.policy.deptgl.tau_grad));
  }
  // tau_c = 0 (the paper's Table VII): every batch after the first heavy.
  if (!(o.policy.deptgl.tau_load >= 0) ||
      !std::isfinite(o.policy.deptgl.tau_load)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tau-load must be >= 0 (0: prune every batch after "
                     "the first), got ",
                     o.policy.deptgl.tau_load));
  }
  if (!(o.policy.deptgl.ema_alpha > 0 && o.policy.deptgl.ema_alpha <= 1) ||
      !(o.policy.deptgl.ema_beta > 0 && o.policy.deptgl.ema_beta <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--ema-alpha and --ema-beta must be in (0, 1], got ",
        o.policy.deptgl.ema_alpha, " and ", o.policy.deptgl.ema_beta));
  }
  return absl::OkStatus();
}

absl::StatusOr<TrainFlags> FlagsOfRun(
    const std::string& config, const std::string& data,
    const std::vector<std::string>& data_dirs) {
  // The keys that define what the model is and how it reads the data.
  static const absl::flat_hash_set<std::string> kKeys = {"data",
                                                         "format",
                                                         "max_events",
                                                         "model",
                                                         "batch_size",
                                                         "eval_batch_size",
                                                         "memory_dim",
                                                         "time_dim",
                                                         "embedding_dim",
                                                         "neighbors",
                                                         "neighbor_strategy",
                                                         "heads",
                                                         "dropout",
                                                         "layers",
                                                         "mailbox",
                                                         "apan_mailbox",
                                                         "snapshots",
                                                         "snapshot_span",
                                                         "seed",
                                                         "precision",
                                                         "protocol",
                                                         "skip_bad_lines",
                                                         "refine_chunks",
                                                         "policy"};
  TrainFlags f;
  FlagSet flags("serve", "");
  AddTrainFlags(&flags, &f);
  for (const auto& [key, value] : runtime::ParseRunConfig(config)) {
    // "auto" and "default": left to the data or the model, as in the run.
    if (!kKeys.contains(key) || value == "auto" || value == "default") {
      continue;
    }
    if (absl::Status s = flags.Set(runtime::FlagOfRunConfigKey(key), value,
                                   "the run's configuration");
        !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the run's configuration, ", key, "=", value, ": ", s.message()));
    }
  }
  if (!data.empty()) f.data = data;
  f.data_dirs = data_dirs;
  RETURN_IF_ERROR(ResolveTrainFlags(&f));
  return f;
}

std::string RunConfigText(const runtime::TrainOptions& o,
                          const std::string& policy) {
  return absl::StrFormat(
             "data=%s format=%s max_events=%d model=%s epochs=%d batch_size=%s "
             "eval_batch_size=%d lr=%g memory_dim=%d time_dim=%d "
             "embedding_dim=%d "
             "neighbors=%d neighbor_strategy=%s heads=%d dropout=%s layers=%d "
             "mailbox=%d apan_mailbox=%s snapshots=%d snapshot_span=%g "
             "patience=%d "
             "seed=%d precision=%s device_kind=%s policy=%s "
             "check_parameters=%d "
             "skip_bad_lines=%d "
             "protocol=%s sync_every=%d tau_grad=%g tau_load=%g ema_alpha=%g "
             "ema_beta=%g push_scope=%s sync_scope=%s refine_chunks=%d "
             "window_events=%s partitioner=%s chain_assignment=%s "
             "piece_events=%d "
             "imbalance=%g "
             "urgent_batches=%d "
             "critical_path=%d resume=%d",
             o.data.dataset, o.data.format, o.data.max_events,
             model::ModelName(o.model.kind), o.optim.epochs,
             // "auto": derived from the data by the engine (the same
             // values for the same data, which the checkpoint checks).
             o.policy.depbloom.derive_batch ? std::string("auto")
                                            : absl::StrCat(o.optim.batch_size),
             o.eval.batch_size, o.optim.lr, o.model.memory_dim,
             o.model.time_dim, o.model.embedding_dim, o.model.neighbors,
             NeighborStrategyText(o.model.neighbor_strategy), o.model.heads,
             // Below 0: the model's default.
             o.model.dropout < 0 ? std::string("default")
                                 : absl::StrCat(o.model.dropout),
             o.model.layers, o.model.mailbox,
             model::ApanMailboxName(o.model.apan_mailbox), o.model.snapshots,
             o.model.snapshot_span, o.optim.patience, o.optim.seed,
             runtime::PrecisionName(o.optim.precision),
             // Ranks may use different GPUs but must agree on the gradient
             // group's backend.
             o.compute.device.cuda() ? "cuda" : "cpu", policy,
             int{o.checks.check_parameters}, int{o.data.skip_bad_lines},
             runtime::ProtocolName(o.eval.protocol), o.policy.deptgl.sync_every,
             o.policy.deptgl.tau_grad, o.policy.deptgl.tau_load,
             o.policy.deptgl.ema_alpha, o.policy.deptgl.ema_beta,
             runtime::PushScopeName(o.policy.deptgl.push_scope),
             runtime::SyncScopeName(o.policy.deptgl.sync_scope),
             o.policy.depbloom.refine_chunks,
             o.policy.depbloom.window_events > 0
                 ? absl::StrCat(o.policy.depbloom.window_events)
                 : std::string("auto"),
             plan::PartitionerName(o.policy.depbloom.partitioner),
             plan::ChainAssignmentName(o.policy.depbloom.chain_assignment),
             o.policy.depbloom.piece_events, o.policy.depbloom.imbalance,
             o.policy.depbloom.urgent_batches,
             int{o.policy.depbloom.critical_path},
             // Every rank resumes or none does (they share rank 0's choice of
             // checkpoint in a collective).
             int{!o.run.resume_dir.empty()}) +
         // A batch the engine derives is scaled to by this rule (lr is
         // then the unscaled rate).
         (o.policy.depbloom.derive_batch && o.optim.lr_scale_power > 0
              ? absl::StrCat(" lr_scaling=",
                             o.optim.lr_scale_power == 1 ? "linear" : "sqrt")
              : std::string()) +
         // Full fp32 on a GPU (the default, TF32, is left out).
         (o.compute.device.cuda() && !o.compute.tf32 ? std::string(" tf32=0")
                                                     : std::string()) +
         // The gradients' travel (ranks must agree; the defaults are left
         // out, so that runs from before these flags resume unchanged).
         (o.gradients.comm != runtime::GradComm::kFp32
              ? absl::StrCat(" grad_comm=", std::string(runtime::GradCommName(
                                                o.gradients.comm)))
              : std::string()) +
         (o.gradients.bucket_mb != runtime::GradientOptions::kAuto
              ? absl::StrFormat(" bucket_mb=%g", o.gradients.bucket_mb)
              : std::string()) +
         // Who evaluates (ranks must agree; a resume may change it: the
         // figures are the same either way).
         (o.eval.shared ? std::string() : std::string(" eval_on=leader")) +
         // DepBloom's pipelines (the default, 1, is left out).
         (o.policy.depbloom.pipeline_depth != 1
              ? absl::StrFormat(" pipeline_depth=%d",
                                o.policy.depbloom.pipeline_depth)
              : std::string()) +
         // The TGB protocol's negatives (its results depend on them).
         (o.eval.protocol == runtime::Protocol::kTgb
              ? absl::StrFormat(" tgb_negatives=%d tgb_seed=%d",
                                o.eval.tgb_negatives, o.eval.tgb_seed)
              : std::string());
}

std::string RunConfigHash(const std::string& text) {
  // FNV-1a, 64 bit: a fingerprint, not a security measure.
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return absl::StrFormat("%016x", h);
}

int PrecheckRun(const TrainFlags& f, bool own_out, const std::string& who,
                runtime::ResumePoint* point) {
  const runtime::TrainOptions& o = f.options;
  auto fail = [&](int code, const absl::Status& s) {
    std::fprintf(stderr, "%s: %s\n", who.c_str(),
                 std::string(s.message()).c_str());
    return code;
  };
  if (!o.run.resume_dir.empty()) {
    // Before the lock, which would create the directory.
    std::error_code ec;
    const auto st = std::filesystem::status(o.run.resume_dir, ec);
    if (!std::filesystem::exists(st)) {
      return fail(2, absl::InvalidArgumentError(absl::StrCat(
                         "--resume ", o.run.resume_dir,
                         ": no such directory (the --out directory of the "
                         "run to continue)")));
    }
    if (!std::filesystem::is_directory(st)) {
      return fail(2, absl::InvalidArgumentError(absl::StrCat(
                         "--resume ", o.run.resume_dir,
                         ": not a directory (the --out directory of the run "
                         "to continue)")));
    }
  }
  if (own_out && !o.run.out_dir.empty()) {
    if (absl::Status s = runtime::LockOutputDir(o.run.out_dir); !s.ok()) {
      return fail(1, s);
    }
  }
  if (!o.run.out_dir.empty()) {
    if (absl::Status s =
            runtime::CheckOutputOwner(o.run.out_dir, o.run.resume_dir);
        !s.ok()) {
      return fail(2, s);
    }
  }
  if (o.run.resume_dir.empty()) return 0;
  // `mnemo train` reads every file's footer and metadata (all are local:
  // a missing file or another run's is found before anything starts); a
  // separate rank-0 trainer may hold only its own file. Each file's
  // checksum is checked once, where it loads.
  absl::StatusOr<runtime::ResumePoint> p =
      runtime::FindResumePoint(o.run.resume_dir, /*verify=*/own_out);
  if (!p.ok()) return fail(absl::IsDataLoss(p.status()) ? 1 : 2, p.status());
  if (absl::Status s = runtime::CheckRunConfig(
          p->run_config, o.run.run_config, o.run.resume_overrides, p->describe);
      !s.ok()) {
    return fail(2, s);
  }
  if (absl::Status s = p->CheckVerified(o.run.resume_overrides); !s.ok()) {
    return fail(1, s);
  }
  if (point != nullptr) *point = *p;
  return 0;
}

}  // namespace mnemo
