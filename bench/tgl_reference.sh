#!/usr/bin/env bash
# Side by side: mnemo's APAN, DySAT and TGAT against TGL's (amazon-research/tgl at
# 5d852b8, a public implementation, not part of this project) on the same
# data, split and hyperparameters.
#
#   bench/tgl_reference.sh --tgl DIR [--model apan|dysat|tgat|both|all]
#       [--data collegemsg|wikipedia] [--epochs E] [--seeds N]
#       [--tgl-runs R] [--threads T] [--ablation] [--reuse]
#
# DIR is a checkout of TGL or its git directory (the fetch tool's
# /work/.mirror/amazon-research+tgl/repo; the commit $TGL_COMMIT, default
# 5d852b8, is extracted: its sources and configs, not the model files it
# tracks). The copy goes to runs/tgl-work/ (git-ignored; $TGL_WORK), one per
# model, is patched there by bench/tgl.py (CPU instead of CUDA, DGL 1.x,
# seeds, best epoch over all epochs; see its patch command), gets our
# featureless data set converted with mnemo's split (TGL's edges.csv, the
# T-CSR from TGL's own gen_graph.py --add_reverse) and runs with the Python
# $TGL_PYTHON (default: runs/tgl-venv/bin/python, a venv over /usr/bin/python3
# with --system-site-packages, that is Debian's python3-torch 1.13, -pandas,
# -sklearn, -yaml, plus DGL 1.1.3 and pybind11 from PyPI; created when
# missing, and TGL's C++ sampler is built in it with setup.py build_ext). DGL
# 1.1.3 refuses Debian's torch version string '1.13.0a0': the venv's copy of
# its check is patched too. Debian's torch calls the generic reference BLAS:
# where libopenblas0-pthread is installed, TGL runs with OpenBLAS through
# LD_LIBRARY_PATH ($TGL_BLAS_DIR; the system's choice of BLAS stays as it
# is). TGL runs R times (default N) with TGL_SEED 0..R-1, one after the
# other; mnemo runs the same hyperparameters with --seed 0..N-1 (default
# N=3), E epochs (default 3) each, T threads (default 1: OMP_NUM_THREADS,
# OpenBLAS, TGL's sampler threads, mnemo's --threads). Everything runs
# under nice, one run at a time. Writes
# bench/results/reference_<model>-tgl-<data>.json (both sides per seed and
# epoch, means and sds, commands, machine) and .md (the table and the
# verdict: test AP within 0.01). --ablation also runs TGL R more times with
# mnemo's negatives (TGL_NEG=destinations: training negatives from the
# training events' destinations, evaluation negatives from all events'), a
# row of its own in the report; for APAN also R runs that test from the
# memory validation left (TGL_TEST=continue), as mnemo does, instead of
# TGL's replay of training and validation from a reset memory, and R runs
# whose sampler searches every root's window at the root's own time
# (TGL_PER_ROOT_WINDOWS=1; APAN also with TGL_TEST=continue): TGL's sampler
# finds first-hop neighbours through one pointer per node, advanced to the
# node's latest time in the batch, which drops the neighbours of the node's
# earlier occurrences in long batches (the report gives the counts, from
# bench/tgl.py window-counts); for APAN also R runs with all of these and
# mnemo's negatives and its memory attending over the filled mailbox slots
# only, as mnemo's (TGL_MASK_EMPTY_MAILS=1); and R runs with all of those
# that keep, of the mails that reach a node in a batch, the one mnemo keeps
# (TGL_MAIL_ORDER=latest). --as-mnemo (APAN) runs TGL only with all of
# mnemo's choices (per-root neighbours, empty mailbox slots masked, mnemo's
# mail per node and batch, mnemo's negatives, tested from the
# post-validation memory) as the reference, to
# bench/results/reference_apan-tgl-<data>-asmnemo-e<E>.{json,md}.
# --mnemo-as-tgl (APAN) goes the other way for the mailbox: mnemo runs with
# --apan-mailbox tgl (every slot attended, TGL's mail order) and TGL with its
# own mailbox but the other three of mnemo's choices (per-root neighbours,
# mnemo's negatives, tested from the post-validation memory: mnemo has no
# mode for them), to bench/results/reference_apan-tgl-<data>-mnemoastgl-e<E>.
# --reuse reuses finished runs of the same
# commands from the work directory.
set -euo pipefail
cd "$(dirname "$0")/.."
MNEMO=${MNEMO:-build/services/mnemo}

