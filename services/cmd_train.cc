// mnemo train: the embedded default, all roles in one process.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "services/commands.h"
#include "services/flags.h"
#include "trainer/runtime/train.h"

namespace mnemo {

int TrainMain(int argc, char** argv, int first) {
  runtime::TrainOptions o;
  std::vector<std::string> data_dirs;
  std::string data = o.dataset;
  std::string progress = "auto";
  FlagSet flags("train",
                "usage: mnemo train [--data NAME|PATH] [flags]\n\n"
                "Trains a memory-based temporal GNN (TGN or JODIE) on an event "
                "stream in one process\nand evaluates it on the chronological "
                "70/15/15 split (transductive and new-node\nlink prediction, "
                "AP and AUC). Datasets by name are looked up in --data-dir, "
                "then\n$MNEMO_DATA_DIR, then ../shared/data.");
  flags.String("data", &data,
               "dataset: a registry name (wikipedia, mathoverflow, collegemsg, "
               "bitcoin-alpha, uslegis, reddit, mooc, lastfm, askubuntu) or a "
               "path to an event file");
  flags.StringList("data-dir", &data_dirs,
                   "directory to look for datasets by name (repeatable; before "
                   "$MNEMO_DATA_DIR and ../shared/data)");
  flags.String("format", &o.format,
               "file format: auto, snap, tgn, tgn-csv, jodie, konect, tuvw");
  flags.Bool("skip-bad-lines", &o.skip_bad_lines,
             "skip malformed lines (and report how many) instead of failing");
  flags.Int64("max-events", &o.max_events,
              "use only the first N events in time order (0: all)");
  flags.String("model", &o.model, "model: tgn or jodie");
  flags.Int("epochs", &o.epochs, "maximum number of training epochs");
  flags.Int64("batch-size", &o.batch_size, "training batch size (events)");
  flags.Int64("eval-batch-size", &o.eval_batch_size,
              "evaluation batch size (0: same as --batch-size)");
  flags.Double("lr", &o.lr, "Adam learning rate");
  flags.Int64("memory-dim", &o.memory_dim, "node memory width");
  flags.Int64("time-dim", &o.time_dim, "time encoding width");
  flags.Int64("embedding-dim", &o.embedding_dim,
              "node embedding width (TGN; JODIE uses --memory-dim)");
  flags.Int("neighbors", &o.neighbors,
            "temporal neighbours per node for graph attention (TGN)");
  flags.String("neighbor-strategy", &o.neighbor_strategy,
               "neighbour sampling: recent (k most recent) or uniform");
  flags.Int("heads", &o.heads, "attention heads (TGN)");
  flags.Double("dropout", &o.dropout, "attention dropout (TGN)");
  flags.Int("patience", &o.patience,
            "early stopping: epochs without val AP improvement (0: off)");
  flags.Uint64("seed", &o.seed,
               "seed for initialization, sampling and negatives (evaluation "
               "negatives use fixed seeds)");
  flags.Int("threads", &o.threads, "intra-op CPU threads (0: all cores)");
  flags.String("precision", &o.precision,
               "fp32, or bf16 (autocast with fp32 master weights)");
  flags.String("out", &o.out_dir,
               "output directory: summary.json, metrics.csv, id_map.csv, "
               "checkpoints/");
  flags.String("resume", &o.resume_dir,
               "continue from the last checkpoint in this --out directory");
  flags.String("config", &o.config_path,
               "YAML file of 'flag-name: value' lines; flags override it");
  flags.String("progress", &progress,
               "progress display: auto (bar on a terminal), bar, lines, none");
  std::vector<std::string> positional;
  bool help = false;
  absl::Status s = flags.Parse(argc, argv, first, &positional, &help);
  if (help) {
    std::printf("%s", flags.Help().c_str());
    return 0;
  }
  if (!s.ok()) {
    std::fprintf(stderr, "mnemo train: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  if (!positional.empty()) {
    std::fprintf(stderr, "mnemo train: unexpected argument '%s'\n",
                 positional[0].c_str());
    return 2;
  }
  o.dataset = data;
  if (!o.resume_dir.empty() && o.out_dir.empty()) o.out_dir = o.resume_dir;
  o.data_dirs = DataSearchDirs(data_dirs);
  if (progress == "auto") {
    o.progress_bar = isatty(STDERR_FILENO);
  } else if (progress == "bar") {
    o.progress_bar = true;
  } else if (progress == "none") {
    o.progress_interval_s = 1e18;
  } else if (progress != "lines") {
    std::fprintf(stderr,
                 "mnemo train: --progress must be auto, bar, lines or none\n");
    return 2;
  }
  runtime::TrainCallbacks callbacks;
  callbacks.log = [](const std::string& line) {
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
  };
  auto result = runtime::Train(o, callbacks);
  if (!result.ok()) {
    std::fprintf(stderr, "mnemo train: %s\n",
                 std::string(result.status().message()).c_str());
    return 1;
  }
  if (!o.out_dir.empty()) {
    std::printf("wrote %s/summary.json\n", o.out_dir.c_str());
  }
  return 0;
}

}  // namespace mnemo
