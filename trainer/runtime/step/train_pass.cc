#include "trainer/runtime/step/train_pass.h"

#include <torch/torch.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "trainer/data/negative_sampler.h"
#include "util/status_macros.h"

namespace mnemo::runtime {

TrainPass::TrainPass(RunParts* parts)
    : p_(*parts),
      timer_(p_.clock.get(), &p_.comm.time, &p_.comm.collectives),
      divergence_(&p_.o, p_.distributed()),
      counter_(&stats_, &p_.comm),
      progress_(&p_.progress, &stats_) {
  // Where the parameters travel down a pipeline, the workers' parameters
  // differ between steps by design: nothing to check.
  if (p_.distributed() && p_.o.checks.check_parameters &&
      p_.policy->CombinesGradients()) {
    parameter_check_ = std::make_unique<ParameterCheck>(
        p_.model, p_.cluster->control(), p_.rank(), p_.world());
  }
  if (p_.cb.batch) {
    callback_ = std::make_unique<BatchCallback>(p_.cb.batch, &p_.comm);
  }
}

batch::Ahead TrainPass::ChooseAhead() const {
  if (!p_.o.checks.prepare_ahead || !p_.policy->PlanIsLocal()) {
    return batch::Ahead::kNone;
  }
  return p_.distributed() || p_.memory.bounded() ? batch::Ahead::kPrepare
                                                 : batch::Ahead::kFinish;
}

void TrainPass::BeginEpoch(int epoch) {
  p_.model->train();
  const Task& task = *p_.task;
  torch::manual_seed(EpochSeed(p_.o.optim.seed, epoch, 1) + p_.rank());
  // Every rank draws the same negatives for the whole epoch (the same
  // sequence per-batch draws would give) and uses its targets' ones,
  // unless its policy gives it a stream of its own.
  const int stream = p_.policy->NegativeStream();
  data::NegativeSampler negatives(
      task.train_neg_candidates,
      EpochSeed(p_.o.optim.seed, epoch, stream == 0 ? 2 : 100 + stream));
  p_.epoch_negatives.resize(task.split.train.size());
  negatives.Sample(p_.epoch_negatives.size(), p_.epoch_negatives.data());
  sampler_ = p_.MakeSampler(task.train_graph.get(),
                            EpochSeed(p_.o.optim.seed, epoch, 3) + p_.rank());
  // Belady needs what each batch will read: the plan's events, this
  // epoch's negatives and, for a model that reads its targets' recent
  // neighbours, theirs.
  plan::ReadPredictor predicted;
  if (p_.memory.bounded() &&
      p_.o.working_set.eviction == plan::Eviction::kBelady) {
    predicted = plan::PlanReads(
        p_.plan, task.log,
        [this](int64_t e) { return p_.epoch_negatives[p_.train_pos[e]]; },
        p_.NeighborReads(task.train_graph.get()));
  }
  p_.memory.BeginEpoch(std::move(predicted), p_.policy->PullsEveryRead());
  p_.policy->BeginEpoch(epoch);
  p_.progress.Start(
      p_.distributed()
          ? absl::StrFormat("epoch %d/%d [rank %d]", epoch, p_.o.optim.epochs,
                            p_.rank())
          : absl::StrFormat("epoch %d/%d", epoch, p_.o.optim.epochs),
      task.split.train.size());
}

absl::StatusOr<PassStats> TrainPass::Run(int epoch) {
  BeginEpoch(epoch);
  BeginProfile();
  StepParts sp;
  sp.options = &p_.o;
  sp.model = p_.model;
  sp.optimizer = p_.optimizer.get();
  sp.memory = &p_.memory;
  sp.builder = p_.builder.get();
  sp.policy = p_.policy.get();
  sp.gradients = p_.cluster ? p_.cluster->buckets() : nullptr;
  sp.world = p_.world();
  sp.device = p_.device;
  sp.bf16 = p_.bf16;
  sp.time_gaps = p_.TimeGaps();
  sp.train_pos = &p_.train_pos;
  sp.negatives = &p_.epoch_negatives;
  sp.refine_chunks = p_.refine_chunks;
  sp.collectives = &p_.comm.collectives;
  // Timing first (it times the others' work too), checks in the order
  // they name a failure.
  std::vector<StepObserver*> observers = {&timer_};
  if (profile_observer_) observers.push_back(profile_observer_.get());
  if (p_.o.checks.check_device_syncs && p_.device.is_cuda() &&
      !p_.distributed()) {
    observers.push_back(&sync_check_);
  }
  observers.push_back(&divergence_);
  if (parameter_check_) observers.push_back(parameter_check_.get());
  observers.push_back(&counter_);
  observers.push_back(&progress_);
  if (callback_) observers.push_back(callback_.get());
  step_ = std::make_unique<TrainStep>(sp, observers);
  step_->set_sampler(sampler_ ? &*sampler_ : nullptr);
  for (StepObserver* o : observers) o->BeginPass();

  TrainBatch slots[2];
  absl::Status s = batch::RunLookahead(p_.plan.num_batches(), ChooseAhead(),
                                       slots, Calls(epoch));
  for (StepObserver* o : observers) o->EndPass();
  if (absl::Status e = EndProfile(); s.ok()) s = e;
  p_.global_batch += stats_.batches;
  step_.reset();
  RETURN_IF_ERROR(s);
  return stats_;
}

batch::LookaheadCalls<TrainBatch> TrainPass::Calls(int epoch) {
  batch::LookaheadCalls<TrainBatch> c;
  const int64_t first = p_.global_batch;
  c.begin = [this](int64_t, TrainBatch* t) { step_->Begin(t); };
  c.prepare = [this, epoch, first](int64_t r, TrainBatch* t) {
    BatchContext& b = t->b;
    b.epoch = epoch;
    b.num_batches = p_.plan.num_batches();
    b.versions = p_.Versions(epoch);
    b.global_batch = first + r;
    b.epoch_batch = r;
    b.global_events = p_.plan.step_events(r);  // targets of all workers
    b.view = p_.plan.batch(r);
    b.events.assign(b.view.events.begin(), b.view.events.end());
    b.target.assign(b.view.target.begin(), b.view.target.end());
    return step_->Plan(t);
  };
  c.finish = [this](int64_t, TrainBatch* t) { return step_->Fetch(t); };
  // Where the all-reduce blocks the host (gloo), its wait, the push (which
  // must follow every rank's reads of the batch: the all-reduce is that
  // barrier) and the step wait until the next batch is prepared, so that
  // the host prepares it while the last buckets are in flight. Elsewhere
  // they are queued at once.
  c.run = [this](int64_t, TrainBatch* t) {
    RETURN_IF_ERROR(step_->Update(t));
    step_->Embed(t);
    step_->Backward(t);
    if (step_->ReducesOnHost()) return absl::OkStatus();
    return ReduceAndStep(t);
  };
  c.complete = [this](int64_t, TrainBatch* t) {
    if (step_->ReducesOnHost()) RETURN_IF_ERROR(ReduceAndStep(t));
    return step_->Finish(t);
  };
  return c;
}

absl::Status TrainPass::ReduceAndStep(TrainBatch* t) {
  RETURN_IF_ERROR(step_->Reduce(t));
  RETURN_IF_ERROR(step_->Push(t));
  return step_->Step(t);
}

void TrainPass::BeginProfile() {
  if (p_.o.run.profile_path.empty() || profiled_) return;
  // Warm-up batches (allocations, first-touch) stay out of the profile.
  const int64_t n = p_.plan.num_batches();
  const int64_t count = std::max<int64_t>(1, p_.o.run.profile_batches);
  const int64_t first = std::clamp<int64_t>(n - count, 0, 10);
  profile_ = std::make_unique<OpProfile>(p_.o.run.profile_path, first, count,
                                         p_.device.is_cuda());
  profile_observer_ = std::make_unique<ProfileObserver>(profile_.get());
}

absl::Status TrainPass::EndProfile() {
  if (!profile_) return absl::OkStatus();
  profiled_ = true;
  absl::Status s = profile_->Finish();
  if (s.ok()) {
    p_.progress.Log(
        absl::StrCat("wrote the operator profile to ", p_.o.run.profile_path));
  }
  profile_observer_.reset();
  profile_.reset();
  return s;
}

}  // namespace mnemo::runtime
