#!/usr/bin/env bash
# Where a TGN training step spends its time: `mnemo train --profile` on
# Wikipedia with the TGN reference's hyperparameters (batch 200, widths 172,
# 10 neighbours, 2 heads, 2 threads), one epoch on the first 40,000 events,
# 50 batches recorded after 10 warm-up batches. Writes
# bench/results/profile_<name>.md: the command, the machine, the per-batch
# split into forward / backward / optimizer and the per-operator table.
#
# Usage: bench/profile_step.sh [name] [extra mnemo train flags...]
#   e.g. bench/profile_step.sh tgn-wiki
#        bench/profile_step.sh tgn-wiki-bf16 --precision bf16
set -euo pipefail
cd "$(dirname "$0")/.."
MNEMO=${MNEMO:-build/services/mnemo}
name=${1:-tgn-wiki}
[ $# -eq 0 ] || shift
out=${BENCH_RESULTS:-bench/results}/profile_$name.md
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
args="--data wikipedia --model tgn --epochs 1 --memory-dim 172 --time-dim 172 --embedding-dim 172 --batch-size 200 --lr 1e-4 --neighbors 10 --heads 2 --dropout 0.1 --protocol tgn-reference --patience 0 --threads 2 --progress none --seed 0 --max-events 40000 $*"
load0=$(cut -d' ' -f1 /proc/loadavg)
"$MNEMO" train $args --profile "$work/profile.md" --out "$work/run" >"$work/log" 2>&1 ||
  { cat "$work/log" >&2; exit 1; }
load1=$(cut -d' ' -f1 /proc/loadavg)
mkdir -p "$(dirname "$out")"
{
  echo "<!-- bench/profile_step.sh $name $* -->"
  echo "Command: \`mnemo train $args --profile FILE\`"
  echo
  echo "Machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(nproc) CPUs ($(hostname)); $(date -u +%Y-%m-%dT%H:%M:%SZ); load average $load0 -> $load1; $("$MNEMO" --version 2>/dev/null | head -1 || echo mnemo), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo
  grep -E "^epoch" "$work/log" | sed 's/^/    /'
  echo
  cat "$work/profile.md"
} >"$out"
echo "wrote $out"
