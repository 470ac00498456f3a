#include "trainer/runtime/task.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <numeric>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "trainer/data/registry.h"
#include "util/status_macros.h"

namespace mnemo::runtime {
namespace fs = std::filesystem;
namespace {

// Sorted unique destinations of `events`.
std::vector<int32_t> UniqueDestinations(const data::EventLog& log,
                                        const std::vector<int64_t>& events) {
  std::vector<int32_t> d;
  d.reserve(events.size());
  for (int64_t e : events) d.push_back(log.dst[e]);
  std::sort(d.begin(), d.end());
  d.erase(std::unique(d.begin(), d.end()), d.end());
  return d;
}

// Mean and (population) standard deviation of the time since a node's
// previous event (0 before its first) over `events` (null: all), counting
// nodes as sources (role 0), destinations (role 1) or both, each role with
// its own last-seen times when one is chosen. JODIE normalizes time gaps
// with these.
std::pair<double, double> GapStats(const data::EventLog& log,
                                   const std::vector<int64_t>* events,
                                   int role) {
  std::vector<double> last(log.num_nodes, 0.0);
  double sum = 0, sq = 0;
  int64_t count = 0;
  auto visit = [&](int64_t e) {
    for (int r = 0; r < 2; ++r) {
      if (role >= 0 && r != role) continue;
      const int32_t u = r == 0 ? log.src[e] : log.dst[e];
      const double dt = log.t[e] - last[u];
      sum += dt;
      sq += dt * dt;
      ++count;
      last[u] = log.t[e];
    }
  };
  if (events != nullptr) {
    for (int64_t e : *events) visit(e);
  } else {
    for (int64_t e = 0; e < log.num_events(); ++e) visit(e);
  }
  const double mean = count ? sum / count : 0;
  const double var = count ? sq / count - mean * mean : 0;
  return {mean, var > 0 ? std::sqrt(var) : 1.0};
}

// --protocol tgb: each evaluation split's ranking negatives, read from
// their file when one was written before (same data, split, k and seed),
// else drawn and written there.
absl::Status MakeRankingNegatives(const TrainOptions& o, Progress* progress,
                                  Task* task) {
  Task& t = *task;
  data::TgbNegativeOptions nopt;
  const int64_t k = o.eval.tgb_negatives >= 0   ? o.eval.tgb_negatives
                    : t.log.name == "wikipedia" ? 0
                                                : 100;
  nopt.strategy =
      k == 0 ? data::TgbStrategy::kEveryOther : data::TgbStrategy::kHistRandom;
  nopt.per_positive = k;
  nopt.seed = static_cast<uint64_t>(o.eval.tgb_seed);
  const std::string dir =
      !o.eval.tgb_negatives_dir.empty()
          ? o.eval.tgb_negatives_dir
          : (o.run.out_dir.empty()
                 ? ""
                 : (fs::path(o.run.out_dir) / "tgb_negatives").string());
  t.tgb_negatives_text =
      k == 0 ? "every other destination"
             : absl::StrFormat("%d per positive (historical + random), seed %d",
                               k, o.eval.tgb_seed);
  for (const auto& [split, events, out] :
       {std::tuple<const char*, const std::vector<int64_t>*,
                   data::RankingNegatives*>{"val", &t.split.val,
                                            &t.val_ranking},
        {"test", &t.split.test, &t.test_ranking}}) {
    const std::string path =
        dir.empty() || k == 0
            ? ""
            : (fs::path(dir) /
               absl::StrFormat("%s_%dev_hist_rnd_%s_k%d_seed%d.ns", t.log.name,
                               t.log.num_events(), split, k, o.eval.tgb_seed))
                  .string();
    std::error_code ec;
    if (!path.empty() && fs::exists(path, ec)) {
      ASSIGN_OR_RETURN(*out, data::ReadTgbNegatives(path, t.log, *events));
      progress->Log(absl::StrFormat("tgb: %s negatives from %s", split, path));
      continue;
    }
    *out = data::MakeTgbNegatives(t.log, *events, t.split.all_destinations,
                                  t.split.train, nopt);
    if (!path.empty()) {
      fs::create_directories(dir, ec);
      RETURN_IF_ERROR(data::WriteTgbNegatives(
          path, t.log, *events, *out,
          absl::StrFormat("data %s, %s split, %s", t.log.name, split,
                          t.tgb_negatives_text)));
      progress->Log(
          absl::StrFormat("tgb: %s negatives written to %s", split, path));
    }
  }
  return absl::OkStatus();
}

// Resolves and loads the data set `o` names into t->log (t->data_path,
// t->load_report); logs a warning for skipped lines.
absl::Status LoadLog(const TrainOptions& o, Progress* progress, Task* t) {
  data::Format format = data::Format::kAuto;
  ASSIGN_OR_RETURN(format, data::ParseFormat(o.data.format));
  data::ResolveOptions resolve;
  resolve.search_dirs = o.data.data_dirs;
  data::Format registry_format = data::Format::kAuto;
  ASSIGN_OR_RETURN(t->data_path, data::ResolveDataset(o.data.dataset, resolve,
                                                      &registry_format));
  data::LoadOptions load;
  load.format = format != data::Format::kAuto ? format : registry_format;
  load.skip_bad_lines = o.data.skip_bad_lines;
  load.max_events = o.data.max_events;
  const data::DatasetInfo* info = data::FindDataset(o.data.dataset);
  load.name = info ? info->name : fs::path(t->data_path).stem().string();
  ASSIGN_OR_RETURN(t->log,
                   data::LoadEventLog(t->data_path, load, &t->load_report));
  if (t->load_report.bad_lines_skipped > 0) {
    progress->Log(
        absl::StrFormat("warning: skipped %d malformed lines of %s (first: %s)",
                        t->load_report.bad_lines_skipped, t->data_path,
                        t->load_report.first_bad_line_error));
  }
  return absl::OkStatus();
}

// The chronological split of t->log into t->split; INVALID_ARGUMENT when
// a part is empty, saying why it likely is.
absl::Status SplitLog(Task* t) {
  data::SplitOptions split_options;
  split_options.reference_draw = t->reference_protocol;
  // TGB trains on every training event: no new-node hold-out.
  if (t->tgb) split_options.new_node_fraction = 0;
  t->split = data::MakeSplit(t->log, split_options);
  if (!t->split.train.empty() && !t->split.val.empty() &&
      !t->split.test.empty()) {
    return absl::OkStatus();
  }
  // The split cuts at time quantiles: with enough events, an empty part
  // means the timestamps do not spread (often one timestamp for all).
  const auto [lo, hi] = std::minmax_element(t->log.t.begin(), t->log.t.end());
  if (t->log.num_events() >= 20 && lo != t->log.t.end() && *lo == *hi) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: all %d events have the same timestamp, so the chronological "
        "70/15/15 split has nothing to cut at (the third field must be "
        "the event time)",
        t->data_path, t->log.num_events()));
  }
  return absl::InvalidArgumentError(absl::StrFormat(
      "%s: the chronological 70/15/15 split of %d events left a part "
      "empty (train %d, validation %d, test %d): too few events or too "
      "few distinct timestamps",
      t->data_path, t->log.num_events(), t->split.train.size(),
      t->split.val.size(), t->split.test.size()));
}

