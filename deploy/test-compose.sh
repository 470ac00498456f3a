#!/usr/bin/env bash
# The compose stack end to end: builds the images (and Prometheus's), brings
# deploy/compose.yaml up, runs its 2-worker training job on CollegeMsg to
# completion, checks summary.json and `mnemo serve` on the trained model,
# queries a node's memory with `mnemo query` from outside the containers, checks that the real
# Prometheus in the stack scraped every service (up == 1) and that every
# metric the Grafana dashboard names was scraped, and tears everything down.
#
# Usage: deploy/test-compose.sh [--prebuilt]
#   --prebuilt  put the host's build/services/mnemo and mnemo-trainer in the
#               images instead of
#               compiling inside it (what CI runs: same Debian, same
#               libraries; the full build takes about 10 more minutes)
# Skips (exit 0, with a message) where podman or podman-compose is missing.
# Needs root (debootstrap for the base image) or an existing debian:bookworm.
set -euo pipefail
cd "$(dirname "$0")/.."
PREBUILT=0
[ "${1:-}" = --prebuilt ] && PREBUILT=1
for tool in podman podman-compose; do
  if ! command -v "$tool" >/dev/null; then
    echo "test-compose: SKIPPED: $tool is not installed (apt-get install podman podman-compose runc)"
    exit 0
  fi
done
export CONTAINERS_CONF=${CONTAINERS_CONF:-$PWD/deploy/podman/containers.conf}
# Services reach each other by name: CNI networks need the dnsname plugin
# (netavark has aardvark-dns).
if [ "$(podman info --format '{{.Host.NetworkBackend}}' 2>/dev/null)" = cni ] &&
  ! [ -x /usr/lib/cni/dnsname ]; then
  echo "test-compose: podman's CNI networks have no DNS here: apt-get install golang-github-containernetworking-plugin-dnsname" >&2
  exit 1
fi
START=$(date +%s)
PROJECT=mnemo-test-$$
RUNS=$(mktemp -d /var/tmp/mnemo-compose.XXXXXX)
chmod 0777 "$RUNS"  # the containers run as uid 10001
COMPOSE=(podman-compose -p "$PROJECT" -f deploy/compose.yaml)
export MNEMO_RUNS=$RUNS MNEMO_DATASETS=${MNEMO_DATASETS:-$(cd .. && pwd)/shared/data}
log() { echo "test-compose: $* ($(($(date +%s) - START)) s)" >&2; }
# Untagged images of earlier builds (a replaced mnemo:latest, the build
# stage: 3 to 7 GB each) are removed before and after building, and when the
# script ends; only those our Dockerfiles labelled, never other images.
prune_ours() {
  podman image prune -f --filter label=io.mnemo.image >/dev/null 2>&1 || true
}
cleanup() {
  local rc=$?
  if [ $rc != 0 ]; then
    log "FAILED; container logs:"
    for c in $(podman ps -a --filter "label=io.podman.compose.project=$PROJECT" --format '{{.Names}}'); do
      echo "--- $c" >&2
      podman logs --tail 15 "$c" >&2 2>&1 || true
    done
  fi
  "${COMPOSE[@]}" down -v >/dev/null 2>&1 || true
  podman network rm "${PROJECT}_default" >/dev/null 2>&1 || true
  rm -rf "$RUNS" prebuilt
  prune_ours
  exit $rc
}
trap cleanup EXIT

prune_ours
# The build needs about three copies of the 3 GB of runtime libraries at
# once (prebuilt/, the build stage, the image); say so rather than fail in
# the middle of a layer.
STORE=$(podman info --format '{{.Store.GraphRoot}}' 2>/dev/null || echo /var/lib/containers)
mkdir -p "$STORE"
FREE_GB=$(($(df -Pk "$STORE" | awk 'NR == 2 {print $4}') / 1048576))
NEED_GB=${MNEMO_COMPOSE_NEED_GB:-12}
if [ "$FREE_GB" -lt "$NEED_GB" ]; then
  echo "test-compose: $FREE_GB GB free under $STORE (podman's storage), the image build needs $NEED_GB GB; free space (podman image prune, podman system df) and run it again" >&2
  exit 1
fi
deploy/base-image.sh
if [ $PREBUILT = 1 ]; then
  [ -x build/services/mnemo-trainer ] || scripts/build mnemo
  rm -rf prebuilt
  mkdir -p prebuilt
  objcopy --strip-unneeded build/services/mnemo prebuilt/mnemo
  objcopy --strip-unneeded build/services/mnemo-trainer prebuilt/mnemo-trainer
  scripts/runtime-libs build/services/mnemo-trainer prebuilt/lib --gpu
fi
# The memory stores and the coordinator run the service image (no
# LibTorch), the trainers the full one; both from one build stage.
log "building mnemo-service:latest and mnemo:latest"
podman build -q --format docker -f deploy/Dockerfile --target service \
  -t mnemo-service:latest . >/dev/null
podman build -q --format docker -f deploy/Dockerfile -t mnemo:latest . >/dev/null
rm -rf prebuilt
prune_ours
podman build -q --format docker -f deploy/prometheus/Dockerfile \
  -t mnemo-prometheus:latest deploy/prometheus >/dev/null
for image in mnemo-service mnemo; do
  SIZE=$(podman image inspect $image:latest --format '{{.Size}}')
  log "image $image:latest: $((SIZE / 1000000)) MB"
done
# The service image carries no LibTorch, and its mnemo loads none.
if podman run --rm --entrypoint sh mnemo-service:latest -c \
  'ls /usr/local/lib/mnemo 2>/dev/null; ldd /usr/local/bin/mnemo' | grep -q torch; then
  echo "test-compose: mnemo-service:latest carries LibTorch" >&2
  exit 1
