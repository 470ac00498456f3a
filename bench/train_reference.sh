#!/usr/bin/env bash
# Training benchmark: TGN with the TGN reference's hyperparameters on
# Wikipedia (memory 172, batch 200, 10 neighbours, lr 1e-4, dropout 0.1,
# 2 threads, 3 epochs, no early stopping), the same in bf16, JODIE on
# Wikipedia, TGN on sx-mathoverflow. Writes bench/results/train_*.json (the
# run's summary.json plus the command and machine) and prints a table.
#
# Usage: bench/train_reference.sh [which...]   which: tgn-wiki tgn-wiki-bf16
#        jodie-wiki tgn-mathoverflow (default: all)
#
# Side by side with the TGN reference implementation (twitter-research/tgn
# at d55bbe67, not part of this project):
#
#   bench/train_reference.sh --reference DIR [--seeds N] [--threads T]
#       [--reuse-reference] [--max-events E] [--baseline BIN]
#       [--reference-runs R] [which...]
#
# which: jodie-wiki, tgn-wiki, tgn-wiki-bf16 (mnemo in bf16 against the fp32
# reference) (default: all three). DIR is a checkout of the reference, or its
# git directory (the fetch tool's /work/.mirror/twitter-research+tgn/repo; the
# commit $REFERENCE_COMMIT, default d55bbe67, is extracted). The reference is
# copied to runs/reference-work/ (git-ignored; $REFERENCE_WORK), patched there
# for Python 3.11 and given our featureless Wikipedia (zero 172-wide features)
# by bench/reference.py, and run on the CPU with /usr/bin/python3 (Debian's
# python3-torch, -pandas, -sklearn; $REFERENCE_PYTHON; with OpenBLAS where
# libopenblas0-pthread is installed, $REFERENCE_BLAS_DIR) for N runs (its own
# seeds), 3 epochs, T threads (default 2). mnemo runs the same hyperparameters
# with --seed 0..N-1 (default N=3). Writes bench/results/reference_<which>.json
# (both sides per epoch, means and sds over runs, commands, machine) and
# reference_<which>.md (the comparison table). --reuse-reference reuses a
# finished reference run of the same configuration from the work directory;
# --max-events E (quick checks only) trains both sides on the first E events.
# --reference-runs R runs the reference R times instead of N (its TGN epoch
# takes minutes here; mnemo's seeds still decide the AP comparison).
#
# The reference at its best BLAS: before its runs, each BLAS configuration
# that this machine has trains the reference (TGN) for one epoch on the first
# --probe-events E events (default 20000), --probe-rounds R times (default 2,
# alternating); the configuration with the most training events/s (best of
# its rounds) runs the reference, and the report names it with every
# configuration's figure. Configurations: openblas-openmp (Debian's
# libopenblas0-openmp, OMP_NUM_THREADS=T), openblas-pthread
# (libopenblas0-pthread, OPENBLAS_NUM_THREADS=T), openblas-pthread-1 (the
# same, one BLAS thread per calling thread), system (the libblas.so.3 the
# system chooses, environment unchanged but OMP_NUM_THREADS=T).
# --reference-blas NAME skips the probe and uses NAME.
# --baseline BIN also runs an earlier mnemo build (BIN: its mnemo binary) with
# the same seeds, and the results compare this build's AP and events/s with
# it (the accuracy goal of a speed change: test AP within 0.005). Speed
# goals, mnemo / reference (at its best BLAS) training events/s: tgn-wiki 8,
# tgn-wiki-bf16 12, jodie-wiki 15.
set -euo pipefail
cd "$(dirname "$0")/.."
MNEMO=${MNEMO:-build/services/mnemo}
OUT=${BENCH_RUNS:-runs/bench}

