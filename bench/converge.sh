#!/usr/bin/env bash
# Time to accuracy: every policy and ablation trained to convergence (early
# stopping on validation AP, patience 3, at most 10 epochs) over seeds 1-3,
# in the harness of bench/deptgl.sh (network namespaces, tbf links, trainers
# pinned one per CPU with one thread each). Reports, per policy, the training
# time to reach a target (vanilla's best validation AP of the same seed minus
# 0.01), best validation AP, test AP (mean and standard deviation over
# seeds), optimizer steps, and the time split with state synchronization
# and the gradient all-reduce apart (bench/converge_report.py ->
# bench/results/converge_<group>.{md,json}).
#
# Policies: single (one process), vanilla, full-cache, deptgl:replay,
# deptgl:replay+sync, deptgl, depbloom and its ablations (no-partition:
# --partitioner time, paper-cut: the paper's cut, whole nodes and each event
# in its source's part, no-imr: --refine-chunks 1, no-critical-path,
# no-lr-scaling: --lr-scaling none; lr-sqrt and lr-linear: --lr-scaling sqrt
# or linear, the one that is the model's default left out), and the
# equal-work baselines: vanilla at depbloom's global batch (vanilla:b4800)
# and depbloom at vanilla's (depbloom:b300, 300 events per worker). Runs
# are ordered so that an interrupted sweep has the main policies of every
# seed first; rerunning resumes it (finished runs are skipped).
#
# Usage: bench/converge.sh [--quick | --wikipedia-jodie | --wikipedia-tgn |
#          --mathoverflow-jodie | --mathoverflow-tgn] [--seeds N]
#          [--out RUNS_DIR] [--results DIR]
#   --quick   CollegeMsg, TGN, 1 Gbit/s, vanilla and depbloom with its
#             learning rate scaled by sqrt, linearly and not (about 8 min).
#   --imr     the IMR study to convergence in one process: small batch
#             (600), large batch (2,400) and large batch + IMR(4), at the
#             small batch's learning rate and at the rate depbloom scales
#             to (linear for JODIE, sqrt for TGN), on Wikipedia and
#             sx-mathoverflow's first 30,000 events, JODIE and TGN:
#             validation loss at the best epoch and the share of the large
#             batch's loss gap that IMR recovers (about 12 min).
#   --grad-comm  Wikipedia TGN, vanilla and deptgl with fp32 and with
#             bf16 gradient communication (--grad-comm bf16).
#   --pipeline  the pipelines at RATE=1gbit (a cross-node GPU link scaled
#             to these CPUs' compute: docs/performance.md): one process,
#             vanilla, pipetgl, depbloom (2 sub-chains x 1 worker),
#             depbloom:g2 (1 sub-chain run by a pipeline of 2 workers,
#             --pipeline-depth 2) and disttgl-epoch (DistTGL's epoch
#             parallelism), depbloom at its defaults (window and
#             batch from the data), on Wikipedia's and sx-mathoverflow's
#             first 30,000 events, JODIE and TGN.
#   --GROUP   one data set and model.
#   (none)    every group: Wikipedia and sx-mathoverflow, TGN and JODIE.
# Every group runs at 20 Mbit/s on the first 30,000 events, the regime where
# vanilla's epoch is spent synchronizing (its state sync share is reported
# beside each group). Needs root (network namespaces).
# Environment: MNEMO (binary), BENCH_RUNS (run directory), RATE (20mbit),
# PREFIX (events; 30000), ABLATE (1; 0: the main policies only).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib_runs.sh
source bench/lib_runs.sh
GROUPS_ALL="wikipedia-jodie wikipedia-tgn mathoverflow-jodie mathoverflow-tgn"
bench_args bench/converge.sh "quick imr grad-comm pipeline $GROUPS_ALL" seeds -- "$@"
[ "$SEEDS" -gt 0 ] || SEEDS=3
RATE=${RATE:-20mbit}
PREFIX=${PREFIX:-30000}
ABLATE=${ABLATE:-1}
MAIN=(single vanilla depbloom deptgl vanilla:b4800 depbloom:b300
  depbloom:lr-sqrt depbloom:lr-linear)
ABLATIONS=(full-cache deptgl:replay deptgl:replay+sync depbloom:no-partition
  depbloom:paper-cut depbloom:no-imr depbloom:no-critical-path
  depbloom:no-lr-scaling)

# depbloom_lr_rule MODEL: the rule --lr-scaling auto picks under depbloom
# for MODEL (ApplyPolicyDefaults in services/cli/train_flags.cc).
depbloom_lr_rule() {
  if [ "$1" = jodie ]; then echo linear; else echo sqrt; fi
}

