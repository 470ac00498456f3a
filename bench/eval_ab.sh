#!/bin/bash
# Rank 0's evaluation through a bounded working set (--memory-cache-bytes),
# configurations side by side in one session: a baseline binary
# (MNEMO_BASE, e.g. a build from before a change; optional) and this build
# (MNEMO_BIN) at each --memory-prefetch depth.
#
# Usage:
#   [MNEMO_BASE=PATH] bench/eval_ab.sh [--nodes N] [--events M]
#       [--degree-exponent E] [--seed S] [--cache-bytes B] [--hot-bytes HB]
#       [--prefetch "D ..."]
#   The synthetic stream of bench/scale.sh (made when missing; default
#   1,000,000 node ids, 2,000,000 events, degree exponent 3), 2 workers
#   and 2 shards, TGN at its defaults, one epoch of deptgl:replay+sync,
#   each worker holding B bytes of node state (default 158716764) and each
#   shard HB hot (default 76736550), as the scale runs; prefetch depths
#   default "0 4". Each configuration runs once, in turn. Reports the
#   epoch's training and evaluation seconds, evaluation events/s, the
#   seconds the evaluating thread waited for pulls, the states pulled
#   ahead, the bytes all the job's processes wrote to disk (getrusage of
#   the reaped children), and test AP, which must be the same in every run
#   (the script fails otherwise).
#   bench/results/eval_bounded_N_M[_eE].{json,md}.
set -euo pipefail
cd "$(dirname "$0")/.."
nodes=1000000 events=2000000 exponent=3 seed=1
cache=158716764 hot=76736550 depths="0 4"
while [ $# -gt 0 ]; do
  case $1 in
    --nodes) nodes=${2:?}; shift 2 ;;
    --events) events=${2:?}; shift 2 ;;
    --degree-exponent) exponent=${2:?}; shift 2 ;;
    --seed) seed=${2:?}; shift 2 ;;
    --cache-bytes) cache=${2:?}; shift 2 ;;
    --hot-bytes) hot=${2:?}; shift 2 ;;
    --prefetch) depths=${2:?}; shift 2 ;;
    *) sed -n '2,22p' "$0" >&2; exit 2 ;;
  esac
done
MNEMO=${MNEMO_BIN:-build/services/mnemo}
[ -x "$MNEMO" ] || { echo "eval_ab.sh: build first (scripts/build)" >&2; exit 1; }
BASE=${MNEMO_BASE:-}
work=${SCALE_WORK:-runs/scale}
results=${BENCH_RESULTS:-bench/results}
mkdir -p "$work/eval_ab" "$results"
shape=""
[ "$exponent" != 2 ] && shape="-e$exponent"
# shellcheck source=bench/lib_runs.sh
source bench/lib_runs.sh
stream=$(synthetic_stream "$MNEMO" "$work" "$nodes" "$events" "$exponent")

# run NAME BINARY [FLAGS...]: one job; its summary and the rusage of all
# its processes go to $work/eval_ab/NAME.
run() {
  local name=$1 bin=$2
  shift 2
  local dir="$work/eval_ab/$name"
  rm -rf "$dir"
  mkdir -p "$dir"
  echo "== $name: $bin $*" >&2
  python3 - "$dir/rusage.json" "$bin" train --workers 2 --epochs 1 \
    --patience 0 --progress none --seed "$seed" --data "$stream.mnemo" \
    --policy deptgl:replay+sync --memstore-hot-bytes "$hot" \
    --no-memstore-mmap-reads --memory-cache-bytes "$cache" \
    --out "$dir/out" "$@" <<'PY'
import json, resource, subprocess, sys, time
t0 = time.monotonic()
rc = subprocess.call(sys.argv[2:])
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
json.dump({"rc": rc, "wall_seconds": time.monotonic() - t0,
           "written_bytes": ru.ru_oublock * 512,
           "max_child_rss_bytes": ru.ru_maxrss * 1024},
          open(sys.argv[1], "w"))
sys.exit(rc)
PY
  rm -rf "$dir/out/cluster" "$dir/out/checkpoints"
}

names=()
if [ -n "$BASE" ]; then
  run base "$BASE"
  names+=("base=$BASE")
fi
for d in $depths; do
  run "prefetch-$d" "$MNEMO" --memory-prefetch "$d"
  names+=("prefetch-$d=$MNEMO --memory-prefetch $d")