usage="usage: bench/tgl_reference.sh --tgl DIR [--model apan|dysat|tgat|both|all] [--data collegemsg|wikipedia] [--epochs E] [--seeds N] [--tgl-runs R] [--threads T] [--ablation | --as-mnemo | --mnemo-as-tgl] [--reuse]"
dir="" models=both data=collegemsg epochs=3 seeds=3 runs="" threads=1 reuse=0 ablation=0 as_mnemo=0 as_tgl=0
while [ $# -gt 0 ]; do
  case $1 in
    --tgl) dir=${2:?--tgl needs DIR}; shift 2 ;;
    --tgl=*) dir=${1#*=}; shift ;;
    --model) models=${2:?--model needs apan, dysat, tgat, both or all}; shift 2 ;;
    --model=*) models=${1#*=}; shift ;;
    --data) data=${2:?--data needs collegemsg or wikipedia}; shift 2 ;;
    --data=*) data=${1#*=}; shift ;;
    --epochs) epochs=${2:?--epochs needs E}; shift 2 ;;
    --epochs=*) epochs=${1#*=}; shift ;;
    --seeds) seeds=${2:?--seeds needs N}; shift 2 ;;
    --seeds=*) seeds=${1#*=}; shift ;;
    --tgl-runs) runs=${2:?--tgl-runs needs R}; shift 2 ;;
    --tgl-runs=*) runs=${1#*=}; shift ;;
    --threads) threads=${2:?--threads needs T}; shift 2 ;;
    --threads=*) threads=${1#*=}; shift ;;
    --ablation) ablation=1; shift ;;
    --as-mnemo) as_mnemo=1; shift ;;
    --mnemo-as-tgl) as_tgl=1; shift ;;
    --reuse) reuse=1; shift ;;
    -h|--help) echo "$usage"; exit 0 ;;
    *) echo "tgl_reference.sh: unknown argument $1" >&2; echo "$usage" >&2; exit 2 ;;
  esac
done
[ -n "$dir" ] || { echo "$usage" >&2; exit 2; }
[ -n "$runs" ] || runs=$seeds
[ $((ablation + as_mnemo + as_tgl)) -le 1 ] || { echo "--ablation, --as-mnemo, --mnemo-as-tgl: one of them" >&2; exit 2; }
if [ $((as_mnemo + as_tgl)) = 1 ]; then
  [ "$models" = apan ] || { echo "--as-mnemo, --mnemo-as-tgl: APAN only (--model apan)" >&2; exit 2; }
fi
# APAN with every choice mnemo makes differently (bench/tgl.py patch).
asmnemo_env="TGL_PER_ROOT_WINDOWS=1 TGL_MASK_EMPTY_MAILS=1 TGL_MAIL_ORDER=latest TGL_NEG=destinations TGL_TEST=continue "
# --mnemo-as-tgl: TGL's mailbox as it is, the rest as mnemo.
astgl_env="TGL_PER_ROOT_WINDOWS=1 TGL_NEG=destinations TGL_TEST=continue "
# What the reference runs with, and the name of the mode.
ref_env="" mode_suffix="" mnemo_extra=""
if [ $as_mnemo = 1 ]; then ref_env=$asmnemo_env; mode_suffix=-asmnemo; fi
if [ $as_tgl = 1 ]; then ref_env=$astgl_env; mode_suffix=-mnemoastgl; mnemo_extra=" --apan-mailbox tgl"; fi
for v in epochs seeds runs threads; do
  [[ ${!v} =~ ^[1-9][0-9]*$ ]] || { echo "--$v: a positive integer" >&2; exit 2; }
done
case $models in
  apan|dysat|tgat) ;;
  both) models="apan dysat" ;;
  all) models="apan dysat tgat" ;;
  *) echo "--model: apan, dysat, tgat, both or all" >&2; exit 2 ;;
