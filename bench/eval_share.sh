#!/usr/bin/env bash
# Shared evaluation against rank 0 alone: the same 2-worker job run with
# --eval-on all and --eval-on leader, alternately (pairs of back-to-back
# runs, their order alternating), reporting the validation's and the
# test's wall seconds (rank 0's: what the job waits for) and their ratio
# per pair, and checking that every figure (validation and test AP, AUC,
# per-batch means, new-node figures, loss, parameter checksum) is the same
# in every run (the script fails otherwise).
#
# Usage: bench/eval_share.sh [--pairs P] [--name NAME] DATA -- FLAGS...
#   DATA: a dataset name or path, or synthetic:NODES:EVENTS:EXPONENT (the
#   stream of bench/scale.sh, made when missing). FLAGS go to every
#   `mnemo train --workers 2 --data DATA --epochs 1` run (a policy, a
#   model, a seed). Writes bench/results/eval_share_NAME.json and .md
#   ($BENCH_RESULTS moves them) with the commands and the machine; runs go
#   to runs/eval-share/ ($EVAL_SHARE_WORK).
set -euo pipefail
cd "$(dirname "$0")/.."
pairs=3 name= data=
while [ $# -gt 0 ]; do
  case $1 in
    --pairs) pairs=${2:?--pairs needs P}; shift 2 ;;
    --name) name=${2:?--name needs NAME}; shift 2 ;;
    --) shift; break ;;
    -*) echo "eval_share.sh: unknown option $1" >&2; exit 2 ;;
    *) data=$1; shift ;;
  esac
done
[ -n "$data" ] || { sed -n '2,16p' "$0" >&2; exit 2; }
[[ $pairs =~ ^[1-9][0-9]*$ ]] || { echo "--pairs: a positive integer" >&2; exit 2; }
MNEMO=${MNEMO_BIN:-build/services/mnemo}
[ -x "$MNEMO" ] || { echo "eval_share.sh: build first (scripts/build)" >&2; exit 1; }
work=${EVAL_SHARE_WORK:-runs/eval-share}
results=${BENCH_RESULTS:-bench/results}
mkdir -p "$work" "$results"
data_arg=$data
if [[ $data == synthetic:* ]]; then
  IFS=: read -r _ nodes events exponent <<<"$data"
  # shellcheck source=bench/lib_runs.sh
  source bench/lib_runs.sh
  data_arg=$(synthetic_stream "$MNEMO" "${SCALE_WORK:-runs/scale}" "$nodes" "$events" "${exponent:-2}").mnemo
fi
name=${name:-$(basename "$data_arg" | sed 's/[.:].*//')}
flags=("$@")
: >"$work/$name.runs"
for ((p = 0; p < pairs; p++)); do
  order=(all leader)
  ((p % 2)) && order=(leader all)
  for mode in "${order[@]}"; do
    out="$work/$name-$p-$mode"
    rm -rf "$out"
    echo "== pair $p: --eval-on $mode" >&2
    "$MNEMO" train --workers 2 --data "$data_arg" --epochs 1 --progress none \
      --eval-on "$mode" --out "$out" "${flags[@]}" >"$out.log" 2>&1 ||
      { tail -20 "$out.log" >&2; exit 1; }
    echo "$p $mode $out/summary.json" >>"$work/$name.runs"
  done
