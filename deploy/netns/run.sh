#!/usr/bin/env bash
# Runs a mnemo cluster job inside an emulated network on this machine: one
# Linux network namespace per process (coordinator, each memstore shard, each
# trainer), each joined by a veth pair to a bridge in a private "switch"
# namespace, with kernel traffic shaping (tbf) on every link in both
# directions. netem delay is added only where the kernel has it (it does not
# on the machines this project is built on). Traffic stays between these
# namespaces; everything is removed on exit, whatever happens.
#
# Usage: deploy/netns/run.sh [--workers N] [--rate 1gbit] [--delay 0ms]
#          [--pin] [--mnemo PATH] [--tag NAME] -- <mnemo train flags, e.g.
#          --data collegemsg --policy vanilla --out runs/x>
# --pin: trainer r runs on CPU r with one intra-op thread (when there are at
# least as many CPUs as workers; otherwise each trainer gets --threads 1
# unpinned and the script says so).
# With STATS_FILE=path, writes "host bytes_sent" lines (tc counters of every
# shaped link) there at the end.
# Prints "netns: shaping=tbf rate=... delay=... (netem: yes|no)" first.
# Needs root (ip netns, tc).
set -euo pipefail

WORKERS=2
RATE=1gbit
DELAY=0ms
MNEMO=${MNEMO:-$(cd "$(dirname "$0")/../.." && pwd)/build/services/mnemo}
TAG=m$$
PIN=no
while [ $# -gt 0 ]; do
  case "$1" in
    --pin) PIN=yes; shift ;;
    --workers) WORKERS=$2; shift 2 ;;
    --rate) RATE=$2; shift 2 ;;
    --delay) DELAY=$2; shift 2 ;;
    --mnemo) MNEMO=$2; shift 2 ;;
    --tag) TAG=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "netns: unknown option $1" >&2; exit 2 ;;
  esac
done
TRAIN_ARGS=("$@")
[ -x "$MNEMO" ] || { echo "netns: no mnemo binary at $MNEMO (build first)" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "netns: needs root (ip netns, tc)" >&2; exit 2; }

