#!/usr/bin/env bash
# DepBloom's defaults on small data (issue 50): vanilla, depbloom with the
# old fixed defaults (80,000-event windows, 2,400-event batches per worker)
# and depbloom at its derived defaults, 2 workers on loopback, TGN (or
# MODEL), early stopping (patience 3, at most EPOCHS epochs), seeds
# 1..SEEDS, on CollegeMsg and bitcoin-alpha. One run at a time; finished runs
# (summary.json) are skipped, so rerunning resumes the sweep.
# bench/depbloom_defaults_report.py RUNS_DIR tabulates the runs
# (bench/results/depbloom_defaults.md).
#
# Usage: bench/depbloom_defaults.sh [--seeds N] [--out RUNS_DIR]
# Environment: MNEMO (binary), EPOCHS (30), MODEL (tgn), DATASETS
# ("collegemsg bitcoin-alpha"), VARIANTS ("vanilla;depbloom:old;depbloom"; a
# "label=flags..." entry runs those flags under that label, e.g.
# "depbloom:w2k=--policy depbloom --window-events 2000").
set -euo pipefail
cd "$(dirname "$0")/.."
SEEDS=3
EPOCHS=${EPOCHS:-30}
OUT=runs/depbloom_defaults
while [ $# -gt 0 ]; do
  case "$1" in
    --seeds) SEEDS=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    *) echo "usage: $0 [--seeds N] [--out RUNS_DIR]" >&2; exit 2 ;;
  esac
done
MNEMO=${MNEMO:-build/services/mnemo}
MODEL=${MODEL:-tgn}
DATASETS=${DATASETS:-collegemsg bitcoin-alpha}
VARIANTS=${VARIANTS:-vanilla;depbloom:old;depbloom}
mkdir -p "$OUT"

flags_of() {
  case "$1" in
    vanilla) echo "--policy vanilla" ;;
    # The defaults before they followed the data: the paper's.
    depbloom:old) echo "--policy depbloom --window-events 80000 --batch-size 2400" ;;
    depbloom) echo "--policy depbloom" ;;
    *=*) echo "${1#*=}" ;;
    *) echo "unknown variant $1" >&2; exit 2 ;;
  esac
}

IFS=';' read -r -a variants <<< "$VARIANTS"
for seed in $(seq 1 "$SEEDS"); do
  for ds in $DATASETS; do
    for v in "${variants[@]}"; do
      label=${v%%=*}
      dir="$OUT/$ds-$MODEL-s$seed-$label"
      [ -f "$dir/summary.json" ] && continue
      read -r -a flags <<< "$(flags_of "$v")"
      cmd=("$MNEMO" train --data "$ds" --model "$MODEL" --workers 2 --epochs "$EPOCHS"
        --patience 3 --seed "$seed" --progress lines --out "$dir" "${flags[@]}")
      rm -rf "$dir"
      mkdir -p "$dir"
      echo "${cmd[*]}" > "$dir/command.txt"
      echo "== $ds s$seed $label: ${cmd[*]}" >&2
      start=$(date +%s)
      "${cmd[@]}" > "$dir/log.txt" 2>&1 || { echo "FAILED: $dir" >&2; continue; }
      echo "   $(($(date +%s) - start)) s" >&2
    done
  done
done
