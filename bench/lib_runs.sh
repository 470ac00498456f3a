# Shared by bench/deptgl.sh, bench/depbloom.sh and bench/converge.sh
# (sourced): their argument parsing, one training job per directory under
# $OUT (skipped when its summary exists, so rerunning a script resumes an
# interrupted sweep) and the report step.

# bench_args SCRIPT MODES [seeds] -- "$@": parses [--MODE] [--out DIR]
# [--results DIR] (and [--seeds N] when "seeds" is given), where MODES is a
# space-separated list of the script's modes (without dashes). Sets MODE
# (default), OUT (BENCH_RUNS or runs/NAME), RESULTS, SEEDS (0: the script's
# own), MNEMO, START and FAILED; builds the binary when it is missing.
bench_args() {
  local script=$1 modes=$2 seeds=no
  shift 2
  if [ "$1" = seeds ]; then seeds=yes; shift; fi
  shift
  local name
  name=$(basename "$script" .sh)
  MODE=default
  OUT=${BENCH_RUNS:-runs/$name}
  RESULTS=bench/results
  SEEDS=0
  local usage="usage: $script [$(printf -- '--%s|' $modes | sed 's/|$//')]"
  [ $seeds = no ] || usage+=" [--seeds N]"
  usage+=" [--out RUNS_DIR] [--results DIR]"
  while [ $# -gt 0 ]; do
    case "$1" in
      --out) OUT=$2; shift 2 ;;
      --results) RESULTS=$2; shift 2 ;;
      --seeds)
        [ $seeds = yes ] || { echo "$script: unknown option $1" >&2; echo "$usage" >&2; exit 2; }
        [[ "$2" =~ ^[1-9][0-9]*$ ]] || { echo "$script: --seeds must be a positive integer, got '$2'" >&2; exit 2; }
        SEEDS=$2; shift 2 ;;
      --*)
        if [[ " $modes " == *" ${1#--} "* ]]; then
          MODE=${1#--}; shift
        else
          echo "$script: unknown option $1" >&2; echo "$usage" >&2; exit 2
        fi ;;
      *) echo "$usage" >&2; exit 2 ;;
    esac
  done
  MNEMO=${MNEMO:-build/services/mnemo}
  [ -x "$MNEMO" ] || scripts/build mnemo
  mkdir -p "$OUT"
  START=$(date +%s)
  FAILED=0
}

# run NAME RATE WORKERS -- train flags...: one job, skipped when its
# summary exists. WORKERS 1: one process pinned to CPU 0 with one thread;
# otherwise the emulated network of deploy/netns/run.sh with trainers pinned.
run() {
  local name=$1 rate=$2 workers=$3
  shift 4
  local dir="$OUT/$name"
  if [ -f "$dir/summary.json" ]; then return 0; fi
  mkdir -p "$dir"
  printf '{"name": "%s", "rate": "%s", "workers": %s, "args": "%s"}\n' \
    "$name" "$rate" "$workers" "$*" > "$dir/meta.json"
  echo "== $name ($(($(date +%s) - START)) s)" >&2
  if [ "$workers" = 1 ]; then
    taskset -c 0 "$MNEMO" train "$@" --threads 1 --progress none \
      --out "$dir" > "$dir/log" 2>&1 || true
  else
    STATS_FILE="$dir/links" deploy/netns/run.sh --workers "$workers" \
      --rate "$rate" --pin --tag "d$RANDOM" -- "$@" --out "$dir" \
      > "$dir/log" 2>&1 || true
  fi
  [ -f "$dir/summary.json" ] || {
    echo "   failed: see $dir/log" >&2
    tail -3 "$dir/log" >&2
    FAILED=$((FAILED + 1))
  }
}

# bench_report REPORT_PY COMMAND [report flags...]: writes the results with
# the sweep's duration and command, then fails when a run failed.
bench_report() {
  local report=$1 command=$2
  shift 2
  mkdir -p "$RESULTS"
  /usr/bin/python3 "$report" --runs "$OUT" --mode "$MODE" --out "$RESULTS" \
    --seconds $(($(date +%s) - START)) --command "$command" "$@"
  if [ "$FAILED" -gt 0 ]; then
    echo "$command: $FAILED run(s) failed" >&2
    exit 1
  fi
}

# synthetic_stream MNEMO WORK NODES EVENTS EXPONENT: prints the path (without
# .mnemo) of the columnar file of `mnemo data --synthetic` (seed 1) with
# these sizes and degree exponent under WORK, made when missing. Streams
# of exponent 2 keep the names they always had. (bench/scale.sh,
# bench/eval_ab.sh.)
synthetic_stream() {
  local mnemo=$1 work=$2 nodes=$3 events=$4 exponent=$5 shape=""
  [ "$exponent" != 2 ] && shape="-e$exponent"
  local stream="$work/synthetic-$nodes-$events$shape"
  if [ ! -f "$stream.mnemo" ]; then
    "$mnemo" data --synthetic --nodes "$nodes" --events "$events" \
      --degree-exponent "$exponent" --seed 1 --out "$stream.txt" >&2
    "$mnemo" data --convert "$stream.txt" --out "$stream.mnemo" >&2
    rm -f "$stream.txt"
  fi
  echo "$stream"
}
