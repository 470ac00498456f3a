#include "trainer/runtime/checkpoint/checkpoint.h"

#include <cmath>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "trainer/platform/doubles.h"
#include "trainer/platform/exceptions.h"
#include "trainer/runtime/checkpoint/resume_point.h"
#include "trainer/runtime/optim/fused_adam.h"
#include "trainer/runtime/optim/grads.h"
#include "util/file.h"
#include "util/status_macros.h"

namespace mnemo::runtime {

using platform::DoublesToTensor;
using platform::TensorToDoubles;
namespace fs = std::filesystem;

// Checkpoint layout (torch archive): model/, optimizer/, best/param_i,
// best/memory, best/mail, best/times (last_update, mail_time, has_mail),
// history (per-epoch figures), meta (epoch, best epoch, best val AP, rounds
// without improvement, seed), and in a cluster rank's file policy (the
// training policy's state, TrainingPolicy::SaveState). Randomness is derived
// from (seed, epoch), so the seed and epoch are the RNG state.
namespace {
// Fields per epoch in "history" (checkpoints before val_loss had 12 and no
// "history_fields" entry; before the validation MRR, 14).
constexpr int kHistoryFields = 16;

// Adam's per-parameter state, keyed by parameter index. (LibTorch's own
// optimizer serialization keys the state by tensor address, which does not
// map state back to the right parameters after a restart; the index keys
// also keep files written by the LibTorch 1.13 build loadable.)
void SaveAdamState(torch::optim::Adam& opt,
                   const std::vector<torch::Tensor>& params,
                   torch::serialize::OutputArchive* archive) {
  for (size_t i = 0; i < params.size(); ++i) {
    auto it = opt.state().find(OptimizerStateKey(params[i]));
    if (it == opt.state().end()) continue;
    auto& st = static_cast<torch::optim::AdamParamState&>(*it->second);
    torch::serialize::OutputArchive a;
    a.write("step", torch::tensor(st.step(), torch::kInt64));
    a.write("exp_avg", st.exp_avg());
    a.write("exp_avg_sq", st.exp_avg_sq());
    archive->write(absl::StrCat("param_", i), a);
  }
}

absl::Status LoadAdamState(torch::serialize::InputArchive& archive,
                           const std::vector<torch::Tensor>& params,
                           torch::optim::Adam* opt) {
  for (size_t i = 0; i < params.size(); ++i) {
    torch::serialize::InputArchive a;
    if (!archive.try_read(absl::StrCat("param_", i), a)) continue;
    auto st = std::make_unique<torch::optim::AdamParamState>();
    torch::Tensor step, avg, avg_sq;
    a.read("step", step);
    a.read("exp_avg", avg);
    a.read("exp_avg_sq", avg_sq);
    if (!avg.sizes().equals(params[i].sizes())) {
      return absl::InvalidArgumentError(
          absl::StrCat("checkpoint optimizer state does not match parameter ",
                       i, " (different model configuration?)"));
    }
    st->step(step.item<int64_t>());
    st->exp_avg(avg);
    st->exp_avg_sq(avg_sq);
    opt->state()[OptimizerStateKey(params[i])] = std::move(st);
  }
  return absl::OkStatus();
}
}  // namespace

namespace {
// Makes `dir` (and its parents) if missing; `created_dir` receives the
// parent of a directory made here (empty when it existed), whose entry the
// writer syncs once the file is in place.
absl::Status MakeCheckpointDirectory(const fs::path& dir,
                                     std::string* created_dir) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) *created_dir = dir.parent_path().string();
  fs::create_directories(dir, ec);
  if (ec) {
    return absl::InternalError(
        absl::StrCat("cannot create ", dir.string(), ": ", ec.message()));
  }
  return absl::OkStatus();
}

