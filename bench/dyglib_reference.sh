#!/usr/bin/env bash
# Side by side: mnemo's TGAT against DyGLib's TGAT (yule-BUAA/DyGLib at
# 3aacc36, a public implementation, not part of this project) on the same
# data and hyperparameters.
#
#   bench/dyglib_reference.sh --dyglib DIR [--data collegemsg|wikipedia]
#       [--epochs E] [--seeds N] [--dyglib-runs R] [--threads T] [--sequential]
#       [--reuse]
#
# DIR is a checkout of DyGLib or its git directory (the fetch tool's
# /work/.mirror/yule-BUAA+DyGLib/repo; the commit $DYGLIB_COMMIT, default
# 3aacc36, is extracted: its Python files only, the data sets it tracks are
# not needed). The copy goes to runs/dyglib-work/ (git-ignored;
# $DYGLIB_WORK), is patched there by bench/dyglib.py (Python 3.11, and a log
# line with each epoch's training seconds) and given our featureless data
# set (zero features, which DyGLib pads to 172 columns; CollegeMsg under
# DyGLib's name for it, uci) and runs on the CPU with /usr/bin/python3
# (Debian's python3-torch, -pandas, -sklearn, -tqdm; $DYGLIB_PYTHON) for N
# runs (its seeds 0..N-1), E epochs (default 3, no early stopping), T threads
# (default 1). Debian's torch calls the generic reference BLAS, 13x slower
# than OpenBLAS on its matrix products here: where libopenblas0-pthread is
# installed, DyGLib runs with it through LD_LIBRARY_PATH
# ($DYGLIB_BLAS_DIR; the system's choice of BLAS stays as it is).
# mnemo runs the same hyperparameters with --seed 0..N-1 (default N=3);
# --dyglib-runs R runs DyGLib R times instead of N (its TGAT is slow here).
# Both sides run at the same time (one thread each on a 2-CPU machine, so
# that both see the same load), or one after the other with --sequential.
# Writes bench/results/reference_tgat-dyglib-<data>.json (both sides per
# seed and epoch, means and sds, commands, machine) and .md (the table and
# the verdict: test AP within 0.01). --reuse reuses finished runs (DyGLib's,
# mnemo's seeds) of the same commands from the work directory.
set -euo pipefail
cd "$(dirname "$0")/.."
MNEMO=${MNEMO:-build/services/mnemo}

dir="" data=collegemsg epochs=3 seeds=3 runs="" threads=1 reuse=0 sequential=0
while [ $# -gt 0 ]; do
  case $1 in
    --dyglib) dir=${2:?--dyglib needs DIR}; shift 2 ;;
    --dyglib=*) dir=${1#*=}; shift ;;
    --data) data=${2:?--data needs collegemsg or wikipedia}; shift 2 ;;
    --data=*) data=${1#*=}; shift ;;
    --epochs) epochs=${2:?--epochs needs E}; shift 2 ;;
    --epochs=*) epochs=${1#*=}; shift ;;
    --seeds) seeds=${2:?--seeds needs N}; shift 2 ;;
    --seeds=*) seeds=${1#*=}; shift ;;
    --dyglib-runs) runs=${2:?--dyglib-runs needs R}; shift 2 ;;
    --dyglib-runs=*) runs=${1#*=}; shift ;;
    --threads) threads=${2:?--threads needs T}; shift 2 ;;
    --threads=*) threads=${1#*=}; shift ;;
    --sequential) sequential=1; shift ;;
    --reuse) reuse=1; shift ;;
    *) echo "dyglib_reference.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ -n "$dir" ] || { echo "usage: bench/dyglib_reference.sh --dyglib DIR [--data collegemsg|wikipedia] [--epochs E] [--seeds N] [--dyglib-runs R] [--threads T] [--sequential] [--reuse]" >&2; exit 2; }
[ -n "$runs" ] || runs=$seeds
for v in epochs seeds runs threads; do
  [[ ${!v} =~ ^[1-9][0-9]*$ ]] || { echo "--$v: a positive integer" >&2; exit 2; }
done
case $data in
  collegemsg) dname=uci; file=CollegeMsg.txt.gz ;;
  wikipedia) dname=wikipedia; file=wikipedia.txt.gz ;;
  *) echo "--data: collegemsg or wikipedia" >&2; exit 2 ;;
