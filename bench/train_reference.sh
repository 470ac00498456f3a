#!/usr/bin/env bash
# Training benchmark: TGN with the TGN reference's hyperparameters on
# Wikipedia (memory 172, batch 200, 10 neighbours, lr 1e-4, dropout 0.1,
# 2 threads, 3 epochs, no early stopping), the same in bf16, JODIE on
# Wikipedia, TGN on sx-mathoverflow. Writes bench/results/train_*.json (the
# run's summary.json plus the command and machine) and prints a table.
#
# Usage: bench/train_reference.sh [which...]   which: tgn-wiki tgn-wiki-bf16
#        jodie-wiki tgn-mathoverflow (default: all)
set -euo pipefail
cd "$(dirname "$0")/.."
MNEMO=${MNEMO:-build/services/mnemo}
OUT=${BENCH_RUNS:-runs/bench}
mkdir -p bench/results "$OUT"
REF="--memory-dim 172 --time-dim 172 --embedding-dim 172 --batch-size 200 --lr 1e-4 --neighbors 10 --dropout 0.1 --threads 2 --patience 0 --seed 0 --progress none"
declare -A CMD=(
  [tgn-wiki]="--data wikipedia --model tgn --epochs 3 $REF"
  [tgn-wiki-bf16]="--data wikipedia --model tgn --epochs 3 --precision bf16 $REF"
  [jodie-wiki]="--data wikipedia --model jodie --epochs 10 --memory-dim 172 --batch-size 200 --threads 2 --patience 3 --seed 0 --progress none"
  [tgn-mathoverflow]="--data mathoverflow --model tgn --epochs 3 --threads 2 --patience 0 --seed 0 --progress none"
)
which=("$@")
[ ${#which[@]} -gt 0 ] || which=(tgn-wiki tgn-wiki-bf16 jodie-wiki tgn-mathoverflow)
for w in "${which[@]}"; do
  args=${CMD[$w]}
  echo "== $w: mnemo train $args" >&2
  "$MNEMO" train $args --out "$OUT/$w" >&2
  python3 - "$OUT/$w/summary.json" "bench/results/train_$w.json" "$w" "$args" <<'PY'
import json, os, socket, subprocess, sys, datetime
summary, dest, name, args = sys.argv[1:5]
s = json.load(open(summary))
cpu = ""
try:
    cpu = [l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")][0]
except Exception:
    pass
out = {"benchmark": "train_" + name,
       "command": "build/services/mnemo train " + args + " --out OUT",
       "script": "bench/train_reference.sh " + name,
       "date": datetime.datetime.utcnow().isoformat() + "Z",
       "machine": {"host": socket.gethostname(), "nproc": os.cpu_count(), "cpu": cpu},
       "summary": s}
json.dump(out, open(dest, "w"), indent=1)
t = s["test"]
print(f"{name:18s} epochs {len(s['epochs'])}  train {s['train_events_per_second']:.0f} ev/s  "
      f"test AP {t['ap']:.4f} (batch-mean {t['ap_batch_mean']:.4f})  "
      f"new-node AP {t['new_node_ap']:.4f} (batch-mean {t['new_node_ap_batch_mean']:.4f})  "
      f"AUC {t['auc']:.4f} / {t['new_node_auc']:.4f}  peak RSS {s['peak_rss_bytes']/1e9:.2f} GB")
PY
done