// The per-epoch figures, kHistoryFields a row.
torch::Tensor HistoryTensor(const std::vector<EpochResult>& epochs) {
  std::vector<double> history;
  for (const EpochResult& e : epochs) {
    history.insert(
        history.end(),
        {double(e.epoch), e.train_loss, e.val_ap, e.val_auc, e.val_new_node_ap,
         e.val_new_node_auc, e.val_ap_batch_mean, e.val_new_node_ap_batch_mean,
         e.seconds, e.eval_seconds, double(e.train_events), e.grad_norm_mean,
         e.val_loss, double(e.steps), e.val_mrr, e.val_hits_at_10});
  }
  return DoublesToTensor(history);
}

// The checkpoint's archive (layout above). `policy_state`: a cluster
// rank's (null: a single process's file).
absl::Status BuildArchive(int epoch, uint64_t seed, model::ModelImpl& model,
                          torch::optim::Adam& optimizer,
                          const TrainingRecord& record,
                          const std::vector<double>* policy_state,
                          torch::serialize::OutputArchive* archive) {
  torch::serialize::OutputArchive model_archive, opt_archive, best_archive;
  model.save(model_archive);
  SaveAdamState(optimizer, model.parameters(), &opt_archive);
  archive->write("model", model_archive);
  archive->write("optimizer", opt_archive);
  for (size_t i = 0; i < record.best_params.size(); ++i) {
    best_archive.write(absl::StrCat("param_", i), record.best_params[i]);
  }
  RETURN_IF_ERROR(record.best_state.Save(&best_archive));
  if (!record.best_test.empty()) {
    best_archive.write("test", DoublesToTensor(record.best_test));
  }
  archive->write("best", best_archive);
  archive->write("history", HistoryTensor(record.epochs));
  archive->write("history_fields", DoublesToTensor({double(kHistoryFields)}));
  if (!record.stage_seconds.empty()) {
    archive->write("stage_seconds", DoublesToTensor(record.stage_seconds));
  }
  archive->write(
      "meta", DoublesToTensor(
                  {double(epoch), double(record.best_epoch), record.best_score,
                   double(record.rounds_without_improvement), double(seed)}));
  if (policy_state != nullptr) {
    archive->write("policy", DoublesToTensor(*policy_state));
  }
  return absl::OkStatus();
}

// Streams `archive` into `final_path` as LibTorch serializes it (the
// archive, node memory included, is never held whole in memory), with its
// checksum and `meta`, by one durable write that cleans up after itself: a
// full disk is an error naming the file, not an abort. Errors name the
// checkpoint's `epoch`.
absl::Status WriteArchive(torch::serialize::OutputArchive& archive,
                          const fs::path& final_path, int epoch,
                          const CheckpointMeta& meta) {
  auto in_epoch = [epoch](const absl::Status& s) {
    return absl::Status(s.code(), absl::StrCat("checkpoint of epoch ", epoch,
                                               ": ", s.message()));
  };
  absl::StatusOr<CheckpointFileWriter> writer =
      CheckpointFileWriter::Create(final_path.string());
  if (!writer.ok()) return in_epoch(writer.status());
  absl::Status written;
  try {
    // After a failed write the rest is dropped but reported as written:
    // LibTorch's zip writer throws from its destructor (an abort) when a
    // write comes back short.
    archive.save_to([&](const void* data, size_t n) -> size_t {
      if (written.ok()) {
        written =
            writer->Append(std::string_view(static_cast<const char*>(data), n));
      }
      return n;
    });
  } catch (const std::exception& e) {
    if (!written.ok()) return in_epoch(written);
    return absl::InternalError(absl::StrCat("cannot serialize checkpoint ",
                                            final_path.string(), ": ",
                                            platform::ExceptionMessage(e)));
  }
  if (!written.ok()) return in_epoch(written);
  if (absl::Status s = writer->Finish(meta); !s.ok()) return in_epoch(s);
  return absl::OkStatus();
}

