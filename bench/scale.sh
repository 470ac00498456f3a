#!/usr/bin/env bash
# Past one trainer's RAM: each cluster worker holds a bounded working set of
# node states (--memory-cache-bytes), the memory-store shards and the
# workers' own spill stores the rest.
#
# Usage:
#   bench/scale.sh curve [--data NAME] [--seed S] [--policies "P ..."]
#       [--fractions "F ..."]
#     2 workers, TGN at its defaults, one epoch on NAME (default
#     mathoverflow): for each policy (default "vanilla deptgl:replay+sync
#     depbloom") an unbounded run, then runs whose working set holds each
#     fraction F of the data's node states (default "0.0625 0.125 0.25
#     0.5") under Belady and under LRU. Reports the states each rule
#     brings in and spills, the bytes it restores from the spill store
#     (what a miss costs beyond the policy's own pulls), the peak RSS of
#     each process and the PSS of all together (bench/rss_sampler.py),
#     epoch time and test AP against
#     the unbounded run. bench/results/scale_curve_NAME.{json,md}.
#   bench/scale.sh synthetic --nodes N --events M [--fraction F]
#       [--policy P] [--hot-fraction H] [--seed S] [--cache-bytes B]
#       [--hot-bytes HB] [--bounded-only | --unbounded-only]
#       [--degree-exponent E]
#     A synthetic stream (mnemo data --synthetic, power-law degrees of
#     exponent E, default 2: Zipf's law, under which about half of 10M node
#     ids occur in 20M events; 3 makes 94% occur), written once to
#     runs/scale/ and converted to a columnar file), TGN
#     at its defaults, 2 workers and 2 shards, one epoch, with every node's
#     state and with a working set of F (default 0.25) of them (or B bytes
#     per worker), shards keeping H (default 0.25) of all states hot (or HB
#     bytes each) and reading their cold tier with pread: time, peak RSS
#     per process and of all processes together, bytes on disk,
#     working-set counters, test AP. --bounded-only skips the run with
#     every state (a stream whose memory does not fit); --unbounded-only
#     runs it alone (its shards' peak against the state they hold;
#     ..._unbounded.{json,md}).
#     bench/results/scale_synthetic_N_M[_eE].{json,md}.
#   bench/scale.sh growth --sizes "N:M ..." --cache-bytes B --hot-bytes HB
#       [--policy P]
#     What grows with the stream at a fixed budget: the bounded run of
#     `synthetic` for each size (N node ids, M events), side by side,
#     with each process's peak anonymous memory and what one more million
#     node ids (and two million events) adds between consecutive sizes.
#     bench/results/scale_growth.{json,md}.
#   bench/scale.sh seeds [--data NAME | --nodes N --events M
#       [--degree-exponent E]] [--fraction F] [--policy P] [--seeds "S ..."]
#     One process against 2 workers with every state and with a working
#     set of F (default 0.25) of them, TGN, one epoch, for each seed
#     (default "1 2 3") on NAME (default mathoverflow) or on the synthetic
#     stream of `synthetic` (where node memory, not the libraries, is most
#     of a process): each trainer's peak RSS over the one process's, test
#     AP of the bounded run against the unbounded one (mean over the
#     seeds), and the peak RSS of the coordinator, a process that holds no
#     training state (the floor every process pays for its libraries).
#     bench/results/scale_seeds_NAME.{json,md} (NAME: synthetic-N-M[-eE]).
#   bench/scale.sh ci
#     The CI-sized variant: synthetic with 20,000 nodes and 60,000 events
#     (a few minutes); fails when the bounded run's test AP differs from
#     the unbounded one's.
#
# Runs go to runs/scale/ ($SCALE_WORK); results to bench/results/
# ($BENCH_RESULTS). Each report names the machine and the commands.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib_runs.sh
source bench/lib_runs.sh
mode=${1:-}
[ -n "$mode" ] && shift
data=mathoverflow seed=1 seeds="1 2 3" policies="vanilla deptgl:replay+sync depbloom"
sizes=""
fractions="0.0625 0.125 0.25 0.5" nodes=0 events=0 fraction=0.25
policy=deptgl:replay+sync hot_fraction=0.25 cache_bytes=0 hot_bytes=0
bounded_only=0 unbounded_only=0 exponent=2
while [ $# -gt 0 ]; do
  case $1 in
    --data) data=${2:?}; shift 2 ;;
    --seed) seed=${2:?}; shift 2 ;;
    --seeds) seeds=${2:?}; shift 2 ;;
    --policies) policies=${2:?}; shift 2 ;;
    --fractions) fractions=${2:?}; shift 2 ;;
    --nodes) nodes=${2:?}; shift 2 ;;
    --events) events=${2:?}; shift 2 ;;
    --fraction) fraction=${2:?}; shift 2 ;;
    --policy) policy=${2:?}; shift 2 ;;
    --hot-fraction) hot_fraction=${2:?}; shift 2 ;;
    --cache-bytes) cache_bytes=${2:?}; shift 2 ;;
    --hot-bytes) hot_bytes=${2:?}; shift 2 ;;
    --bounded-only) bounded_only=1; shift ;;
    --unbounded-only) unbounded_only=1; shift ;;
    --degree-exponent) exponent=${2:?}; shift 2 ;;
    --sizes) sizes=${2:?}; shift 2 ;;
    *) echo "scale.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