// Negative candidates and evaluation negative seeds (TGN protocol: seeds
// 0-3, independent of --seed).
void ChooseNegatives(Task* task) {
  Task& t = *task;
  if (t.reference_protocol || t.log.bipartite || t.tgb) {
    // The reference draws from the unique destinations of each sampler's
    // data: training events; all events (validation, test, and -- a quirk
    // of the reference -- new-node validation, with the validation seed);
    // the new-node test events.
    // (TGB trains against any destination of the data set.)
    t.train_neg_candidates =
        t.tgb ? t.split.all_destinations : t.split.train_destinations;
    t.val_negs = {t.split.all_destinations, kValSeed};
    t.test_negs = {t.split.all_destinations, kTestSeed};
    if (t.reference_protocol) {
      t.new_node_val_negs = {t.split.all_destinations, kValSeed};
      t.new_node_test_negs = {UniqueDestinations(t.log, t.split.new_node_test),
                              kNewNodeTestSeed};
    } else {
      t.new_node_val_negs = {t.split.all_destinations, kNewNodeValSeed};
      t.new_node_test_negs = {t.split.all_destinations, kNewNodeTestSeed};
    }
  } else {
    std::vector<int32_t> all(t.log.num_nodes);
    std::iota(all.begin(), all.end(), 0);
    t.train_neg_candidates = all;
    t.val_negs = {all, kValSeed};
    t.new_node_val_negs = {all, kNewNodeValSeed};
    t.test_negs = {all, kTestSeed};
    t.new_node_test_negs = {all, kNewNodeTestSeed};
  }
  if (t.train_neg_candidates.empty()) t.train_neg_candidates = {0};
  if (t.new_node_test_negs.candidates.empty()) {
    t.new_node_test_negs.candidates = t.split.all_destinations;
  }
}

// Time-gap statistics (JODIE's embedding reads normalized gaps): the
// reference's over every event, per role; else over the training events.
batch::TimeGapStats TimeGaps(const Task& t) {
  if (t.reference_protocol) {
    const auto [sm, ss] = GapStats(t.log, nullptr, /*role=*/0);
    const auto [dm, ds] = GapStats(t.log, nullptr, /*role=*/1);
    return {sm, ss, dm, ds};
  }
  const auto [m, sd] = GapStats(t.log, &t.split.train, /*role=*/-1);
  return {m, sd, m, sd};
}

}  // namespace

absl::StatusOr<std::unique_ptr<Task>> LoadTask(const TrainOptions& o,
                                               bool evaluates,
                                               Progress* progress) {
  auto task = std::make_unique<Task>();
  Task& t = *task;
  t.reference_protocol = o.eval.protocol == Protocol::kTgnReference;
  RETURN_IF_ERROR(LoadLog(o, progress, &t));
  t.tgb = o.eval.protocol == Protocol::kTgb;
  RETURN_IF_ERROR(SplitLog(&t));
  t.train_graph = std::make_unique<data::TemporalGraph>(t.log, t.split.train);
  if (evaluates) t.full_graph = std::make_unique<data::TemporalGraph>(t.log);
  ChooseNegatives(&t);
  t.time_gaps = TimeGaps(t);
  if (t.tgb) RETURN_IF_ERROR(MakeRankingNegatives(o, progress, &t));
  return task;
}

}  // namespace mnemo::runtime