// Writes one checkpoint file at `final_path` (temp file + rename).
// `policy_state`: a cluster rank's (null: a single process's file).
absl::Status WriteCheckpointFile(const fs::path& final_path, int epoch,
                                 uint64_t seed, model::ModelImpl& model,
                                 torch::optim::Adam& optimizer,
                                 const TrainingRecord& record,
                                 const std::vector<double>* policy_state,
                                 CheckpointMeta meta) {
  std::string created_dir;
  RETURN_IF_ERROR(
      MakeCheckpointDirectory(final_path.parent_path(), &created_dir));
  torch::serialize::OutputArchive archive;
  RETURN_IF_ERROR(BuildArchive(epoch, seed, model, optimizer, record,
                               policy_state, &archive));
  meta.epoch = epoch;
  meta.stop.known = true;
  meta.stop.best_epoch = record.best_epoch;
  meta.stop.rounds_without_improvement = record.rounds_without_improvement;
  RETURN_IF_ERROR(WriteArchive(archive, final_path, epoch, meta));
  if (!created_dir.empty()) {
    return SyncDirectory(created_dir);  // the new directory's entry
  }
  return absl::OkStatus();
}
}  // namespace

absl::Status SaveCheckpoint(const std::string& out_dir, int epoch,
                            uint64_t seed, model::ModelImpl& model,
                            torch::optim::Adam& optimizer,
                            const TrainingRecord& record,
                            const CheckpointMeta& meta) {
  if (out_dir.empty()) return absl::OkStatus();
  return WriteCheckpointFile(SingleCheckpointPath(out_dir, epoch), epoch, seed,
                             model, optimizer, record, nullptr, meta);
}

absl::Status SaveRankCheckpoint(const std::string& out_dir, int epoch, int rank,
                                uint64_t seed, model::ModelImpl& model,
                                torch::optim::Adam& optimizer,
                                const TrainingRecord& record,
                                const std::vector<double>& policy_state,
                                const CheckpointMeta& meta) {
  return WriteCheckpointFile(RankCheckpointPath(out_dir, epoch, rank), epoch,
                             seed, model, optimizer, record, &policy_state,
                             meta);
}

absl::StatusOr<LoadedCheckpoint> LoadCheckpoint(
    const std::string& resume_dir, model::ModelImpl& model,
    torch::optim::Adam& optimizer, int64_t num_nodes,
    const memory::RecordLayout& layout, TrainingRecord* record) {
  ASSIGN_OR_RETURN(ResumePoint point,
                   FindResumePoint(resume_dir, /*verify=*/false));
  return LoadCheckpointFile(point.FileFor(0, 1), model, optimizer, num_nodes,
                            layout, record, nullptr);
}

namespace {
// The envelope of the checkpoint file `path`, its errors as --resume's.
absl::StatusOr<CheckpointEnvelope> ReadEnvelopeToResume(
    const std::string& path) {
  absl::StatusOr<CheckpointEnvelope> env = ReadCheckpointEnvelope(path);
  if (absl::IsNotFound(env.status())) {
    return absl::NotFoundError(
        absl::StrCat("--resume: checkpoint ", path, " does not exist"));
  }
  if (!env.ok()) {
    return absl::Status(env.status().code(),
                        absl::StrCat("--resume: ", env.status().message()));
  }
  return env;
}

// Loads `model_archive` into `model`; INVALID_ARGUMENT when a parameter's
// shape differs from the model's (`path`: the file, for the message).
// Throws what LibTorch's reads throw.
absl::Status LoadModel(torch::serialize::InputArchive& model_archive,
                       const fs::path& path, model::ModelImpl& model) {
  // load() takes the checkpoint's tensors whatever their shapes: a model
  // of other widths would fail later, in a forward pass.
  std::vector<std::pair<std::string, std::vector<int64_t>>> shapes;
  for (const auto& p : model.named_parameters())
    shapes.emplace_back(p.key(), p.value().sizes().vec());
  model.load(model_archive);
  // load() gives each parameter the file's storage: a recurrent layer's
  // weights are then no longer the one contiguous block cuDNN wants (it
  // would copy them at every call on a GPU).
  for (const auto& m : model.modules(/*include_self=*/false)) {
    if (auto* rnn = m->as<torch::nn::RNNImpl>()) rnn->flatten_parameters();
  }
  for (const auto& [name, shape] : shapes) {
    const torch::Tensor* p = model.named_parameters().find(name);
    if (p != nullptr && p->sizes().vec() != shape) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "--resume %s: the checkpoint's parameter %s has shape [%s], this "
          "run's model [%s] (resume with the checkpoint's --model, widths, "
          "--heads and --neighbors)",
          path.string(), name, absl::StrJoin(p->sizes().vec(), ", "),
          absl::StrJoin(shape, ", ")));
    }
  }
  return absl::OkStatus();
}

