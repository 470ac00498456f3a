#!/usr/bin/env bash
# `mnemo serve` under load: p50/p99 latency and calls/s of Score with 100
# candidates from 1, 8 and 64 closed-loop clients, with dynamic batching
# and without, and ingestion's events/s (the test period, predict then
# update, in batches of 200) beside the run's own test pass and training's
# forward pass; then Score (1 and 8 clients) and ingestion with the memory
# in 2 memory-store shards (`serve --memstore`): bench_serve_load
# (bench/serve_load.cc) against the real `mnemo serve` and `mnemo memstore`
# on loopback.
#
# Usage: bench/serve.sh [--seconds S] [--epochs E] [--data NAME] [FLAGS...]
#   Trains TGN (the default model) on NAME (default wikipedia) for E epochs
#   (default 3) into runs/serve/NAME-tgn once (FLAGS go to that
#   `mnemo train`), then loads it for S seconds a point (default 10).
#   Writes bench/results/serve_NAME.json and .md ($BENCH_RESULTS moves
#   them) with the commands and the machine.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=10 epochs=3 data=wikipedia
while [ $# -gt 0 ]; do
  case $1 in
    --seconds) seconds=${2:?--seconds needs S}; shift 2 ;;
    --epochs) epochs=${2:?--epochs needs E}; shift 2 ;;
    --data) data=${2:?--data needs NAME}; shift 2 ;;
    *) break ;;
  esac
done
results=${BENCH_RESULTS:-bench/results}
shared=${MNEMO_SHARED_DATA:-$PWD/../shared/data}
export MNEMO_SHARED_DATA=$shared
flock /tmp/mnemo-build.lock ninja -C build -j2 mnemo bench_serve_load >/dev/null
bin=$PWD/build/services/mnemo
export MNEMO_BIN=$bin
run=runs/serve/$data-tgn
if [ ! -f "$run/summary.json" ]; then
  rm -rf "$run"
  mkdir -p runs/serve
  "$bin" train --data "$data" --data-dir "$shared" --epochs "$epochs" \
    --progress none --out "$run" "$@" >"$run.train.log" 2>&1 ||
    { tail "$run.train.log" >&2; exit 1; }
fi
path=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["data_path"])' "$run/summary.json")
max_events=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["data"]["events"])' "$run/summary.json")
mkdir -p "$results"
out=$results/serve_$data.json
build/bench/bench_serve_load --from "$run" --data "$path" \
  --max-events "$max_events" --seconds "$seconds" --out "$out"
rm -f "$out".*.log
python3 - "$out" "$run" "$*" <<'PY'
import json, subprocess, sys
out, run, flags = sys.argv[1], sys.argv[2], sys.argv[3]
r = json.load(open(out))
s = json.load(open(run + "/summary.json"))
cpu = r["cpu"]
flags_line = subprocess.run(["sh", "-c", "grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\\n' | grep -E '^(avx512f|avx512_bf16|amx_tile|avx2)$' | tr '\\n' ' '"], capture_output=True, text=True).stdout.strip()
nproc = subprocess.run(["nproc"], capture_output=True, text=True).stdout.strip()
lines = [f"# `mnemo serve` under load: {s['dataset']}, {s['model']}",
         "",
         f"Machine: {cpu} ({flags_line}), {nproc} CPUs. Server and clients share them (loopback).",
         f"Run: `mnemo train --data {s['dataset']} --epochs {len(s['epochs'])}{(' ' + flags) if flags else ''}` "
         f"(test AP {s['test']['ap']:.4f}); served with `mnemo serve --from {run}`.",
         f"Script: `bench/serve.sh{(' ' + flags) if flags else ''}`; command: `{r['command']}` ({r['seconds_per_point']:g} s a point, closed loop: each client sends its next call when the last is answered).",
         "",
         "| memory | clients | batching | p50 ms | p99 ms | calls/s | calls | errors |",
         "|---|---:|---|---:|---:|---:|---:|---:|"]
def memory(row):
    n = row.get("shards", 0)
    return f"{n} memory-store shards (`--memstore`)" if n else "in serve"
for row in r["rows"]:
    if row["kind"] != "score":
        continue
    lines.append(f"| {memory(row)} | {row['clients']} | {'on' if row['batching'] else 'off'} | {row['p50_ms']:.2f} | {row['p99_ms']:.2f} | {row['calls_per_s']:.1f} | {row['calls']} | {row['errors']} |")
ings = [row for row in r["rows"] if row["kind"] == "ingest"]
ing = ings[0]
lines += ["",
          f"Score carries {r['rows'][0]['candidates']} random candidates from the data's destinations for a random source.",
          "",
          "| ingestion (predict, then update) | events/s |",
          "|---|---:|"]
for row in ings:
    how = ('with `--journal` (each batch fdatasync-ed before its ack)' if row.get('journal') else
           f"memory in {row['shards']} write-through memory-store shards (each batch's states pulled, then pushed before its ack)" if row.get('shards') else 'no journal')
    lines.append(f"| `Ingest`, the test period ({row['events']} events) in batches of 200, one stream, {how} | {row['events_per_s']:.0f} |")
lines += [
          f"| the run's own test pass (the same work in `mnemo train`) | {ing['run_test_pass_events_per_s']:.0f} |",
          f"| training's forward pass (train events x epochs / forward seconds) | {ing['train_forward_events_per_s']:.0f} |",
          "",
          "The stream's AP over the test period (from its acks' scores), in the order of the rows above: "
          + " / ".join("%.9f" % row["stream_ap"] for row in ings)
          + f"; the run's test AP: {ing['run_test_ap']:.9f}."]
open(out[:-5] + ".md", "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
