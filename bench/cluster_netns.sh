#!/usr/bin/env bash
# The baseline rows DepTGL is measured against: TGN trained by one process,
# and by 2 and 3 workers with the vanilla and full-cache policies inside the
# emulated network of deploy/netns/run.sh (tbf-shaped links, default 1 Gbit/s;
# no netem delay on these kernels). One epoch each, same seed and flags.
# Writes bench/results/cluster_netns.json (every run's summary, the bytes
# each host sent through its shaped link, the command, the machine) and
# prints a table.
#
# Usage: bench/cluster_netns.sh [--rate 1gbit] [--epochs 1] [dataset...]
#        (default datasets: wikipedia mathoverflow). Needs root.
set -euo pipefail
cd "$(dirname "$0")/.."
RATE=1gbit
EPOCHS=1
DATASETS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --rate) RATE=$2; shift 2 ;;
    --epochs) EPOCHS=$2; shift 2 ;;
    *) DATASETS+=("$1"); shift ;;
  esac
done
[ ${#DATASETS[@]} -gt 0 ] || DATASETS=(wikipedia mathoverflow)
MNEMO=build/services/mnemo
OUT=${BENCH_RUNS:-runs/cluster_netns}
rm -rf "$OUT"
mkdir -p "$OUT" bench/results
COMMON=(--model tgn --epochs "$EPOCHS" --patience 0 --seed 0 --threads 1 --progress none)
RUNS=()
for ds in "${DATASETS[@]}"; do
  echo "== $ds: single process" >&2
  "$MNEMO" train --data "$ds" "${COMMON[@]}" --out "$OUT/$ds-single" >&2
  RUNS+=("$ds-single")
  for w in 2 3; do
    for policy in vanilla full-cache; do
      name="$ds-$policy-$w"
      echo "== $name" >&2
      STATS_FILE="$OUT/$name.links" deploy/netns/run.sh --workers "$w" \
        --rate "$RATE" --tag "b$w${policy:0:1}" -- --data "$ds" "${COMMON[@]}" \
        --policy "$policy" --out "$OUT/$name" >"$OUT/$name.log" 2>&1 ||
        { echo "run $name failed, see $OUT/$name.log" >&2; tail -5 "$OUT/$name.log" >&2; }
      RUNS+=("$name")
    done
  done
done
python3 - "$OUT" "$RATE" "$EPOCHS" "${RUNS[@]}" <<'PY'
import datetime, json, os, socket, sys
out, rate, epochs, runs = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
cpu = ""
try:
    cpu = [l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")][0]
except Exception:
    pass
rows, table = [], []
for name in runs:
    path = os.path.join(out, name, "summary.json")
    if not os.path.exists(path):
        rows.append({"run": name, "error": "no summary (see log)"})
        continue
    s = json.load(open(path))
    links = {}
    lp = os.path.join(out, name + ".links")
    if os.path.exists(lp):
        for line in open(lp):
            host, sent = line.split()
            links[host] = int(sent)
    e = s["epochs"][0]
    c = s.get("comm", {})
    rows.append({"run": name, "summary": s, "link_bytes_sent": links})
    table.append("%-26s %5.1fs %8.0f ev/s  syncs %6d  pulled %9.1f MB  pushed %8.1f MB  comm %5.1f%%  link %8.1f MB  test AP %.4f  nn AP %.4f" % (
        name, e["seconds"], e["train_events_per_second"], c.get("sync_count", 0),
        c.get("bytes_pulled", 0) / 1e6, c.get("bytes_pushed", 0) / 1e6,
        100 * c.get("share", 0), sum(links.values()) / 1e6,
        s["test"]["ap"], s["test"]["new_node_ap"]))
result = {
    "benchmark": "cluster_netns",
    "command": "bench/cluster_netns.sh --rate %s --epochs %s" % (rate, epochs),
    "network": "deploy/netns/run.sh: one namespace per process, veth to a bridge, tbf rate %s on every link both ways; netem delay unavailable on this kernel, so no added latency" % rate,
    "note": "All processes share this machine's cores: 2- and 3-worker runs compete for 2 CPU cores, so epoch time is CPU-bound; compare syncs, bytes and communication share.",
    "date": datetime.datetime.utcnow().isoformat() + "Z",
    "machine": {"host": socket.gethostname(), "nproc": os.cpu_count(), "cpu": cpu},
    "rows": rows,
    "table": table,
}
json.dump(result, open("bench/results/cluster_netns.json", "w"), indent=1)
print("\n".join(table))
PY