fi

log "compose up"
"${COMPOSE[@]}" up -d >/dev/null 2>&1
ctr() { echo "${PROJECT}_$1_1"; }
wait_healthy() {  # podman-compose ignores depends_on conditions
  local name=$1 addr=$2
  for _ in $(seq 1 120); do
    if podman exec "$(ctr "$name")" mnemo healthcheck "$addr" >/dev/null 2>&1; then
      return 0
    fi
    sleep 1
  done
  echo "test-compose: $name never became healthy" >&2
  return 1
}
wait_healthy memstore-0 127.0.0.1:7000
wait_healthy memstore-1 127.0.0.1:7000
log "memstores healthy"

log "waiting for the training job"
for t in trainer-0 trainer-1 coordinator; do
  rc=$(timeout 900 podman wait "$(ctr $t)")
  [ "$rc" = 0 ] || { echo "test-compose: $t exited with $rc" >&2; exit 1; }
done
log "trainers and coordinator exited 0"
SUMMARY=$RUNS/job/summary.json
[ -f "$SUMMARY" ] || { echo "test-compose: no $SUMMARY" >&2; exit 1; }
python3 - "$SUMMARY" <<'PY'
import json, math, sys
s = json.load(open(sys.argv[1]))
assert s["workers"] == 2 and s["dataset"] == "collegemsg", (s["workers"], s["dataset"])
ap = s["test"]["ap"]
assert math.isfinite(ap) and 0.5 < ap <= 1, ap
print(f"test-compose: summary.json: 2 workers, test AP {ap:.4f}")
PY

# The trained model served (mnemo serve waited for the job's checkpoint):
# healthy, and its replay of the test period gives the job's test AP.
wait_healthy serve 127.0.0.1:50061
log "serve healthy"
python3 - "$SUMMARY" "$(podman logs "$(ctr serve)" 2>&1)" <<'PY'
import json, re, sys
want = json.load(open(sys.argv[1]))["test"]
m = re.search(r"test period replayed \(([0-9]+) events.*AP ([0-9.]+)", sys.argv[2])
assert m, sys.argv[2]
assert int(m[1]) == want["events"], (m[1], want["events"])
assert abs(float(m[2]) - want["ap"]) < 1e-6, (m[2], want["ap"])
print(f"test-compose: mnemo serve replayed the test period: AP {float(m[2]):.6f}, "
      f"the job's {want['ap']:.6f}")
PY

# The job's memory followed (serve-live, --follow on the job's shards):
# healthy once the job's first checkpoint was there, reading the epoch the
# job's stored memory is in.
wait_healthy serve-live 127.0.0.1:50062
log "serve-live healthy"
python3 - "$(podman logs "$(ctr serve-live)" 2>&1)" <<'PY'
import re, sys
m = re.search(r"following the job's memory \(epoch ([0-9]+), ([0-9]+) events applied", sys.argv[1])
assert m, sys.argv[1]
assert int(m[1]) >= 1 and int(m[2]) > 0, m.group(0)
print(f"test-compose: mnemo serve --follow reads the job's memory: epoch {m[1]}, "
      f"{m[2]} events applied")
PY

# A node's memory by its original id, from outside the containers (the
# shards' published ports), with the host's mnemo or the image's.
NODE=$(awk -F, 'NR == 2 {print $2}' "$RUNS/job/id_map.csv")
QUERY=(--memstore 127.0.0.1:17000,127.0.0.1:17001 --node "$NODE" --json)
if [ -x build/services/mnemo ]; then
  OUT=$(build/services/mnemo query "${QUERY[@]}")
else
  OUT=$(podman run --rm --network host mnemo-service:latest query "${QUERY[@]}")
fi
python3 - "$OUT" "$NODE" <<'PY'
import json, sys
q = json.loads(sys.argv[1])
state = q if "memory" in q else q.get("nodes", [q])[0]
assert state["dim"] == 303 and len(state["memory"]) == 303, state["dim"]
assert state["version"] > 0 and state["updates"] > 0, state
print(f"test-compose: mnemo query --node {sys.argv[2]}: version {state['version']}, "
      f"{state['updates']} updates, {state['tier']}")
PY

# Prometheus (the real server in the stack): every target was up, and every
# metric the dashboard queries was scraped.
sleep 3
python3 - <<'PY'
import json, sys, urllib.parse, urllib.request
sys.path.insert(0, "tests/deploy")
from deploy_test import dashboard_metrics
def query(q):
    url = "http://127.0.0.1:19090/api/v1/query?" + urllib.parse.urlencode({"query": q})
    return json.load(urllib.request.urlopen(url, timeout=10))["data"]["result"]
up = {r["metric"]["instance"]: float(r["value"][1])
      for r in query("max_over_time(up[15m])")}
want = {"memstore-0:9100", "memstore-1:9100", "coordinator:9100",
        "trainer-0:9100", "trainer-1:9100", "serve:9100", "serve-live:9100"}
missing = [t for t in sorted(want) if up.get(t) != 1.0]
assert not missing, f"targets never up: {missing} (seen {up})"
print(f"test-compose: Prometheus scraped all {len(want)} services (up == 1)")
names = dashboard_metrics()
absent = [n for n in sorted(names)
          if not query(f'count(max_over_time({{__name__=~"{n}(_bucket)?"}}[15m]))')]
assert not absent, f"dashboard metrics never scraped: {absent}"
print(f"test-compose: all {len(names)} dashboard metrics were scraped")
PY
log "passed"