// The best epoch's parameters (`num_params`), memory and test figures from
// `best_archive` into `record`. Throws what LibTorch's reads throw.
absl::Status LoadBest(torch::serialize::InputArchive& best_archive,
                      size_t num_params, const memory::RecordLayout& layout,
                      int64_t num_nodes, const torch::Device& device,
                      const fs::path& path, TrainingRecord* record) {
  record->best_params.clear();
  for (size_t i = 0; i < num_params; ++i) {
    torch::Tensor p;
    best_archive.read(absl::StrCat("param_", i), p);
    record->best_params.push_back(p);
  }
  if (absl::Status st =
          record->best_state.Load(best_archive, layout, num_nodes, device);
      !st.ok()) {
    return absl::Status(st.code(), absl::StrCat("--resume ", path.string(),
                                                ": ", st.message()));
  }
  torch::Tensor t;
  record->best_test.clear();
  if (best_archive.try_read("test", t)) {
    record->best_test = TensorToDoubles(t);
    if (record->best_test.size() != kBestTestFields) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--resume ", path.string(), ": the checkpoint's best test holds ",
          record->best_test.size(), " figures, not ", kBestTestFields));
    }
  }
  return absl::OkStatus();
}

// The per-epoch figures of `archive`'s history into `epochs` (rows of 12
// fields before "history_fields" was written). Throws what LibTorch's
// reads throw.
void ReadHistory(torch::serialize::InputArchive& archive,
                 std::vector<EpochResult>* epochs) {
  torch::Tensor t;
  archive.read("history", t);
  std::vector<double> h = TensorToDoubles(t);
  epochs->clear();
  size_t fields = 12;
  if (archive.try_read("history_fields", t)) {
    fields = static_cast<size_t>(TensorToDoubles(t).at(0));
  }
  for (size_t i = 0; i + fields <= h.size(); i += fields) {
    EpochResult e;
    e.epoch = static_cast<int>(h[i]);
    e.train_loss = h[i + 1];
    e.val_ap = h[i + 2];
    e.val_auc = h[i + 3];
    e.val_new_node_ap = h[i + 4];
    e.val_new_node_auc = h[i + 5];
    e.val_ap_batch_mean = h[i + 6];
    e.val_new_node_ap_batch_mean = h[i + 7];
    e.seconds = h[i + 8];
    e.eval_seconds = h[i + 9];
    e.train_events = static_cast<int64_t>(h[i + 10]);
    e.grad_norm_mean = h[i + 11];
    if (fields > 12) e.val_loss = h[i + 12];
    if (fields > 13) e.steps = static_cast<int64_t>(h[i + 13]);
    // Unknown in older files: null in summary.json, as for a run without
    // --protocol tgb.
    e.val_mrr = fields > 15 ? h[i + 14] : std::nan("");
    e.val_hits_at_10 = fields > 15 ? h[i + 15] : std::nan("");
    e.train_events_per_second = e.seconds > 0 ? e.train_events / e.seconds : 0;
    epochs->push_back(e);
  }
}