esac
case $data in
  collegemsg) dname=COLLEGEMSG; file=CollegeMsg.txt.gz ;;
  wikipedia) dname=WIKIPEDIA; file=wikipedia.txt.gz ;;
  *) echo "--data: collegemsg or wikipedia" >&2; exit 2 ;;
esac
[ -x "$MNEMO" ] || { echo "$MNEMO: no mnemo binary (build it, or set MNEMO)" >&2; exit 1; }
commit=${TGL_COMMIT:-5d852b8}
work=${TGL_WORK:-runs/tgl-work}
venv=${TGL_VENV:-runs/tgl-venv}
py=${TGL_PYTHON:-$venv/bin/python}
results=${BENCH_RESULTS:-bench/results}
helper=$PWD/bench/tgl.py

# Where TGL comes from: a work tree, or a git directory.
src_kind="" gitdir="" src_commit=""
if [ -f "$dir/train.py" ] && [ -f "$dir/sampler_core.cpp" ]; then
  src_kind=tree
  [ ! -e "$dir/.git" ] || src_commit=$(git -C "$dir" rev-parse -q --verify 'HEAD^{commit}' 2>/dev/null || true)
elif git --git-dir="$dir" rev-parse -q --verify "$commit^{commit}" >/dev/null 2>&1; then
  src_kind=git; gitdir=$dir
elif git --git-dir="$dir/repo" rev-parse -q --verify "$commit^{commit}" >/dev/null 2>&1; then
  src_kind=git; gitdir=$dir/repo
else
  echo "--tgl $dir: neither a checkout of amazon-research/tgl nor a git directory with $commit" >&2; exit 2
fi
[ $src_kind = tree ] || src_commit=$(git --git-dir="$gitdir" rev-parse "$commit^{commit}")

# Data: the file mnemo's registry reads.
data_path=""
for d in ${MNEMO_DATA_DIR:-} ../shared/data; do
  [ -n "$d" ] && [ -f "$d/$file" ] && { data_path=$d/$file; break; }
done
[ -n "$data_path" ] || { echo "$file not found in \$MNEMO_DATA_DIR or ../shared/data" >&2; exit 1; }
data_path=$(realpath "$data_path")

# TGL's Python: a venv with DGL 1.1.3 over Debian's torch.
if [ -z "${TGL_PYTHON:-}" ] && [ ! -x "$py" ]; then
  /usr/bin/python3 -c 'import numpy, pandas, sklearn, torch, yaml' ||
    { echo "/usr/bin/python3 lacks numpy/pandas/sklearn/torch/yaml (Debian: apt-get install python3-torch python3-pandas python3-sklearn python3-yaml python3-venv)" >&2; exit 1; }
  echo "== creating $venv (DGL 1.1.3, pybind11 from PyPI)" >&2
  /usr/bin/python3 -m venv --system-site-packages "$venv"
  "$venv/bin/pip" install --quiet dgl==1.1.3 pybind11 tqdm
fi
dgl_check=$("$py" -c 'import importlib.util, os; print(os.path.join(os.path.dirname(importlib.util.find_spec("dgl").origin), "backend", "pytorch", "tensor.py"))')
py=$(cd "$(dirname "$py")" && pwd)/$(basename "$py")  # absolute, the venv kept (no symlinks resolved)
blas_dir=${TGL_BLAS_DIR:-/usr/lib/x86_64-linux-gnu/openblas-pthread}
blas_env=""
if [ -f "$blas_dir/libblas.so.3" ]; then
  blas_env="LD_LIBRARY_PATH=$blas_dir OPENBLAS_NUM_THREADS=$threads "
else
  echo "note: no OpenBLAS in $blas_dir (apt-get install libopenblas0-pthread): TGL runs on the BLAS torch finds, which for Debian's torch is the slow reference one" >&2
fi
tenv="OMP_NUM_THREADS=$threads MKL_NUM_THREADS=$threads $blas_env"
mkdir -p "$results" "$work"

