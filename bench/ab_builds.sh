#!/usr/bin/env bash
# Two mnemo builds side by side: runs `BIN train FLAGS` for build A and
# build B alternately, N pairs (A B, B A, A B, ...: each pair back to back,
# their order alternating so that neither build always runs first), and
# reports each run's training events/s and the ratio B / A per pair, with
# the median and range. On a 2-CPU guest the speed of one command drifts by
# tens of percent within minutes; a pair shares one machine state, so the
# per-pair ratio is the figure to compare, not the two means.
#
# Usage: bench/ab_builds.sh [--pairs N] [--name NAME] BIN_A BIN_B -- FLAGS...
#   e.g. bench/ab_builds.sh --name tgn-wiki-bf16 old/mnemo build/services/mnemo \
#          -- --data wikipedia --epochs 1 --precision bf16 ...
# Writes bench/results/ab_NAME.json and ab_NAME.md ($BENCH_RESULTS moves
# them). Test AP is reported too (same seed in every run).
set -euo pipefail
cd "$(dirname "$0")/.."
pairs=6
name=ab
while [ $# -gt 0 ]; do
  case $1 in
    --pairs) pairs=${2:?--pairs needs N}; shift 2 ;;
    --name) name=${2:?--name needs NAME}; shift 2 ;;
    --) shift; break ;;
    -*) echo "ab_builds.sh: unknown option $1" >&2; exit 2 ;;
    *) if [ -z "${bin_a:-}" ]; then bin_a=$1; elif [ -z "${bin_b:-}" ]; then bin_b=$1; else
         echo "ab_builds.sh: extra argument $1 (flags for mnemo go after --)" >&2; exit 2; fi
       shift ;;
  esac
done
[ -n "${bin_a:-}" ] && [ -n "${bin_b:-}" ] || {
  echo "usage: bench/ab_builds.sh [--pairs N] [--name NAME] BIN_A BIN_B -- FLAGS..." >&2; exit 2; }
[[ $pairs =~ ^[1-9][0-9]*$ ]] || { echo "--pairs: a positive integer" >&2; exit 2; }
for b in "$bin_a" "$bin_b"; do [ -x "$b" ] || { echo "$b: not an executable" >&2; exit 2; }; done
results=${BENCH_RESULTS:-bench/results}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
runs=$work/runs.tsv
: >"$runs"
run() {  # run LABEL BIN PAIR
  local out=$work/$1-$3
  echo "== pair $3 $1: $2 train ${flags[*]} --out OUT" >&2
  "$2" train "${flags[@]}" --out "$out" >"$out.log" 2>&1 || { cat "$out.log" >&2; exit 1; }
  printf '%s\t%s\t%s\n' "$3" "$1" "$out/summary.json" >>"$runs"
}
flags=("$@")
start=$(date -u +%Y-%m-%dT%H:%M:%SZ)
for ((p = 1; p <= pairs; p++)); do
  if ((p % 2)); then run A "$bin_a" $p; run B "$bin_b" $p; else run B "$bin_b" $p; run A "$bin_a" $p; fi
done
mkdir -p "$results"
python3 - "$runs" "$results/ab_$name" "$name" "$bin_a" "$bin_b" "$start" "${flags[*]}" <<'PY'
import json, os, socket, statistics, sys
runs_file, out, name, bin_a, bin_b, start, flags = sys.argv[1:]
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
cpuflags = next((l.split(":", 1)[1].split() for l in open("/proc/cpuinfo") if l.startswith("flags")), [])
pairs = {}
for line in open(runs_file):
    p, label, path = line.rstrip("\n").split("\t")
    s = json.load(open(path))
    pairs.setdefault(int(p), {})[label] = {
        "train_events_per_second": s["train_events_per_second"],
        "test_ap": s["test"]["ap_batch_mean"], "version": s.get("version")}
ratios = [pairs[p]["B"]["train_events_per_second"] / pairs[p]["A"]["train_events_per_second"]
          for p in sorted(pairs)]
res = {"name": name, "date": start, "command": f"bench/ab_builds.sh --pairs {len(pairs)} --name {name} A B -- {flags}",
       "a": bin_a, "b": bin_b, "flags": flags,
       "machine": {"host": socket.gethostname(), "cpu": cpu, "nproc": os.cpu_count(),
                   "avx512_bf16": "avx512_bf16" in cpuflags, "amx_bf16": "amx_bf16" in cpuflags},
       "pairs": [dict(pair=p, **pairs[p]) for p in sorted(pairs)],
       "ratio_b_over_a": {"per_pair": ratios, "median": statistics.median(ratios),
                          "min": min(ratios), "max": max(ratios),
                          "b_faster_pairs": sum(r > 1 for r in ratios)}}
json.dump(res, open(out + ".json", "w"), indent=1)
L = [f"# {name}: build B / build A, side by side", "",
     f"{start}; {cpu}, {os.cpu_count()} CPUs ({socket.gethostname()}); avx512_bf16 {int(res['machine']['avx512_bf16'])}, amx_bf16 {int(res['machine']['amx_bf16'])}.",
     "", f"A: `{bin_a}`; B: `{bin_b}`; each run: `BIN train {flags}`. Pairs back to back, order alternating (odd pairs A first).",
     "", "| pair | A events/s | B events/s | B / A | A test AP | B test AP |", "|---|---|---|---|---|---|"]
for p in sorted(pairs):
    a, b = pairs[p]["A"], pairs[p]["B"]
    L.append(f"| {p} | {a['train_events_per_second']:.0f} | {b['train_events_per_second']:.0f} | "
             f"{b['train_events_per_second'] / a['train_events_per_second']:.2f} | {a['test_ap']:.4f} | {b['test_ap']:.4f} |")
r = res["ratio_b_over_a"]
L += ["", f"B / A training events/s: median {r['median']:.2f} (range {r['min']:.2f}-{r['max']:.2f}; "
      f"B faster in {r['b_faster_pairs']} of {len(ratios)} pairs). Command: `{res['command']}`."]
open(out + ".md", "w").write("\n".join(L) + "\n")
print("\n".join(L))
PY
