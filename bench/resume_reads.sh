#!/usr/bin/env bash
# Bytes a resume reads from its checkpoint files: `mnemo train --resume`
# under strace (openat, read, pread64, close; every thread of every process
# traced to its own file), the bytes read from each *.pt file summed per
# process.
#
# Usage: bench/resume_reads.sh RUN_DIR [TRAIN FLAGS...]
#   Copies RUN_DIR's checkpoints/ to a temporary directory, resumes from it
#   with `mnemo train --resume TMP TRAIN FLAGS...` (the run's own flags, and
#   a later --epochs) and prints, per checkpoint file and process, how often
#   it was opened and how many bytes were read. Needs strace.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { sed -n '2,/^set -euo/p' "$0" | sed '$d;s/^# \{0,1\}//' >&2; exit 2; }
run=$1; shift
command -v strace >/dev/null || { echo "resume_reads: strace is not installed" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/run" "$work/trace"
cp -r "$run/checkpoints" "$work/run/"
strace -ff -e trace=openat,read,pread64,close -o "$work/trace/t" \
  build/services/mnemo train --resume "$work/run" "$@" > "$work/train.log" 2>&1 ||
  { tail "$work/train.log" >&2; exit 1; }
grep -E "^test|resumed from" "$work/train.log" | head -4
python3 - "$work/trace" <<'PY'
import glob, os, re, sys
# One trace file per thread: its own openat/read/close lines, calls split
# into "unfinished" and "resumed" halves joined back.
rows = []
for path in sorted(glob.glob(os.path.join(sys.argv[1], "t.*"))):
    fds, total, opens, pending = {}, {}, {}, None
    for line in open(path):
        if "<unfinished" in line:
            pending = line.split("<unfinished")[0]
            continue
        if "resumed>" in line and pending is not None:
            line = pending + line.split("resumed>", 1)[1]
            pending = None
        m = re.match(r'openat\(.*?"([^"]+\.pt)".*\)\s*=\s*(\d+)', line)
        if m:
            fds[m[2]] = m[1]
            opens[m[1]] = opens.get(m[1], 0) + 1
            continue
        m = re.match(r'(?:read|pread64)\((\d+),.*\)\s*=\s*(\d+)', line)
        if m and m[1] in fds:
            total[fds[m[1]]] = total.get(fds[m[1]], 0) + int(m[2])
            continue
        m = re.match(r'close\((\d+)\)', line)
        if m:
            fds.pop(m[1], None)
    for p in opens:
        rows.append((p, path.rsplit(".", 1)[1], opens[p], total.get(p, 0),
                     os.path.getsize(p) if os.path.exists(p) else 0))
print("| file | thread | opens | bytes read | of the file |")
print("|---|---:|---:|---:|---:|")
for p, tid, n, b, size in sorted(rows):
    print(f"| {os.path.relpath(p, os.path.dirname(sys.argv[1]))} | {tid} | {n} | {b:,} | {b / size if size else 0:.5f}x |")
PY