// DATA_LOSS when the model's parameters, Adam's state or the best epoch's
// parameters, memory or mail hold NaN or inf. A file that was written whole but
// holds them (damaged before its checksum was taken, or a file from before
// checksums) would only show as divergence later.
absl::Status CheckFinite(model::ModelImpl& model, torch::optim::Adam& optimizer,
                         const TrainingRecord& record, const fs::path& path) {
  std::vector<std::pair<std::string, torch::Tensor>> checked;
  for (const auto& p : model.named_parameters()) {
    checked.emplace_back(absl::StrCat("parameter ", p.key()), p.value());
    // Adam's moments: NaN there turns the next step's parameters to NaN.
    auto it = optimizer.state().find(OptimizerStateKey(p.value()));
    if (it == optimizer.state().end()) continue;
    auto& st = static_cast<torch::optim::AdamParamState&>(*it->second);
    checked.emplace_back(
        absl::StrCat("optimizer state exp_avg of parameter ", p.key()),
        st.exp_avg());
    checked.emplace_back(
        absl::StrCat("optimizer state exp_avg_sq of parameter ", p.key()),
        st.exp_avg_sq());
  }
  for (size_t i = 0; i < record.best_params.size(); ++i)
    checked.emplace_back(absl::StrCat("best parameter ", i),
                         record.best_params[i]);
  checked.emplace_back("best memory", record.best_state.memory());
  checked.emplace_back("best mail", record.best_state.mail());
  for (const auto& [what, tensor] : checked) {
    if (tensor.defined() && tensor.is_floating_point() &&
        !torch::isfinite(tensor).all().item<bool>()) {
      return absl::DataLossError(absl::StrCat(
          "--resume: checkpoint ", path.string(), ": its ", what,
          " holds values that are not finite (NaN or inf): refusing to "
          "resume from it; remove it (and any later ones) to resume from "
          "the one before"));
    }
  }
  return absl::OkStatus();
}
}  // namespace

absl::StatusOr<LoadedCheckpoint> LoadCheckpointFile(
    const std::string& path, model::ModelImpl& model,
    torch::optim::Adam& optimizer, int64_t num_nodes,
    const memory::RecordLayout& layout, TrainingRecord* record,
    std::vector<double>* policy_state) {
  const fs::path last = path;
  ASSIGN_OR_RETURN(CheckpointEnvelope env, ReadEnvelopeToResume(path));
  try {
    torch::serialize::InputArchive archive, model_archive, opt_archive,
        best_archive;
    // Onto the model's device, whichever the checkpoint was written on (a
    // GPU's resumes on a CPU and the other way round).
    const torch::Device device = model.parameters().empty()
                                     ? torch::Device(torch::kCPU)
                                     : model.parameters()[0].device();
    archive.load_from(env.bytes.data(), env.payload_size, device);
    archive.read("model", model_archive);
    archive.read("optimizer", opt_archive);
    archive.read("best", best_archive);
    RETURN_IF_ERROR(LoadModel(model_archive, last, model));
    RETURN_IF_ERROR(LoadAdamState(opt_archive, model.parameters(), &optimizer));
    // As after any step of an uninterrupted run (see DefineZeroGrads).
    DefineZeroGrads(model.parameters());
    RETURN_IF_ERROR(LoadBest(best_archive, model.parameters().size(), layout,
                             num_nodes, device, last, record));
    ReadHistory(archive, &record->epochs);
    torch::Tensor t;
    record->stage_seconds.clear();
    if (archive.try_read("stage_seconds", t)) {
      record->stage_seconds = TensorToDoubles(t);
    }
    if (policy_state != nullptr) {
      policy_state->clear();
      if (archive.try_read("policy", t)) *policy_state = TensorToDoubles(t);
    }
    archive.read("meta", t);
    std::vector<double> meta = TensorToDoubles(t);
    record->best_epoch = static_cast<int>(meta[1]);
    record->best_score = meta[2];
    record->rounds_without_improvement = static_cast<int>(meta[3]);
    RETURN_IF_ERROR(CheckFinite(model, optimizer, *record, last));
    LoadedCheckpoint loaded;
    loaded.epoch = static_cast<int>(meta[0]);
    loaded.seed = static_cast<uint64_t>(meta[4]);
    loaded.path = last.string();
    loaded.meta = env.meta;
    loaded.verified = env.verified;
    return loaded;
  } catch (const std::exception& e) {
    return absl::DataLossError(absl::StrCat("--resume: cannot read checkpoint ",
                                            last.string(), ": ",
                                            platform::ExceptionMessage(e)));
  }
}

}  // namespace mnemo::runtime
