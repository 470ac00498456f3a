#!/usr/bin/env bash
# Every model on one data set with its defaults (TGL's configurations):
# `mnemo train --data DATA --model M --epochs E --seed S` for each model and
# seed, one after the other, and a report of test AP (transductive and new
# node), best validation AP, training events/s and epoch seconds per model.
#
# Usage: bench/models.sh [--data NAME] [--epochs E] [--seeds "1 2 3"]
#                        [--models "tgn jodie apan tgat dysat"] [--name NAME]
#                        [--jobs N] [--runs DIR] [-- EXTRA_FLAGS...]
# Writes bench/results/models_NAME.json and .md (NAME: the data set's name
# unless given; $BENCH_RESULTS moves them), with the commands and the
# machine (CPU model and flags). With `-- --protocol tgb` the report gives
# the ranking figures (validation and test MRR, Hits@10) instead of AP.
# --jobs N: up to N trainings at once (give each `-- --threads 1` so that
# they do not share cores; the report says how many ran at once).
# --runs DIR: keep each run in DIR/MODEL-SEED; a run whose summary.json is
# there already is not repeated (an interrupted sweep resumes).
set -euo pipefail
cd "$(dirname "$0")/.."
data=wikipedia
epochs=3
seeds="1"
models="tgn jodie apan tgat dysat"
name=
jobs=1
keep=
while [ $# -gt 0 ]; do
  case $1 in
    --data) data=${2:?--data needs NAME}; shift 2 ;;
    --epochs) epochs=${2:?--epochs needs E}; shift 2 ;;
    --seeds) seeds=${2:?--seeds needs a list}; shift 2 ;;
    --models) models=${2:?--models needs a list}; shift 2 ;;
    --name) name=${2:?--name needs NAME}; shift 2 ;;
    --jobs) jobs=${2:?--jobs needs N}; shift 2 ;;
    --runs) keep=${2:?--runs needs DIR}; shift 2 ;;
    --) shift; break ;;
    *) echo "models.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
bin=${MNEMO_BIN:-build/services/mnemo}
[ -x "$bin" ] || { echo "$bin: not built (scripts/build)" >&2; exit 2; }
[[ "$jobs" =~ ^[1-9][0-9]*$ ]] || { echo "models.sh: --jobs needs a positive integer, got '$jobs'" >&2; exit 2; }
results=${BENCH_RESULTS:-bench/results}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
runs=$work/runs.tsv
: >"$runs"
start=$(date -u +%Y-%m-%dT%H:%M:%SZ)
rundir=${keep:-$work}
mkdir -p "$rundir"
# one_run OUT CMD...: one training; its log beside OUT.
one_run() {
  local out=$1
  shift
  "$@" --out "$out" >"$out.log" 2>&1 || {
    cat "$out.log" >&2
    echo "models.sh: failed: $*" >&2
    return 1
  }
}
pids=()
for m in $models; do
  for s in $seeds; do
    out=$rundir/$m-$s
    cmd=("$bin" train --data "$data" --model "$m" --epochs "$epochs" --seed "$s" --patience 0 "$@")
    printf '%s\t%s\t%s\t%s\n' "$m" "$s" "$out/summary.json" "${cmd[*]}" >>"$runs"
    if [ -f "$out/summary.json" ]; then
      echo "== done already: ${cmd[*]}" >&2
      continue
    fi
    rm -rf "$out"
    echo "== ${cmd[*]}" >&2
    one_run "$out" "${cmd[@]}" &
    pids+=($!)
    if [ "${#pids[@]}" -ge "$jobs" ]; then
      wait -n || exit 1
      alive=()
      for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive+=("$p"); done
      pids=("${alive[@]}")
    fi
  done
