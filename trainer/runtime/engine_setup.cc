// The engine's setup: options, the CPU, the task, the model, the cluster
// wiring (store, collectives, policy) and this worker's plan.
#include <algorithm>

#include "trainer/runtime/engine.h"

namespace mnemo::runtime {

absl::Status Engine::Setup() {
  ScopedTimer t(&timers_.load);
  model_kind_ = o_.model;
  bf16_ = o_.precision == Precision::kBf16;
  RETURN_IF_ERROR(SetUpDevice());
  {
    // On a GPU the CPU runs no bf16 products: no oneDNN cap or warnings.
    ASSIGN_OR_RETURN(CpuSetup cpu, SetUpCpu(bf16_ && device_.is_cpu(),
                                            o_.allow_amx, &progress_));
    malloc_ = cpu.malloc;
    onednn_isa_cap_ = cpu.onednn_isa_cap;
  }
  RETURN_IF_ERROR(ValidateTrainOptions(o_));
  if (o_.refine_chunks < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--refine-chunks must be >= 0 (0: the policy's default), got ",
        o_.refine_chunks));
  }
  refine_chunks_ = o_.refine_chunks > 0
                       ? o_.refine_chunks
                       : (o_.distributed != nullptr &&
                                  o_.distributed->policy.policy ==
                                      coordinator::TrainingPolicy::kDepBloom
                              ? 4
                              : 1);
  eval_batch_size_ =
      o_.eval_batch_size > 0 ? o_.eval_batch_size
      : o_.protocol == Protocol::kTgnReference || o_.protocol == Protocol::kTgb
          ? 200
          : o_.batch_size;
  // LibTorch's own default here is one thread: 0 means every CPU this
  // process may use (its affinity mask, so a pinned worker uses its share).
  at::set_num_threads(o_.threads > 0 ? o_.threads : UsableCpuCount());

  // In a cluster rank 0 evaluates; the others need no graph of all events.
  ASSIGN_OR_RETURN(
      task_,
      LoadTask(o_, o_.distributed == nullptr || o_.distributed->rank == 0,
               &progress_));
  // Seeding and initialization draw from torch's process-wide generator:
  // serialize them so engines running side by side in one process (workers
  // as threads in tests) each get the initialization their seed gives.
  static std::mutex* init_mu = new std::mutex;
  std::unique_lock<std::mutex> init_lock(*init_mu);
  torch::manual_seed(o_.seed);
  model::ModelOptions mo;
  mo.kind = model_kind_;
  mo.memory_dim = o_.memory_dim;
  mo.time_dim = o_.time_dim;
  mo.embedding_dim = o_.embedding_dim;
  mo.edge_dim = task_->log.edge_feature_dim;
  mo.heads = o_.heads;
  mo.dropout = o_.dropout;
  mo.layers = o_.layers;
  mo.mailbox = o_.mailbox;
  mo.num_nodes = task_->log.num_nodes;
  mo.snapshots = o_.snapshots;
  mo.snapshot_span = o_.snapshot_span;
  const bool refines = model_kind_ == model::ModelKind::kTgn ||
                       model_kind_ == model::ModelKind::kJodie;
  if (refine_chunks_ > 1 && !refines) {
    // Refinement (REFINE, COMB) is defined for the recurrent memory
    // updaters of TGN and JODIE.
    if (o_.refine_chunks > 1) {
      progress_.Log(absl::StrFormat(
          "--refine-chunks %d: intra-batch refinement is defined for tgn "
          "and jodie, not %s; training without refinement",
          o_.refine_chunks, model::ModelName(model_kind_)));
    }
    refine_chunks_ = 1;
  }
  mo.refine = refine_chunks_ > 1;
  model_ = model::MakeModel(mo);
  init_lock.unlock();
  // Initialized on the CPU (the same parameters as a CPU run's), then moved.
  if (!device_.is_cpu()) model_->to(device_);
  optimizer_ = std::make_unique<FusedAdam>(model_->parameters(),
                                           torch::optim::AdamOptions(o_.lr));
  builder_ = std::make_unique<BatchBuilder>(&task_->log, task_->log.num_nodes);
  builder_->set_needs(model_->needs());
  builder_->set_device(device_);
  // With a bounded working set the memory holds rows for its capacity only
  // (SetUpWorkingSet): a row for every node, even freed again, would stay
  // in the process's heap.
  state_.Reset(model_->layout(),
               o_.memory_cache_bytes > 0 ? 0 : task_->log.num_nodes, device_);