# policy_flags POLICY: the train flags of a policy name.
policy_flags() {
  case "$1" in
    vanilla:b4800) echo "--policy vanilla --batch-size 4800" ;;
    depbloom:b300) echo "--policy depbloom --batch-size 300" ;;
    depbloom:no-partition) echo "--policy depbloom --partitioner time" ;;
    depbloom:paper-cut)
      echo "--policy depbloom --piece-events 0 --chain-assignment source" ;;
    depbloom:no-imr) echo "--policy depbloom --refine-chunks 1" ;;
    depbloom:no-critical-path) echo "--policy depbloom --no-critical-path" ;;
    depbloom:no-lr-scaling) echo "--policy depbloom --lr-scaling none" ;;
    depbloom:lr-sqrt) echo "--policy depbloom --lr-scaling sqrt" ;;
    depbloom:lr-linear) echo "--policy depbloom --lr-scaling linear" ;;
    depbloom:g2) echo "--policy depbloom --pipeline-depth 2" ;;
    pipetgl:critical-path) echo "--policy pipetgl --critical-path" ;;
    *:grad-bf16) echo "--policy ${1%:grad-bf16} --grad-comm bf16" ;;
    *) echo "--policy $1" ;;
  esac
}

# converge DATASET MODEL RATE PREFIX WINDOW POLICIES...: each policy on
# seeds 1..SEEDS, to convergence.
converge() {
  local ds=$1 model=$2 rate=$3 prefix=$4 window=$5
  shift 5
  local p seed
  for seed in $(seq 1 "$SEEDS"); do
    for p in "$@"; do
      local common=(--data "$ds" --model "$model" --epochs 10 --patience 3
        --seed "$seed")
      [ "$prefix" = 0 ] || common+=(--max-events "$prefix")
      local tag="$ds-$model-$rate-s$seed"
      # depbloom's own --lr-scaling rule is the depbloom row already.
      [ "$p" != "depbloom:lr-$(depbloom_lr_rule "$model")" ] || continue
      if [ "$p" = single ]; then
        run "$tag-single" "$rate" 1 -- "${common[@]}"
        continue
      fi
      local flags
      read -r -a flags <<< "$(policy_flags "$p")"
      [[ "$p" != depbloom* || -z "$window" ]] ||
        flags+=(--window-events "$window")
      run "$tag-w2-$p" "$rate" 2 -- "${common[@]}" "${flags[@]}"
    done
  done
}

# imr_study DATASET MODEL: one process, seeds 1..SEEDS, small batch, large
# batch, large batch + IMR(4).
imr_study() {
  local ds=$1 model=$2 seed
  for seed in $(seq 1 "$SEEDS"); do
    local common=(--data "$ds" --model "$model" --epochs 10 --patience 3
      --seed "$seed" --max-events "$PREFIX")
    local tag="$ds-$model-local-s$seed-w1"
    run "$tag-sb600" local 1 -- "${common[@]}" --batch-size 600
    run "$tag-lb2400" local 1 -- "${common[@]}" --batch-size 2400
    run "$tag-lb2400-imr4" local 1 -- "${common[@]}" --batch-size 2400 \
      --refine-chunks 4
    # The large batch at the rate depbloom gives it: what is left of the
    # gap is the batch's staleness, not its fewer steps at the small
    # batch's rate.
    local rule
    rule=$(depbloom_lr_rule "$model")
    run "$tag-lb2400-lr" local 1 -- "${common[@]}" --batch-size 2400 \
      --lr-scaling "$rule"
    run "$tag-lb2400-imr4-lr" local 1 -- "${common[@]}" --batch-size 2400 \
      --refine-chunks 4 --lr-scaling "$rule"
  done
}

case $MODE in
  imr)
    for g in $GROUPS_ALL; do imr_study "${g%-*}" "${g#*-}"; done
    ;;
  quick)
    converge collegemsg tgn 1gbit 0 5000 vanilla depbloom \
      depbloom:no-lr-scaling depbloom:lr-linear
    ;;
  grad-comm)
    converge wikipedia tgn "$RATE" "$PREFIX" 2500 vanilla vanilla:grad-bf16 \
      deptgl deptgl:grad-bf16
    ;;
  pipeline)
    # depbloom at its defaults (window and batch from the data).
    for g in wikipedia-jodie wikipedia-tgn mathoverflow-jodie mathoverflow-tgn; do
      converge "${g%-*}" "${g#*-}" "${RATE_PIPELINE:-1gbit}" "$PREFIX" "" \
        single vanilla pipetgl depbloom depbloom:g2 disttgl-epoch
    done
    ;;
  *)
    groups=$GROUPS_ALL
    [ "$MODE" = default ] || groups=$MODE
    for g in $groups; do
      converge "${g%-*}" "${g#*-}" "$RATE" "$PREFIX" 2500 "${MAIN[@]}"
    done
    [ "$ABLATE" = 1 ] || groups=
    for g in $groups; do
      converge "${g%-*}" "${g#*-}" "$RATE" "$PREFIX" 2500 "${ABLATIONS[@]}"
    done
    ;;
esac
bench_report bench/converge_report.py \
  "$([ "$ABLATE" = 1 ] || echo "ABLATE=0 ")bench/converge.sh$([ "$MODE" = default ] || echo " --$MODE")$([ "$SEEDS" = 3 ] || echo " --seeds $SEEDS")"
