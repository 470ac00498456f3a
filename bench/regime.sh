#!/usr/bin/env bash
# What puts vanilla's epoch in the papers' regime, where state
# synchronization (the pulls and pushes to the memory stores), not the
# gradient all-reduce or compute, takes most of it. Vanilla, one epoch,
# 2 workers in the emulated network of deploy/netns/run.sh, the first
# 30,000 events, seed 1, varying one thing at a time from the setting of
# bench/converge.sh (20 Mbit/s, global batch 600, node memory 100):
#   the link rate: 5, 20 and 80 Mbit/s (Wikipedia, JODIE);
#   the global batch: 600, 1,200, 2,400 and 4,800 (Wikipedia and
#     sx-mathoverflow, JODIE and TGN);
#   the node memory width: 50, 100 and 200 (Wikipedia, JODIE and TGN).
# The report (bench/regime_report.py) gives per run the state and gradient
# bytes per optimizer step and the shares of the epoch spent in state sync,
# all-reduce and compute, for the mean worker and for the critical worker
# (the one that waited least in the all-reduce: the epoch is its time).
#
# Usage: bench/regime.sh [--quick] [--out RUNS_DIR] [--results DIR]
#   --quick   Wikipedia JODIE at 20 Mbit/s, batches 600 and 4,800 (2 min).
#   --grad-comm  the default setting on Wikipedia JODIE and TGN and
#             sx-mathoverflow TGN with the gradients all-reduced in fp32
#             and in bf16 (--grad-comm bf16): how the split moves.
# Writes bench/results/regime[_quick].md and .json. Needs root (network
# namespaces). Environment: MNEMO (binary), BENCH_RUNS (run directory).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib_runs.sh
source bench/lib_runs.sh
bench_args bench/regime.sh "quick grad-comm" -- "$@"
PREFIX=30000

# variant DATASET MODEL RATE BATCH MEMORY: one vanilla epoch; the run's
# name carries what differs from the default setting.
variant() {
  local ds=$1 model=$2 rate=$3 batch=$4 mem=$5 comm=${6:-fp32}
  local name="vanilla:b$batch:m$mem"
  [ "$comm" = fp32 ] || name+=":$comm"
  run "$ds-$model-$rate-s1-w2-$name" "$rate" 2 -- --data "$ds" \
    --model "$model" --epochs 1 --patience 0 --seed 1 --max-events "$PREFIX" \
    --policy vanilla --batch-size "$batch" --memory-dim "$mem" \
    --grad-comm "$comm"
}

if [ "$MODE" = quick ]; then
  variant wikipedia jodie 20mbit 600 100
  variant wikipedia jodie 20mbit 4800 100
elif [ "$MODE" = grad-comm ]; then
  for comm in fp32 bf16; do
    variant wikipedia jodie 20mbit 600 100 "$comm"
    variant wikipedia tgn 20mbit 600 100 "$comm"
    variant mathoverflow tgn 20mbit 600 100 "$comm"
  done
else
  for rate in 20mbit 5mbit 80mbit; do
    variant wikipedia jodie "$rate" 600 100
  done
  for ds in wikipedia mathoverflow; do
    for model in jodie tgn; do
      for batch in 600 1200 2400 4800; do
        variant "$ds" "$model" 20mbit "$batch" 100
      done
    done
  done
  for model in jodie tgn; do
    for mem in 50 200; do
      variant wikipedia "$model" 20mbit 600 "$mem"
    done
  done
fi

command="bench/regime.sh"
[ "$MODE" = default ] || command+=" --$MODE"
bench_report bench/regime_report.py "$command"
