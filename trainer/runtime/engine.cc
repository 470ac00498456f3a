// The training engine's run: epochs, the best epoch's test, the result
// (engine_setup.cc sets the run up).
#include "trainer/runtime/engine.h"

#include <torch/torch.h>

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "trainer/data/event_file.h"
#include "trainer/platform/exceptions.h"
#include "trainer/runtime/cluster/comm_stats.h"
#include "trainer/runtime/report/summary.h"
#include "util/proc.h"
#include "util/status_macros.h"

namespace mnemo::runtime {
namespace {

// The test's line.
void LogTest(const Progress& progress, const Task& task, int best_epoch,
             const TestResult& test, const RankResult& ranked) {
  if (task.tgb) {
    progress.Log(absl::StrFormat(
        "test (best epoch %d): MRR %.4f Hits@10 %.4f (%d events, %d "
        "negatives scored; %s)",
        best_epoch, ranked.mrr, ranked.hits_at_10, ranked.events,
        ranked.negatives, task.tgb_negatives_text));
  } else {
    progress.Log(absl::StrFormat(
        "test (best epoch %d): AP %.4f AUC %.4f (per-batch mean AP %.4f)  "
        "new-node AP %.4f AUC %.4f (per-batch mean AP %.4f)",
        best_epoch, test.ap, test.auc, test.ap_batch_mean, test.new_node_ap,
        test.new_node_auc, test.new_node_ap_batch_mean));
  }
}

// time_breakdown_seconds' stages, in order.
constexpr const char* kStageNames[] = {"load",          "data_preparation",
                                       "forward",       "backward",
                                       "memory_update", "evaluation"};

}  // namespace

std::vector<double> Engine::StageSeconds() const {
  const PhaseSeconds& t = p_.comm.time;
  std::vector<double> s = {p_.load_seconds,     t.preparation,
                           t.forward,           t.backward,
                           t.memory_management, p_.evaluation_seconds};
  for (size_t i = 0; i < s.size() && i < earlier_stage_seconds_.size(); ++i) {
    s[i] += earlier_stage_seconds_[i];
  }
  return s;
}

absl::StatusOr<TrainResult> Engine::Run() {
  absl::StatusOr<int> start = checkpoints_->Resume();
  if (!start.ok()) return p_.Fail(start.status());
  earlier_stage_seconds_ = p_.record.stage_seconds;
  const int patience = p_.o.optim.patience;
  bool stop = patience > 0 && p_.record.rounds_without_improvement >= patience;
  for (int epoch = *start; epoch <= p_.o.optim.epochs && !stop; ++epoch) {
    EpochResult r;
    if (absl::Status s = TrainEpoch(epoch, &r); !s.ok()) return p_.Fail(s);
    // A mapped event file rewritten in place during the epoch: what it
    // trained on is unknown, so it is not checkpointed.
    if (absl::Status s = data::CheckEventFileUnchanged(p_.task->log); !s.ok()) {
      return p_.Fail(s);
    }
    p_.record.epochs.push_back(r);
    if (p_.cb.epoch) p_.cb.epoch(r);
    if (eval_->Improves(r)) {
      if (absl::Status s = eval_->KeepBest(r); !s.ok()) return p_.Fail(s);
    } else {
      ++p_.record.rounds_without_improvement;
    }
    stop = LogEpoch(r);
    p_.record.stage_seconds = StageSeconds();
    if (absl::Status s = checkpoints_->Save(epoch); !s.ok()) {
      return p_.Fail(s);
    }
  }
  if (p_.record.best_params.empty()) {
    return absl::FailedPreconditionError("no epoch was trained");
  }
  return Finish();
}

absl::Status Engine::TrainEpoch(int epoch, EpochResult* r) {
  const double t0 = MonotonicSeconds();
  ASSIGN_OR_RETURN(const PassStats pass, pass_->Run(epoch));
  r->epoch = epoch;
  r->train_loss = pass.batches ? pass.loss_sum / pass.batches : 0;
  p_.comm.train_loss = r->train_loss;
  if (p_.distributed()) RETURN_IF_ERROR(EndEpochInCluster(epoch, pass, r));
  r->seconds = MonotonicSeconds() - t0;
  r->grad_norm_mean = pass.batches ? pass.grad_norm_sum / pass.batches : 0;
  r->steps = pass.batches;
  r->train_events = p_.task->split.train.size();
  r->train_events_per_second = r->train_events / r->seconds;
  p_.comm.train_seconds += r->seconds;
  const double e0 = MonotonicSeconds();
  RETURN_IF_ERROR(eval_->Validate(r));
  r->eval_seconds = MonotonicSeconds() - e0;
  return absl::OkStatus();
}

absl::Status Engine::EndEpochInCluster(int epoch, const PassStats& pass,
                                       EpochResult* r) {
  // The global batches' mean loss, as one process would report it (the
  // ranks leave the pass together: its last step was a collective).
  std::vector<double> t = {pass.global_loss_sum};
  RETURN_IF_ERROR(p_.cluster->control()->Sum(&t));
  r->train_loss = pass.batches ? t[0] / pass.batches : 0;
  RETURN_IF_ERROR(p_.policy->EndEpoch(p_.Versions(epoch)));
  ++p_.comm.policy.refreshes;
  return p_.cluster->Barrier(absl::StrCat("synced-", epoch));
}

bool Engine::LogEpoch(const EpochResult& r) {
  const Task& task = *p_.task;
  const std::string val_text =
      task.tgb
          ? absl::StrFormat("val MRR %.4f Hits@10 %.4f", r.val_mrr,
                            r.val_hits_at_10)
          : absl::StrFormat(
                "val AP %.4f AUC %.4f  new-node val AP %.4f AUC %.4f", r.val_ap,
                r.val_auc, r.val_new_node_ap, r.val_new_node_auc);
  const TrainingRecord& record = p_.record;
  p_.progress.Log(absl::StrFormat(
      "epoch %d/%d  loss %.4f  %s  %.1fs (eval %.1fs)  %.0f ev/s%s", r.epoch,
      p_.o.optim.epochs, r.train_loss, val_text, r.seconds, r.eval_seconds,
      r.train_events_per_second,
      record.best_epoch == r.epoch ? "  *best" : ""));
  const int patience = p_.o.optim.patience;
  if (patience <= 0 || record.rounds_without_improvement < patience) {
    return false;
  }
  p_.progress.Log(absl::StrFormat(
      "early stopping: val %s has not improved for %d epochs; best epoch %d "
      "(%.4f)",
      task.tgb                  ? "MRR"
      : task.reference_protocol ? "AP (mean of per-batch AP)"
                                : "AP",
      patience, record.best_epoch, record.best_score));
  return true;
}

absl::Status Engine::Gather(TrainResult* result) {
  p_.comm.peak_rss_bytes = result->peak_rss_bytes;
  if (!p_.distributed()) {
    result->per_worker = {p_.comm};
    result->comm = p_.comm;
    return absl::OkStatus();
  }
  result->policy = p_.policy->name();
  result->workers = p_.world();
  p_.comm.collectives.allreduce_bytes =
      p_.cluster->gradients()->bytes_reduced();
  return GatherCommStats(
      p_.cluster->control(), p_.rank(), p_.world(), p_.comm,
      p_.record.epochs.empty() ? 0 : p_.record.epochs.back().train_loss,
      result);
}

absl::StatusOr<TrainResult> Engine::Finish() {
  TrainResult result;
  RankResult ranked;
  const double t0 = MonotonicSeconds();
  if (absl::Status s = eval_->Test(&result.test, &ranked); !s.ok()) {
    return p_.Fail(s);
  }
  result.test_seconds = MonotonicSeconds() - t0;
  result.epochs = p_.record.epochs;
  result.best_epoch = p_.record.best_epoch;
  if (p_.cb.test && p_.leader()) p_.cb.test(result.test);
  double secs = 0;
  int64_t events = 0;
  for (const EpochResult& e : p_.record.epochs) {
    secs += e.seconds;
    events += e.train_events;
  }
  result.train_events_per_second = secs > 0 ? events / secs : 0;
  const std::vector<double> stages = StageSeconds();
  for (size_t i = 0; i < stages.size(); ++i) {
    result.time_breakdown_seconds.emplace_back(kStageNames[i], stages[i]);
  }
  result.peak_rss_bytes = PeakRssBytes();
  result.parameter_checksum = model::ParameterChecksum(*p_.model);
  if (absl::Status s = Gather(&result); !s.ok()) return p_.Fail(s);
  if (!p_.leader()) return result;
  LogTest(p_.progress, *p_.task, p_.record.best_epoch, result.test, ranked);
  SummaryInfo info;
  info.options = &p_.o;
  info.data_path = p_.task->data_path;
  info.log = &p_.task->log;
  info.split = &p_.task->split;
  info.threads = at::get_num_threads();
  info.eval_batch_size = p_.eval_batch_size;
  info.onednn_isa_cap = p_.onednn_isa_cap;
  info.malloc = p_.malloc;
  info.derived_sizes = p_.derived_sizes;
  info.device = p_.device.str();
  info.run_id = p_.run_id;
  info.batch_lookahead = batch::AheadName(pass_->ChooseAhead());
  if (p_.device.is_cuda()) {
    info.gpu_name = platform::CudaDeviceName(p_.device.index());
    info.tf32 = platform::CudaTf32();
    info.peak_gpu_bytes = platform::CudaPeakAllocatedBytes(p_.device.index());
  }
  result.summary_json = SummaryJson(info, result);
  if (!p_.o.run.out_dir.empty()) {
    RETURN_IF_ERROR(WriteOutputs(p_.o.run.out_dir, p_.task->log, result));
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
    return absl::InternalError(
        absl::StrCat("LibTorch: ", platform::ExceptionMessage(e)));
  }
}

}  // namespace mnemo::runtime