MNEMO=${MNEMO_BIN:-build/services/mnemo}
[ -x "$MNEMO" ] || { echo "scale.sh: build first (scripts/build)" >&2; exit 1; }
export MNEMO_SHARED_DATA=${MNEMO_SHARED_DATA:-$(cd .. && pwd)/shared/data}
work=${SCALE_WORK:-runs/scale}
results=${BENCH_RESULTS:-bench/results}
mkdir -p "$work" "$results"
# The machine every report names: CPU model, the ISA extensions that
# change LibTorch's kernels, CPUs.
SCALE_MACHINE=$(python3 -c '
import os
info = open("/proc/cpuinfo").read().splitlines()
cpu = next((l.split(":", 1)[1].strip() for l in info
            if l.startswith("model name")), "unknown")
flags = next((l.split(":", 1)[1].split() for l in info
              if l.startswith("flags")), [])
isa = " ".join(f for f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16")
               if f in flags)
print(f"{cpu} ({isa}), {os.cpu_count()} CPUs")')
export SCALE_MACHINE

# Bytes of one held node state of TGN at its defaults (memory 100, mail
# 2 x 100 + edge features; trainer/memory/record_layout.h HeldStateBytes).
state_bytes() {  # DATA
  "$MNEMO" data --json --data-dir "$MNEMO_SHARED_DATA" "$1" | python3 -c '
import json, sys
d = json.load(sys.stdin)
d = d[0] if isinstance(d, list) else d
edge = d["edge_feature_dim"]
print(d["nodes"], 4 * (100 + 200 + edge) + 41)'
}

# run NAME ARGS...: one training job of 2 workers under the RSS sampler
# (skipped when its summary exists). WORKERS=1 runs one process.
run() {
  local name=$1
  shift
  local workers=(--workers 2)
  [ "${WORKERS:-2}" = 1 ] && workers=()
  local dir="$work/$name"
  [ -f "$dir/summary.json" ] && [ -f "$dir/rss.json" ] && return 0
  rm -rf "$dir"
  mkdir -p "$dir"
  echo "== $name" >&2
  python3 bench/rss_sampler.py "$dir/rss.json" -- "$MNEMO" train \
    ${workers[@]+"${workers[@]}"} --epochs 1 --patience 0 --progress none --seed "$seed" \
    --out "$dir" "$@" > "$dir/log" 2>&1 || {
    grep -v rocksdb "$dir/log" | tail -5 >&2
    return 1
  }
  if [ -d "$dir/cluster" ]; then
    du -sb "$dir/cluster" | cut -f1 > "$dir/disk_bytes"
  else
    echo 0 > "$dir/disk_bytes"
  fi
}

report() {  # OUT_STEM TITLE COMMANDS RUN...
  python3 - "$@" <<'PY'
import json, os, subprocess, sys
stem, title, commands, *runs = sys.argv[1:]
rows = []
for r in runs:
    name, d = r.split("=", 1)
    s = json.load(open(f"{d}/summary.json"))
    rss = json.load(open(f"{d}/rss.json"))
    ws = s["comm"]["working_set"]
    ep = s["epochs"][0]
    rows.append({
        "run": name, "test_ap": s["test"]["ap"],
        "new_node_test_ap": s["test"]["new_node_ap"],
        # summary.json: an epoch's seconds are its training, apart from
        # its evaluation's.
        "epoch_seconds": ep["seconds"],
        "eval_seconds": ep.get("eval_seconds", 0),
        "parameter_checksum": s["parameter_checksum"],
        "working_set": ws,
        "per_worker_working_set": [w["working_set"] for w in s["per_worker"]],
        "peak_rss_bytes": rss["peak_rss_bytes"],
        "peak_pss_bytes": rss["peak_pss_bytes"],
        "peak_pss_total_bytes": rss["peak_pss_total_bytes"],
        "peak_anon_bytes": rss.get("peak_anon_bytes", {}),
        "peak_anon_total_bytes": rss.get("peak_anon_total_bytes"),
        "disk_bytes": int(open(f"{d}/disk_bytes").read()),
        "seconds": rss["seconds"]})
machine = os.environ["SCALE_MACHINE"]
json.dump({"title": title, "machine": machine, "commands": commands,
           "rows": rows}, open(stem + ".json", "w"), indent=1)
mib = lambda b: f"{b / 2**20:,.0f}"
out = [f"# {title}", "", f"Machine: {machine}.", "", "Commands:", "",
       "```", commands, "```", "",
       "| run | capacity (states) | misses | spills | restored MiB | "
       "spilled MiB | epoch s | eval s | test AP | trainer 0 / 1 peak RSS "
       "MiB | all processes (PSS) MiB | disk MiB |", "|" + "---|" * 12]
for r in rows:
    ws, p = r["working_set"], r["peak_rss_bytes"]
    t0 = max((v for k, v in p.items() if k.startswith("trainer --rank 0")),
             default=0)
    t1 = max((v for k, v in p.items() if k.startswith("trainer --rank 1")),
             default=0)
    out.append(
        f"| {r['run']} | {ws['capacity_states']:,} | {ws['misses']:,} | "
        f"{ws['spills']:,} | {ws['restore_bytes'] / 2**20:,.1f} | "
        f"{ws['spill_bytes'] / 2**20:,.1f} | {r['epoch_seconds']:.1f} | "
        f"{r['eval_seconds']:.1f} | "
        f"{r['test_ap']:.4f} | {mib(t0)} / {mib(t1)} | "
        f"{mib(r['peak_pss_total_bytes'])} | {mib(r['disk_bytes'])} |")
# Each process's peak RSS and anonymous part (heap, not file pages).
roles = sorted({k for r in rows for k in r["peak_anon_bytes"]})
if roles:
    out += ["", "Peak resident memory per process, MiB: RSS / anonymous "
            "(heap and stacks; the rest are file pages: libraries and "
            "memory-mapped RocksDB files, which the kernel can drop).", "",
            "| run | " + " | ".join(roles) + " | all: PSS / anonymous |",
            "|" + "---|" * (len(roles) + 2)]
    for r in rows:
        if not r["peak_anon_bytes"]:
            continue
        cells = [f"{mib(r['peak_rss_bytes'].get(k, 0))} / "
                 f"{mib(r['peak_anon_bytes'].get(k, 0))}" for k in roles]
        out.append(f"| {r['run']} | " + " | ".join(cells) +
                   f" | {mib(r['peak_pss_total_bytes'])} / "
                   f"{mib(r['peak_anon_total_bytes'])} |")
# Belady against LRU at the same budget: states brought in and bytes
# restored (the cost of a miss beyond the policy's own pulls).
pairs = {}
for r in rows:
    if r["run"].endswith(" belady") or r["run"].endswith(" lru"):
        base, rule = r["run"].rsplit(" ", 1)
        pairs.setdefault(base, {})[rule] = r
ratios = [(b, v["lru"]["working_set"], v["belady"]["working_set"])
          for b, v in pairs.items() if len(v) == 2]
if ratios:
    out += ["", "LRU over Belady at the same budget (same command, same "
            "seed): states brought in, and bytes restored from the spill "
            "store.", "", "| run | misses LRU / Belady | restored bytes "
            "LRU / Belady |", "|---|---|---|"]
    for b, lru, bel in ratios:
        rm = lru["misses"] / bel["misses"] if bel["misses"] else float("nan")
        rb = (lru["restore_bytes"] / bel["restore_bytes"]
              if bel["restore_bytes"] else float("nan"))
        out.append(f"| {b} | {rm:.2f} | {rb:.2f} |")
open(stem + ".md", "w").write("\n".join(out) + "\n")
print("\n".join(out))
PY
}

case $mode in
  curve)
    read -r num_nodes bytes < <(state_bytes "$data")
    runs=()
    for p in $policies; do
      tag=${p//[:+]/-}
      run "$data-$tag-unbounded" --data "$data" --policy "$p"
      runs+=("$p unbounded=$work/$data-$tag-unbounded")
      for f in $fractions; do
        cache=$(python3 -c "print(int($f * $num_nodes * $bytes))")
        for rule in belady lru; do
          name="$data-$tag-$f-$rule"
          run "$name" --data "$data" --policy "$p" \
            --memory-cache-bytes "$cache" --memory-eviction "$rule" || continue
          runs+=("$p $f $rule=$work/$name")
        done
      done
    done
    report "$results/scale_curve_$data" \
      "Bounded working sets on $data: 2 workers, TGN, one epoch, seed $seed" \
      "bench/scale.sh curve --data $data --seed $seed --policies \"$policies\" --fractions \"$fractions\"
(each run: $MNEMO train --workers 2 --epochs 1 --data $data --policy P [--memory-cache-bytes F x $num_nodes x $bytes --memory-eviction R], under bench/rss_sampler.py)" \
      "${runs[@]}"
    ;;
  growth)
    [ -n "$sizes" ] && [ "$cache_bytes" -gt 0 ] && [ "$hot_bytes" -gt 0 ] || {
      echo "scale.sh growth: --sizes, --cache-bytes and --hot-bytes are required" >&2
      exit 2
    }
    dirs=()
    for size in $sizes; do
      n=${size%:*} m=${size#*:}
      # The bounded run of `synthetic` (its report, its run directory).
      "$0" synthetic --nodes "$n" --events "$m" --policy "$policy" \
        --cache-bytes "$cache_bytes" --hot-bytes "$hot_bytes" --bounded-only \
        --seed "$seed" > /dev/null
      dirs+=("$n:$m:$work/synthetic-$n-$m-${policy//[:+]/-}-c$cache_bytes-h$hot_bytes-belady")
    done
    python3 - "$results/scale_growth" "bench/scale.sh growth --sizes \"$sizes\" --cache-bytes $cache_bytes --hot-bytes $hot_bytes --policy $policy" "${dirs[@]}" <<'PY'
import json, os, sys
stem, command, *runs = sys.argv[1:]
rows = []
for r in runs:
    n, m, d = r.split(":", 2)
    s = json.load(open(f"{d}/summary.json"))
    rss = json.load(open(f"{d}/rss.json"))
    ep = s["epochs"][0]
    rows.append({"ids": int(n), "events": int(m),
                 "nodes": s.get("data", {}).get("nodes"),
                 "test_ap": s["test"]["ap"], "epoch_seconds": ep["seconds"],
                 "eval_seconds": ep.get("eval_seconds", 0),
                 "seconds": rss["seconds"],
                 "disk_bytes": int(open(f"{d}/disk_bytes").read()),
                 "peak_anon_bytes": rss["peak_anon_bytes"],
                 "peak_rss_bytes": rss["peak_rss_bytes"],
                 "peak_anon_total_bytes": rss["peak_anon_total_bytes"],
                 "peak_pss_total_bytes": rss["peak_pss_total_bytes"]})
machine = os.environ["SCALE_MACHINE"]
json.dump({"machine": machine, "command": command, "rows": rows},
          open(stem + ".json", "w"), indent=1)
mib = lambda b: f"{round(b / 2**20):,}"
roles = sorted({k for r in rows for k in r["peak_anon_bytes"]})
out = ["# What grows with the stream at a fixed budget", "",
       f"Machine: {machine}.", "", "```", command, "```", "",
       "Each row: one bounded run of `bench/scale.sh synthetic` (2 workers, "
       "2 shards, TGN, one epoch, the same working-set and hot-tier budget "
       "at every size). Peak anonymous memory (heap and stacks) per "
       "process, MiB; all processes: the peak of their sum (anonymous, "
       "and PSS).", "",
       "| node ids | nodes in events | events | training s | eval s | "
       "test AP | disk MiB | " +
       " | ".join(roles) + " | all: anon / PSS |",
       "|" + "---|" * (len(roles) + 8)]
for r in rows:
    out.append(f"| {r['ids']:,} | {r['nodes']:,} | {r['events']:,} | "
               f"{r['epoch_seconds']:.0f} | {r['eval_seconds']:.0f} | "
               f"{r['test_ap']:.4f} | {mib(r['disk_bytes'])} | " +
               " | ".join(mib(r["peak_anon_bytes"].get(k, 0))
                          for k in roles) +
               f" | {mib(r['peak_anon_total_bytes'])} / "
               f"{mib(r['peak_pss_total_bytes'])} |")
if len(rows) > 1:
    out += ["", "Added per million node ids (and two million events) "
            "between consecutive sizes, MiB:", "",
            "| from | to | " + " | ".join(roles) + " | all: anon / PSS |",
            "|" + "---|" * (len(roles) + 3)]
    for a, b in zip(rows, rows[1:]):
        k = (b["ids"] - a["ids"]) / 1e6
        d = lambda key: (b[key] - a[key]) / k
        out.append(f"| {a['ids']:,} | {b['ids']:,} | " + " | ".join(
            mib((b["peak_anon_bytes"].get(x, 0) -
                 a["peak_anon_bytes"].get(x, 0)) / k) for x in roles) +
            f" | {mib(d('peak_anon_total_bytes'))} / "
            f"{mib(d('peak_pss_total_bytes'))} |")
open(stem + ".md", "w").write("\n".join(out) + "\n")
print("\n".join(out))
PY
    ;;
  seeds)
    # --nodes/--events: the synthetic stream, named as its file is.
    label=$data source_args="--data $data"
    if [ "$nodes" -gt 0 ] || [ "$events" -gt 0 ]; then
      [ "$nodes" -gt 0 ] && [ "$events" -gt 0 ] || {
        echo "scale.sh seeds: --nodes and --events go together" >&2
        exit 2
      }
      stream=$(synthetic_stream "$MNEMO" "$work" "$nodes" "$events" "$exponent")
      data=$stream.mnemo label=${stream##*/}
      source_args="--nodes $nodes --events $events --degree-exponent $exponent"
    fi
    read -r num_nodes bytes < <(state_bytes "$data")
    cache=$(python3 -c "print(int($fraction * $num_nodes * $bytes))")
    tag=${policy//[:+]/-}
    runs=()
    for seed in $seeds; do
      WORKERS=1 run "$label-one-process-s$seed" --data "$data"
      run "$label-$tag-unbounded-s$seed" --data "$data" --policy "$policy"
      run "$label-$tag-$fraction-belady-s$seed" --data "$data" \
        --policy "$policy" --memory-cache-bytes "$cache"
      runs+=("$seed:$work/$label-one-process-s$seed:$work/$label-$tag-unbounded-s$seed:$work/$label-$tag-$fraction-belady-s$seed")
    done
    python3 - "$results/scale_seeds_$label" "$label" "$fraction" "$cache" "$num_nodes" "$bytes" \
      "bench/scale.sh seeds $source_args --fraction $fraction --policy $policy --seeds \"$seeds\"
(each seed S: $MNEMO train --epochs 1 --data $data --seed S;
 $MNEMO train --workers 2 --epochs 1 --data $data --policy $policy --seed S [--memory-cache-bytes $cache];
 each under bench/rss_sampler.py)" "${runs[@]}" <<'PY'
import json, os, statistics, sys
stem, data, fraction, cache, num_nodes, state, command, *runs = sys.argv[1:]
mib = lambda b: f"{b / 2**20:,.0f}"
def load(d):
    s, r = json.load(open(f"{d}/summary.json")), json.load(open(f"{d}/rss.json"))
    return {"test_ap": s["test"]["ap"], "epoch_seconds": s["epochs"][0]["seconds"],
            "working_set": s.get("comm", {}).get("working_set"),
            "peak_rss_bytes": r["peak_rss_bytes"],
            "peak_anon_bytes": r["peak_anon_bytes"],
            "peak_pss_total_bytes": r["peak_pss_total_bytes"]}
rows = []
for run in runs:
    seed, one, unb, bnd = run.split(":")
    rows.append({"seed": int(seed), "one_process": load(one),
                 "unbounded": load(unb), "bounded": load(bnd)})
def trainer(r, rank, key="peak_rss_bytes"):
    return r[key].get(f"trainer --rank {rank}", 0)
def single(r, key="peak_rss_bytes"):
    return r[key]["train"]
machine = os.environ["SCALE_MACHINE"]
node_memory = int(num_nodes) * int(state)
json.dump({"machine": machine, "command": command, "data": data,
           "fraction": float(fraction), "cache_bytes": int(cache),
           "node_memory_bytes": node_memory, "rows": rows},
          open(stem + ".json", "w"), indent=1)
out = [f"# One process against 2 workers with a working set of {fraction} "
       f"of the node states: {data}, TGN, one epoch", "",
       f"Machine: {machine}.", "", "```", command, "```", "",
       f"Node memory: {int(num_nodes):,} states of {state} bytes, "
       f"{mib(node_memory)} MiB; the working set holds {int(cache):,} bytes "
       "a worker. Peak RSS / anonymous (heap and stacks), MiB; ratios are "
       "each trainer's peak RSS over the one process's. The coordinator "
       "holds no training state: its RSS is what any mnemo process costs "
       "(LibTorch with its CUDA libraries, gRPC).", "",
       "| seed | one process | unbounded trainer 0 / 1 | bounded trainer 0 / 1 "
       "| bounded / one process | coordinator | test AP: one process, "
       "unbounded, bounded |", "|" + "---|" * 7]
for r in rows:
    o, u, b = r["one_process"], r["unbounded"], r["bounded"]
    out.append(
        f"| {r['seed']} | {mib(single(o))} / {mib(single(o, 'peak_anon_bytes'))} | "
        f"{mib(trainer(u, 0))} / {mib(trainer(u, 1))} | "
        f"{mib(trainer(b, 0))} / {mib(trainer(b, 1))} | "
        f"{trainer(b, 0) / single(o):.2f} / {trainer(b, 1) / single(o):.2f} | "
        f"{mib(b['peak_rss_bytes'].get('coordinator', 0))} | "
        f"{o['test_ap']:.4f}, {u['test_ap']:.4f}, {b['test_ap']:.4f} |")
mean = lambda k: statistics.mean(r[k]["test_ap"] for r in rows)
worst = max(max(trainer(r["bounded"], 0), trainer(r["bounded"], 1)) /
            single(r["one_process"]) for r in rows)
out += ["", f"Mean test AP over {len(rows)} seeds: one process "
        f"{mean('one_process'):.4f}, 2 workers unbounded "
        f"{mean('unbounded'):.4f}, bounded {mean('bounded'):.4f} "
        f"(bounded - unbounded {mean('bounded') - mean('unbounded'):+.4f}). "
        f"Largest trainer over one process: {worst:.2f}."]
open(stem + ".md", "w").write("\n".join(out) + "\n")
print("\n".join(out))
PY
    ;;
  synthetic | ci)
    if [ "$mode" = ci ]; then nodes=20000 events=60000; fi
    [ "$nodes" -gt 0 ] && [ "$events" -gt 0 ] || {
      echo "scale.sh synthetic: --nodes and --events are required" >&2
      exit 2
    }
    # Streams of exponent 2 keep the names they always had.
    shape=""
    [ "$exponent" != 2 ] && shape="-e$exponent"
    stream=$(synthetic_stream "$MNEMO" "$work" "$nodes" "$events" "$exponent")
    read -r num_nodes bytes < <(state_bytes "$stream.mnemo")
    cache=$(python3 -c "print(int($fraction * $num_nodes * $bytes))")
    hot=$(python3 -c "print(int($hot_fraction * $num_nodes * ($bytes - 41) / 2))")
    budget="$fraction of the states" budget_tag=$fraction
    args="--fraction $fraction --hot-fraction $hot_fraction"
    if [ "$cache_bytes" -gt 0 ]; then
      cache=$cache_bytes budget="$cache_bytes bytes a worker"
      budget_tag=c$cache_bytes args="--cache-bytes $cache_bytes"
    fi
    if [ "$hot_bytes" -gt 0 ]; then
      hot=$hot_bytes budget_tag=$budget_tag-h$hot_bytes
      args="$args --hot-bytes $hot_bytes"
    fi
    [ "$bounded_only" = 1 ] && args="$args --bounded-only"
    [ "$unbounded_only" = 1 ] && args="$args --unbounded-only"
    [ -n "$shape" ] && args="$args --degree-exponent $exponent"
    tag="synthetic-$nodes-$events$shape-${policy//[:+]/-}"
    common=(--data "$stream.mnemo" --policy "$policy" --memstore-hot-bytes "$hot"
            --no-memstore-mmap-reads)
    runs=()
    if [ "$bounded_only" = 0 ]; then
      run "$tag-unbounded" "${common[@]}"
      runs+=("unbounded=$work/$tag-unbounded")
    fi
    if [ "$unbounded_only" = 0 ]; then
      run "$tag-$budget_tag-belady" "${common[@]}" --memory-cache-bytes "$cache"
      runs+=("$budget=$work/$tag-$budget_tag-belady")
    fi
    stem="$results/scale_synthetic_${nodes}_$events${shape//-/_}"
    [ "$unbounded_only" = 1 ] && stem="${stem}_unbounded"
    [ "$mode" = ci ] && stem="$work/scale_ci"
    report "$stem" \
      "Synthetic stream, $nodes node ids ($num_nodes in events), $events events, degree exponent $exponent: 2 workers, 2 shards, TGN, one epoch, $policy" \
      "bench/scale.sh $mode --nodes $nodes --events $events --policy $policy $args
(each run: $MNEMO train --workers 2 --epochs 1 --data $stream.mnemo --policy $policy --memstore-hot-bytes $hot --no-memstore-mmap-reads [--memory-cache-bytes $cache], under bench/rss_sampler.py)" \
      "${runs[@]}"
    if [ "$mode" = ci ]; then
      python3 - "$stem.json" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))["rows"]
a, b = rows[0], rows[1]
assert b["working_set"]["evictions"] > 0, "the bounded run evicted nothing"
if a["test_ap"] != b["test_ap"]:
    sys.exit(f"bounded test AP {b['test_ap']} != unbounded {a['test_ap']}")
print("scale.sh ci: bounded run equals the unbounded one "
      f"(test AP {a['test_ap']:.4f})")
PY
    fi
    ;;
  *)
    sed -n '2,56p' "$0" >&2
    exit 2
    ;;
esac
