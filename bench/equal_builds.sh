#!/usr/bin/env bash
# Two mnemo builds that must compute the same: runs the same short jobs
# with build A and build B (every model in one process, each policy on 2
# workers on loopback, bounded working sets) and compares their figures
# (parameter checksum, training losses, validation and test AP) to the
# last digit. For a change that should not move any result (a refactor, a
# change of timing or layout): any difference is a finding, not noise (the
# runs are deterministic: DepTGL runs without its load-aware pruning, which
# reads wall-clock times).
#
# Usage: bench/equal_builds.sh [--name NAME] BIN_A BIN_B
# Writes bench/results/equal_NAME.md ($BENCH_RESULTS moves it); exits 1
# when a job differs or fails.
set -uo pipefail
cd "$(dirname "$0")/.."
name=builds
while [ $# -gt 0 ]; do
  case $1 in
    --name) name=${2:?--name needs NAME}; shift 2 ;;
    -*) echo "equal_builds.sh: unknown option $1" >&2; exit 2 ;;
    *) if [ -z "${bin_a:-}" ]; then bin_a=$1; elif [ -z "${bin_b:-}" ]; then bin_b=$1; else
         echo "equal_builds.sh: extra argument $1" >&2; exit 2; fi
       shift ;;
  esac
done
[ -n "${bin_a:-}" ] && [ -n "${bin_b:-}" ] || {
  echo "usage: bench/equal_builds.sh [--name NAME] BIN_A BIN_B" >&2; exit 2; }
for b in "$bin_a" "$bin_b"; do [ -x "$b" ] || { echo "$b: not an executable" >&2; exit 2; }; done
data=${MNEMO_SHARED_DATA:-../shared/data}
results=${BENCH_RESULTS:-bench/results}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
common=(--data collegemsg --data-dir "$data" --max-events 3000 --epochs 2
  --patience 0 --memory-dim 16 --time-dim 16 --embedding-dim 16
  --batch-size 200 --lr 0.001 --threads 1 --seed 3 --progress none)
cases=(
  "tgn|--model tgn"
  "jodie|--model jodie"
  "apan|--model apan"
  "tgat|--model tgat"
  "dysat|--model dysat"
  "tgn-imr4|--model tgn --refine-chunks 4"
  "tgn-vanilla-w2|--model tgn --workers 2 --policy vanilla"
  "apan-vanilla-w2|--model apan --workers 2 --policy vanilla"
  "tgn-full-cache-w2|--model tgn --workers 2 --policy full-cache"
  "tgn-deptgl-w2|--model tgn --workers 2 --policy deptgl:replay+sync"
  "tgn-depbloom-w2|--model tgn --workers 2 --policy depbloom --window-events 1000 --batch-size 100"
  "tgn-vanilla-w2-bounded|--model tgn --workers 2 --policy vanilla --memory-cache-bytes 70000"
  "tgn-deptgl-w2-bounded|--model tgn --workers 2 --policy deptgl:replay+sync --memory-cache-bytes 70000"
  "tgn-depbloom-w2-bounded|--model tgn --workers 2 --policy depbloom --window-events 1000 --batch-size 100 --memory-cache-bytes 70000"
)
rows=$work/rows.tsv
: >"$rows"
for c in "${cases[@]}"; do
  label=${c%%|*}
  read -r -a flags <<<"${c#*|}"
  for side in A B; do
    bin=$bin_a; [ $side = B ] && bin=$bin_b
    echo "== $label $side: $bin train ${common[*]} ${flags[*]}" >&2
    "$bin" train "${common[@]}" "${flags[@]}" --out "$work/$label-$side" \
      >"$work/$label-$side.log" 2>&1 || { echo "$label $side failed:" >&2; tail -5 "$work/$label-$side.log" >&2; }
  done
  printf '%s\t%s\t%s\t%s\n' "$label" "${flags[*]}" "$work/$label-A/summary.json" "$work/$label-B/summary.json" >>"$rows"
done
mkdir -p "$results"
python3 - "$rows" "$results/equal_$name.md" "$bin_a" "$bin_b" "${common[*]}" <<'PY'
import json, os, socket, sys
rows, out, bin_a, bin_b, common = sys.argv[1:]
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
def figures(path):
    s = json.load(open(path))
    ws = s["comm"]["working_set"]
    return (s["parameter_checksum"], s["test"]["ap"], s["test"]["new_node_ap"],
            tuple(e["train_loss"] for e in s["epochs"]), tuple(e["val_ap"] for e in s["epochs"]),
            (ws["spills"], ws["restores"]))
lines = [f"# Builds that compute alike: {os.path.basename(out)[6:-3]}", "",
         f"`bench/equal_builds.sh` on {cpu}, {os.cpu_count()} CPUs ({socket.gethostname()}).",
         f"A: `{bin_a}`; B: `{bin_b}`.", "",
         f"Every job: `mnemo train {common}` plus the flags below.", "",
         "| job | flags | A checksum | B checksum | A test AP | B test AP | spills, restores (A) | equal |",
         "|---|---|---|---|---|---|---|---|"]
bad = 0
for line in open(rows):
    label, flags, a, b = line.rstrip("\n").split("\t")
    try:
        fa, fb = figures(a), figures(b)
    except Exception as e:
        lines.append(f"| {label} | `{flags}` | failed: {e} | | | | | no |"); bad += 1; continue
    same = fa[:5] == fb[:5]
    bad += not same
    lines.append(f"| {label} | `{flags}` | {fa[0]!r} | {fb[0]!r} | {fa[1]:.10f} | {fb[1]:.10f} | {fa[5][0]}, {fa[5][1]} | {'yes' if same else '**no**'} |")
lines += ["", "Equal: the parameter checksum, every epoch's training loss and "
          "validation AP, test AP and new-node test AP are the same numbers. "
          "Spills and restores: what build A's bounded working sets moved to "
          "and from their own spill stores (0 where nothing was dropped)."]
open(out, "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
sys.exit(1 if bad else 0)
PY
