#!/usr/bin/env bash
# Makes the debian:bookworm base image locally where no container registry
# is reachable: debootstrap (minbase) from the Debian mirror apt already
# uses, imported into podman (or docker) as debian:bookworm.
#
# Usage: deploy/base-image.sh [--engine podman|docker] [--mirror URL]
# Needs root (debootstrap) and about 200 MB of disk. Skips the work when
# the image exists (--force rebuilds it).
set -euo pipefail
ENGINE=${ENGINE:-podman}
MIRROR=${MIRROR:-}
FORCE=0
while [ $# -gt 0 ]; do
  case "$1" in
    --engine) ENGINE=$2; shift 2 ;;
    --mirror) MIRROR=$2; shift 2 ;;
    --force) FORCE=1; shift ;;
    *) echo "usage: deploy/base-image.sh [--engine podman|docker] [--mirror URL] [--force]" >&2; exit 2 ;;
  esac
done
if [ "$FORCE" = 0 ] && $ENGINE image exists debian:bookworm 2>/dev/null; then
  echo "base-image: debian:bookworm exists ($ENGINE)"
  exit 0
fi
if [ -z "$MIRROR" ]; then
  # The mirror this machine's apt uses (deb822 or one-line sources).
  MIRROR=$(cat /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null |
    sed -nE 's/^(URIs:|deb)[[:space:]]+(\[[^]]*\][[:space:]]+)?(https?:[^[:space:]]+).*/\3/p' |
    grep -v security | head -n1 || true)
  MIRROR=${MIRROR:-http://deb.debian.org/debian}
fi
command -v debootstrap >/dev/null || {
  echo "base-image: needs debootstrap (apt-get install debootstrap)" >&2
  exit 1
}
DIR=$(mktemp -d /var/tmp/mnemo-rootfs.XXXXXX)
trap 'rm -rf "$DIR"' EXIT
echo "base-image: debootstrap bookworm from $MIRROR" >&2
debootstrap --variant=minbase bookworm "$DIR" "$MIRROR" >/dev/null
# The same sources inside, with security updates.
cat > "$DIR/etc/apt/sources.list" <<SRC
deb $MIRROR bookworm main
deb $MIRROR bookworm-updates main
deb ${MIRROR%/debian*}/debian-security bookworm-security main
SRC
rm -rf "$DIR"/var/cache/apt/archives/*.deb "$DIR"/var/lib/apt/lists/*
tar -C "$DIR" -c . | $ENGINE import - debian:bookworm >/dev/null
echo "base-image: debian:bookworm imported into $ENGINE"
