// The engine's setup: the device and the CPU, the task, the model, the
// cluster wiring (store, collectives, policy, working set) and this
// worker's plan.
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "trainer/plan/subchain_plan.h"
#include "trainer/platform/cpu_setup.h"
#include "trainer/runtime/depbloom_sizes.h"
#include "trainer/runtime/engine.h"
#include "util/proc.h"
#include "util/status_macros.h"

namespace mnemo::runtime {

absl::Status Engine::Setup() {
  ScopedTimer t(&p_.load_seconds);
  const TrainOptions& o = p_.o;
  p_.bf16 = o.optim.precision == Precision::kBf16;
  RETURN_IF_ERROR(SetUpDevice());
  {
    // On a GPU the CPU runs no bf16 products: no oneDNN cap or warnings.
    ASSIGN_OR_RETURN(platform::CpuSetup cpu,
                     platform::SetUpCpu(
                         p_.bf16 && p_.device.is_cpu(), o.compute.allow_amx,
                         [this](const std::string& l) { p_.progress.Log(l); }));
    p_.malloc = cpu.malloc;
    p_.onednn_isa_cap = cpu.onednn_isa_cap;
  }
  RETURN_IF_ERROR(ValidateTrainOptions(o));
  const bool depbloom =
      o.distributed != nullptr &&
      o.distributed->policy.policy == coordinator::PolicyKind::kDepBloom;
  p_.refine_chunks = o.policy.depbloom.refine_chunks > 0
                         ? o.policy.depbloom.refine_chunks
                         : (depbloom ? 4 : 1);
  // LibTorch's own default here is one thread: 0 means every CPU this
  // process may use (its affinity mask, so a pinned worker uses its share).
  at::set_num_threads(o.compute.threads > 0 ? o.compute.threads
                                            : UsableCpuCount());
  // In a cluster rank 0 evaluates, or every rank shares the evaluation
  // (eval/epoch_eval.h); otherwise the others need no graph of all events.
  const bool shares_eval = o.eval.shared && o.working_set.budget_bytes == 0 &&
                           o.eval.protocol != Protocol::kTgb;
  ASSIGN_OR_RETURN(
      p_.task, LoadTask(o,
                        o.distributed == nullptr || o.distributed->rank == 0 ||
                            shares_eval,
                        &p_.progress));
  SetUpDepBloomSizes();
  p_.eval_batch_size = EvalBatchSize(o);
  RETURN_IF_ERROR(SetUpModel());
  if (o.distributed != nullptr) {
    RETURN_IF_ERROR(SetUpCluster());
  } else if (o.working_set.budget_bytes > 0) {
    return absl::InvalidArgumentError(
        "--memory-cache-bytes bounds what a cluster worker holds, the rest "
        "living in the memory stores: run with --workers N (N >= 2), or "
        "mnemo trainer");
  } else {
    p_.policy = MakeSingleProcessPolicy();
  }
  RETURN_IF_ERROR(SetUpPlan());
  pass_ = std::make_unique<TrainPass>(&p_);
  eval_ = std::make_unique<EpochEvaluation>(&p_);
  checkpoints_ = std::make_unique<RunCheckpoints>(&p_);
  const Task& task = *p_.task;
  p_.progress.Log(absl::StrFormat(
      "data: %s (%s, %s): %d events, %d nodes%s, %d edge features; "
      "train %d, val %d (new-node %d), test %d (new-node %d); set up in "
      "%.0f MiB resident",
      task.log.name, task.data_path, data::FormatName(task.log.format),
      task.log.num_events(), task.log.num_nodes,
      task.log.bipartite ? ", bipartite" : "", task.log.edge_feature_dim,
      task.split.train.size(), task.split.val.size(),
      task.split.new_node_val.size(), task.split.test.size(),
      task.split.new_node_test.size(), CurrentRssBytes() / 1048576.0));
  return absl::OkStatus();
}

void Engine::SetUpDepBloomSizes() {
  TrainOptions& o = p_.o;
  DepBloomOptions& d = o.policy.depbloom;
  const DistributedContext* dist = o.distributed;
  const bool depbloom =
      dist != nullptr &&
      dist->policy.policy == coordinator::PolicyKind::kDepBloom;
  const bool derive = d.window_events <= 0 || d.derive_batch;
  if (!depbloom && !derive) return;
  const int64_t n = static_cast<int64_t>(p_.task->split.train.size());
  const int workers = dist != nullptr ? dist->world_size : 1;
  const DepBloomSizes s = DeriveDepBloomSizes(
      n, workers, d.window_events, d.derive_batch ? 0 : o.optim.batch_size);
  d.window_events = s.window_events;
  p_.derived_sizes = absl::StrCat(s.window_derived ? "window_events" : "",
                                  s.window_derived && d.derive_batch ? "," : "",
                                  d.derive_batch ? "batch_size" : "");
  if (d.derive_batch) {
    o.optim.batch_size = s.batch_size;
    if (o.optim.lr_scale_power > 0) {
      o.optim.lr_scale = std::pow(static_cast<double>(s.batch_size * workers) /
                                      static_cast<double>(kLrReferenceBatch),
                                  o.optim.lr_scale_power);
      o.optim.lr *= o.optim.lr_scale;
    }
  }
  // Every rank derives the same values from the same data; rank 0 says so.
  if (dist != nullptr && dist->rank != 0) return;
  p_.progress.Log(
      absl::StrCat(DescribeDepBloomSizes(s, n, workers),
                   d.derive_batch && o.optim.lr_scale_power > 0
                       ? absl::StrFormat("; lr %g (x %.3g, the global batch's)",
                                         o.optim.lr, o.optim.lr_scale)
                       : ""));
  if (!depbloom) return;
  for (const std::string& warning : DepBloomSizeWarnings(s, n, workers)) {
    p_.progress.Log(warning);
  }
}

absl::Status Engine::SetUpModel() {
  const TrainOptions& o = p_.o;
  model::ModelOptions mo = o.model;
  mo.edge_dim = p_.task->log.edge_feature_dim;
  mo.num_nodes = p_.task->log.num_nodes;
  const model::ModelSpec& spec = model::SpecOf(mo.kind);
  if (p_.refine_chunks > 1 && !spec.refines) {
    // Refinement (REFINE, COMB) is defined for the recurrent memory
    // updaters of TGN and JODIE.
    if (o.policy.depbloom.refine_chunks > 1) {
      p_.progress.Log(absl::StrFormat(
          "--refine-chunks %d: intra-batch refinement is defined for tgn "
          "and jodie, not %s; training without refinement",
          o.policy.depbloom.refine_chunks, spec.name));
    }
    p_.refine_chunks = 1;
  }
  mo.refine = p_.refine_chunks > 1;
  {
    // Seeding and initialization draw from torch's process-wide generator:
    // serialized so that engines running side by side in one process
    // (workers as threads in tests) each get the initialization their seed
    // gives.
    static std::mutex* init_mu = new std::mutex;
    std::lock_guard<std::mutex> init_lock(*init_mu);
    torch::manual_seed(o.optim.seed);
    p_.model = model::MakeModel(mo);
  }
  // Initialized on the CPU (the same parameters as a CPU run's), then moved.
  if (!p_.device.is_cpu()) p_.model->to(p_.device);
  p_.optimizer = std::make_unique<FusedAdam>(
      p_.model->parameters(), torch::optim::AdamOptions(o.optim.lr));
  p_.builder = std::make_unique<batch::BatchBuilder>(&p_.task->log,
                                                     p_.task->log.num_nodes);
  p_.builder->set_needs(p_.model->needs());
  p_.builder->set_device(p_.device);
  p_.memory.Init(p_.model->layout(), p_.task->log.num_nodes, p_.device);
  return absl::OkStatus();
}

absl::Status Engine::SetUpDevice() {
  const TrainOptions& o = p_.o;
  if (!o.compute.device.cuda()) return absl::OkStatus();
  // "cuda": one process per GPU, the worker's node-local rank's (LOCAL_RANK,
  // read by the trainer command), else its rank's; GPU 0 in one process.
  const DistributedContext* d = o.distributed;
  const int local_rank =
      d == nullptr ? 0 : (d->local_rank >= 0 ? d->local_rank : d->rank);
  const int count = platform::CudaDeviceCount();
  const std::string name = DeviceName(o.compute.device);
  if (count == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--device ", name, ": no CUDA GPU: ", platform::CudaUnavailableReason(),
        "; train with --device cpu"));
  }
  const int asked = o.compute.device.index;
  const int index = asked >= 0 ? asked : local_rank;
  if (index >= count) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "--device %s: %s GPU %d, but %d %s visible%s", name,
        asked >= 0 ? "asks for" : "rank's", index, count,
        count == 1 ? "is" : "are",
        asked >= 0
            ? ""
            : " (one process per GPU: NCCL cannot run two ranks on one GPU; "
              "use --workers <= the GPU count, or --gpus)"));
  }
  platform::SetCudaDevice(index);
  // fp32 products in TF32 on the GPU (tensor cores; fp32 sums).
  platform::SetCudaTf32(o.compute.tf32);
  p_.device = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(index));
  p_.clock = std::make_unique<platform::CudaPhaseClock>(index);
  p_.progress.Log(absl::StrFormat("device: cuda:%d (%s), fp32 products in %s",
                                  index, platform::CudaDeviceName(index),
                                  platform::CudaTf32() ? "TF32" : "full fp32"));
  return absl::OkStatus();
}

