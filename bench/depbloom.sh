#!/usr/bin/env bash
# DepBloom measured here, in the same harness as bench/deptgl.sh (network
# namespaces, tbf links, trainers pinned one per CPU with one thread each):
# single process, vanilla, deptgl, depbloom and its ablations -- without
# spatial partitioning (--partitioner time), without IMR (--refine-chunks
# 1), without critical-path optimization (--no-critical-path) -- over link
# rates; the IMR study in one process (small batch 600, large batch 2,400,
# large batch + IMR(2/4/8): validation loss, the paper's Figs. 15 and 17a);
# the window sensitivity (Fig. 17b) and the cross-sub-chain ratio of every
# partitioner (Fig. 5). Writes bench/results/depbloom.{md,json} and PNGs
# (bench/depbloom_report.py).
#
# Usage: bench/depbloom.sh [--ci | --full] [--out RUNS_DIR] [--results DIR]
#   --ci    CollegeMsg, TGN, 2 workers, vanilla vs depbloom at 1 Gbit/s.
#   (none)  Wikipedia and sx-mathoverflow, TGN (and JODIE on Wikipedia),
#           2 workers, 1 Gbit/s and 20 Mbit/s, 3 seeds for the accuracy
#           rows, the IMR study and the window sweep: about 35 min on 2
#           cores (34 min on 2026-12-01).
#   --full  adds 3 workers and JODIE everywhere: about 3 h.
# Windows: 10,000 events on full data and 2,500 on the 30,000-event
# prefixes used at 20 Mbit/s, so that an epoch has at least 8 window
# boundaries (the paper's 80,000-event windows hold all of Wikipedia's
# training events: one window, nothing to measure). Needs root.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib_runs.sh
source bench/lib_runs.sh
bench_args bench/depbloom.sh "ci full" -- "$@"
SLOW_PREFIX=30000

# sweep DATASET MODEL WORKERS RATE SEEDS...
sweep() {
  local ds=$1 model=$2 workers=$3 rate=$4
  shift 4
  local extra=(--window-events 10000)
  [ "$rate" = 1gbit ] || extra=(--max-events "$SLOW_PREFIX" --window-events 2500)
  for seed in "$@"; do
    local common=(--data "$ds" --model "$model" --epochs 1 --patience 0
      --seed "$seed" "${extra[@]}")
    local tag="$ds-$model-${rate}"
    [ "$seed" = 0 ] || tag="$tag-s$seed"
    run "$tag-single" "$rate" 1 -- "${common[@]}"
    run "$tag-w$workers-vanilla" "$rate" "$workers" -- "${common[@]}" --policy vanilla
    run "$tag-w$workers-depbloom" "$rate" "$workers" -- "${common[@]}" --policy depbloom
    [ "$seed" = 0 ] || continue
    run "$tag-w$workers-deptgl" "$rate" "$workers" -- "${common[@]}" --policy deptgl
    run "$tag-w$workers-depbloom:no-partition" "$rate" "$workers" -- \
      "${common[@]}" --policy depbloom --partitioner time
    run "$tag-w$workers-depbloom:no-imr" "$rate" "$workers" -- \
      "${common[@]}" --policy depbloom --refine-chunks 1
    run "$tag-w$workers-depbloom:no-critical-path" "$rate" "$workers" -- \
      "${common[@]}" --policy depbloom --no-critical-path
  done
}

# The IMR study: one process, Wikipedia, TGN, 1 epoch (validation loss).
imr() {
  local base=(--data wikipedia --model tgn --epochs 1 --patience 0 --seed 0)
  run "imr-sb600" 1gbit 1 -- "${base[@]}" --batch-size 600
  run "imr-lb2400" 1gbit 1 -- "${base[@]}" --batch-size 2400
  for k in 2 4 8; do
    run "imr-lb2400-k$k" 1gbit 1 -- "${base[@]}" --batch-size 2400 --refine-chunks "$k"
  done
}

case $MODE in
  ci)
    run "collegemsg-tgn-1gbit-single" 1gbit 1 -- --data collegemsg --epochs 1 --patience 0 --seed 0
    run "collegemsg-tgn-1gbit-w2-vanilla" 1gbit 2 -- --data collegemsg --epochs 1 --patience 0 --seed 0 --policy vanilla
    run "collegemsg-tgn-1gbit-w2-depbloom" 1gbit 2 -- --data collegemsg --epochs 1 --patience 0 --seed 0 --policy depbloom --window-events 5000
    ;;
  default | full)
    RATES=(1gbit 20mbit)
    for rate in "${RATES[@]}"; do
      sweep wikipedia tgn 2 "$rate" 0
      sweep mathoverflow tgn 2 "$rate" 0
      sweep wikipedia jodie 2 "$rate" 0
      [ $MODE = full ] && sweep mathoverflow jodie 2 "$rate" 0
      [ $MODE = full ] && sweep wikipedia tgn 3 "$rate" 0
    done
    sweep wikipedia tgn 2 1gbit 1 2
    imr
    # Fig. 17b: windows (Wikipedia, TGN, 20 Mbit/s prefix).
    for wnd in 1250 5000 20000; do
      run "window-$wnd" 20mbit 2 -- --data wikipedia --model tgn --epochs 1 \
        --patience 0 --seed 0 --max-events "$SLOW_PREFIX" --policy depbloom \
        --window-events "$wnd"
    done
    ;;
esac
bench_report bench/depbloom_report.py \
  "bench/depbloom.sh$([ $MODE = default ] || echo " --$MODE")"
