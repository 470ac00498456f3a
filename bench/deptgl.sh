#!/usr/bin/env bash
# DepTGL measured here: single process, vanilla, full-cache and the three
# deptgl variants (deptgl:replay, deptgl:replay+sync, deptgl) on the same
# data and seed, inside the emulated network of deploy/netns/run.sh (one
# namespace per process, tbf-shaped links), trainers pinned one per CPU with
# one thread each where CPUs allow, over a sweep of link rates. Writes the
# paper's tables as measured here (bench/deptgl_report.py): Table III (epoch
# time, speedup over vanilla), Table IV (AP/AUC), Table V
# (syncs, time split, communication share), Table VI (throughput, peak
# memory), Fig. 6 (ablation) and Table VII (sensitivity to tau_g, tau_c, K)
# as bench/results/deptgl.{md,json} and PNG charts.
#
# Usage: bench/deptgl.sh [--ci | --full | --tau-c] [--out RUNS_DIR]
#                        [--results DIR]
#   --ci    CollegeMsg, TGN, 2 workers, vanilla vs deptgl at 1 Gbit/s: about
#           1 min (what CI runs).
#   --tau-c the load detector's threshold (Eq. 9's tau_c: 0.5, the
#           literal reading, 1.0, 1.5 and 1e9, never heavy) on Wikipedia and
#           sx-mathoverflow, TGN, 2 workers, 20 Mbit/s, 3 seeds: epoch time,
#           heavy-load share, pruned events, test AP
#           (bench/results/deptgl_tau_c.md; about 20 min).
#   (none)  the measured set: Wikipedia and sx-mathoverflow, TGN and JODIE,
#           2 workers (and 3 for Wikipedia/TGN at 1 Gbit/s), 1 Gbit/s and
#           20 Mbit/s, 3 seeds for the accuracy rows, the sensitivity
#           sweep: about 55 min on 2 cores (56 min on 2026-12-01).
#   --full  adds 100 Mbit/s, and 3 workers for sx-mathoverflow/TGN and
#           Wikipedia/JODIE at every rate: about 3 h.
# At 20 Mbit/s every run uses the first 30,000 events (--max-events): the
# rate at which vanilla spends >= 80% of its epoch communicating on these
# CPUs, where full epochs would take hours. Needs root (network namespaces).
# Environment: MNEMO (binary), BENCH_RUNS (run directory).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib_runs.sh
source bench/lib_runs.sh
bench_args bench/deptgl.sh "ci full tau-c" -- "$@"
POLICIES=(vanilla full-cache deptgl:replay deptgl:replay+sync deptgl)
SLOW_PREFIX=30000  # events at low link rates

# sweep DATASET MODEL WORKERS RATE SEEDS...: every policy (and one process).
sweep() {
  local ds=$1 model=$2 workers=$3 rate=$4
  shift 4
  local extra=()
  [ "$rate" = 1gbit ] || extra=(--max-events "$SLOW_PREFIX")
  for seed in "$@"; do
    local common=(--data "$ds" --model "$model" --epochs 1 --patience 0
      --seed "$seed" "${extra[@]}")
    local tag="$ds-$model-${rate}"
    [ "$seed" = 0 ] || tag="$tag-s$seed"
    run "$tag-single" "$rate" 1 -- "${common[@]}"
    for p in "${POLICIES[@]}"; do
      # Accuracy seeds: the baselines and deptgl only.
      if [ "$seed" != 0 ] && [ "$p" != vanilla ] && [ "$p" != deptgl ]; then
        continue
      fi
      run "$tag-w$workers-$p" "$rate" "$workers" -- "${common[@]}" \
        --policy "$p"
    done
  done
}

case $MODE in
  tau-c)
    for ds in wikipedia mathoverflow; do
      for seed in 0 1 2; do
        for v in 0.5 1.0 1.5 1e9; do
          run "tau_c-$v-$ds-s$seed" 20mbit 2 -- --data "$ds" --model tgn \
            --epochs 1 --patience 0 --seed "$seed" \
            --max-events "$SLOW_PREFIX" --policy deptgl --tau-load "$v"
        done
      done
    done
    bench_report bench/deptgl_report.py "bench/deptgl.sh --tau-c" --tau-c
    exit 0
    ;;
  ci)
    POLICIES=(vanilla deptgl)
    sweep collegemsg tgn 2 1gbit 0
    ;;
  default | full)
    RATES=(1gbit 20mbit)
    [ $MODE = full ] && RATES=(1gbit 100mbit 20mbit)
    for rate in "${RATES[@]}"; do
      sweep wikipedia tgn 2 "$rate" 0
      sweep mathoverflow tgn 2 "$rate" 0
      sweep wikipedia jodie 2 "$rate" 0
      sweep mathoverflow jodie 2 "$rate" 0
    done
    sweep wikipedia tgn 3 1gbit 0
    sweep wikipedia tgn 2 1gbit 1 2
    sweep mathoverflow tgn 2 1gbit 1 2
    if [ $MODE = full ]; then
      for rate in "${RATES[@]}"; do
        sweep mathoverflow tgn 3 "$rate" 0
        sweep wikipedia jodie 3 "$rate" 0
      done
    fi
    # Table VII: one knob at a time around the reference configuration
    # (tau_g 1.6, tau_c 1.5, K 6), where communication dominates.
    base=(--data wikipedia --model tgn --epochs 1 --patience 0 --seed 0
      --max-events "$SLOW_PREFIX" --policy deptgl)
    for v in 1.2 2.0 3.0; do
      run "sens-tau_g-$v" 20mbit 2 -- "${base[@]}" --tau-grad "$v"
    done
    for v in 0.5 1.0 1e9; do
      run "sens-tau_c-$v" 20mbit 2 -- "${base[@]}" --tau-load "$v"
    done
    for v in 1 3 12; do
      run "sens-K-$v" 20mbit 2 -- "${base[@]}" --sync-every "$v"
    done
    # Beyond the paper: push scope and refresh scope.
    run "scope-push-owned" 20mbit 2 -- "${base[@]}" --push-scope owned
    run "scope-sync-frontier" 20mbit 2 -- "${base[@]}" --sync-scope frontier
    run "scope-owned-frontier" 20mbit 2 -- "${base[@]}" --push-scope owned \
      --sync-scope frontier
    ;;
esac
/usr/bin/python3 -c 'import matplotlib' 2>/dev/null ||
  echo "(charts need python3-matplotlib: apt-get install python3-matplotlib)" >&2
bench_report bench/deptgl_report.py \
  "bench/deptgl.sh$([ $MODE = default ] || echo " --$MODE")"