  if (o_.distributed != nullptr) {
    dist_ = o_.distributed;
    rank_ = dist_->rank;
    world_ = dist_->world_size;
    if (dist_->store == nullptr || dist_->cluster == nullptr) {
      return absl::InvalidArgumentError(
          "a distributed run needs a node-state store and a coordinator");
    }
    const memory::RecordLayout layout = model_->layout();
    const int64_t record_dim = layout.RecordFloats();
    if (dist_->store->dim() != record_dim) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "the memory store holds records of %d floats but this model needs "
          "%d (memory %d + mail %d + times %d): start the memstores with "
          "--dim %d",
          dist_->store->dim(), record_dim, layout.memory_dim,
          layout.MailboxFloats(),
          record_dim - layout.memory_dim - layout.MailboxFloats(), record_dim));
    }
    owner_ = dist_->owner ? dist_->owner
                          : [w = world_](int64_t u) { return HashOwner(u, w); };
    sync_ = std::make_unique<StateSync>(
        dist_->store, &state_, [this](int64_t u) { return owner_(u) == rank_; },
        rank_, &comm_);
    CollectiveOptions co;
    co.rendezvous = dist_->rendezvous;
    co.master_addr = dist_->master_addr;
    co.master_port = dist_->master_port;
    co.rank = rank_;
    co.world_size = world_;
    co.bind_host = dist_->bind_host;
    co.timeout = dist_->timeout;
    // Control values (host doubles and ints) go over gloo, apart from the
    // gradients, which go over NCCL on a GPU.
    CollectiveOptions control = co;
    control.prefix = "mnemo-control";
    ASSIGN_OR_RETURN(control_group_, Collectives::Connect(control));
    control_ = ControlOver(control_group_.get());
    if (device_.is_cuda()) co.backend = CollectiveOptions::Backend::kNccl;
    ASSIGN_OR_RETURN(collectives_, Collectives::Connect(co));
    // Identical initial parameters everywhere (the seed already makes them
    // equal; the broadcast makes it a guarantee).
    torch::NoGradGuard guard;
    RETURN_IF_ERROR(collectives_->Broadcast(model_->parameters(), 0));
    PolicyEnv env;
    env.options = &o_;
    env.dist = dist_;
    env.rank = rank_;
    env.world = world_;
    env.log = &task_->log;
    env.train = &task_->split.train;
    env.train_graph = task_->train_graph.get();
    // DySAT reads its snapshots' neighbours by id, not their state.
    env.model_reads_neighbors =
        model_->needs().neighbors && model_->needs().snapshots == 0;
    env.train_pos = &train_pos_;
    env.negatives = &epoch_negatives_;
    env.state = &state_;
    env.sync = sync_.get();
    env.comm = &comm_;
    env.progress = &progress_;
    env.owner = owner_;
    PolicyOptions po;
    po.sync_every = o_.sync_every;
    po.tau_load = o_.tau_load;
    po.ema_alpha = o_.ema_alpha;
    po.ema_beta = o_.ema_beta;
    po.push_advanced = o_.push_scope == PushScope::kAdvanced;
    po.refresh_reads = o_.sync_scope == SyncScope::kReads;
    po.window_events = o_.window_events;
    po.partitioner = o_.partitioner;
    po.chain_assignment = o_.chain_assignment;
    po.piece_events = o_.piece_events;
    po.imbalance = o_.imbalance;
    po.urgent_batches = o_.urgent_batches;
    po.critical_path = o_.critical_path;
    ASSIGN_OR_RETURN(policy_, MakeTrainingPolicy(dist_->policy, po, env));
    RETURN_IF_ERROR(SetUpWorkingSet());
    progress_.Log(absl::StrFormat(
        "worker %d/%d: policy %s, record %d floats, store, %d-rank %s "
        "gradient group and gloo control group ready",
        rank_, world_, dist_->policy.name, record_dim, world_,
        collectives_->backend_name()));
  } else {
    if (o_.memory_cache_bytes > 0) {
      return absl::InvalidArgumentError(
          "--memory-cache-bytes bounds what a cluster worker holds, the rest "
          "living in the memory stores: run with --workers N (N >= 2), or "
          "mnemo trainer");
    }
    owner_ = [](int64_t) { return 0; };
    policy_ = MakeSingleProcessPolicy();
  }
  // This worker's batches (trainer/plan/), cached on disk.
  {
    train_pos_.assign(task_->log.num_events(), -1);
    for (size_t i = 0; i < task_->split.train.size(); ++i) {
      train_pos_[task_->split.train[i]] = static_cast<int64_t>(i);
    }
    plan::PlanOptions po = policy_->PlanOptions();
    po.batch_size = o_.batch_size;
    // Sub-chains: rank 0 partitions and every rank plans from its partition
    // (ranks that disagreed would lose or double events and leave their
    // collectives out of step; the partition itself is reproducible, see
    // MetisRandomScope in trainer/plan/subchain_plan.cc).
    std::vector<int32_t> chain;
    double partition_seconds = 0;  // rank 0's, which the summary reports
    if (distributed() && po.kind == plan::PlanKind::kSubChains &&
        po.window_events >= 1) {
      if (rank_ == 0) {
        plan::SubChainPartition partition =
            plan::PartitionSubChains(task_->log, task_->split.train, po);
        for (const plan::WindowStats& w : partition.stats) {
          partition_seconds += w.partition_seconds;
        }
        chain = std::move(partition.chain);
      }
      chain.resize(task_->split.train.size());
      RETURN_IF_ERROR(control_->Broadcast(&chain, 0));
      po.given_chain = &chain;
    }
    ASSIGN_OR_RETURN(plan_,
                     plan::LoadOrMakeWorkerPlan(
                         task_->log, task_->split.train, owner_, rank_, po,
                         distributed() ? o_.plan_cache_dir : "", &plan_stats_));
    // Planning from a given partition partitions nothing: the time is the
    // partition's own.
    if (po.given_chain != nullptr) {
      plan_stats_.partition_seconds = partition_seconds;
    }
    policy_->SetPlan(&plan_);
    comm_.plan_seconds = plan_stats_.seconds;
    if (distributed()) {
      progress_.Log(absl::StrFormat(
          "plan (%s): %d batches, %d targets, %d auxiliary events, %d "
          "windows, refresh sets %d nodes in all (max %d); %.3f s%s",
          policy_->name(), plan_stats_.batches, plan_stats_.targets,
          plan_stats_.auxiliaries, plan_stats_.windows,
          plan_stats_.refresh_total, plan_stats_.refresh_max,
          plan_stats_.seconds,
          plan_stats_.from_cache
              ? absl::StrCat(", from ", plan_stats_.cache_path)
              : ""));
    }
  }

  progress_.Log(absl::StrFormat(
      "data: %s (%s, %s): %d events, %d nodes%s, %d edge features; "
      "train %d, val %d (new-node %d), test %d (new-node %d); set up in "
      "%.0f MiB resident",
      task_->log.name, task_->data_path, data::FormatName(task_->log.format),
      task_->log.num_events(), task_->log.num_nodes,
      task_->log.bipartite ? ", bipartite" : "", task_->log.edge_feature_dim,
      task_->split.train.size(), task_->split.val.size(),
      task_->split.new_node_val.size(), task_->split.test.size(),
      task_->split.new_node_test.size(), CurrentRssBytes() / 1048576.0));
  return absl::OkStatus();
}

