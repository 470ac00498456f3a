#!/usr/bin/env bash
# Two mnemo builds side by side: runs `BIN train FLAGS` for build A and
# build B alternately, N pairs (A B, B A, A B, ...: each pair back to back,
# their order alternating so that neither build always runs first), and
# reports each run's training events/s and the ratio B / A per pair, with
# the median and range. On a 2-CPU guest the speed of one command drifts by
# tens of percent within minutes; a pair shares one machine state, so the
# per-pair ratio is the figure to compare, not the two means.
#
# Usage: bench/ab_builds.sh [--pairs N] [--name NAME] [--netns RATE]
#          [--a-flags "FLAGS"] [--b-flags "FLAGS"] BIN_A BIN_B -- FLAGS...
#   e.g. bench/ab_builds.sh --name tgn-wiki-bf16 old/mnemo build/services/mnemo \
#          -- --data wikipedia --epochs 1 --precision bf16 ...
# A copy of a build (old/ above) is its mnemo and mnemo-trainer together
#   in one folder: mnemo hands training to the mnemo-trainer beside it.
# --netns RATE: each run is a cluster job (FLAGS name --workers, default 2)
#   in the emulated network of deploy/netns/run.sh at RATE per link, the
#   trainers pinned one per CPU (needs root).
# --a-flags / --b-flags: flags only build A's / build B's runs get (a flag
#   the other build lacks, or the same build with two settings: BIN_A and
#   BIN_B may be one binary).
# Writes bench/results/ab_NAME.json and ab_NAME.md ($BENCH_RESULTS moves
# them). Test AP is reported too (same seed in every run), and for cluster
# jobs the state-sync and all-reduce seconds of rank 0's training thread.
set -euo pipefail
cd "$(dirname "$0")/.."
pairs=6
name=ab
while [ $# -gt 0 ]; do
  case $1 in
    --pairs) pairs=${2:?--pairs needs N}; shift 2 ;;
    --name) name=${2:?--name needs NAME}; shift 2 ;;
    --netns) netns=${2:?--netns needs RATE}; shift 2 ;;
    --a-flags) a_flags=$2; shift 2 ;;
    --b-flags) b_flags=$2; shift 2 ;;
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
  local out=$work/$1-$3 own=()
  if [ "$1" = A ]; then read -r -a own <<<"${a_flags:-}"; else read -r -a own <<<"${b_flags:-}"; fi
  echo "== pair $3 $1: $2 train ${flags[*]} ${own[*]} --out OUT" >&2
  if [ -n "${netns:-}" ]; then
    deploy/netns/run.sh --workers "$workers" --rate "$netns" --pin --mnemo "$2" \
      --tag "ab$3$1" -- "${flags[@]}" "${own[@]}" --out "$out" >"$out.log" 2>&1 || { cat "$out.log" >&2; exit 1; }
  else
    "$2" train "${flags[@]}" "${own[@]}" --out "$out" >"$out.log" 2>&1 || { cat "$out.log" >&2; exit 1; }
  fi
  printf '%s\t%s\t%s\n' "$3" "$1" "$out/summary.json" >>"$runs"
}
flags=("$@")
given=("$@")  # as written, for the report's command
workers=2
if [ -n "${netns:-}" ]; then
  # deploy/netns/run.sh starts the processes itself: --workers is its flag.
  kept=()
  for ((i = 0; i < ${#flags[@]}; i++)); do
    if [ "${flags[i]}" = --workers ]; then
      workers=${flags[i + 1]:?--workers needs N}
      i=$((i + 1))
    else
      kept+=("${flags[i]}")
    fi
  done
  flags=("${kept[@]}")
fi
start=$(date -u +%Y-%m-%dT%H:%M:%SZ)
for ((p = 1; p <= pairs; p++)); do
  if ((p % 2)); then run A "$bin_a" $p; run B "$bin_b" $p; else run B "$bin_b" $p; run A "$bin_a" $p; fi
done
mkdir -p "$results"
python3 - "$runs" "$results/ab_$name" "$name" "$bin_a" "$bin_b" "$start" "${flags[*]}" "${netns:-}" "${given[*]}" "${a_flags:-}" "${b_flags:-}" <<'PY'
import json, os, socket, statistics, sys
runs_file, out, name, bin_a, bin_b, start, flags, netns, given, a_flags, b_flags = sys.argv[1:]
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
cpuflags = next((l.split(":", 1)[1].split() for l in open("/proc/cpuinfo") if l.startswith("flags")), [])
pairs = {}
for line in open(runs_file):
    p, label, path = line.rstrip("\n").split("\t")
    s = json.load(open(path))
    pairs.setdefault(int(p), {})[label] = {
        "train_events_per_second": s["train_events_per_second"],
        "test_ap": s["test"]["ap_batch_mean"], "version": s.get("version")}
    w = (s.get("per_worker") or [None])[0]
    if w:  # a cluster job: rank 0's training thread
        pairs[int(p)][label].update(
            state_sync_seconds=w["seconds"], allreduce_seconds=w["allreduce_seconds"],
            train_seconds=w["train_seconds"], bytes_pushed=w["bytes_pushed"],
            bytes_pulled=w["bytes_pulled"], allreduce_bytes=w.get("allreduce_bytes"))
cluster = all("state_sync_seconds" in v for pr in pairs.values() for v in pr.values())
ratios = [pairs[p]["B"]["train_events_per_second"] / pairs[p]["A"]["train_events_per_second"]
          for p in sorted(pairs)]
netns_flag = f" --netns {netns}" if netns else ""
netns_flag += (f" --a-flags '{a_flags}'" if a_flags else "") + (f" --b-flags '{b_flags}'" if b_flags else "")
res = {"name": name, "date": start,
       "command": f"bench/ab_builds.sh --pairs {len(pairs)} --name {name}{netns_flag} A B -- {given}",
       "a": bin_a, "b": bin_b, "flags": flags, "netns_rate": netns or None,
       "machine": {"host": socket.gethostname(), "cpu": cpu, "nproc": os.cpu_count(),
                   "avx512_bf16": "avx512_bf16" in cpuflags, "amx_bf16": "amx_bf16" in cpuflags},
       "pairs": [dict(pair=p, **pairs[p]) for p in sorted(pairs)],
       "ratio_b_over_a": {"per_pair": ratios, "median": statistics.median(ratios),
                          "min": min(ratios), "max": max(ratios),
                          "b_faster_pairs": sum(r > 1 for r in ratios)}}
json.dump(res, open(out + ".json", "w"), indent=1)
L = [f"# {name}: build B / build A, side by side", "",
     f"{start}; {cpu}, {os.cpu_count()} CPUs ({socket.gethostname()}); avx512_bf16 {int(res['machine']['avx512_bf16'])}, amx_bf16 {int(res['machine']['amx_bf16'])}.",
     "", f"A: `{bin_a}`" + (f" with `{a_flags}`" if a_flags else "") + f"; B: `{bin_b}`"
     + (f" with `{b_flags}`" if b_flags else "") + f"; each run: `BIN train {flags}`"
     + (f", in deploy/netns/run.sh's emulated network at {netns} per link, trainers pinned one per CPU" if netns else "")
     + ". Pairs back to back, order alternating (odd pairs A first)."]
if cluster:
    L += ["", "*sync s*: rank 0's training thread in state pulls and pushes (a push it did not wait for is not counted); "
          "*all-reduce s*: waiting in the gradient all-reduce (its exposed time); *all-reduce MB*: gradient bytes it sent into it; "
          "*train s*: its training time."]
L += ["", "| pair | A events/s | B events/s | B / A | A test AP | B test AP |"
      + (" A sync s | B sync s | A all-reduce s | B all-reduce s | A all-reduce MB | B all-reduce MB | A train s | B train s |" if cluster else ""),
      "|---|---|---|---|---|---|" + ("---|---|---|---|---|---|---|---|" if cluster else "")]
mb = lambda v: f"{v / 1e6:.1f}" if v is not None else "-"
for p in sorted(pairs):
    a, b = pairs[p]["A"], pairs[p]["B"]
    row = (f"| {p} | {a['train_events_per_second']:.0f} | {b['train_events_per_second']:.0f} | "
           f"{b['train_events_per_second'] / a['train_events_per_second']:.2f} | {a['test_ap']:.4f} | {b['test_ap']:.4f} |")
    if cluster:
        row += (f" {a['state_sync_seconds']:.2f} | {b['state_sync_seconds']:.2f} | {a['allreduce_seconds']:.2f} | "
                f"{b['allreduce_seconds']:.2f} | {mb(a.get('allreduce_bytes'))} | {mb(b.get('allreduce_bytes'))} | "
                f"{a['train_seconds']:.2f} | {b['train_seconds']:.2f} |")
    L.append(row)
r = res["ratio_b_over_a"]
if cluster:
    ar = [pairs[p]["B"]["allreduce_seconds"] / pairs[p]["A"]["allreduce_seconds"]
          for p in sorted(pairs) if pairs[p]["A"]["allreduce_seconds"] > 0]
    tr = [pairs[p]["A"]["train_seconds"] / pairs[p]["B"]["train_seconds"] for p in sorted(pairs)]
    res["allreduce_b_over_a"] = {"per_pair": ar, "median": statistics.median(ar)} if ar else None
    res["train_seconds_a_over_b"] = {"per_pair": tr, "median": statistics.median(tr)}
    json.dump(res, open(out + ".json", "w"), indent=1)
L += ["", f"B / A training events/s: median {r['median']:.2f} (range {r['min']:.2f}-{r['max']:.2f}; "
      f"B faster in {r['b_faster_pairs']} of {len(ratios)} pairs)."]
if cluster:
    if res["allreduce_b_over_a"]:
        L += [f"B's all-reduce wait / A's: median {res['allreduce_b_over_a']['median']:.2f} "
              f"(per pair {', '.join(f'{x:.2f}' for x in res['allreduce_b_over_a']['per_pair'])}); "
              f"A's training seconds / B's: median {res['train_seconds_a_over_b']['median']:.2f}."]
L += ["", f"Command: `{res['command']}`."]
open(out + ".md", "w").write("\n".join(L) + "\n")
print("\n".join(L))
PY