SW="${TAG}-sw"
NAMESPACES=()
PIDS=()
cleanup() {
  set +e
  if [ -n "${STATS_FILE:-}" ] && [ ${#NAMESPACES[@]} -gt 0 ]; then
    # Bytes each host sent through its shaped link (tc counters).
    for ns in "${NAMESPACES[@]}"; do
      sent=$(ip netns exec "$ns" tc -s qdisc show dev eth0 2>/dev/null | sed -n 's/.*Sent \([0-9]*\) bytes.*/\1/p' | head -n1)
      echo "${ns#${TAG}-} ${sent:-0}"
    done > "$STATS_FILE"
  fi
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null; done
  for _ in $(seq 100); do
    alive=0
    for p in "${PIDS[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ $alive = 0 ] && break
    sleep 0.1
  done
  for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null; done
  for ns in "${NAMESPACES[@]}"; do ip netns del "$ns" 2>/dev/null; done
  ip netns del "$SW" 2>/dev/null
}
trap cleanup EXIT INT TERM

ip netns add "$SW"
ip -n "$SW" link add br0 type bridge
ip -n "$SW" link set br0 up
ip -n "$SW" link set lo up

NETEM=no
probe_netem() {
  if ip netns exec "$SW" tc qdisc add dev lo root netem delay 1ms 2>/dev/null; then
    ip netns exec "$SW" tc qdisc del dev lo root 2>/dev/null
    NETEM=yes
  fi
}
probe_netem

shape() {  # shape NS DEV
  local ns=$1 dev=$2
  if [ "$NETEM" = yes ] && [ "$DELAY" != 0ms ]; then
    ip netns exec "$ns" tc qdisc add dev "$dev" root handle 1: netem delay "$DELAY"
    ip netns exec "$ns" tc qdisc add dev "$dev" parent 1: handle 2: tbf rate "$RATE" burst 256kb latency 50ms
  else
    ip netns exec "$ns" tc qdisc add dev "$dev" root tbf rate "$RATE" burst 256kb latency 50ms
  fi
}

N=0
add_host() {  # add_host NAME -> sets HOST_NS, HOST_IP
  N=$((N + 1))
  local ns="${TAG}-$1"
  local ip="10.213.$((N / 250)).$((N % 250 + 2))"
  ip netns add "$ns"
  NAMESPACES+=("$ns")
  ip link add "h$N$TAG" type veth peer name "s$N$TAG"
  ip link set "h$N$TAG" netns "$ns"
  ip link set "s$N$TAG" netns "$SW"
  ip -n "$ns" link set "h$N$TAG" name eth0
  ip -n "$ns" addr add "$ip/16" dev eth0
  ip -n "$ns" link set eth0 up
  ip -n "$ns" link set lo up
  ip -n "$SW" link set "s$N$TAG" master br0
  ip -n "$SW" link set "s$N$TAG" up
  shape "$ns" eth0
  shape "$SW" "s$N$TAG"
  HOST_NS=$ns
  HOST_IP=$ip
}

echo "netns: shaping=tbf rate=$RATE delay=$DELAY (netem: $NETEM$([ "$NETEM" = no ] && [ "$DELAY" != 0ms ] && echo ', delay NOT applied'))" >&2

# Record width for the memstores: memory + mail (2 memory + edge features) + 3.
MEM=100
for ((i = 0; i < ${#TRAIN_ARGS[@]}; i++)); do
  [ "${TRAIN_ARGS[$i]}" = --memory-dim ] && MEM=${TRAIN_ARGS[$((i + 1))]}
done
EDGE=0
for ((i = 0; i < ${#TRAIN_ARGS[@]}; i++)); do
  if [ "${TRAIN_ARGS[$i]}" = --data ]; then
    EDGE=$("$MNEMO" data --json "${TRAIN_ARGS[$((i + 1))]}" | sed -n 's/.*"edge_feature_dim": \([0-9]*\).*/\1/p' | head -n1)
  fi
done
DIM=$((3 * MEM + ${EDGE:-0} + 3))
POLICY=vanilla
TAU_GRAD=1.6
for ((i = 0; i < ${#TRAIN_ARGS[@]}; i++)); do
  [ "${TRAIN_ARGS[$i]}" = --policy ] && POLICY=${TRAIN_ARGS[$((i + 1))]}
  [ "${TRAIN_ARGS[$i]}" = --tau-grad ] && TAU_GRAD=${TRAIN_ARGS[$((i + 1))]}
done
NPROC=$(nproc)
if [ "$PIN" = yes ] && [ "$NPROC" -lt "$WORKERS" ]; then
  echo "netns: $WORKERS trainers on $NPROC CPUs: not pinned (one thread each)" >&2
fi

WORK=$(mktemp -d)
NAMESPACES_WORK=$WORK
trap 'cleanup; rm -rf "$NAMESPACES_WORK"' EXIT INT TERM

MS_ADDRS=()
for ((i = 0; i < WORKERS; i++)); do
  add_host "ms$i"
  MS_ADDRS+=("$HOST_IP:7000")
  ip netns exec "$HOST_NS" "$MNEMO" memstore --listen "$HOST_IP:7000" \
    --data-dir "$WORK/ms$i" --dim "$DIM" --shard-id "$i" --num-shards "$WORKERS" \
    --write-policy write-back --max-message-bytes 67108864 \
    > >(sed "s/^/[memstore $i] /" >&2) 2>&1 &
  PIDS+=($!)
done
add_host coord
COORD_IP=$HOST_IP
ip netns exec "$HOST_NS" "$MNEMO" coordinator --listen "$COORD_IP:29501" \
  --world-size "$WORKERS" \
  --memstores "$(IFS=,; echo "${MS_ADDRS[*]}")" --policy "$POLICY" \
  --tau-grad "$TAU_GRAD" \
  > >(sed "s/^/[coordinator] /" >&2) 2>&1 &
COORD_PID=$!
PIDS+=($COORD_PID)
for a in "${MS_ADDRS[@]}"; do
  for _ in $(seq 100); do
    ip netns exec "$HOST_NS" "$MNEMO" healthcheck "$a" >/dev/null 2>&1 && break
    sleep 0.1
  done
done
TRAINER_PIDS=()
for ((r = 0; r < WORKERS; r++)); do
  add_host "tr$r"
  PIN_ARGS=()
  if [ "$PIN" = yes ]; then
    PIN_ARGS=(--threads 1)
    [ "$NPROC" -ge "$WORKERS" ] && PIN_ARGS+=(--cpus "$r")
  fi
  ip netns exec "$HOST_NS" env MASTER_ADDR="$COORD_IP" MASTER_PORT=29500 \
    RANK=$r WORLD_SIZE="$WORKERS" "$MNEMO" trainer "${TRAIN_ARGS[@]}" \
    "${PIN_ARGS[@]}" --bind-host "$HOST_IP" --progress lines \
    > >(sed "s/^/[trainer $r] /") 2>&1 &
  TRAINER_PIDS+=($!)
  PIDS+=($!)
done
RC=0
for p in "${TRAINER_PIDS[@]}"; do
  wait "$p" || RC=$?
done
if [ "$RC" -ne 0 ]; then
  # A trainer that failed before it joined (a bad flag) leaves the
  # coordinator waiting for it: stop it and the stores (the exit trap).
  echo "netns: a trainer failed (exit $RC)" >&2
  exit "$RC"
fi
wait "$COORD_PID" || RC=$?
exit "$RC"
