// mnemo data: inspect an event file or registry dataset.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_format.h"
#include "services/cli/commands.h"
#include "services/cli/flags.h"
#include "services/cli/run_command.h"
#include "trainer/data/event_file.h"
#include "trainer/data/event_log.h"
#include "trainer/data/registry.h"
#include "trainer/data/split.h"
#include "trainer/data/synthetic.h"
#include "util/json.h"
#include "util/proc.h"

namespace mnemo {
namespace {

// A "Name:   123 kB" field of /proc/self/status, in bytes (0 if absent).
int64_t ProcStatusBytes(const std::string& field) {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (f == nullptr) return 0;
  char line[256];
  int64_t kb = 0;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    if (std::strncmp(line, field.c_str(), field.size()) == 0) {
      kb = std::atoll(line + field.size());
      break;
    }
  }
  std::fclose(f);
  return kb * 1024;
}

}  // namespace

std::vector<std::string> DataSearchDirs(
    const std::vector<std::string>& explicit_dirs) {
  namespace fs = std::filesystem;
  std::vector<std::string> dirs = explicit_dirs;
  if (const char* env = std::getenv("MNEMO_DATA_DIR"); env && *env) {
    dirs.push_back(env);
  }
  dirs.push_back("../shared/data");
  // build/services/mnemo -> <repo>/../shared/data ("mnemo" where the
  // executable's path cannot be read: no parent to walk).
  const fs::path exe = SelfExe();
  for (fs::path p = exe.parent_path(); !p.empty() && p != p.root_path();
       p = p.parent_path()) {
    if (fs::exists(p / "../shared/data")) {
      dirs.push_back((p / "../shared/data").lexically_normal().string());
      break;
    }
  }
  return dirs;
}