# TGL, one model: extract, patch, build the sampler, convert, run R seeds.
run_tgl() {  # model, TGL's name for it, rdir
  local m=$1 M=$2 rdir=$3 s
  local name=$dname extra=""
  if [ $m = dysat ]; then name=$dname-ID; extra="TGL_LEARN_NODE_FEATS=1 "; fi
  local cmd="$py train.py --data $name --config config/$M-bench.yml"
  local fresh=0
  [ $reuse = 1 ] && [ "$(cat "$rdir/command" 2>/dev/null)" = "$tenv$extra$cmd" ] || fresh=1
  if [ $fresh = 1 ]; then
    rm -rf "$rdir"; mkdir -p "$rdir/src"
    if [ $src_kind = git ]; then
      # Sources and configs only: the model files TGL tracks are not needed.
      git --git-dir="$gitdir" archive "$src_commit" -- '*.py' '*.cpp' '*.yml' LICENSE README.md 2>"$rdir/archive.err" | tar -x -C "$rdir/src"
    else
      tar -C "$dir" --exclude=./.git --exclude=./DATA --exclude=./models -cf - . | tar -x -C "$rdir/src"
    fi
  fi
  # Idempotent: a reused copy gets what the patch has gained since (the
  # ablations' switches, inert without their variables).
  "$py" "$helper" patch "$rdir/src" --model "$M" --epochs "$epochs" --threads "$threads" --dgl "$dgl_check" > "$rdir/patch.json"
  # The sampler: built in a fresh copy, rebuilt when the patch changed it.
  local so
  so=$(ls "$rdir"/src/sampler_core*.so 2>/dev/null | head -1 || true)  # none yet in a fresh copy
  if [ $fresh = 1 ] || [ -z "$so" ] || [ "$rdir/src/sampler_core.cpp" -nt "$so" ]; then
    (cd "$rdir/src" && nice -n 10 "$py" setup.py build_ext --inplace) > "$rdir/build.log" 2>&1 ||
      { tail -20 "$rdir/build.log" >&2; echo "TGL's sampler did not build: $rdir/build.log" >&2; return 1; }
    touch "$rdir"/src/sampler_core*.so
  fi
  if [ $fresh = 1 ]; then
    local nf=""
    [ $m = dysat ] && nf="--node-features 100"
    (cd "$rdir/src" && "$py" "$helper" convert --input "$data_path" --out DATA --name "$name" $nf) > "$rdir/data.json"
    (cd "$rdir/src" && nice -n 10 "$py" gen_graph.py --data "$name" --add_reverse) > "$rdir/gen_graph.log" 2>&1 ||
      { tail -5 "$rdir/gen_graph.log" >&2; echo "TGL's gen_graph.py failed: $rdir/gen_graph.log" >&2; return 1; }
    echo "$tenv$extra$cmd" > "$rdir/command"
  fi
  if [ $ablation = 1 ] && [ $m = apan ]; then
    # First (the closest to mnemo): everything mnemo does differently at
    # once: per-root windows, tested from the post-validation memory, the
    # attention over the filled mailbox slots only and mnemo's negatives;
    # then also keeping mnemo's mail of those that reach a node in a batch.
    tgl_runs "$rdir" tgl-asmnemo "${asmnemo_env/TGL_MAIL_ORDER=latest /}$tenv$extra" "$cmd" "$m" --test-after-val
    tgl_runs "$rdir" tgl-asmnemo-mail "$asmnemo_env$tenv$extra" "$cmd" "$m" --test-after-val
  fi
  if [ -n "$ref_env" ]; then
    # Only TGL as mnemo (or with its mailbox only as it is), the report's
    # reference.
    tgl_runs "$rdir" tgl "$ref_env$tenv$extra" "$cmd" "$m" --test-after-val
  else
    tgl_runs "$rdir" tgl "$tenv$extra" "$cmd" "$m"
  fi
  [ $ablation = 0 ] || tgl_runs "$rdir" tgl-negdst "TGL_NEG=destinations $tenv$extra" "$cmd" "$m"
  # APAN's memory: TGL tests after replaying training and validation from a
  # reset memory, mnemo from the best epoch's post-validation memory.
  [ $ablation = 0 ] || [ $m != apan ] || tgl_runs "$rdir" tgl-testcont "TGL_TEST=continue $tenv$extra" "$cmd" "$m" --test-after-val
  # The sampler's per-node pointers against per-root windows (APAN: tested
  # as mnemo tests, from the post-validation memory).
  if [ $ablation = 1 ]; then
    if [ $m = apan ]; then
      tgl_runs "$rdir" tgl-perroot "TGL_PER_ROOT_WINDOWS=1 TGL_TEST=continue $tenv$extra" "$cmd" "$m" --test-after-val
    else
      tgl_runs "$rdir" tgl-perroot "TGL_PER_ROOT_WINDOWS=1 $tenv$extra" "$cmd" "$m"
    fi
  fi
  (cd "$rdir/src" && "$py" "$helper" window-counts . --data "$name" --config "config/$M-bench.yml") > "$rdir/window-counts.json"
}