done
for p in "${pids[@]}"; do wait "$p" || exit 1; done
mkdir -p "$results"
python3 - "$runs" "$results/models_${name:-$data}" "$data" "$start" "$jobs" <<'PY'
import json, statistics, sys
runs_file, out, data, start, jobs = sys.argv[1:]
jobs = int(jobs)
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
cpuflags = next((l.split(":", 1)[1].split() for l in open("/proc/cpuinfo") if l.startswith("flags")), [])
isa = [f for f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16") if f in cpuflags]
ncpu = sum(1 for l in open("/proc/cpuinfo") if l.startswith("processor"))
rows = []
for line in open(runs_file):
    model, seed, path, cmd = line.rstrip("\n").split("\t")
    s = json.load(open(path))
    ep = s["epochs"]
    tgb = s["test"].get("mrr") is not None  # --protocol tgb: ranking figures
    rows.append({
        "model": model, "seed": int(seed), "command": cmd, "tgb": tgb,
        "epochs": len(ep), "best_epoch": s["best_epoch"],
        "best_val_ap": None if tgb else max(e["val_ap"] for e in ep),
        "best_val_mrr": max(e["val_mrr"] for e in ep) if tgb else None,
        "test_mrr": s["test"].get("mrr"), "test_hits_at_10": s["test"].get("hits_at_10"),
        "eval_seconds": statistics.mean(e["eval_seconds"] for e in ep),
        "test_ap": s["test"]["ap"], "test_new_node_ap": s["test"]["new_node_ap"],
        "train_events_per_second": s["train_events_per_second"],
        "epoch_seconds": statistics.mean(e["seconds"] for e in ep),
        "peak_rss_bytes": s.get("peak_rss_bytes", 0),
        "config": {k: s["config"][k] for k in ("batch_size", "lr", "memory_dim", "time_dim", "embedding_dim", "neighbors", "neighbor_strategy", "heads", "dropout", "layers") if k in s.get("config", {})},
    })
machine = {"cpu": cpu, "cpus": ncpu, "isa": isa}
json.dump({"data": data, "start": start, "machine": machine, "jobs": jobs, "runs": rows}, open(out + ".json", "w"), indent=1)
by = {}
for r in rows:
    by.setdefault(r["model"], []).append(r)
def ms(v):
    return f"{statistics.mean(v):.4f}" + (f" ± {statistics.stdev(v):.4f}" if len(v) > 1 else "")
tgb = any(r["tgb"] for r in rows)
with open(out + ".md", "w") as f:
    f.write(f"# Models on {data}\n\n")
    f.write(f"Machine: {cpu}, {ncpu} CPUs ({', '.join(isa)}). Each model with its defaults "
            "(TGL's configurations), `--patience 0`; the test figures are the best "
            "validation epoch's.\n\n")
    if jobs > 1:
        f.write(f"Up to {jobs} trainings ran at once (events/s and seconds are "
                "each run's own, sharing the machine's memory bandwidth).\n\n")
    if tgb:
        f.write("`--protocol tgb`: one-vs-many ranking (MRR, Hits@10 with TGB's tie "
                "rule; docs/training.md). Validation s: one ranking pass over the "
                "validation events per epoch.\n\n")
        f.write("| model | seeds | epochs | best val MRR | test MRR | test Hits@10 | train events/s | epoch s | validation s | peak RSS MB |\n")
        f.write("|---|---|---|---|---|---|---|---|---|---|\n")
        for m, rs in by.items():
            f.write(f"| {m} | {len(rs)} | {rs[0]['epochs']} | {ms([r['best_val_mrr'] for r in rs])} | "
                    f"{ms([r['test_mrr'] for r in rs])} | {ms([r['test_hits_at_10'] for r in rs])} | "
                    f"{statistics.mean(r['train_events_per_second'] for r in rs):.0f} | "
                    f"{statistics.mean(r['epoch_seconds'] for r in rs):.1f} | "
                    f"{statistics.mean(r['eval_seconds'] for r in rs):.1f} | "
                    f"{max(r['peak_rss_bytes'] for r in rs) / 2**20:.0f} |\n")
        by = {}
    else:
        f.write("| model | seeds | epochs | best val AP | test AP | new-node test AP | train events/s | epoch s | peak RSS MB |\n")
        f.write("|---|---|---|---|---|---|---|---|---|\n")
    for m, rs in by.items():
        f.write(f"| {m} | {len(rs)} | {rs[0]['epochs']} | {ms([r['best_val_ap'] for r in rs])} | "
                f"{ms([r['test_ap'] for r in rs])} | {ms([r['test_new_node_ap'] for r in rs])} | "
                f"{statistics.mean(r['train_events_per_second'] for r in rs):.0f} | "
                f"{statistics.mean(r['epoch_seconds'] for r in rs):.1f} | "
                f"{max(r['peak_rss_bytes'] for r in rs) / 2**20:.0f} |\n")
    f.write("\nCommands (`--out` omitted):\n\n")
    for r in rows:
        f.write(f"    {r['command']}\n")
print(open(out + ".md").read())
PY