done

stem="$results/eval_bounded_${nodes}_$events${shape//-/_}"
python3 - "$stem" "$work/eval_ab" \
  "bench/eval_ab.sh --nodes $nodes --events $events --degree-exponent $exponent --seed $seed --cache-bytes $cache --hot-bytes $hot --prefetch \"$depths\"${BASE:+ (MNEMO_BASE=$BASE)}" \
  "$MNEMO train --workers 2 --epochs 1 --patience 0 --seed $seed --data $stream.mnemo --policy deptgl:replay+sync --memstore-hot-bytes $hot --no-memstore-mmap-reads --memory-cache-bytes $cache" \
  "${names[@]}" <<'PY'
import json, os, sys
stem, work, command, run_command = sys.argv[1:5]
info = open("/proc/cpuinfo").read().splitlines()
cpu = next((l.split(":", 1)[1].strip() for l in info
            if l.startswith("model name")), "unknown")
flags = next((l.split(":", 1)[1].split() for l in info
              if l.startswith("flags")), [])
isa = " ".join(f for f in ("avx2", "avx512f") if f in flags)
machine = f"{cpu} ({isa}), {os.cpu_count()} CPUs"
rows = []
for arg in sys.argv[5:]:
    name, how = arg.split("=", 1)
    s = json.load(open(f"{work}/{name}/out/summary.json"))
    ru = json.load(open(f"{work}/{name}/rusage.json"))
    d, c, e = s["data"], s["comm"], s["epochs"][0]
    ws = c.get("working_set", {})
    eval_events = (d["val_events"] + d["new_node_val_events"] +
                   d["test_events"] + d["new_node_test_events"])
    ev = s["time_breakdown_seconds"]["evaluation"]
    rows.append({
        "name": name, "command": how,
        "train_seconds": e["seconds"], "eval_seconds": ev,
        "eval_events": eval_events, "eval_events_per_second": eval_events / ev,
        "eval_pull_seconds": c["eval_pull_seconds"],
        "eval_states_pulled": c["eval_states_pulled"],
        "prefetched": ws.get("prefetched", 0),
        "prefetch_unused": ws.get("prefetch_unused", 0),
        "written_bytes": ru["written_bytes"],
        "wall_seconds": ru["wall_seconds"],
        "test_ap": s["test"]["ap"], "new_node_test_ap": s["test"]["new_node_ap"],
    })
json.dump({"machine": machine, "command": command, "rows": rows},
          open(stem + ".json", "w"), indent=1)
first = rows[0]
out = [f"# Bounded evaluation, {rows[0]['eval_events']:,} evaluation events: configurations side by side", "",
       f"Machine: {machine}.", "", "Command (one session, each configuration once, in turn):", "",
       "```", command, f"(each run: {run_command} [--memory-prefetch D])", "```", "",
       "| run | training s | evaluation s | evaluation events/s | vs first | waiting for pulls s | states pulled | of them ahead | written to disk GB | test AP | new-node test AP |",
       "|---|---|---|---|---|---|---|---|---|---|---|"]
for r in rows:
    out.append(
        f"| {r['name']} | {r['train_seconds']:.1f} | {r['eval_seconds']:.1f} | "
        f"{r['eval_events_per_second']:,.0f} | "
        f"{first['eval_seconds'] / r['eval_seconds']:.2f}x | "
        f"{r['eval_pull_seconds']:.1f} | {r['eval_states_pulled']:,} | "
        f"{r['prefetched']:,} | {r['written_bytes'] / 1e9:.1f} | "
        f"{r['test_ap']:.10f} | {r['new_node_test_ap']:.10f} |")
out += ["", "`vs first`: the first row's evaluation seconds over this row's. "
        "`written to disk`: bytes all the job's processes wrote (getrusage of "
        "the reaped children: RocksDB files of the shards and of the workers' "
        "spill stores, the shards' journals, checkpoints)."]
open(stem + ".md", "w").write("\n".join(out) + "\n")
print("\n".join(out))
aps = {(r["test_ap"], r["new_node_test_ap"]) for r in rows}
if len(aps) != 1:
    sys.exit(f"eval_ab.sh: test AP differs between runs: {sorted(aps)}")
PY