reference_mode() {
  local dir="" seeds=3 threads=2 reuse=0 max_events=0 which=() baseline="" ref_runs=""
  local blas_choice=probe probe_events=20000 probe_rounds=2
  while [ $# -gt 0 ]; do
    case $1 in
      --reference) dir=${2:?--reference needs DIR}; shift 2 ;;
      --reference=*) dir=${1#*=}; shift ;;
      --seeds) seeds=${2:?--seeds needs N}; shift 2 ;;
      --seeds=*) seeds=${1#*=}; shift ;;
      --threads) threads=${2:?--threads needs T}; shift 2 ;;
      --threads=*) threads=${1#*=}; shift ;;
      --max-events) max_events=${2:?--max-events needs E}; shift 2 ;;
      --max-events=*) max_events=${1#*=}; shift ;;
      --reuse-reference) reuse=1; shift ;;
      --baseline) baseline=${2:?--baseline needs BIN}; shift 2 ;;
      --reference-runs) ref_runs=${2:?--reference-runs needs R}; shift 2 ;;
      --reference-runs=*) ref_runs=${1#*=}; shift ;;
      --reference-blas) blas_choice=${2:?--reference-blas needs NAME}; shift 2 ;;
      --reference-blas=*) blas_choice=${1#*=}; shift ;;
      --probe-events) probe_events=${2:?--probe-events needs E}; shift 2 ;;
      --probe-events=*) probe_events=${1#*=}; shift ;;
      --probe-rounds) probe_rounds=${2:?--probe-rounds needs R}; shift 2 ;;
      --probe-rounds=*) probe_rounds=${1#*=}; shift ;;
      --baseline=*) baseline=${1#*=}; shift ;;
      -*) echo "train_reference.sh: unknown option $1" >&2; exit 2 ;;
      *) which+=("$1"); shift ;;
    esac
  done
  [[ $seeds =~ ^[1-9][0-9]*$ ]] || { echo "--seeds: a positive integer" >&2; exit 2; }
  [ -n "$ref_runs" ] || ref_runs=$seeds
  [[ $ref_runs =~ ^[1-9][0-9]*$ ]] || { echo "--reference-runs: a positive integer" >&2; exit 2; }
  [[ $probe_events =~ ^[1-9][0-9]*$ ]] || { echo "--probe-events: a positive integer" >&2; exit 2; }
  [[ $probe_rounds =~ ^[1-9][0-9]*$ ]] || { echo "--probe-rounds: a positive integer" >&2; exit 2; }
  [ ${#which[@]} -gt 0 ] || which=(jodie-wiki tgn-wiki tgn-wiki-bf16)
  [ -z "$baseline" ] || [ -x "$baseline" ] || { echo "--baseline $baseline: not an executable" >&2; exit 2; }
  local w
  for w in "${which[@]}"; do
    case $w in
      jodie-wiki|tgn-wiki|tgn-wiki-bf16) ;;
      *) echo "train_reference.sh --reference: unknown benchmark $w (jodie-wiki, tgn-wiki, tgn-wiki-bf16)" >&2; exit 2 ;;
    esac
  done
  local py=${REFERENCE_PYTHON:-/usr/bin/python3}
  local commit=${REFERENCE_COMMIT:-d55bbe67}
  local work=${REFERENCE_WORK:-runs/reference-work}
  local helper=bench/reference.py results=${BENCH_RESULTS:-bench/results}
  # The reference's BLAS. Debian's torch calls whatever libblas.so.3 the
  # system chooses; the generic reference BLAS is about 25x slower than
  # OpenBLAS on the reference's products
  # (bench/results/blas_reference_vs_openblas.md), and pthread OpenBLAS with
  # T threads beside T OpenMP threads ran the reference at half the speed of
  # OpenMP OpenBLAS on a Zen 4. So each configuration this machine has is
  # tried (below) and the fastest is used; the system's choice stays as it is.
  local lib=/usr/lib/x86_64-linux-gnu
  declare -A blas_envs=()
  [ ! -f "$lib/openblas-openmp/libblas.so.3" ] || blas_envs[openblas-openmp]="LD_LIBRARY_PATH=$lib/openblas-openmp "
  if [ -f "$lib/openblas-pthread/libblas.so.3" ]; then
    blas_envs[openblas-pthread]="LD_LIBRARY_PATH=$lib/openblas-pthread OPENBLAS_NUM_THREADS=$threads "
    blas_envs[openblas-pthread-1]="LD_LIBRARY_PATH=$lib/openblas-pthread OPENBLAS_NUM_THREADS=1 "
  fi
  blas_envs[system]=""
  local blas_names=()
  for n in openblas-openmp openblas-pthread openblas-pthread-1 system; do
    [ -z "${blas_envs[$n]+set}" ] || blas_names+=("$n")
  done
  if [ "$blas_choice" != probe ] && [ -z "${blas_envs[$blas_choice]+set}" ]; then
    echo "--reference-blas $blas_choice: not on this machine (here: ${blas_names[*]}; apt-get install libopenblas0-openmp libopenblas0-pthread)" >&2
    exit 2
  fi
  [ -n "${blas_envs[openblas-openmp]+set}${blas_envs[openblas-pthread]+set}" ] ||
    echo "note: no OpenBLAS in $lib (apt-get install libopenblas0-openmp libopenblas0-pthread): the reference runs on the BLAS torch finds, for Debian's torch maybe the slow reference one" >&2
  "$py" -c 'import numpy, pandas, sklearn, torch' ||
    { echo "$py lacks numpy/pandas/sklearn/torch (Debian: apt-get install python3-torch python3-pandas python3-sklearn)" >&2; exit 1; }
  # Where the reference comes from: a work tree, or a git directory.
  local src_kind gitdir=""
  if [ -f "$dir/train_self_supervised.py" ]; then
    src_kind=tree
  elif git --git-dir="$dir" rev-parse -q --verify "$commit^{commit}" >/dev/null 2>&1; then
    src_kind=git; gitdir=$dir
  elif git --git-dir="$dir/repo" rev-parse -q --verify "$commit^{commit}" >/dev/null 2>&1; then
    src_kind=git; gitdir=$dir/repo
  else
    echo "--reference $dir: neither a checkout of twitter-research/tgn nor a git directory with $commit" >&2; exit 2
  fi
  local src_commit=""
  if [ $src_kind = git ]; then
    src_commit=$(git --git-dir="$gitdir" rev-parse "$commit^{commit}")
  else
    [ ! -e "$dir/.git" ] || src_commit=$(git -C "$dir" rev-parse -q --verify 'HEAD^{commit}' 2>/dev/null || true)
    case $src_commit in
      d55bbe67*) ;;
      "") echo "note: $dir has no git history; assuming it is twitter-research/tgn d55bbe67" >&2 ;;
      *) echo "warning: $dir is at $src_commit, not d55bbe67" >&2 ;;
    esac
  fi
  mkdir -p "$results" "$work"
  local common="--epochs 3 --memory-dim 172 --time-dim 172 --embedding-dim 172 --batch-size 200 --lr 1e-4 --neighbors 10 --heads 2 --dropout 0.1 --protocol tgn-reference --patience 0 --threads $threads --progress none"
  local refcommon="--data wikipedia --use_memory --n_epoch 3 --bs 200 --lr 0.0001 --n_degree 10 --n_head 2 --n_layer 1 --drop_out 0.1 --memory_dim 172 --patience 5 --gpu -1"
  [ "$max_events" = 0 ] || common="$common --max-events $max_events"
  # A copy of the reference, patched, with the first E events (0: all) of our
  # Wikipedia: prepare_reference DEST E.
  local wiki_path
  wiki_path=$("$MNEMO" data wikipedia --json | "$py" -c 'import json,sys; print(json.load(sys.stdin)["path"])')
  prepare_reference() {
    rm -rf "$1"; mkdir -p "$1/src"
    if [ $src_kind = git ]; then
      git --git-dir="$gitdir" archive "$src_commit" | tar -x -C "$1/src"
    else
      tar -C "$dir" --exclude=./.git --exclude=./data --exclude=./log --exclude=./results \
          --exclude=./saved_models --exclude=./saved_checkpoints -cf - . | tar -x -C "$1/src"
    fi
    "$py" "$helper" patch "$1/src" > "$1/patch.json"
    "$py" "$helper" convert --input "$wiki_path" --out "$1/src/data" --name wikipedia \
        --max-events "$2" > "$1/data.json"
  }
  # The BLAS probe (see the top of this file): one epoch of TGN on the first
  # $probe_events events per configuration and round, alternating.
  local blas_json="$work/blas-probe-t$threads-e$probe_events-r$probe_rounds/blas.json"
  local blas_name blas_env
  if [ "$blas_choice" != probe ]; then
    blas_name=$blas_choice
    blas_json="$work/blas-$blas_name.json"
    "$py" "$helper" blas --chosen "$blas_name" --env "${blas_envs[$blas_name]}" > "$blas_json"
  elif [ $reuse = 1 ] && [ -f "$blas_json" ] &&
       [ "$("$py" -c 'import json,sys; print(" ".join(r["name"] for r in json.load(open(sys.argv[1]))["probe"]["configurations"]))' "$blas_json")" = "${blas_names[*]}" ]; then
    echo "== reference BLAS: reusing the probe $blas_json" >&2
    blas_name=$("$py" -c 'import json,sys; print(json.load(open(sys.argv[1]))["chosen"])' "$blas_json")
  else
    local pdir=${blas_json%/blas.json} round n probe_args=()
    prepare_reference "$pdir" "$probe_events"
    local probecmd="$py train_self_supervised.py ${refcommon/--n_epoch 3/--n_epoch 1} --memory_updater gru --embedding_module graph_attention --n_runs 1"
    for ((round = 1; round <= probe_rounds; round++)); do
      for n in "${blas_names[@]}"; do
        echo "== reference BLAS probe, round $round: $n: ${blas_envs[$n]}OMP_NUM_THREADS=$threads $probecmd" >&2
        (cd "$pdir/src" && env ${blas_envs[$n]} OMP_NUM_THREADS=$threads MKL_NUM_THREADS=$threads \
           $probecmd --prefix "probe-$n-$round") > "$pdir/$n-$round.out" 2>&1 ||
          { tail -20 "$pdir/$n-$round.out" >&2; echo "the reference failed with BLAS $n: $pdir/$n-$round.out" >&2; exit 1; }
        "$py" "$helper" parse "$pdir/src" --prefix "probe-$n-$round" --runs 1 > "$pdir/$n-$round.json"
        probe_args+=("$n=$pdir/$n-$round.json")
      done
    done
    local name_envs=()
    for n in "${blas_names[@]}"; do name_envs+=("$n=${blas_envs[$n]}"); done
    "$py" "$helper" blas --probe "${probe_args[@]}" --envs "${name_envs[@]}" \
        --command "(BLAS) OMP_NUM_THREADS=$threads MKL_NUM_THREADS=$threads $probecmd" \
        --events "$probe_events" --rounds "$probe_rounds" > "$blas_json.tmp"
    mv "$blas_json.tmp" "$blas_json"
    blas_name=$("$py" -c 'import json,sys; print(json.load(open(sys.argv[1]))["chosen"])' "$blas_json")
  fi
  blas_env=${blas_envs[$blas_name]}
  echo "== reference BLAS: $blas_name (${blas_env:-environment unchanged})" >&2
  declare -A done_ref=()
  for w in "${which[@]}"; do
    local model extra="" refkey refargs goal
    case $w in
      jodie-wiki) model=jodie; refkey=jodie; goal=15; refargs="--memory_updater rnn --embedding_module time" ;;
      tgn-wiki) model=tgn; refkey=tgn; goal=8; refargs="--memory_updater gru --embedding_module graph_attention" ;;
      tgn-wiki-bf16) model=tgn; refkey=tgn; goal=12; extra=" --precision bf16"
                     refargs="--memory_updater gru --embedding_module graph_attention" ;;
      *) echo "train_reference.sh --reference: unknown benchmark $w (jodie-wiki, tgn-wiki, tgn-wiki-bf16)" >&2; exit 2 ;;
    esac
    local margs="--data wikipedia --model $model $common$extra"
    local load_m0 load_m1 load_r0 load_r1 ref_load
    # Seed S of one mnemo binary: run_seed LABEL BIN S; prints the summary.
    local s summaries=() base_summaries=()
    run_seed() {
      echo "== $w $1 seed $3: $2 train $margs --seed $3" >&2
      rm -rf "$work/$w/$1/seed-$3"
      mkdir -p "$work/$w/$1"
      "$2" train $margs --seed "$3" --out "$work/$w/$1/seed-$3" >&2
      echo "$work/$w/$1/seed-$3/summary.json"
    }
    # Seeds 0..N-1; with --baseline, the earlier build runs each seed right
    # after this one (alternating, so that both see the same machine: the
    # speed of a 2-CPU guest drifts by tens of percent within minutes).
    load_m0=$(cut -d' ' -f1 /proc/loadavg)
    for ((s = 0; s < seeds; s++)); do
      summaries+=("$(run_seed mnemo "$MNEMO" $s)")
      [ -z "$baseline" ] || base_summaries+=("$(run_seed baseline "$baseline" $s)")
    done
    load_m1=$(cut -d' ' -f1 /proc/loadavg)
    local bargs=()
    if [ -n "$baseline" ]; then
      bargs=(--baseline "${base_summaries[@]}" --baseline-command "$baseline train $margs --seed S --out OUT")
    fi
    # The reference: its own N runs in one process.
    local rdir="$work/reference-$refkey-runs$ref_runs" prefix="mnemo-bench-$refkey"
    [ "$max_events" = 0 ] || rdir="$rdir-events$max_events"
    local refcmd="$py train_self_supervised.py $refcommon $refargs --n_runs $ref_runs --prefix $prefix"
    if { [ $reuse = 1 ] || [ -n "${done_ref[$rdir]:-}" ]; } && [ -f "$rdir/reference.json" ] &&
       [ "$(cat "$rdir/command" 2>/dev/null)" = "${blas_env}OMP_NUM_THREADS=$threads $refcmd" ]; then
      echo "== $w reference: reusing $rdir/reference.json" >&2
      ref_load=$(cat "$rdir/load")
    else
      prepare_reference "$rdir" "$max_events"
      echo "${blas_env}OMP_NUM_THREADS=$threads $refcmd" > "$rdir/command"
      echo "== $w reference ($ref_runs runs): (cd $rdir/src && ${blas_env}OMP_NUM_THREADS=$threads $refcmd)" >&2
      load_r0=$(cut -d' ' -f1 /proc/loadavg)
      (cd "$rdir/src" && env $blas_env OMP_NUM_THREADS=$threads MKL_NUM_THREADS=$threads $refcmd) > "$rdir/reference.out" 2>&1 ||
        { tail -30 "$rdir/reference.out" >&2; echo "the reference failed: $rdir/reference.out" >&2; exit 1; }
      load_r1=$(cut -d' ' -f1 /proc/loadavg)
      "$py" "$helper" parse "$rdir/src" --prefix "$prefix" --runs "$ref_runs" > "$rdir/reference.json.tmp"
      mv "$rdir/reference.json.tmp" "$rdir/reference.json"
      ref_load="$load_r0, $load_r1"
      echo "$ref_load" > "$rdir/load"
    fi
    done_ref[$rdir]=1
    local source_desc
    if [ $src_kind = git ]; then source_desc="git directory $gitdir"; else source_desc="checkout $dir"; fi
    "$py" "$helper" report --which "$w" --reference "$rdir/reference.json" --mnemo "${summaries[@]}" \
      --out-json "$results/reference_$w.json" --out-md "$results/reference_$w.md" \
      --mnemo-command "build/services/mnemo train $margs --seed S --out OUT" \
      --ref-command "${blas_env}OMP_NUM_THREADS=$threads $refcmd" --threads "$threads" \
      --script "bench/train_reference.sh --reference DIR --seeds $seeds --reference-runs $ref_runs$([ "$blas_choice" = probe ] || echo " --reference-blas $blas_choice")$([ -z "$baseline" ] || echo " --baseline BIN")$([ "$max_events" = 0 ] || echo " --max-events $max_events") $w" \
      --ref-source "$source_desc" --ref-commit "$src_commit" --ref-patch "$rdir/patch.json" \
      --ref-data "$rdir/data.json" --ref-blas "$blas_json" \
      --ref-python "$("$py" -c 'import sys; print(sys.version.split()[0])')" \
      --ref-torch "$("$py" -c 'import torch; print(torch.__version__)')" \
      --load "{\"mnemo\": [$load_m0, $load_m1], \"reference\": [$ref_load]}" \
      --speed-goal "$goal" "${bargs[@]}"
  done
}
for arg in "$@"; do
  case $arg in --reference|--reference=*) reference_mode "$@"; exit 0 ;; esac
