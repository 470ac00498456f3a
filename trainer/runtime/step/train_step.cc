#include "trainer/runtime/step/train_step.h"

#include <torch/torch.h>

#include <algorithm>

#include "trainer/platform/cuda_transfer.h"
#include "trainer/runtime/cluster/grad_buckets.h"
#include "trainer/runtime/optim/grads.h"
#include "util/proc.h"
#include "util/status_macros.h"

namespace mnemo::runtime {

void TrainStep::Begin(TrainBatch* t) {
  t->start_seconds = MonotonicSeconds();
  if (p_.gradients != nullptr) {
    p_.gradients->Zero();  // the gradients stay the buckets' views
  } else {
    ForgetGrads(p_.model->parameters());
  }
  for (StepObserver* o : observers_) o->BeginBatch(*t);
}

absl::Status TrainStep::Plan(TrainBatch* t) {
  t->compute_seconds = 0;
  std::fill(std::begin(t->stage_seconds), std::end(t->stage_seconds), 0.0);
  BatchContext& b = t->b;
  RETURN_IF_ERROR(Staged(Stage::kPlan, t, [&] { return p_.policy->Plan(&b); }));
  Staged(Stage::kSample, t, [&] {
    t->targets.clear();
    t->negatives.clear();
    for (size_t i = 0; i < b.events.size(); ++i) {
      if (!b.target[i]) continue;
      t->targets.push_back(b.events[i]);
      t->negatives.push_back((*p_.negatives)[(*p_.train_pos)[b.events[i]]]);
    }
    // The events it executes besides its targets (replayed for memory).
    const bool replay = t->targets.size() != b.events.size();
    p_.builder->Prepare(t->targets.data(), t->negatives.data(),
                        t->targets.size(), replay ? b.events.data() : nullptr,
                        replay ? b.events.size() : 0, sampler_,
                        p_.refine_chunks);
  });
  return absl::OkStatus();
}

absl::Status TrainStep::Fetch(TrainBatch* t) {
  // Every state the batch reads or writes (with APAN's mails to
  // neighbours, more than the nodes it reads).
  const std::vector<int64_t> nodes = p_.builder->StateNodes();
  RETURN_IF_ERROR(Staged(Stage::kFetch, t, [&] {
    RETURN_IF_ERROR(p_.policy->Fetch(t->b, nodes));
    return p_.memory->Ready(nodes, t->b.versions);
  }));
  Staged(Stage::kBuild, t, [&] {
    p_.builder->Finish(p_.memory->view(), p_.time_gaps, &t->tensors,
                       &t->update);
  });
  return absl::OkStatus();
}

absl::Status TrainStep::Update(TrainBatch* t) {
  Staged(Stage::kUpdate, t, [&] {
    if (t->mine() > 0) {
      autocast_.Begin(p_.bf16, p_.device.type());
      t->updated = p_.model->UpdateMemory(p_.memory->view(), t->tensors);
      autocast_.Pause();
    } else if (t->update.rows.numel() > 0) {
      // Nothing to predict, but replayed events still update memory. The
      // link scores are computed too, unread: the dropout they draw keeps
      // the random stream of the batches after it as it was.
      torch::NoGradGuard no_grad;
      t->updated = p_.model->UpdateMemory(p_.memory->view(), t->tensors);
      p_.model->Embed(t->tensors, t->updated);
    } else {
      t->updated = model::UpdatedMemory();
    }
    p_.memory->Advance(t->update, t->updated.memory, t->updated.rows,
                       t->b.events, t->b.target);
  });
  return p_.policy->Handoff(t->b, t->update.node_ids);
}

void TrainStep::Embed(TrainBatch* t) {
  t->loss = torch::Tensor();
  if (t->mine() == 0) return;
  Staged(Stage::kEmbed, t, [&] {
    autocast_.Resume();
    // DepTGL Eq. 12-13: the mean loss over this worker's targets.
    t->loss = model::Loss(p_.model->Embed(t->tensors, t->updated));
    autocast_.End();
  });
}

void TrainStep::Backward(TrainBatch* t) {
  Staged(Stage::kBackward, t, [&] {
    if (t->loss.defined()) {
      // Scaled so that the mean of the ranks' gradients is the gradient of
      // the global batch's mean loss (1 in one process, and where each
      // batch steps alone).
      const double scale =
          p_.policy->CombinesGradients()
              ? static_cast<double>(t->mine()) * p_.world / t->b.global_events
              : 1.0;
      (t->loss * scale).backward();
    }
    DefineZeroGrads(p_.model->parameters());
    // The buckets the pass did not start (an error surfaces at reduce).
    if (p_.gradients != nullptr) p_.gradients->Flush().IgnoreError();
  });
}

absl::Status TrainStep::Reduce(TrainBatch* t) {
  if (!p_.policy->CombinesGradients()) {
    return Staged(Stage::kReduce, t,
                  [&] { return p_.policy->ReceiveParameters(t->b); });
  }
  if (p_.gradients == nullptr) return absl::OkStatus();
  if (p_.collectives != nullptr) {
    p_.collectives->allreduce_buckets += p_.gradients->num_buckets();
    p_.collectives->allreduce_buckets_in_backward +=
        p_.gradients->started_early();
  }
  return Staged(Stage::kReduce, t, [&] { return p_.gradients->Wait(); });
}

bool TrainStep::ReducesOnHost() const {
  if (!p_.policy->CombinesGradients()) return true;
  return p_.gradients != nullptr && p_.gradients->waits_on_host();
}

absl::Status TrainStep::Push(TrainBatch* t) {
  return Staged(Stage::kPush, t,
                [&] { return p_.policy->Push(t->b, t->update.node_ids); });
}

absl::Status TrainStep::Step(TrainBatch* t) {
  Staged(Stage::kStep, t, [&] {
    const auto params = p_.model->parameters();
    if (p_.device.is_cuda()) {
      t->grad_norm_on_device = GradNormOnDevice(params);
    } else {
      t->grad_norm = GradNorm(params);
    }
    // A batch that steps alone and has no targets has nothing to step.
    if (p_.policy->CombinesGradients() || t->mine() > 0) {
      p_.optimizer->step();
    }
  });
  // The loss and the gradient norm stay on a GPU until the batch's wait,
  // read together in one copy (on the CPU the loss is read at once).
  t->read_scalars = nullptr;
  t->loss_value = 0;
  if (p_.device.is_cuda()) {
    torch::Tensor l = t->loss.defined()
                          ? t->loss.detach().to(torch::kDouble).reshape({1})
                          : torch::zeros({1}, t->grad_norm_on_device.options());
    t->read_scalars = platform::ReadToHostLater(
        torch::cat({l, t->grad_norm_on_device.reshape({1})}));
  } else if (t->loss.defined()) {
    t->loss_value = t->loss.item<double>();
  }
  return p_.policy->PassParameters(t->b);
}

absl::Status TrainStep::Finish(TrainBatch* t) {
  Staged(Stage::kWait, t, [&] {
    if (!t->read_scalars) return;
    const torch::Tensor h = t->read_scalars();  // the batch's one wait
    t->loss_value = h[0].item<double>();
    t->grad_norm = h[1].item<double>();
  });
  for (StepObserver* o : observers_) RETURN_IF_ERROR(o->Check(*t));
  BatchOutcome outcome;
  outcome.grad_norm = t->grad_norm;
  outcome.loss = t->loss_value;
  outcome.targets = t->mine();
  outcome.auxiliaries = static_cast<int64_t>(t->b.events.size()) - t->mine();
  outcome.compute_seconds = t->compute_seconds;
  outcome.batch_seconds = MonotonicSeconds() - t->start_seconds;
  outcome.advanced = &t->update.node_ids;
  RETURN_IF_ERROR(Staged(Stage::kReport, t,
                         [&] { return p_.policy->Report(t->b, outcome); }));
  for (StepObserver* o : observers_) o->EndBatch(*t, outcome);
  p_.memory->EndBatch();
  // The batch's graph goes now, not when its slot is used again.
  t->updated = model::UpdatedMemory();
  t->loss = torch::Tensor();
  return absl::OkStatus();
}

}  // namespace mnemo::runtime