done
python3 - "$work/$name.runs" "$results/eval_share_$name" "$data_arg" "$pairs" "${flags[*]}" <<'PY'
import json, os, socket, statistics, sys
runs_file, out, data, pairs, flags = sys.argv[1:]
def cpu():
    model = [l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")][0]
    have = next(l for l in open("/proc/cpuinfo") if l.startswith("flags")).split(":", 1)[1].split()
    return model, [f for f in ("avx2", "fma", "avx512f", "avx512_bf16", "amx_tile") if f in have]
model, cpuflags = cpu()
runs = []
for line in open(runs_file):
    p, mode, path = line.split()
    s = json.load(open(path))
    e = s["epochs"][0]
    figures = {k: e[k] for k in ("val_ap", "val_auc", "val_ap_batch_mean", "val_new_node_ap",
                                 "val_new_node_auc", "val_new_node_ap_batch_mean", "val_loss")}
    figures.update({"test_" + k: v for k, v in s["test"].items() if k not in ("mrr", "hits_at_10")})
    figures["parameter_checksum"] = s["parameter_checksum"]
    w = s["per_worker"]
    runs.append({"pair": int(p), "mode": mode, "val_seconds": e["eval_seconds"],
                 "test_seconds": s["test_seconds"], "train_seconds": e["seconds"],
                 "figures": figures,
                 "scored_batches": [x["eval_scored_batches"] for x in w],
                 "replayed_batches": [x["eval_replayed_batches"] for x in w],
                 "replay_cost": w[0]["eval_replay_cost"],
                 "eval_pull_seconds": [x["eval_pull_seconds"] for x in w],
                 "peak_rss_mib": [round(x["peak_rss_bytes"] / 2**20) for x in w],
                 "val_events": s["data"]["val_events"], "test_events": s["data"]["test_events"]})
ref = runs[0]["figures"]
diff = [(r["pair"], r["mode"], k) for r in runs for k, v in r["figures"].items()
        if v != ref[k] and not (v != v and ref[k] != ref[k])]
ratios = []
for p in range(int(pairs)):
    a = next(r for r in runs if r["pair"] == p and r["mode"] == "all")
    l = next(r for r in runs if r["pair"] == p and r["mode"] == "leader")
    ratios.append({"pair": p,
                   "val": l["val_seconds"] / a["val_seconds"],
                   "test": l["test_seconds"] / a["test_seconds"],
                   "both": (l["val_seconds"] + l["test_seconds"]) / (a["val_seconds"] + a["test_seconds"])})
cmd = f"bench/eval_share.sh --pairs {pairs} {data} -- {flags}".strip()
med = {k: statistics.median(r[k] for r in ratios) for k in ("val", "test", "both")}
res = {"command": cmd, "machine": {"host": socket.gethostname(), "cpu": model, "flags": cpuflags,
       "nproc": os.cpu_count()}, "runs": runs, "ratios": ratios, "median": med,
       "identical_figures": not diff, "differences": diff}
json.dump(res, open(out + ".json", "w"), indent=1)
with open(out + ".md", "w") as f:
    f.write(f"# Shared evaluation against rank 0 alone: {os.path.basename(data)}\n\n")
    f.write(f"`{cmd}` on {model}, {os.cpu_count()} CPUs ({', '.join(cpuflags)}): "
            f"`mnemo train --workers 2 --epochs 1` with `--eval-on all` and `--eval-on leader`, "
            f"{pairs} back-to-back pairs, order alternating. Seconds are rank 0's wall time: "
            f"validation (`epochs[0].eval_seconds`, the pull of every state included) and the best "
            f"epoch's test (`test_seconds`); {runs[0]['val_events']:,} validation and "
            f"{runs[0]['test_events']:,} test events.\n\n")
    f.write("| pair | mode | validation s | test s | train s | scored batches (rank 0, 1) | replayed (rank 0, 1) | replay cost |\n|---|---|---:|---:|---:|---|---|---:|\n")
    for r in runs:
        f.write(f"| {r['pair']} | {r['mode']} | {r['val_seconds']:.1f} | {r['test_seconds']:.1f} | {r['train_seconds']:.1f} | "
                f"{', '.join(map(str, r['scored_batches']))} | {', '.join(map(str, r['replayed_batches']))} | {r['replay_cost']:.3f} |\n")
    f.write("\n| pair | validation: leader / all | test: leader / all | both |\n|---|---:|---:|---:|\n")
    for r in ratios:
        f.write(f"| {r['pair']} | {r['val']:.2f} | {r['test']:.2f} | {r['both']:.2f} |\n")
    f.write(f"| median | {med['val']:.2f} | {med['test']:.2f} | {med['both']:.2f} |\n\n")
    f.write(("Every figure is the same in every run (validation and test AP, AUC, per-batch means, "
             "new-node figures, loss, parameter checksum): "
             f"val AP {ref['val_ap']:.6f}, test AP {ref['test_ap']:.6f}, new-node test AP {ref['test_new_node_ap']:.6f}.\n")
            if not diff else f"FIGURES DIFFER: {diff}\n")
    f.write(f"\nPeak RSS per worker (MiB), first pair: all {runs[0]['peak_rss_mib']}, leader {runs[1]['peak_rss_mib']} "
            "(with `--eval-on all` every worker builds the graph of all events).\n")
print(open(out + ".md").read())
sys.exit(1 if diff else 0)
PY