esac
py=${DYGLIB_PYTHON:-/usr/bin/python3}
commit=${DYGLIB_COMMIT:-3aacc36}
work=${DYGLIB_WORK:-runs/dyglib-work}
results=${BENCH_RESULTS:-bench/results}
helper=bench/dyglib.py
"$py" -c 'import numpy, pandas, sklearn, torch, tqdm' ||
  { echo "$py lacks numpy/pandas/sklearn/torch/tqdm (Debian: apt-get install python3-torch python3-pandas python3-sklearn python3-tqdm)" >&2; exit 1; }
blas_dir=${DYGLIB_BLAS_DIR:-/usr/lib/x86_64-linux-gnu/openblas-pthread}
blas_env=""
if [ -f "$blas_dir/libblas.so.3" ]; then
  blas_env="LD_LIBRARY_PATH=$blas_dir OPENBLAS_NUM_THREADS=$threads "
else
  echo "note: no OpenBLAS in $blas_dir (apt-get install libopenblas0-pthread): DyGLib runs on the BLAS torch finds, which for Debian's torch may be the slow reference one" >&2
fi

# Where DyGLib comes from: a work tree, or a git directory.
src_kind="" gitdir="" src_commit=""
if [ -f "$dir/train_link_prediction.py" ]; then
  src_kind=tree
  [ ! -e "$dir/.git" ] || src_commit=$(git -C "$dir" rev-parse -q --verify 'HEAD^{commit}' 2>/dev/null || true)
elif git --git-dir="$dir" rev-parse -q --verify "$commit^{commit}" >/dev/null 2>&1; then
  src_kind=git; gitdir=$dir
elif git --git-dir="$dir/repo" rev-parse -q --verify "$commit^{commit}" >/dev/null 2>&1; then
  src_kind=git; gitdir=$dir/repo
else
  echo "--dyglib $dir: neither a checkout of yule-BUAA/DyGLib nor a git directory with $commit" >&2; exit 2
fi
[ $src_kind = tree ] || src_commit=$(git --git-dir="$gitdir" rev-parse "$commit^{commit}")

# Data: the file mnemo's registry reads.
data_path=""
for d in ${MNEMO_DATA_DIR:-} ../shared/data; do
  [ -n "$d" ] && [ -f "$d/$file" ] && { data_path=$d/$file; break; }
done
[ -n "$data_path" ] || { echo "$file not found in \$MNEMO_DATA_DIR or ../shared/data" >&2; exit 1; }

mkdir -p "$results" "$work"
margs="--data $data --model tgat --epochs $epochs --batch-size 200 --lr 1e-4 --neighbors 10 --neighbor-strategy uniform --heads 2 --layers 2 --dropout 0.1 --time-dim 100 --embedding-dim 172 --protocol tgn-reference --patience 0 --threads $threads --progress none"
dargs="--dataset_name $dname --model_name TGAT --num_neighbors 10 --sample_neighbor_strategy uniform --num_layers 2 --num_heads 2 --dropout 0.1 --learning_rate 0.0001 --batch_size 200 --time_feat_dim 100 --num_epochs $epochs --patience 100 --num_runs $runs --gpu -1"
dcmd="$py train_link_prediction.py $dargs"
denv="OMP_NUM_THREADS=$threads MKL_NUM_THREADS=$threads $blas_env"
rdir="$work/dyglib-$data-e$epochs-runs$runs"