absl::Status Engine::SetUpCluster() {
  const DistributedContext* dist = p_.o.distributed;
  const memory::RecordLayout layout = p_.model->layout();
  const int64_t record_dim = layout.RecordFloats();
  if (dist->store != nullptr && dist->store->dim() != record_dim) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the memory store holds records of %d floats but this model needs "
        "%d (memory %d + mail %d + times %d): start the memstores with "
        "--dim %d",
        dist->store->dim(), record_dim, layout.memory_dim,
        layout.MailboxFloats(),
        record_dim - layout.memory_dim - layout.MailboxFloats(), record_dim));
  }
  // PipeTGL's workers pass the parameters down the pipeline instead of
  // all-reducing gradients (policies/pipetgl.cc).
  const bool pipetgl = dist->policy.policy == coordinator::PolicyKind::kPipeTgl;
  // DepBloom's sub-chains run by groups of workers (--pipeline-depth).
  const int depth = p_.o.policy.depbloom.pipeline_depth;
  const bool depbloom_pipelines =
      dist->policy.policy == coordinator::PolicyKind::kDepBloom && depth > 1;
  if (dist->policy.policy == coordinator::PolicyKind::kDepBloom &&
      (depth < 1 || dist->world_size % depth != 0)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--pipeline-depth %d does not divide the %d workers into groups: "
        "each sub-chain is run by a group of that many workers",
        depth, dist->world_size));
  }
  if ((pipetgl || depbloom_pipelines) && p_.o.working_set.budget_bytes > 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        pipetgl ? "--policy pipetgl" : "--pipeline-depth > 1",
        " does not run with --memory-cache-bytes: each worker of a pipeline "
        "holds every state the batches before it handed on; train without "
        "a budget, or with --policy vanilla"));
  }
  ASSIGN_OR_RETURN(
      p_.cluster,
      ClusterWorker::Connect(dist, p_.device.is_cuda(), p_.model->parameters(),
                             p_.o.gradients, &p_.comm.collectives,
                             /*all_reduce=*/!pipetgl,
                             /*pipeline=*/pipetgl || depbloom_pipelines));
  const int rank = p_.rank();
  const std::function<int(int64_t)> owner = p_.cluster->owner();
  p_.memory.Connect(
      dist->store, [owner, rank](int64_t u) { return owner(u) == rank; }, rank,
      &p_.comm.store, &p_.comm.working_set);
  PolicyEnv env;
  env.options = &p_.o;
  env.dist = dist;
  env.rank = rank;
  env.world = p_.world();
  env.log = &p_.task->log;
  env.train = &p_.task->split.train;
  env.train_graph = p_.task->train_graph.get();
  // DySAT reads its snapshots' neighbours by id, not their state.
  env.model_reads_neighbors =
      p_.model->needs().neighbors && p_.model->needs().snapshots == 0;
  env.train_pos = &p_.train_pos;
  env.negatives = &p_.epoch_negatives;
  env.exchange = p_.memory.exchange();
  env.comm = &p_.comm;
  env.progress = &p_.progress;
  env.owner = owner;
  env.pipeline = p_.cluster->pipeline();
  env.parameters = p_.model->parameters();
  env.neighbor_reads = p_.NeighborReads(p_.task->train_graph.get());
  ASSIGN_OR_RETURN(p_.policy,
                   MakeTrainingPolicy(dist->policy, p_.o.policy, env));
  RETURN_IF_ERROR(SetUpWorkingSet());
  p_.progress.Log(absl::StrFormat(
      "worker %d/%d: policy %s, record %d floats, store, %d-rank %s "
      "gradient group and gloo control group ready",
      rank, p_.world(), dist->policy.name, record_dim, p_.world(),
      p_.cluster->gradients()->backend_name()));
  return absl::OkStatus();
}

