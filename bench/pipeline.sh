#!/usr/bin/env bash
# The pipelines' own figures (issue 50), in the emulated network of
# deploy/netns/run.sh (tbf links at RATE, trainers pinned one per CPU with
# one thread each), one epoch on Wikipedia's first PREFIX events:
#
#   --bubbles  the critical path's effect (DepBloom Fig. 16's analogue):
#              pipetgl and depbloom --pipeline-depth 2 on 2 workers, each
#              with --critical-path and --no-critical-path, JODIE and TGN,
#              seeds 1..SEEDS: bubble share, critical-path seconds (from a
#              batch's states arriving to its handoff leaving), state and
#              parameter waits, and the machine-independent counts
#              (handoffs, states and bytes handed on, of them urgent).
#   --scaling  throughput and parallel efficiency for 1, 2 and 3 workers
#              (DepTGL Table VIII, DepBloom Fig. 13): one process, and
#              vanilla, pipetgl, depbloom and depbloom with one sub-chain
#              per pipeline (--pipeline-depth = workers), TGN, seed 1.
#              3 workers share 2 CPUs here: their rows say so.
#
# Writes bench/results/pipeline_<mode>.{md,json} with the command and the
# machine (bench/pipeline_report.py). Needs root (network namespaces).
# Environment: MNEMO (binary), BENCH_RUNS (run directory), RATE (1gbit),
# PREFIX (events; 30000).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib_runs.sh
source bench/lib_runs.sh
bench_args bench/pipeline.sh "bubbles scaling" seeds -- "$@"
[ "$MODE" != default ] || MODE=bubbles
[ "$SEEDS" -gt 0 ] || SEEDS=3
RATE=${RATE:-1gbit}
PREFIX=${PREFIX:-30000}
COMMON=(--data wikipedia --max-events "$PREFIX" --epochs 1 --patience 0)

case $MODE in
  bubbles)
    for seed in $(seq 1 "$SEEDS"); do
      for model in jodie tgn; do
        for policy in pipetgl depbloom:g2; do
          for cp in critical-path no-critical-path; do
            flags=(--policy pipetgl)
            [ "$policy" = pipetgl ] ||
              flags=(--policy depbloom --pipeline-depth 2)
            run "$model-s$seed-$policy-$cp" "$RATE" 2 -- "${COMMON[@]}" \
              --model "$model" --seed "$seed" "${flags[@]}" "--$cp"
          done
        done
      done
    done
    ;;
  scaling)
    run "tgn-single" local 1 -- "${COMMON[@]}" --model tgn --seed 1
    for w in 1 2 3; do
      for policy in vanilla pipetgl depbloom depbloom:chain; do
        flags=(--policy "$policy")
        [ "$policy" != depbloom:chain ] ||
          flags=(--policy depbloom --pipeline-depth "$w")
        run "tgn-w$w-$policy" "$RATE" "$w" -- "${COMMON[@]}" --model tgn \
          --seed 1 "${flags[@]}"
      done
    done
    ;;
esac
bench_report bench/pipeline_report.py \
  "bench/pipeline.sh --$MODE$([ "$SEEDS" = 3 ] || echo " --seeds $SEEDS")" \
  --rate "$RATE" --prefix "$PREFIX"
