// The training engine: one process, or one worker of a cluster (`mnemo
// train`, `mnemo trainer`). One loop runs every policy through the
// TrainingPolicy seam (policies/policy.h) over this worker's plan
// (trainer/plan/).
#include "trainer/runtime/engine.h"

#include <limits>

namespace mnemo::runtime {

Engine::PassStats Engine::TrainPass(int epoch) {
  model_->train();
  if (cache_) {
    state_.ResetCache(model_->layout(), task_->log.num_nodes, cache_capacity_,
                      device_);
  } else {
    state_.Reset(model_->layout(), task_->log.num_nodes, device_);
  }
  torch::manual_seed(EpochSeed(o_.seed, epoch, 1) + rank_);
  // Every rank draws the same negatives for the whole epoch (the same
  // sequence per-batch draws would give) and uses its targets' ones.
  {
    data::NegativeSampler negs(task_->train_neg_candidates,
                               EpochSeed(o_.seed, epoch, 2));
    epoch_negatives_.resize(task_->split.train.size());
    negs.Sample(epoch_negatives_.size(), epoch_negatives_.data());
  }
  std::optional<data::NeighborSampler> sampler = MakeSampler(
      task_->train_graph.get(), EpochSeed(o_.seed, epoch, 3) + rank_);
  if (sync_) sync_->ClearTrained();
  if (cache_) {
    // Belady needs what each batch will read: the plan's events, this
    // epoch's negatives and, for a model that reads its targets' recent
    // neighbours, theirs.
    plan::ReadPredictor predicted;
    if (o_.memory_eviction == plan::Eviction::kBelady) {
      predicted = plan::PlanReads(
          plan_, task_->log,
          [this](int64_t e) { return epoch_negatives_[train_pos_[e]]; },
          NeighborReads(task_->train_graph.get()));
    }
    sync_->SetWorkingSet(cache_.get(), spill_store_.get(),
                         policy_->PullsEveryRead());
    sync_->BeginEpoch(std::move(predicted));
  }
  policy_->BeginEpoch(epoch);
  PassStats stats;
  const int64_t total = task_->split.train.size();
  progress_.Start(
      distributed()
          ? absl::StrFormat("epoch %d/%d [rank %d]", epoch, o_.epochs, rank_)
          : absl::StrFormat("epoch %d/%d", epoch, o_.epochs),
      total);
  const auto params = model_->parameters();
  const int64_t num_batches = plan_.num_batches();
  data::NeighborSampler* const batch_sampler = sampler ? &*sampler : nullptr;
  if (!o_.profile_path.empty() && !profiled_) {
    // Warm-up batches (allocations, first-touch) stay out of the profile.
    const int64_t count = std::max<int64_t>(1, o_.profile_batches);
    const int64_t first = std::clamp<int64_t>(num_batches - count, 0, 10);
    profile_ = std::make_unique<OpProfile>(o_.profile_path, first, count);
  }
  const Lookahead lookahead = ChooseLookahead();
  BatchSlot slots[2];
  for (BatchSlot& s : slots) {
    s.b.epoch = epoch;
    s.b.num_batches = num_batches;
    s.b.versions = Versions(epoch);
  }
  CudaPhaseClock* const clock = clock_.get();
  if (clock) clock->Discard();
  for (int64_t r = 0; r < num_batches && failure_.ok(); ++r, ++global_batch_) {
    const double batch_start = MonotonicSeconds();
    BatchSlot& s = slots[r % 2];
    // This worker's own compute, waits excluded (with what was spent on
    // the batch while the one before computed).
    double compute = s.ahead_seconds;
    s.ahead_seconds = 0;
    const Timers timers_before = timers_;
    double optimizer_seconds = 0;
    if (profile_) profile_->BeginBatch(r);
    DeviceSyncCheck sync_check(o_.check_device_syncs && device_.is_cuda() &&
                               !distributed());
    if (sync_) sync_->set_position(r);
    s.b.global_batch = global_batch_;
    if (s.prepared != r) {
      if (absl::Status st = PrepareBatch(r, batch_sampler, &s, &compute);
          !st.ok()) {
        failure_ = st;
        break;
      }
    }
    if (!s.finished) {
      if (absl::Status st = FinishBatch(&s, &compute); !st.ok()) {
        failure_ = st;
        break;
      }
    }
    s.prepared = -1;
    s.finished = false;
    const BatchContext& b = s.b;
    const int64_t n = b.global_events;
    const int64_t mine = s.targets.size();
    // The loss and the gradient norm stay on the device until the batch's
    // one wait for it, after every kernel of the step is queued and the
    // next batch is prepared.
    torch::Tensor loss;
    torch::Tensor grad_norm_on_device;
    double loss_value = 0, grad_norm = 0;
    ForgetGrads(params);
    if (mine > 0) {
      model::ModelOutput out;
      {
        PhaseTimer t(clock, {&timers_.forward, &compute});
        AutocastScope autocast(bf16_, device_.type());
        out = model_->Forward(state_, s.batch);
        // DepTGL Eq. 12-13: the mean loss over this worker's targets.
        loss = model::Loss(out);
      }
      {
        PhaseTimer t(clock, {&timers_.backward, &compute});
        // Scaled so that the mean of the ranks' gradients is the gradient
        // of the global batch's mean loss (1 in one process).
        (loss * (static_cast<double>(mine) * world_ / n)).backward();
      }
      {
        PhaseTimer t(clock, {&timers_.memory, &compute});
        state_.Apply(s.update, out.memory, out.rows);
      }
    } else if (s.update.rows.numel() > 0) {
      // Nothing to predict, but replayed events still update memory.
      torch::NoGradGuard guard;
      PhaseTimer t(clock, {&timers_.memory, &compute});
      auto out = model_->Forward(state_, s.batch);
      state_.Apply(s.update, out.memory, out.rows);
    }
    if (sync_) {
      sync_->MarkTrained(b.events, b.target);
      sync_->MarkChanged(s.update.node_ids);
    }
    DefineZeroGrads(params);
    if (distributed()) {
      const double t0 = MonotonicSeconds();
      std::vector<torch::Tensor> grads;
      for (const auto& p : params) grads.push_back(p.grad());
      absl::Status st = collectives_->AllReduceMean(grads);
      comm_.allreduce_seconds += MonotonicSeconds() - t0;
      if (!st.ok()) {
        failure_ = st;
        break;
      }
    }
    // Every worker has read its states for this batch (it reached the
    // all-reduce; on a GPU, work queued from here on follows it): a policy
    // may start pushing the batch's states while the step runs.
    if (absl::Status st = policy_->AfterAllReduce(b, s.update.node_ids);
        !st.ok()) {
      failure_ = st;
      break;
    }
    {
      PhaseTimer t(clock, {&timers_.backward, &compute, &optimizer_seconds});
      if (device_.is_cuda()) {
        grad_norm_on_device = GradNormOnDevice(params);
      } else {
        grad_norm = GradNorm(params);
      }
      // A non-finite step is caught below, before anything reads the
      // parameters: the run stops at this batch either way.
      optimizer_->step();
    }
    std::function<torch::Tensor()> read_scalars;
    if (device_.is_cuda()) {
      torch::Tensor l = loss.defined()
                            ? loss.detach().to(torch::kDouble).reshape({1})
                            : torch::zeros({1}, grad_norm_on_device.options());
      read_scalars =
          ReadToHostLater(torch::cat({l, grad_norm_on_device.reshape({1})}));
    } else if (loss.defined()) {
      loss_value = loss.item<double>();
    }
    // The next batch, prepared while the device runs this one's step.
    if (lookahead != Lookahead::kNone && r + 1 < num_batches) {
      BatchSlot& next = slots[(r + 1) % 2];
      next.b.global_batch = global_batch_ + 1;
      absl::Status st =
          PrepareBatch(r + 1, batch_sampler, &next, &next.ahead_seconds);
      if (st.ok() && lookahead == Lookahead::kFinish) {
        st = FinishBatch(&next, &next.ahead_seconds);
      }
      if (!st.ok()) {
        failure_ = st;
        break;
      }
    }
    sync_check.Release();
    if (read_scalars) {
      const torch::Tensor h = read_scalars();  // the batch's one wait
      loss_value = h[0].item<double>();
      grad_norm = h[1].item<double>();
      clock->Collect();
    }
    // The all-reduced gradient is the same everywhere, so every rank stops
    // at the same batch (a rank that stopped alone would leave the others
    // waiting in the next collective); one process names its loss first.
    if (!std::isfinite(loss_value) && !distributed()) {
      failure_ = NonFinite("training loss", loss_value, epoch, r);
      break;
    }
    if (!std::isfinite(grad_norm) || !std::isfinite(loss_value)) {
      failure_ = std::isfinite(grad_norm)
                     ? NonFinite("training loss", loss_value, epoch, r)
                     : NonFinite("gradient norm", grad_norm, epoch, r);
      break;
    }
    if (o_.check_parameters && distributed()) {
      if (absl::Status st = CheckParameters(); !st.ok()) {
        failure_ = st;
        break;
      }
    }
    if (profile_) {
      profile_->EndBatch(
          r, timers_.forward - timers_before.forward,
          timers_.backward - timers_before.backward - optimizer_seconds,
          optimizer_seconds);
    }
    BatchOutcome outcome;
    outcome.grad_norm = grad_norm;
    outcome.loss = loss_value;
    outcome.targets = mine;
    outcome.auxiliaries = static_cast<int64_t>(b.events.size()) - mine;
    outcome.compute_seconds = compute;
    outcome.batch_seconds = MonotonicSeconds() - batch_start;
    outcome.advanced = &s.update.node_ids;
    if (absl::Status st = policy_->AfterBatch(b, outcome); !st.ok()) {
      failure_ = st;
      break;
    }
    comm_.target_events += mine;
    comm_.replayed_events += outcome.auxiliaries;
    stats.loss_sum += loss_value;
    stats.global_loss_sum += loss_value * static_cast<double>(mine) / n;
    stats.grad_norm_sum += grad_norm;
    ++stats.batches;
    progress_.Advance(n, stats.loss_sum / stats.batches);
    if (cb_.batch) {
      TrainCallbacks::Batch cb;
      cb.epoch = epoch;
      cb.target_events = mine;
      cb.loss = loss_value;
      cb.grad_norm = grad_norm;
      cb.seconds = MonotonicSeconds() - batch_start;
      cb.states_pulled = comm_.states_pulled;
      cb.states_pushed = comm_.states_pushed;
      cb.bytes_pulled = comm_.bytes_pulled;
      cb.bytes_pushed = comm_.bytes_pushed;
      cb.cache_hits = comm_.cache_hits;
      cb.cache_misses = comm_.cache_misses;
      cb.cache_evictions = comm_.cache_evictions;
      cb.cache_spills = comm_.cache_spills;
      cb.cache_restores = comm_.cache_restores;
      cb.cache_spill_bytes = comm_.cache_spill_bytes;
      cb.cache_restore_bytes = comm_.cache_restore_bytes;
      cb_.batch(cb);
    }
  }
  if (profile_) {
    profiled_ = true;
    if (absl::Status s = profile_->Finish(); !s.ok()) {
      if (failure_.ok()) failure_ = s;
    } else {
      progress_.Log(
          absl::StrCat("wrote the operator profile to ", o_.profile_path));
    }
    profile_.reset();
  }
  return stats;
}

Engine::Lookahead Engine::ChooseLookahead() const {
  if (!o_.prepare_ahead || !policy_->BeforeBatchIsLocal()) {
    return Lookahead::kNone;
  }
  // A worker's batch reads states the policy pulls and a bounded working
  // set admits before its tensors are built: only after the batch before
  // has pushed its own.
  return distributed() || cache_ ? Lookahead::kPrepare : Lookahead::kFinish;
}

absl::Status Engine::PrepareBatch(int64_t r, data::NeighborSampler* sampler,
                                  BatchSlot* s, double* compute) {
  BatchContext& b = s->b;
  b.epoch_batch = r;
  b.global_events = plan_.step_events(r);  // targets of all workers
  b.view = plan_.batch(r);
  b.events.assign(b.view.events.begin(), b.view.events.end());
  b.target.assign(b.view.target.begin(), b.view.target.end());
  RETURN_IF_ERROR(policy_->BeforeBatch(&b));
  ScopedTimer t(&timers_.prepare);
  ScopedTimer c(compute);
  s->targets.clear();
  s->negatives.clear();
  for (size_t i = 0; i < b.events.size(); ++i) {
    if (!b.target[i]) continue;
    s->targets.push_back(b.events[i]);
    s->negatives.push_back(epoch_negatives_[train_pos_[b.events[i]]]);
  }
  const bool replay = s->targets.size() != b.events.size();
  builder_->Prepare(s->targets.data(), s->negatives.data(), s->targets.size(),
                    replay ? b.events.data() : nullptr,
                    replay ? b.events.size() : 0, sampler, refine_chunks_);
  s->prepared = r;
  return absl::OkStatus();
}

absl::Status Engine::FinishBatch(BatchSlot* s, double* compute) {
  // Every state the batch reads or writes (with APAN's mails to
  // neighbours, more than the nodes it reads).
  const std::vector<int64_t> state_nodes = builder_->StateNodes();
  RETURN_IF_ERROR(policy_->BeforeForward(s->b, state_nodes));
  if (cache_) {
    // A bounded working set: every state the batch reads or writes held.
    RETURN_IF_ERROR(sync_->Acquire(state_nodes, s->b.versions));
  }
  ScopedTimer t(&timers_.prepare);
  ScopedTimer c(compute);
  // On a GPU the tensors go over on the copy stream; the compute stream
  // waits for them, the host does not.
  builder_->Finish(state_, TimeGaps(), &s->batch, &s->update);
  s->finished = true;
  return absl::OkStatus();
}

absl::Status Engine::CheckParameters() {
  // Identical parameters everywhere after every step: the mean of the
  // ranks' checksums equals ours only if all are equal (to rounding).
  const double mine_sum = model::ParameterChecksum(*model_);
  std::vector<double> t = {mine_sum, mine_sum * mine_sum};
  RETURN_IF_ERROR(control_->Sum(&t));
  const double mean = t[0] / world_;
  const double var = t[1] / world_ - mean * mean;
  const double scale = std::max(1.0, std::abs(mean));
  if (std::abs(mean - mine_sum) > 1e-9 * scale || var > 1e-12 * scale * scale) {
    return absl::InternalError(absl::StrFormat(
        "parameters differ across workers after batch %d (rank %d "
        "checksum %.17g, mean over ranks %.17g)",
        global_batch_, rank_, mine_sum, mean));
  }
  return absl::OkStatus();
}

absl::Status Engine::FinalSync(int epoch) {
  const StateVersions versions = Versions(epoch);
  sync_->set_position(plan_.num_batches());
  RETURN_IF_ERROR(policy_->EndEpoch(versions));
  ++comm_.sync_count;
  {
    const double t0 = MonotonicSeconds();
    absl::Status s = dist_->cluster->Barrier(absl::StrCat("synced-", epoch));
    comm_.barrier_seconds += MonotonicSeconds() - t0;
    RETURN_IF_ERROR(s);
  }
  return absl::OkStatus();
}

absl::Status Engine::NonFinite(const std::string& what, double value, int epoch,
                               int64_t batch) const {
  std::string checkpoint = "no checkpoint was written";
  if (!o_.out_dir.empty() && epoch > 1) {
    checkpoint = absl::StrFormat(
        "the last good checkpoint is %s",
        distributed() ? ClusterCheckpointDir(o_.out_dir, epoch - 1)
                      : SingleCheckpointPath(o_.out_dir, epoch - 1));
  }
  return absl::InternalError(absl::StrFormat(
      "epoch %d, batch %d (events %d-%d of the training split): the %s is "
      "not finite (%g): training has diverged; lower --lr (now %g) or check "
      "the data for "
      "extreme values; %s",
      epoch, batch, batch * o_.batch_size, (batch + 1) * o_.batch_size - 1,
      what, value, o_.lr, checkpoint));
}

absl::StatusOr<TrainResult> Engine::Run() {
  int start_epoch = 1;
  if (!o_.resume_dir.empty() && distributed()) {
    absl::StatusOr<int> done = ResumeCluster();
    if (!done.ok()) return Fail(done.status());
    start_epoch = *done + 1;
  } else if (!o_.resume_dir.empty()) {
    ASSIGN_OR_RETURN(
        LoadedCheckpoint loaded,
        LoadCheckpoint(o_.resume_dir, *model_, *optimizer_,
                       task_->log.num_nodes, model_->layout(), &record_));
    RETURN_IF_ERROR(CheckResumed(loaded));
    run_id_ = loaded.meta.run_id;
    progress_.Log(absl::StrFormat("resumed from %s (epoch %d done)",
                                  loaded.path, loaded.epoch));
    start_epoch = loaded.epoch + 1;
  }
  if (run_id_.empty() && leader()) run_id_ = NewRunId();
  if (distributed()) {
    if (absl::Status s = ShareRunId(); !s.ok()) return Fail(s);
  }
  bool stop =
      o_.patience > 0 && record_.rounds_without_improvement >= o_.patience;
  for (int epoch = start_epoch; epoch <= o_.epochs && !stop; ++epoch) {
    const double t0 = MonotonicSeconds();
    PassStats pass = TrainPass(epoch);
    if (!failure_.ok()) return Fail(failure_);
    EpochResult r;
    r.epoch = epoch;
    r.train_loss = pass.batches ? pass.loss_sum / pass.batches : 0;
    comm_.train_loss = r.train_loss;
    if (distributed()) {
      // The global batches' mean loss, as one process would report it (the
      // ranks leave the pass together: its last step was a collective).
      std::vector<double> t = {pass.global_loss_sum};
      absl::Status s = control_->Sum(&t);
      if (s.ok()) s = FinalSync(epoch);
      if (!s.ok()) return Fail(s);
      r.train_loss = pass.batches ? t[0] / pass.batches : 0;
    }
    r.seconds = MonotonicSeconds() - t0;
    r.grad_norm_mean = pass.batches ? pass.grad_norm_sum / pass.batches : 0;
    r.steps = pass.batches;
    r.train_events = task_->split.train.size();
    r.train_events_per_second = r.train_events / r.seconds;
    comm_.train_seconds += r.seconds;
    const double e0 = MonotonicSeconds();
    if (absl::Status s = EvaluateEpoch(&r); !s.ok()) return Fail(s);
    r.eval_seconds = MonotonicSeconds() - e0;
    record_.epochs.push_back(r);
    if (cb_.epoch) cb_.epoch(r);
    const double score = Score(r);
    if (Improves(score)) {
      record_.best_score = score;
      record_.best_epoch = epoch;
      record_.rounds_without_improvement = 0;
      SnapshotBest();
    } else {
      ++record_.rounds_without_improvement;
    }
    const std::string val_text =
        task_->tgb
            ? absl::StrFormat("val MRR %.4f Hits@10 %.4f", r.val_mrr,
                              r.val_hits_at_10)
            : absl::StrFormat(
                  "val AP %.4f AUC %.4f  new-node val AP %.4f AUC %.4f",
                  r.val_ap, r.val_auc, r.val_new_node_ap, r.val_new_node_auc);
    progress_.Log(absl::StrFormat(
        "epoch %d/%d  loss %.4f  %s  %.1fs (eval %.1fs)  %.0f ev/s%s", epoch,
        o_.epochs, r.train_loss, val_text, r.seconds, r.eval_seconds,
        r.train_events_per_second,
        record_.best_epoch == epoch ? "  *best" : ""));
    if (distributed()) {
      if (absl::Status s = SaveClusterCheckpoint(epoch); !s.ok()) {
        return Fail(s);
      }
    } else if (absl::Status s =
                   SaveCheckpoint(o_.out_dir, epoch, o_.seed, *model_,
                                  *optimizer_, record_, CheckpointMetaNow());
               !s.ok()) {
      return Fail(s);
    }
    if (o_.patience > 0 && record_.rounds_without_improvement >= o_.patience) {
      progress_.Log(absl::StrFormat(
          "early stopping: val %s has not improved for %d epochs; best "
          "epoch %d (%.4f)",
          task_->tgb                  ? "MRR"
          : task_->reference_protocol ? "AP (mean of per-batch AP)"
                                      : "AP",
          o_.patience, record_.best_epoch, record_.best_score));
      stop = true;
    }
  }
  if (record_.best_params.empty()) {
    return absl::FailedPreconditionError("no epoch was trained");
  }

  // Test with the best model and its post-validation memory (TGN protocol:
  // new-node test starts again from the validation memory).
  RestoreBest();
  EvalResult test = NoEvalResult(), nn_test = NoEvalResult();
  RankResult ranked;
  ranked.mrr = ranked.hits_at_10 = std::numeric_limits<double>::quiet_NaN();
  if (leader() && record_.best_test.size() == kBestTestFields) {
    // A bounded working set: the best epoch was tested when it was
    // evaluated, from the same parameters and memory.
    UnpackBestTest(record_.best_test, &test, &nn_test);
  } else if (leader() && task_->tgb) {
    auto t = RankPass(task_->split.test, task_->test_ranking, "test (MRR)");
    if (!t.ok()) return Fail(t.status());
    ranked = *t;
    test.events = ranked.events;
  } else if (leader()) {
    auto t = EvalPass(task_->split.test, task_->test_negs, "test");
    if (!t.ok()) return Fail(t.status());
    test = *t;
    state_ = record_.best_state.Clone();
    auto nn = EvalPass(task_->split.new_node_test, task_->new_node_test_negs,
                       "test new nodes");
    if (!nn.ok()) return Fail(nn.status());
    nn_test = *nn;
  }
  if (distributed()) {
    // The others wait while the leader tests, then gather statistics.
    if (absl::Status s = dist_->cluster->Barrier("tested", 0); !s.ok()) {
      return Fail(s);
    }
  }

  TrainResult result;
  result.epochs = record_.epochs;
  result.best_epoch = record_.best_epoch;
  result.test.ap = test.ap;
  result.test.auc = test.auc;
  result.test.ap_batch_mean = test.ap_batch_mean;
  result.test.auc_batch_mean = test.auc_batch_mean;
  result.test.new_node_ap = nn_test.ap;
  result.test.new_node_auc = nn_test.auc;
  result.test.new_node_ap_batch_mean = nn_test.ap_batch_mean;
  result.test.new_node_auc_batch_mean = nn_test.auc_batch_mean;
  result.test.events = test.events;
  result.test.new_node_events = nn_test.events;
  result.test.mrr = ranked.mrr;
  result.test.hits_at_10 = ranked.hits_at_10;
  if (cb_.test && leader()) cb_.test(result.test);
  double secs = 0;
  int64_t events = 0;
  for (const EpochResult& e : record_.epochs) {
    secs += e.seconds;
    events += e.train_events;
  }
  result.train_events_per_second = secs > 0 ? events / secs : 0;
  result.time_breakdown_seconds = {{"load", timers_.load},
                                   {"data_preparation", timers_.prepare},
                                   {"forward", timers_.forward},
                                   {"backward", timers_.backward},
                                   {"memory_update", timers_.memory},
                                   {"evaluation", timers_.evaluation}};
  result.peak_rss_bytes = PeakRssBytes();
  result.parameter_checksum = model::ParameterChecksum(*model_);
  comm_.preparation_seconds = timers_.prepare;
  comm_.forward_seconds = timers_.forward;
  comm_.backward_seconds = timers_.backward;
  comm_.memory_seconds = timers_.memory;
  comm_.peak_rss_bytes = result.peak_rss_bytes;
  {
    const PolicyStats ps = policy_->stats();
    comm_.pruned_events = ps.pruned;
    comm_.heavy_load_batches = ps.heavy_load_batches;
    comm_.boundaries = ps.boundaries;
    comm_.boundaries_refreshed = ps.boundaries_refreshed;
    comm_.boundaries_skipped = ps.boundaries_skipped;
    comm_.refresh_nodes_total = ps.refresh_nodes_total;
    comm_.refresh_nodes_max = ps.refresh_nodes_max;
    comm_.urgent_states = ps.urgent_states;
    comm_.urgent_bytes = ps.urgent_bytes;
    comm_.nonurgent_states = ps.nonurgent_states;
    comm_.nonurgent_bytes = ps.nonurgent_bytes;
    comm_.cross_ratio = plan_stats_.cross_ratio;
    comm_.imbalance = plan_stats_.mean_imbalance;
    comm_.partition_seconds = plan_stats_.partition_seconds;
  }
  if (distributed()) {
    result.policy = policy_->name();
    result.workers = world_;
    comm_.allreduce_bytes = collectives_->bytes_reduced();
    if (absl::Status s = GatherCommStats(
            control_.get(), rank_, world_, comm_,
            record_.epochs.empty() ? 0 : record_.epochs.back().train_loss,
            &result);
        !s.ok()) {
      return Fail(s);
    }
  } else {
    result.per_worker = {comm_};
    result.comm = comm_;
  }
  if (!leader()) return result;
  if (task_->tgb) {
    progress_.Log(absl::StrFormat(
        "test (best epoch %d): MRR %.4f Hits@10 %.4f (%d events, %d "
        "negatives scored; %s)",
        record_.best_epoch, ranked.mrr, ranked.hits_at_10, ranked.events,
        ranked.negatives, task_->tgb_negatives_text));
  } else {
    progress_.Log(absl::StrFormat(
        "test (best epoch %d): AP %.4f AUC %.4f (per-batch mean AP %.4f)  "
        "new-node AP %.4f AUC %.4f (per-batch mean AP %.4f)",
        record_.best_epoch, test.ap, test.auc, test.ap_batch_mean, nn_test.ap,
        nn_test.auc, nn_test.ap_batch_mean));
  }

  SummaryInfo info;
  info.options = &o_;
  info.data_path = task_->data_path;
  info.log = &task_->log;
  info.split = &task_->split;
  info.threads = at::get_num_threads();
  info.eval_batch_size = eval_batch_size_;
  info.onednn_isa_cap = onednn_isa_cap_;
  info.malloc = malloc_;
  info.device = device_.str();
  info.run_id = run_id_;
  info.batch_lookahead = LookaheadName(ChooseLookahead());
  if (device_.is_cuda()) {
    info.gpu_name = CudaDeviceName(device_.index());
    info.peak_gpu_bytes = CudaPeakAllocatedBytes(device_.index());
  }
  result.summary_json = SummaryJson(info, result);
  if (!o_.out_dir.empty()) {
    RETURN_IF_ERROR(WriteOutputs(o_.out_dir, task_->log, result));
  }
  return result;
}

absl::StatusOr<TrainResult> Train(const TrainOptions& options,
                                  const TrainCallbacks& callbacks) {
  // LibTorch reports errors (an allocation too large for this machine, a
  // shape it rejects) as exceptions: an error naming them, not an abort.
  try {
    Engine engine(options, callbacks);
    RETURN_IF_ERROR(engine.Setup());
    return engine.Run();
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("LibTorch: ", ExceptionMessage(e)));
  }
}

}  // namespace mnemo::runtime