tgl_runs() {  # rdir, name, environment, command, model, [parse flag]: R seeds, parsed into rdir/name.json
  local rdir=$1 name=$2 env_=$3 cmd=$4 m=$5 pflag=${6:-} s outs=()
  for ((s = 0; s < runs; s++)); do
    local out="$rdir/$name-seed$s.out"
    outs+=("$out")
    if [ $reuse = 1 ] && grep -q 'test AP:' "$out" 2>/dev/null; then
      echo "== TGL $m ($name) seed $s: reusing $out" >&2
      continue
    fi
    echo "== TGL $m ($name) seed $s: (cd $rdir/src && TGL_SEED=$s $env_$cmd --model_name $name-$m-seed$s)" >&2
    cut -d' ' -f1 /proc/loadavg > "$rdir/$name-seed$s.load"
    (cd "$rdir/src" && env TGL_SEED=$s $env_ nice -n 10 $cmd --model_name "$name-$m-seed$s") > "$out" 2>&1 ||
      { tail -30 "$out" >&2; echo "TGL failed: $out" >&2; return 1; }
    cut -d' ' -f1 /proc/loadavg >> "$rdir/$name-seed$s.load"
  done
  "$py" "$helper" parse "${outs[@]}" $pflag --train-events "$("$py" -c 'import json, sys; print(json.load(open(sys.argv[1]))["train_events"])' "$rdir/data.json")" > "$rdir/$name.json"
}

run_mnemo() {  # model, arguments
  local m=$1 margs=$2 s
  for ((s = 0; s < seeds; s++)); do
    local out="$work/mnemo-$m-$data-e$epochs$mode_suffix/seed-$s"
    if [ $reuse = 1 ] && [ -f "$out/summary.json" ] && [ "$(cat "$out.command" 2>/dev/null)" = "$margs --seed $s" ]; then
      echo "== mnemo $m seed $s: reusing $out" >&2
      continue
    fi
    echo "== mnemo $m seed $s: $MNEMO train $margs --seed $s" >&2
    rm -rf "$out"
    mkdir -p "$work/mnemo-$m-$data-e$epochs$mode_suffix"
    echo "$margs --seed $s" > "$out.command"
    cut -d' ' -f1 /proc/loadavg > "$out.load"
    OMP_NUM_THREADS=$threads nice -n 10 "$MNEMO" train $margs --seed "$s" --out "$out" > "$out.log" 2>&1 ||
      { tail -20 "$out.log" >&2; echo "mnemo failed: $out.log" >&2; return 1; }
    cut -d' ' -f1 /proc/loadavg >> "$out.load"
  done
}