absl::Status Engine::SetUpDevice() {
  if (!o_.device.cuda()) return absl::OkStatus();
  // "cuda": one process per GPU, the worker's node-local rank's (LOCAL_RANK,
  // read by the trainer command), else its rank's; GPU 0 in one process.
  const DistributedContext* d = o_.distributed;
  const int local_rank =
      d == nullptr ? 0 : (d->local_rank >= 0 ? d->local_rank : d->rank);
  const int count = CudaDeviceCount();
  if (count == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("--device ", DeviceName(o_.device), ": no CUDA GPU: ",
                     CudaUnavailableReason(), "; train with --device cpu"));
  }
  const int index = o_.device.index >= 0 ? o_.device.index : local_rank;
  if (index >= count) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "--device %s: %s GPU %d, but %d %s visible%s", DeviceName(o_.device),
        o_.device.index >= 0 ? "asks for" : "rank's", index, count,
        count == 1 ? "is" : "are",
        o_.device.index >= 0
            ? ""
            : " (one process per GPU: NCCL cannot run two ranks on one GPU; "
              "use --workers <= the GPU count, or --gpus)"));
  }
  SetCudaDevice(index);
  device_ = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(index));
  clock_ = std::make_unique<CudaPhaseClock>(index);
  progress_.Log(
      absl::StrFormat("device: cuda:%d (%s)", index, CudaDeviceName(index)));
  return absl::OkStatus();
}

