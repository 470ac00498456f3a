#!/usr/bin/env bash
# Text event files against the columnar event file (mnemo data --convert):
# the time to load a data set and the memory it takes, per process.
#
# Usage: bench/event_file.sh [--data NAME|PATH] [--synthetic EVENTS]
#                            [--repeats R] [--name NAME]
#
# Converts the data set (or a synthetic stream of EVENTS events over
# EVENTS/2 nodes, written first with `mnemo data --synthetic`), then loads
# the source and the columnar file R times each (default 3, alternating)
# with `mnemo data --json`: load seconds (parse or map and check), the
# process's anonymous resident memory after loading (its own heap: a text
# load holds the events there) and its file-backed resident memory (a
# mapped file's pages, shared by every process on the host that maps the
# same file), and peak resident memory. Writes
# bench/results/event_file_NAME.json and .md ($BENCH_RESULTS moves them)
# with the commands and the machine. Work files go to runs/event-file/
# ($EVENT_FILE_WORK).
set -euo pipefail
cd "$(dirname "$0")/.."
data=mathoverflow synthetic=0 repeats=3 name=
while [ $# -gt 0 ]; do
  case $1 in
    --data) data=${2:?--data needs NAME or PATH}; shift 2 ;;
    --synthetic) synthetic=${2:?--synthetic needs EVENTS}; shift 2 ;;
    --repeats) repeats=${2:?--repeats needs R}; shift 2 ;;
    --name) name=${2:?--name needs NAME}; shift 2 ;;
    *) echo "event_file.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
for v in synthetic repeats; do
  [[ ${!v} =~ ^[0-9]+$ ]] || { echo "--$v: a non-negative integer" >&2; exit 2; }
done
bin=${MNEMO_BIN:-build/services/mnemo}
[ -x "$bin" ] || { echo "$bin: not built (scripts/build)" >&2; exit 2; }
results=${BENCH_RESULTS:-bench/results}
work=${EVENT_FILE_WORK:-runs/event-file}
mkdir -p "$work" "$results"
source_cmd=""
if [ "$synthetic" -gt 0 ]; then
  data=$work/synthetic-$synthetic.txt.gz
  name=${name:-synthetic-$synthetic}
  gen_args="data --synthetic --out $data --nodes $((synthetic / 2)) --events $synthetic --communities 100 --bursts 20 --seed 1"
  source_cmd="mnemo $gen_args"
  [ -f "$data" ] || "$bin" $gen_args >&2
fi
name=${name:-$(basename "$data" | sed 's/\..*//')}
columnar=$work/$name.mnev
convert_cmd="mnemo data --convert $data --out $columnar"
"$bin" data --convert "$data" --out "$columnar" >&2
rm -f "$work/$name".run-*.json
for ((r = 0; r < repeats; r++)); do
  for kind in text columnar; do
    src=$data
    [ $kind = columnar ] && src=$columnar
    "$bin" data "$src" --json >"$work/$name.run-$r-$kind.json"
  done
done
python3 - "$work/$name" "$results/event_file_$name" "$data" "$columnar" "$convert_cmd" "$source_cmd" "$repeats" <<'EOF'
import json, os, socket, statistics, sys, datetime
prefix, base, data, columnar, convert_cmd, source_cmd, repeats = sys.argv[1:8]
rows = {"text": [], "columnar": []}
for r in range(int(repeats)):
    for kind in rows:
        rows[kind].append(json.load(open(f"{prefix}.run-{r}-{kind}.json")))
def cpu():
    try:
        model = [l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")][0]
        have = next(l for l in open("/proc/cpuinfo") if l.startswith("flags")).split(":", 1)[1].split()
        return model, [f for f in ("avx2", "fma", "avx512f", "avx512_bf16", "amx_tile") if f in have]
    except Exception:
        return "unknown", []
model, flags = cpu()
summary = {}
for kind, rs in rows.items():
    summary[kind] = {k: statistics.median(r[k] for r in rs)
                     for k in ("load_seconds", "rss_anon_bytes", "rss_file_bytes", "peak_rss_bytes")}
first = rows["text"][0]
out = {"benchmark": os.path.basename(base), "date": datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat(),
       "machine": {"host": socket.gethostname(), "cpu": model, "flags": flags, "nproc": os.cpu_count()},
       "data": data, "columnar_file": columnar, "columnar_bytes": os.path.getsize(columnar),
       "source_path": first["path"], "source_bytes": os.path.getsize(first["path"]),
       "events": first["events"], "nodes": first["nodes"],
       "commands": {"source": source_cmd or None, "convert": convert_cmd,
                    "load": "mnemo data FILE --json"},
       "runs": rows, "median": summary}
json.dump(out, open(base + ".json", "w"), indent=1)
MB = 1 << 20
t, c = summary["text"], summary["columnar"]
L = [f"# Loading events: text against the columnar file ({os.path.basename(base)[len('event_file_'):]})", "",
     f"{model}, {os.cpu_count()} CPUs ({', '.join(flags)}); {first['events']:,} events, {first['nodes']:,} nodes; "
     f"source `{data}` (`{first['path']}`, {out['source_bytes']:,} bytes), columnar file {out['columnar_bytes']:,} bytes "
     f"(`{convert_cmd}`); each loaded {len(rows['text'])} times with `mnemo data FILE --json`, alternating; medians.", ""]
if source_cmd:
    L += [f"Source written by `{source_cmd}`.", ""]
L += ["| | text | columnar | text / columnar |", "|---|---|---|---|",
      f"| load seconds (parse; map and check) | {t['load_seconds']:.3f} | {c['load_seconds']:.3f} | "
      f"{t['load_seconds'] / c['load_seconds']:.1f}x |",
      f"| anonymous RSS after loading (the process's own) | {t['rss_anon_bytes'] / MB:.1f} MB | "
      f"{c['rss_anon_bytes'] / MB:.1f} MB | {t['rss_anon_bytes'] / c['rss_anon_bytes']:.2f}x |",
      f"| file-backed RSS (binary, libraries; columnar: the mapped events, shared) | {t['rss_file_bytes'] / MB:.1f} MB | "
      f"{c['rss_file_bytes'] / MB:.1f} MB | – |",
      f"| peak RSS | {t['peak_rss_bytes'] / MB:.1f} MB | {c['peak_rss_bytes'] / MB:.1f} MB | "
      f"{t['peak_rss_bytes'] / c['peak_rss_bytes']:.2f}x |", "",
      "Anonymous memory is each process's own; file-backed pages of a file mapped read-only are the page cache's, "
      "one copy for every process on the host that maps the file. `mnemo data` also builds the split, "
      "in both cases alike."]
open(base + ".md", "w").write("\n".join(L) + "\n")
print("\n".join(L))
EOF