run_dyglib() {
  if [ $reuse = 1 ] && [ "$(cat "$rdir/command" 2>/dev/null)" = "$denv$dcmd" ] &&
     "$py" "$helper" parse "$rdir/src" --dataset "$dname" --runs "$runs" > "$rdir/dyglib.json.tmp" 2>/dev/null; then
    mv "$rdir/dyglib.json.tmp" "$rdir/dyglib.json"
    echo "== DyGLib: reusing $rdir" >&2
    return 0
  fi
  rm -rf "$rdir"; mkdir -p "$rdir/src"
  if [ $src_kind = git ]; then
    # The Python files only: the data sets DyGLib tracks are not needed.
    git --git-dir="$gitdir" archive "$src_commit" -- '*.py' LICENSE README.md 2>"$rdir/archive.err" | tar -x -C "$rdir/src"
  else
    tar -C "$dir" --exclude=./.git --exclude=./DG_data --exclude=./processed_data --exclude=./logs \
        --exclude=./saved_models --exclude=./saved_results -cf - . | tar -x -C "$rdir/src"
  fi
  "$py" "$helper" patch "$rdir/src" > "$rdir/patch.json"
  "$py" "$helper" convert --input "$data_path" --out "$rdir/src/processed_data" --name "$dname" > "$rdir/data.json"
  echo "$denv$dcmd" > "$rdir/command"
  echo "== DyGLib ($runs runs): (cd $rdir/src && $denv$dcmd)" >&2
  cut -d' ' -f1 /proc/loadavg > "$rdir/load"
  (cd "$rdir/src" && env $denv nice -n 10 $dcmd) > "$rdir/dyglib.out" 2>&1 ||
    { tail -30 "$rdir/dyglib.out" >&2; echo "DyGLib failed: $rdir/dyglib.out" >&2; return 1; }
  cut -d' ' -f1 /proc/loadavg >> "$rdir/load"
  "$py" "$helper" parse "$rdir/src" --dataset "$dname" --runs "$runs" > "$rdir/dyglib.json.tmp"
  mv "$rdir/dyglib.json.tmp" "$rdir/dyglib.json"
}

run_mnemo() {
  local s
  for ((s = 0; s < seeds; s++)); do
    local out="$work/mnemo-$data-e$epochs/seed-$s"
    if [ $reuse = 1 ] && [ -f "$out/summary.json" ] && [ "$(cat "$out.command" 2>/dev/null)" = "$margs --seed $s" ]; then
      echo "== mnemo seed $s: reusing $out" >&2
      continue
    fi
    echo "== mnemo seed $s: $MNEMO train $margs --seed $s" >&2
    rm -rf "$out"
    mkdir -p "$work/mnemo-$data-e$epochs"
    echo "$margs --seed $s" > "$out.command"
    cut -d' ' -f1 /proc/loadavg > "$out.load"
    nice -n 10 "$MNEMO" train $margs --seed "$s" --out "$out" >&2
    cut -d' ' -f1 /proc/loadavg >> "$out.load"
  done
}

if [ $sequential = 1 ]; then
  run_mnemo
  run_dyglib
else
  run_dyglib & dpid=$!
  run_mnemo
  wait $dpid
fi
summaries=() mload=()
for ((s = 0; s < seeds; s++)); do
  summaries+=("$work/mnemo-$data-e$epochs/seed-$s/summary.json")
  mload+=("[$(paste -sd, "$work/mnemo-$data-e$epochs/seed-$s.load" 2>/dev/null || true)]")
done
dload=$(paste -sd, "$rdir/load" 2>/dev/null || echo "")
if [ $src_kind = git ]; then source_desc="git directory $gitdir"; else source_desc="checkout $dir"; fi
if [ -n "$blas_env" ]; then blas_note="DyGLib's BLAS: OpenBLAS ($blas_dir, $threads thread(s))."
else blas_note="DyGLib's BLAS: the one torch finds."; fi
"$py" "$helper" report --which "$data" --reference "$rdir/dyglib.json" --mnemo "${summaries[@]}" \
  --out-json "$results/reference_tgat-dyglib-$data.json" --out-md "$results/reference_tgat-dyglib-$data.md" \
  --mnemo-command "build/services/mnemo train $margs --seed S --out OUT" \
  --ref-command "$denv$dcmd" --threads "$threads" \
  --script "bench/dyglib_reference.sh --dyglib DIR --data $data --epochs $epochs --seeds $seeds --dyglib-runs $runs --threads $threads$([ $sequential = 0 ] || echo " --sequential")" \
  --ref-source "$source_desc" --ref-commit "$src_commit" --ref-patch "$rdir/patch.json" --ref-data "$rdir/data.json" \
  --ref-python "$("$py" -c 'import sys; print(sys.version.split()[0])')" \
  --ref-torch "$("$py" -c 'import torch; print(torch.__version__)')" \
  --load "{\"mnemo\": [$(IFS=,; echo "${mload[*]}")], \"dyglib\": [$dload]}" \
  --note "$blas_note" ${DYGLIB_NOTES:+--note "$DYGLIB_NOTES"}