Engine::SpillDir::~SpillDir() {
  if (!remove || path.empty()) return;
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
}

absl::Status Engine::SetUpWorkingSet() {
  if (o_.memory_cache_bytes <= 0) return absl::OkStatus();
  if (task_->tgb) {
    // A ranking chunk reads up to every destination's state at once.
    return absl::InvalidArgumentError(
        "--protocol tgb does not run with --memory-cache-bytes: its ranking "
        "passes read the states of every candidate destination, which a "
        "bounded working set does not hold; evaluate with the default "
        "protocol, or without a budget");
  }
  const memory::RecordLayout layout = model_->layout();
  const int64_t num_nodes = task_->log.num_nodes;
  const int64_t per_state = memory::HeldStateBytes(layout);
  cache_capacity_ = std::min(o_.memory_cache_bytes / per_state, num_nodes);
  if (cache_capacity_ < 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--memory-cache-bytes %d holds no node state: one takes %d bytes "
        "(memory %d, mails %d floats, times)",
        o_.memory_cache_bytes, per_state, layout.memory_dim,
        layout.MailboxFloats()));
  }
  RETURN_IF_ERROR(CheckEvalFitsWorkingSet());
  state_.ResetCache(layout, num_nodes, cache_capacity_, device_);
  if (!o_.memory_spill_dir.empty()) {
    spill_dir_.path = (std::filesystem::path(o_.memory_spill_dir) /
                       absl::StrCat("rank-", rank_))
                          .string();
    // Scratch space: what an earlier run spilled there means nothing now.
    std::error_code ec;
    std::filesystem::remove_all(spill_dir_.path, ec);
    std::filesystem::create_directories(spill_dir_.path, ec);
    if (ec) {
      return absl::InvalidArgumentError(
          absl::StrCat("--memory-spill-dir: cannot create ", spill_dir_.path,
                       ": ", ec.message()));
    }
  } else {
    std::string tmpl =
        (std::filesystem::temp_directory_path() / "mnemo-spill-XXXXXX")
            .string();
    if (mkdtemp(tmpl.data()) == nullptr) {
      return absl::InternalError(
          absl::StrCat("--memory-cache-bytes: cannot create a spill "
                       "directory under ",
                       std::filesystem::temp_directory_path().string(), ": ",
                       std::strerror(errno)));
    }
    spill_dir_.path = tmpl;
    spill_dir_.remove = true;
  }
  memstore::NodeStateStoreOptions so;
  so.dim = static_cast<int>(layout.RecordFloats());
  so.data_dir = spill_dir_.path;
  // Spilled states go to RocksDB: a small hot tier and block cache, so
  // that the worker's memory stays near its budget.
  so.hot_capacity_bytes = std::max<int64_t>(1 << 20, o_.memory_cache_bytes / 8);
  so.block_cache_bytes = std::max<int64_t>(1 << 20, o_.memory_cache_bytes / 8);
  // A restored state goes to the working set, not back into the spill
  // store's hot tier; its memtables stay small for the same reason.
  so.promotion = memstore::PromotionPolicy::kNever;
  so.write_buffer_bytes =
      std::clamp<int64_t>(o_.memory_cache_bytes / 8, 4ll << 20, 64ll << 20);
  so.write_policy = memstore::WritePolicy::kWriteBack;
  so.cold_read_threads = 0;
  // Restores read with pread: mapped files would count the spill store's
  // pages in the worker's resident memory.
  so.mmap_reads = false;
  auto store = memstore::Open(so);
  if (!store.ok()) {
    return absl::Status(store.status().code(),
                        absl::StrCat("--memory-spill-dir ", spill_dir_.path,
                                     ": ", store.status().message()));
  }
  spill_store_ = std::move(*store);
  cache_ = std::make_unique<plan::WorkingSetCache>(num_nodes, cache_capacity_,
                                                   o_.memory_eviction);
  comm_.cache_capacity_states = cache_capacity_;
  progress_.Log(absl::StrFormat(
      "worker %d: working set of %d node states (%s eviction, %.1f MiB of "
      "%d nodes' %.1f MiB), spilling to %s",
      rank_, cache_capacity_, plan::EvictionName(o_.memory_eviction),
      cache_capacity_ * per_state / 1048576.0, num_nodes,
      num_nodes * per_state / 1048576.0, spill_dir_.path));
  return absl::OkStatus();
}

}  // namespace mnemo::runtime
