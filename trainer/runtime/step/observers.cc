#include "trainer/runtime/step/observers.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_format.h"
#include "trainer/platform/cuda_device.h"
#include "trainer/runtime/checkpoint/resume_point.h"
#include "trainer/runtime/cluster/control.h"
#include "trainer/runtime/report/op_profile.h"
#include "trainer/runtime/report/progress.h"
#include "trainer/runtime/step/train_step.h"
#include "util/proc.h"
#include "util/status_macros.h"

namespace mnemo::runtime {

std::string_view StageName(Stage stage) {
  static constexpr std::string_view kNames[kStages] = {
      "plan",     "sample", "fetch", "build", "update", "embed",
      "backward", "reduce", "push",  "step",  "wait",   "report"};
  return kNames[static_cast<int>(stage)];
}

namespace {

// This worker's own compute: what DepTGL's load test reads.
bool IsCompute(Stage s) {
  switch (s) {
    case Stage::kSample:
    case Stage::kBuild:
    case Stage::kUpdate:
    case Stage::kEmbed:
    case Stage::kBackward:
    case Stage::kStep:
      return true;
    default:
      return false;
  }
}

// Work queued on the device (timed there on a GPU).
bool OnDevice(Stage s) {
  return s == Stage::kUpdate || s == Stage::kEmbed || s == Stage::kBackward ||
         s == Stage::kStep;
}

}  // namespace

void StageTimer::BeginPass() {
  if (clock_) clock_->Discard();
}

double* StageTimer::TotalOf(Stage stage) const {
  switch (stage) {
    case Stage::kSample:
    case Stage::kBuild:
      return &phases_->preparation;
    case Stage::kUpdate:
      return &phases_->memory_management;
    case Stage::kEmbed:
      return &phases_->forward;
    case Stage::kBackward:
    case Stage::kStep:
      return &phases_->backward;
    case Stage::kReduce:
      return &collectives_->allreduce_seconds;
    default:
      return nullptr;
  }
}

void StageTimer::BeginStage(Stage stage, TrainBatch& batch) {
  if (clock_ && OnDevice(stage)) {
    clock_->Begin();
  } else {
    started_[static_cast<int>(stage)] = MonotonicSeconds();
  }
}

void StageTimer::EndStage(Stage stage, TrainBatch& batch) {
  std::vector<double*> into = {&batch.stage_seconds[static_cast<int>(stage)]};
  if (double* total = TotalOf(stage)) into.push_back(total);
  if (IsCompute(stage)) into.push_back(&batch.compute_seconds);
  if (clock_ && OnDevice(stage)) {
    clock_->End(std::move(into));
  } else {
    const double seconds =
        MonotonicSeconds() - started_[static_cast<int>(stage)];
    for (double* acc : into) *acc += seconds;
  }
  // The batch's wait: the device's times of its stages are known.
  if (clock_ && stage == Stage::kWait) clock_->Collect();
}

void ProfileObserver::BeginBatch(TrainBatch& batch) {
  profile_->BeginBatch(batch.b.epoch_batch);
}

void ProfileObserver::EndBatch(const TrainBatch& batch, const BatchOutcome&) {
  auto seconds = [&](Stage s) {
    return batch.stage_seconds[static_cast<int>(s)];
  };
  // The model's forward pass is its memory update and its embedding.
  profile_->EndBatch(batch.b.epoch_batch,
                     seconds(Stage::kUpdate) + seconds(Stage::kEmbed),
                     seconds(Stage::kBackward), seconds(Stage::kStep));
}

void DeviceSyncObserver::BeginBatch(TrainBatch&) {
  platform::SetCudaSyncCheck(true);
  on_ = true;
}

void DeviceSyncObserver::BeginStage(Stage stage, TrainBatch&) {
  // The batch waits for the device here, on purpose.
  if (stage == Stage::kWait) Release();
}

void DeviceSyncObserver::Release() {
  if (on_) platform::SetCudaSyncCheck(false);
  on_ = false;
}

absl::Status DivergenceCheck::Check(const TrainBatch& t) {
  if (!std::isfinite(t.loss_value) && !distributed_) {
    return NonFinite("training loss", t.loss_value, t);
  }
  if (!std::isfinite(t.grad_norm) || !std::isfinite(t.loss_value)) {
    return std::isfinite(t.grad_norm)
               ? NonFinite("training loss", t.loss_value, t)
               : NonFinite("gradient norm", t.grad_norm, t);
  }
  return absl::OkStatus();
}

absl::Status DivergenceCheck::NonFinite(const std::string& what, double value,
                                        const TrainBatch& t) const {
  const TrainOptions& o = *options_;
  const int epoch = t.b.epoch;
  const int64_t batch = t.b.epoch_batch;
  std::string checkpoint = "no checkpoint was written";
  if (!o.run.out_dir.empty() && epoch > 1) {
    checkpoint = absl::StrFormat(
        "the last good checkpoint is %s",
        distributed_ ? ClusterCheckpointDir(o.run.out_dir, epoch - 1)
                     : SingleCheckpointPath(o.run.out_dir, epoch - 1));
  }
  return absl::InternalError(absl::StrFormat(
      "epoch %d, batch %d (events %d-%d of the training split): the %s is "
      "not finite (%g): training has diverged; lower --lr (now %g) or check "
      "the data for extreme values; %s",
      epoch, batch, batch * o.optim.batch_size,
      (batch + 1) * o.optim.batch_size - 1, what, value, o.optim.lr,
      checkpoint));
}

absl::Status ParameterCheck::Check(const TrainBatch& t) {
  // Identical parameters everywhere after every step: the mean of the
  // ranks' checksums equals ours only if all are equal (to rounding).
  const double mine = model::ParameterChecksum(*model_);
  std::vector<double> sums = {mine, mine * mine};
  RETURN_IF_ERROR(control_->Sum(&sums));
  const double mean = sums[0] / world_;
  const double var = sums[1] / world_ - mean * mean;
  const double scale = std::max(1.0, std::abs(mean));
  if (std::abs(mean - mine) > 1e-9 * scale || var > 1e-12 * scale * scale) {
    return absl::InternalError(absl::StrFormat(
        "parameters differ across workers after batch %d (rank %d "
        "checksum %.17g, mean over ranks %.17g)",
        t.b.global_batch, rank_, mine, mean));
  }
  return absl::OkStatus();
}

void PassCounter::EndBatch(const TrainBatch& t, const BatchOutcome& o) {
  comm_->target_events += o.targets;
  comm_->replayed_events += o.auxiliaries;
  stats_->loss_sum += t.loss_value;
  stats_->global_loss_sum +=
      t.loss_value * static_cast<double>(t.mine()) / t.b.global_events;
  stats_->grad_norm_sum += t.grad_norm;
  ++stats_->batches;
}

void PassProgress::EndBatch(const TrainBatch& t, const BatchOutcome&) {
  progress_->Advance(t.b.global_events, stats_->loss_sum / stats_->batches);
}

void BatchCallback::EndBatch(const TrainBatch& t, const BatchOutcome&) {
  TrainCallbacks::Batch cb;
  cb.epoch = t.b.epoch;
  cb.target_events = t.mine();
  cb.loss = t.loss_value;
  cb.grad_norm = t.grad_norm;
  cb.seconds = MonotonicSeconds() - t.start_seconds;
  cb.store = comm_->store;
  cb.working_set = comm_->working_set;
  cb.pipeline = comm_->pipeline;
  callback_(cb);
}

}  // namespace mnemo::runtime
