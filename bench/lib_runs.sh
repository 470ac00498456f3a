# Shared by bench/deptgl.sh and bench/depbloom.sh (sourced): one training
# job per directory under $OUT, skipped when its summary exists (rerunning a
# script resumes an interrupted sweep). Needs MNEMO, OUT, START, FAILED.

# run NAME RATE WORKERS -- train flags...: one job, skipped when its
# summary exists (rerunning the script resumes an interrupted sweep).
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