int DataMain(int argc, char** argv, int first) {
  std::string format = "auto";
  std::vector<std::string> data_dirs;
  bool skip_bad_lines = false, json = false, list = false;
  std::string id_map;
  FlagSet flags("data",
                "usage: mnemo data [flags] NAME|PATH...\n"
                "       mnemo data --list\n"
                "       mnemo data --synthetic --out FILE [--nodes N] "
                "[--events M] [--seed S] ...\n"
                "       mnemo data --convert NAME|PATH --out FILE\n\n"
                "Loads event files (or registry datasets) and prints what they "
                "hold: events, nodes,\nbipartite, features, time span, the "
                "70/15/15 split and the new-node hold-out. --synthetic writes "
                "a generated stream\nfor scale tests instead; --convert writes "
                "a dataset as a columnar event file that\ntrainers map "
                "read-only instead of parsing (docs/data.md).");
  flags.String("format", &format,
               "file format: auto, snap, tgn, tgn-csv, jodie, konect, tuvw");
  flags.StringList("data-dir", &data_dirs,
                   "directory to look for datasets by name (repeatable; "
                   "before $MNEMO_DATA_DIR and ../shared/data)");
  flags.Bool("skip-bad-lines", &skip_bad_lines, "skip malformed lines");
  flags.Bool("json", &json, "print JSON");
  flags.Bool("list", &list, "list the registry's datasets");
  flags.String("id-map", &id_map,
               "write the dense-to-original id map of the (single) dataset "
               "to this CSV file");
  // --synthetic: a generated stream for scale tests (trainer/data/synthetic.h).
  bool synthetic = false;
  std::string out;
  int64_t seed = 1;
  data::SyntheticOptions gen;
  flags.Bool("synthetic", &synthetic,
             "write a synthetic event stream to --out (SNAP format; .gz "
             "compresses) instead of reading one");
  bool convert = false;
  flags.Bool("convert", &convert,
             "write the (single) dataset to --out as a columnar event file "
             "(mapped, not parsed, by every command that reads events)");
  flags.String("out", &out, "--synthetic, --convert: the file to write");
  flags.Int64("nodes", &gen.nodes, "--synthetic: node ids 0..N-1");
  flags.Int64("events", &gen.events, "--synthetic: events");
  flags.Int64("seed", &seed, "--synthetic: random seed (same seed, same file)");
  flags.Double("degree-exponent", &gen.degree_exponent,
               "--synthetic: power-law exponent of node activity (> 1; 0: "
               "every node alike)");
  flags.Int64("communities", &gen.communities,
              "--synthetic: communities (node u in u mod C)");
  flags.Double("mixing", &gen.mixing,
               "--synthetic: share of events whose destination is drawn "
               "from the whole graph, not the source's community");
  flags.Int64("bursts", &gen.bursts, "--synthetic: burst episodes");
  flags.Int64("burst-events", &gen.burst_events,
              "--synthetic: events per burst");
  flags.Double("burst-factor", &gen.burst_factor,
               "--synthetic: how many times faster events arrive in a burst");
  flags.Double("mean-gap", &gen.mean_gap,
               "--synthetic: mean seconds between events outside bursts");
  std::vector<std::string> positional;
  if (auto rc = flags.ParseOrExitCode(argc, argv, first, &positional,
                                      /*max_positional=*/SIZE_MAX)) {
    return *rc;
  }
  if (synthetic) {
    auto usage = [](const std::string& msg) {
      std::fprintf(stderr, "mnemo data: %s\n", msg.c_str());
      return 2;
    };
    if (!positional.empty()) {
      return usage("--synthetic writes a stream: name no dataset");
    }
    if (out.empty()) return usage("--synthetic needs --out FILE");
    if (seed < 0) return usage("--seed must be >= 0");
    gen.seed = static_cast<uint64_t>(seed);
    if (absl::Status v = data::ValidateSyntheticOptions(gen); !v.ok()) {
      return usage(std::string(v.message()));
    }
    if (absl::Status w = data::WriteSynthetic(gen, out); !w.ok()) {
      std::fprintf(stderr, "mnemo data: %s\n",
                   std::string(w.message()).c_str());
      return 1;
    }
    absl::PrintF(
        "%s: %d events over nodes 0..%d (seed %d, degree exponent %g, %d "
        "communities, mixing %g, %d bursts of %d events x%g, mean gap %g s)\n",
        out, gen.events, gen.nodes - 1, seed, gen.degree_exponent,
        gen.communities, gen.mixing, gen.bursts, gen.burst_events,
        gen.burst_factor, gen.mean_gap);
    return 0;
  }
  if (list) {
    for (const auto& d : data::Datasets()) {
      std::printf("%-14s %-8s %s\n", d.name.c_str(),
                  std::string(data::FormatName(d.format)).c_str(),
                  d.url.c_str());
    }
    return 0;
  }
  if (positional.empty()) {
    std::fprintf(stderr, "mnemo data: name a dataset or file (see --help)\n");
    return 2;
  }
  if (convert && (positional.size() != 1 || out.empty())) {
    std::fprintf(stderr,
                 "mnemo data: --convert takes one dataset and --out FILE\n");
    return 2;
  }
  auto fmt = data::ParseFormat(format);
  if (!fmt.ok()) {
    std::fprintf(stderr, "mnemo data: %s\n",
                 std::string(fmt.status().message()).c_str());
    return 2;
  }
  data::ResolveOptions resolve;
  resolve.search_dirs = DataSearchDirs(data_dirs);
  int rc = 0;
  for (const std::string& name : positional) {
    data::Format registry_format = data::Format::kAuto;
    auto path = data::ResolveDataset(name, resolve, &registry_format);
    if (!path.ok()) {
      std::fprintf(stderr, "mnemo data: %s\n",
                   std::string(path.status().message()).c_str());
      rc = 1;
      continue;
    }
    data::LoadOptions load;
    load.format = *fmt != data::Format::kAuto ? *fmt : registry_format;
    load.skip_bad_lines = skip_bad_lines;
    data::LoadReport report;
    const double load_start = MonotonicSeconds();
    auto log = data::LoadEventLog(*path, load, &report);
    const double load_seconds = MonotonicSeconds() - load_start;
    if (!log.ok()) {
      std::fprintf(stderr, "mnemo data: %s\n",
                   std::string(log.status().message()).c_str());
      rc = 1;
      continue;
    }
    if (convert) {
      if (absl::Status w = data::WriteEventFile(*log, out); !w.ok()) {
        std::fprintf(stderr, "mnemo data: %s\n",
                     std::string(w.message()).c_str());
        return 1;
      }
      std::error_code ec;
      const auto bytes = std::filesystem::file_size(out, ec);
      absl::PrintF(
          "%s -> %s: %d events, %d nodes, edge features %d%s, %d bytes "
          "(columnar; read it as --data %s)\n",
          *path, out, log->num_events(), log->num_nodes, log->edge_feature_dim,
          log->labels.empty() ? "" : ", labels",
          ec ? int64_t{-1} : static_cast<int64_t>(bytes), out);
      return 0;
    }
    data::Split split = data::MakeSplit(*log, data::SplitOptions{});
    const double span = log->t.empty() ? 0 : log->t.back() - log->t.front();
    if (json) {
      JsonWriter w;
      w.BeginObject();
      w.Field("path", *path);
      w.Field("format", data::FormatName(log->format));
      w.Field("columnar", log->mapping != nullptr);
      w.Field("load_seconds", load_seconds);
      // Memory after loading: the process's own (anonymous) pages, and the
      // file pages it maps (a columnar file's events: shared with every
      // process that maps the file).
      w.Field("rss_anon_bytes", ProcStatusBytes("RssAnon:"));
      w.Field("rss_file_bytes", ProcStatusBytes("RssFile:"));
      w.Field("peak_rss_bytes", PeakRssBytes());
      w.Field("events", log->num_events());
      w.Field("nodes", log->num_nodes);
      w.Field("bipartite", log->bipartite);
      w.Field("edge_feature_dim", log->edge_feature_dim);
      w.Field("has_labels", !log->labels.empty());
      w.Field("time_offset", log->time_offset);
      w.Field("time_span", span);
      w.Field("was_sorted", report.was_sorted);
      w.Field("bad_lines_skipped", report.bad_lines_skipped);
      w.Field("train_events", static_cast<int64_t>(split.train.size()));
      w.Field("val_events", static_cast<int64_t>(split.val.size()));
      w.Field("test_events", static_cast<int64_t>(split.test.size()));
      w.Field("new_node_val_events",
              static_cast<int64_t>(split.new_node_val.size()));
      w.Field("new_node_test_events",
              static_cast<int64_t>(split.new_node_test.size()));
      w.EndObject();
      std::printf("%s\n", w.str().c_str());
    } else {
      absl::PrintF(
          "%s (%s)\n  events %d, nodes %d%s, edge features %d%s\n"
          "  time span %.0f (offset %.0f)%s%s\n"
          "  split: train %d, val %d (new-node %d), test %d (new-node %d)\n",
          path->c_str(), std::string(data::FormatName(log->format)).c_str(),
          log->num_events(), log->num_nodes,
          log->bipartite ? ", bipartite" : "", log->edge_feature_dim,
          log->labels.empty() ? "" : ", labels", span, log->time_offset,
          report.was_sorted ? "" : ", sorted by time on load",
          report.bad_lines_skipped ? absl::StrFormat(", %d bad lines skipped",
                                                     report.bad_lines_skipped)
                                         .c_str()
                                   : "",
          split.train.size(), split.val.size(), split.new_node_val.size(),
          split.test.size(), split.new_node_test.size());
    }
    if (!id_map.empty()) {
      absl::Status ws = data::SaveIdMap(*log, id_map);
      if (!ws.ok()) {
        std::fprintf(stderr, "mnemo data: %s\n",
                     std::string(ws.message()).c_str());
        rc = 1;
      }
    }
  }
  return rc;
}

}  // namespace mnemo