# TGL's config/APAN.yml and config/DySAT.yml, in mnemo's flags.
head="--epochs $epochs --batch-size 600 --eval-batch-size 600 --lr 1e-4"
tail="--protocol tgn-reference --patience 0 --threads $threads --progress none"
for m in $models; do
  case $m in
    apan) M=APAN
      margs="--data $data --model apan $head --memory-dim 100 --time-dim 100 --embedding-dim 100 --neighbors 10 --neighbor-strategy recent --heads 2 --dropout 0.1 --mailbox 10$mnemo_extra $tail" ;;
    tgat) M=TGAT
      margs="--data $data --model tgat $head --embedding-dim 100 --time-dim 100 --neighbors 10 --neighbor-strategy uniform --layers 2 --heads 2 --dropout 0.1 $tail" ;;
    dysat) M=DySAT
      margs="--data $data --model dysat $head --embedding-dim 100 --neighbors 10 --neighbor-strategy uniform --layers 2 --heads 2 --dropout 0.1 --snapshots 3 --snapshot-span 10000 $tail" ;;
  esac
  rdir="$work/tgl-$m-$data-e$epochs$mode_suffix"
  out_name=reference_$m-tgl-$data$([ -z "$mode_suffix" ] || echo "$mode_suffix-e$epochs")
  run_mnemo "$m" "$margs"
  run_tgl "$m" "$M" "$rdir"
  summaries=() load=()
  for ((s = 0; s < seeds; s++)); do
    summaries+=("$work/mnemo-$m-$data-e$epochs$mode_suffix/seed-$s/summary.json")
    load+=("[$(paste -sd, "$work/mnemo-$m-$data-e$epochs$mode_suffix/seed-$s.load" 2>/dev/null || true)]")
  done
  tload=()
  for ((s = 0; s < runs; s++)); do tload+=("[$(paste -sd, "$rdir/tgl-seed$s.load" 2>/dev/null || true)]"); done
  if [ $src_kind = git ]; then source_desc="git directory $gitdir"; else source_desc="checkout $dir"; fi
  if [ -n "$blas_env" ]; then blas_note="TGL's BLAS: OpenBLAS ($blas_dir, $threads thread(s)); mnemo's: its LibTorch's."
  else blas_note="TGL's BLAS: the one torch finds."; fi
  "$py" "$helper" report --model "$m" --which "$data" --reference "$rdir/tgl.json" --mnemo "${summaries[@]}" \
    --out-json "$results/$out_name.json" --out-md "$results/$out_name.md" \
    --mnemo-command "build/services/mnemo train $margs --seed S --out OUT" \
    --ref-command "TGL_SEED=S $ref_env$(cat "$rdir/command" | sed "s|$py|python|") --model_name NAME" --threads "$threads" \
    $([ $as_mnemo = 0 ] || echo "--as-mnemo") $([ $as_tgl = 0 ] || echo "--mnemo-as-tgl") \
    --script "bench/tgl_reference.sh --tgl DIR --model $m --data $data --epochs $epochs --seeds $seeds --tgl-runs $runs --threads $threads$([ $ablation = 0 ] || echo " --ablation")$([ $as_mnemo = 0 ] || echo " --as-mnemo")$([ $as_tgl = 0 ] || echo " --mnemo-as-tgl")" \
    --ref-source "$source_desc" --ref-commit "$src_commit" --ref-patch "$rdir/patch.json" --ref-data "$rdir/data.json" \
    --ref-python "$("$py" -c 'import sys; print(sys.version.split()[0])')" \
    --ref-torch "$("$py" -c 'import torch; print(torch.__version__)')" \
    --ref-dgl "$("$py" -c 'import dgl; print(dgl.__version__)' 2>/dev/null | tail -1)" \
    --load "{\"mnemo\": [$(IFS=,; echo "${load[*]}")], \"tgl\": [$(IFS=,; echo "${tload[*]}")]}" \
    $([ $ablation = 0 ] || echo "--ablation $rdir/tgl-negdst.json") \
    $([ $ablation = 0 ] || [ $m != apan ] || echo "--ablation-test $rdir/tgl-testcont.json") \
    $([ $ablation = 0 ] || echo "--ablation-windows $rdir/tgl-perroot.json") --window-counts "$rdir/window-counts.json" \
    $([ $ablation = 0 ] || [ $m != apan ] || echo "--ablation-masked $rdir/tgl-asmnemo.json") \
    $([ $ablation = 0 ] || [ $m != apan ] || echo "--ablation-mail $rdir/tgl-asmnemo-mail.json") \
    --note "$blas_note" ${TGL_NOTES:+--note "$TGL_NOTES"}
done