done
for arg in "$@"; do
  case $arg in -*) echo "train_reference.sh: $arg needs --reference (or is unknown)" >&2; exit 2 ;; esac
done
mkdir -p bench/results "$OUT"
REF="--memory-dim 172 --time-dim 172 --embedding-dim 172 --batch-size 200 --lr 1e-4 --neighbors 10 --dropout 0.1 --threads 2 --patience 0 --seed 0 --progress none"
declare -A CMD=(
  [tgn-wiki]="--data wikipedia --model tgn --epochs 3 $REF"
  [tgn-wiki-bf16]="--data wikipedia --model tgn --epochs 3 --precision bf16 $REF"
  [jodie-wiki]="--data wikipedia --model jodie --epochs 10 --memory-dim 172 --batch-size 200 --threads 2 --patience 3 --seed 0 --progress none"
  [tgn-mathoverflow]="--data mathoverflow --model tgn --epochs 3 --threads 2 --patience 0 --seed 0 --progress none"
)
which=("$@")
[ ${#which[@]} -gt 0 ] || which=(tgn-wiki tgn-wiki-bf16 jodie-wiki tgn-mathoverflow)
for w in "${which[@]}"; do
  args=${CMD[$w]}
  echo "== $w: mnemo train $args" >&2
  "$MNEMO" train $args --out "$OUT/$w" >&2
  python3 - "$OUT/$w/summary.json" "bench/results/train_$w.json" "$w" "$args" <<'PY'
import json, os, socket, subprocess, sys, datetime
summary, dest, name, args = sys.argv[1:5]
s = json.load(open(summary))
cpu = ""
try:
    cpu = [l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")][0]
except Exception:
    pass
out = {"benchmark": "train_" + name,
       "command": "build/services/mnemo train " + args + " --out OUT",
       "script": "bench/train_reference.sh " + name,
       "date": datetime.datetime.utcnow().isoformat() + "Z",
       "machine": {"host": socket.gethostname(), "nproc": os.cpu_count(), "cpu": cpu},
       "summary": s}
json.dump(out, open(dest, "w"), indent=1)
t = s["test"]
print(f"{name:18s} epochs {len(s['epochs'])}  train {s['train_events_per_second']:.0f} ev/s  "
      f"test AP {t['ap']:.4f} (batch-mean {t['ap_batch_mean']:.4f})  "
      f"new-node AP {t['new_node_ap']:.4f} (batch-mean {t['new_node_ap_batch_mean']:.4f})  "
      f"AUC {t['auc']:.4f} / {t['new_node_auc']:.4f}  peak RSS {s['peak_rss_bytes']/1e9:.2f} GB")
PY
done
