#!/usr/bin/env bash
# Memory of the service roles: an empty memory-store shard and a
# coordinator, each started from the service-only `mnemo` (no LibTorch) and,
# side by side, from `mnemo-trainer` (every role, LibTorch and CUDA linked),
# as every role ran before the two executables.
#
# Usage: bench/service_rss.sh [--repeats R] [--name NAME]
#
# Each process is started, waited for until its gRPC health check answers
# SERVING, left idle a second, and read from /proc: peak resident memory
# (VmHWM), anonymous resident memory (RssAnon), file-backed resident memory
# (RssFile: mapped libraries) and PSS; then stopped with SIGTERM. Writes
# bench/results/service_rss[_NAME].json and .md ($BENCH_RESULTS moves them)
# with the commands and the machine, and the sizes of the images
# mnemo-service:latest and mnemo:latest where podman has them
# (deploy/test-compose.sh builds both).
set -euo pipefail
cd "$(dirname "$0")/.."
repeats=3 name=
while [ $# -gt 0 ]; do
  case $1 in
    --repeats) repeats=${2:?--repeats needs R}; shift 2 ;;
    --name) name=${2:?--name needs NAME}; shift 2 ;;
    *) echo "service_rss.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[[ $repeats =~ ^[1-9][0-9]*$ ]] || { echo "--repeats: a positive integer" >&2; exit 2; }
bin=${MNEMO_BIN:-build/services/mnemo}
trainer=$(dirname "$bin")/mnemo-trainer
for b in "$bin" "$trainer"; do
  [ -x "$b" ] || { echo "$b: not built (scripts/build mnemo)" >&2; exit 2; }
done
results=${BENCH_RESULTS:-bench/results}
work=$(mktemp -d "${TMPDIR:-/tmp}/mnemo-service-rss-XXXXXX")
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$results"
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
# measure EXE ROLE: one JSON line
measure() {
  local exe=$1 role=$2 port args
  port=$(free_port)
  case $role in
    memstore)
      rm -rf "$work/ms"
      args=(memstore --listen "127.0.0.1:$port" --data-dir "$work/ms" --dim 475) ;;
    coordinator)
      args=(coordinator --listen "127.0.0.1:$port" --world-size 2 --memstores 127.0.0.1:1) ;;
  esac
  "$exe" "${args[@]}" >"$work/log" 2>&1 &
  local pid=$!
  pids+=("$pid")
  for ((i = 0; i < 200; i++)); do
    "$bin" healthcheck "127.0.0.1:$port" >/dev/null 2>&1 && break
    kill -0 "$pid" 2>/dev/null || { cat "$work/log" >&2; exit 1; }
    sleep 0.05
  done
  sleep 1
  python3 - "$pid" "$exe" "$role" "${args[*]}" <<'PY'
import json, sys
pid, exe, role, args = sys.argv[1:]
st = {l.split(":")[0]: l.split(":")[1].split()[0] for l in open(f"/proc/{pid}/status") if l.split(":")[0] in ("VmHWM", "VmRSS", "RssAnon", "RssFile")}
pss = next(int(l.split()[1]) for l in open(f"/proc/{pid}/smaps_rollup") if l.startswith("Pss:"))
maps = open(f"/proc/{pid}/maps").read()
print(json.dumps({"exe": exe.split("/")[-1], "role": role, "args": args,
                  "vmhwm_kib": int(st["VmHWM"]), "rss_kib": int(st["VmRSS"]),
                  "anon_kib": int(st["RssAnon"]), "file_kib": int(st["RssFile"]),
                  "pss_kib": pss, "maps_libtorch": "libtorch" in maps}))
PY
  kill -TERM "$pid"
  wait "$pid" 2>/dev/null || true
}
: >"$work/runs.jsonl"
for ((r = 0; r < repeats; r++)); do
  for role in memstore coordinator; do
    for exe in "$bin" "$trainer"; do
      measure "$exe" "$role" >>"$work/runs.jsonl"
    done
  done
done
: >"$work/images"
if command -v podman >/dev/null; then
  for image in mnemo-service mnemo; do
    size=$(podman image inspect "$image:latest" --format '{{.Size}}' 2>/dev/null) &&
      echo "$image:latest $size" >>"$work/images"
  done
fi
out=$results/service_rss${name:+_$name}
python3 - "$work/runs.jsonl" "$out" "$repeats" "$work/images" <<'PY'
import json, os, socket, statistics, sys, datetime
runs = [json.loads(l) for l in open(sys.argv[1])]
out, repeats = sys.argv[2], int(sys.argv[3])
images = {l.split()[0]: int(l.split()[1]) for l in open(sys.argv[4]) if l.strip()}
def cpu():
    model = [l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")][0]
    have = next(l for l in open("/proc/cpuinfo") if l.startswith("flags")).split(":", 1)[1].split()
    return model, [f for f in ("avx2", "fma", "avx512f", "avx512_bf16", "amx_tile") if f in have]
model, flags = cpu()
rows = []
for role in ("memstore", "coordinator"):
    for exe in ("mnemo", "mnemo-trainer"):
        rs = [r for r in runs if r["role"] == role and r["exe"] == exe]
        med = lambda k: statistics.median(r[k] for r in rs) / 1024
        rows.append({"role": role, "exe": exe, "args": rs[0]["args"],
                     "maps_libtorch": rs[0]["maps_libtorch"],
                     **{k.replace("_kib", "_mib"): round(med(k), 1) for k in ("vmhwm_kib", "rss_kib", "anon_kib", "file_kib", "pss_kib")}})
cmd = "bench/service_rss.sh --repeats %d" % repeats
json.dump({"command": cmd, "machine": {"host": socket.gethostname(), "cpu": model, "flags": flags, "nproc": os.cpu_count()},
           "repeats": repeats, "rows": rows, "runs": runs, "image_bytes": images}, open(out + ".json", "w"), indent=1)
with open(out + ".md", "w") as f:
    f.write("# Service roles' memory: the service-only `mnemo` against `mnemo-trainer`\n\n")
    f.write(f"`{cmd}` on {model}, {os.cpu_count()} CPUs ({', '.join(flags)}). ")
    f.write(f"Median of {repeats} starts each; an idle process, one second after its health check answered SERVING. "
            "Peak = VmHWM, anon = RssAnon, file = RssFile (mapped libraries), PSS from smaps_rollup, MiB.\n\n")
    f.write("| role | executable | LibTorch mapped | peak RSS | anon | file | PSS |\n|---|---|---|---:|---:|---:|---:|\n")
    for r in rows:
        f.write(f"| {r['role']} | `{r['exe']}` | {'yes' if r['maps_libtorch'] else 'no'} | {r['vmhwm_mib']} | {r['anon_mib']} | {r['file_mib']} | {r['pss_mib']} |\n")
    f.write("\nCommands: " + "; ".join(f"`{r['exe']} {r['args']}`" for r in rows if r["exe"] == "mnemo") + " (ports and directories are the run's own).\n")
    if images:
        f.write("\nImages (podman image inspect, deploy/Dockerfile built by `deploy/test-compose.sh --prebuilt`): "
                + ", ".join(f"`{k}` {v / 1e6:.0f} MB" for k, v in images.items()) + ".\n")
print(open(out + ".md").read())
PY