absl::Status Engine::SetUpWorkingSet() {
  if (p_.o.working_set.budget_bytes <= 0) return absl::OkStatus();
  if (p_.task->tgb) {
    // A ranking chunk reads up to every destination's state at once.
    return absl::InvalidArgumentError(
        "--protocol tgb does not run with --memory-cache-bytes: its ranking "
        "passes read the states of every candidate destination, which a "
        "bounded working set does not hold; evaluate with the default "
        "protocol, or without a budget");
  }
  RETURN_IF_ERROR(
      p_.memory.Bound(p_.o.working_set, p_.rank(),
                      [this](const std::string& l) { p_.progress.Log(l); }));
  return EpochEvaluation(&p_).CheckFitsWorkingSet();
}

absl::Status Engine::SetUpPlan() {
  const Task& task = *p_.task;
  p_.train_pos.assign(task.log.num_events(), -1);
  for (size_t i = 0; i < task.split.train.size(); ++i) {
    p_.train_pos[task.split.train[i]] = static_cast<int64_t>(i);
  }
  plan::PlanOptions po = p_.policy->PlanOptions();
  po.batch_size = p_.o.optim.batch_size;
  // Sub-chains: rank 0 partitions and every rank plans from its partition
  // (ranks that disagreed would lose or double events and leave their
  // collectives out of step; the partition itself is reproducible, see
  // MetisRandomScope in trainer/plan/subchain_plan.cc).
  std::vector<int32_t> chain;
  double partition_seconds = 0;  // rank 0's, which the summary reports
  if (p_.distributed() && po.kind == plan::PlanKind::kSubChains &&
      po.window_events >= 1) {
    if (p_.leader()) {
      plan::SubChainPartition partition =
          plan::PartitionSubChains(task.log, task.split.train, po);
      for (const plan::WindowStats& w : partition.stats) {
        partition_seconds += w.partition_seconds;
      }
      chain = std::move(partition.chain);
    }
    chain.resize(task.split.train.size());
    RETURN_IF_ERROR(p_.cluster->control()->Broadcast(&chain, 0));
    po.given_chain = &chain;
  }
  // A pipeline plans its group's chain (as one worker when the plan has
  // one), and deals this worker its part of it.
  const int plan_rank = p_.policy->PlanRank(p_.rank());
  const std::function<int(int64_t)> owner = p_.cluster && po.world_size > 1
                                                ? p_.cluster->owner()
                                                : [](int64_t) { return 0; };
  ASSIGN_OR_RETURN(
      plan::WorkerPlan group_chain,
      plan::LoadOrMakeWorkerPlan(
          task.log, task.split.train, owner, plan_rank, po,
          p_.distributed() ? p_.o.policy.plan_cache_dir : "", &p_.plan_stats));
  p_.plan = p_.policy->DealPlan(std::move(group_chain));
  if (plan_rank != p_.rank() || po.world_size != p_.world()) {
    // The statistics of this worker's part, not of the group's chain.
    plan::FillPlanStats(p_.plan, &p_.plan_stats);
  }
  // Planning from a given partition partitions nothing: the time is the
  // partition's own.
  if (po.given_chain != nullptr) {
    p_.plan_stats.partition_seconds = partition_seconds;
  }
  p_.policy->SetPlan(&p_.plan);
  PolicyCounters& c = p_.comm.policy;
  c.plan_seconds = p_.plan_stats.seconds;
  c.cross_ratio = p_.plan_stats.cross_ratio;
  c.imbalance = p_.plan_stats.mean_imbalance;
  c.partition_seconds = p_.plan_stats.partition_seconds;
  if (!p_.distributed()) return absl::OkStatus();
  const plan::PlanStats& s = p_.plan_stats;
  p_.progress.Log(absl::StrFormat(
      "plan (%s): %d batches, %d targets, %d auxiliary events, %d windows, "
      "refresh sets %d nodes in all (max %d); %.3f s%s",
      p_.policy->name(), s.batches, s.targets, s.auxiliaries, s.windows,
      s.refresh_total, s.refresh_max, s.seconds,
      s.from_cache ? absl::StrCat(", from ", s.cache_path) : ""));
  return absl::OkStatus();
}

}  // namespace mnemo::runtime
