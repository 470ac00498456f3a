#!/usr/bin/env bash
# DepBloom's sub-chains: how the partition of each window breaks
# dependencies, and what that does to training.
#
# Usage: bench/subchains.sh [--seeds N] [--epochs E] [--data NAME]
#
# 1. build/bench/bench_subchains: the cross, cut and shared ratios, the load
#    imbalance and the partitioning time per partitioner, chain rule and
#    node pieces on Wikipedia, sx-mathoverflow, CollegeMsg and bitcoin-alpha
#    (no training; bench/results/plan_subchains.json).
# 2. `mnemo train --policy depbloom --workers 2` on NAME (default
#    mathoverflow) with DepBloom's own partition (METIS over whole nodes, the
#    source's part: --chain-assignment source --piece-events 0) and with
#    pieces of one event and the follow rule (--chain-assignment follow
#    --piece-events 1, the hub-aware partition), seeds 1..N (default 3),
#    E epochs (default 1), windows of 10,000 events: test AP, the epoch's
#    training seconds, the states pulled at window boundaries and the cross
#    ratio. Writes bench/results/subchains_train.md with the commands and
#    the machine. Runs go to runs/subchains/ ($SUBCHAINS_WORK).
set -euo pipefail
cd "$(dirname "$0")/.."
seeds=3 epochs=1 data=mathoverflow
while [ $# -gt 0 ]; do
  case $1 in
    --seeds) seeds=${2:?--seeds needs N}; shift 2 ;;
    --epochs) epochs=${2:?--epochs needs E}; shift 2 ;;
    --data) data=${2:?--data needs NAME}; shift 2 ;;
    *) echo "subchains.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
MNEMO=${MNEMO_BIN:-build/services/mnemo}
[ -x "$MNEMO" ] && [ -x build/bench/bench_subchains ] || {
  echo "subchains.sh: build first (scripts/build)" >&2
  exit 1
}
export MNEMO_SHARED_DATA=${MNEMO_SHARED_DATA:-$(cd .. && pwd)/shared/data}
work=${SUBCHAINS_WORK:-runs/subchains}
results=${BENCH_RESULTS:-bench/results}
mkdir -p "$work" "$results"

build/bench/bench_subchains "$MNEMO_SHARED_DATA" \
  "$results/plan_subchains.json" | tee "$work/plan_subchains.txt"

common=(train --data "$data" --workers 2 --policy depbloom
  --window-events 10000 --epochs "$epochs" --patience 0 --progress none)
declare -A flags=(
  [paper]="--chain-assignment source --piece-events 0"
  [pieces]="--chain-assignment follow --piece-events 1")
for seed in $(seq 1 "$seeds"); do
  for v in paper pieces; do
    dir="$work/$v-seed$seed"
    [ -f "$dir/summary.json" ] && continue
    echo "== $v seed $seed" >&2
    # shellcheck disable=SC2086
    "$MNEMO" "${common[@]}" --seed "$seed" ${flags[$v]} --out "$dir" \
      > "$work/$v-seed$seed.log" 2>&1 || {
      tail -5 "$work/$v-seed$seed.log" >&2
      exit 1
    }
  done
done

python3 - "$work" "$seeds" "$results/subchains_train.md" "$data" \
  "$epochs" "$MNEMO ${common[*]}" "${flags[paper]}" "${flags[pieces]}" <<'PY'
import json, statistics, subprocess, sys
work, seeds, out, data, epochs, cmd, fpaper, fpieces = sys.argv[1:]
seeds = int(seeds)
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
            if l.startswith("model name")), "unknown")
rows = []
for v, f in (("paper", fpaper), ("pieces", fpieces)):
    ap, secs, pulled, cross = [], [], [], []
    for s in range(1, seeds + 1):
        j = json.load(open(f"{work}/{v}-seed{s}/summary.json"))
        ap.append(j["test"]["ap"])
        secs.append(sum(e["seconds"] - e["eval_seconds"] for e in j["epochs"])
                    / len(j["epochs"]))
        pulled.append(j["comm"]["plan"]["refresh_nodes_total"])
        cross.append(j["comm"]["plan"]["cross_ratio"])
    sd = statistics.stdev(ap) if len(ap) > 1 else 0.0
    rows.append(f"| {v} (`{f}`) | {statistics.mean(cross):.4f} | "
                f"{statistics.mean(ap):.4f} ± {sd:.4f} | "
                f"{statistics.mean(secs):.1f} | {statistics.mean(pulled):.0f} |")
with open(out, "w") as o:
    o.write(f"# DepBloom sub-chains in training: {data}, 2 workers\n\n")
    o.write(f"Command: `bench/subchains.sh --seeds {seeds} --epochs {epochs} "
            f"--data {data}`, each run `{cmd} --seed S FLAGS --out DIR` "
            f"(all roles in one host, no link shaping).\n\n")
    o.write(f"Machine: {cpu}, {subprocess.getoutput('nproc')} cores.\n\n")
    o.write(f"Seeds 1-{seeds}; mean (± standard deviation for test AP). "
            "Train s: an epoch's seconds without evaluation. Boundary "
            "states: node states refreshed at window boundaries by rank 0 "
            "(the state traffic of the merges). Cross: the plan's share of "
            "events whose previous event of an endpoint lies in the other "
            "sub-chain.\n\n")
    o.write("| partition | cross | test AP | train s | boundary states |\n")
    o.write("|---|---|---|---|---|\n")
    o.write("\n".join(rows) + "\n")
print(open(out).read())
PY
