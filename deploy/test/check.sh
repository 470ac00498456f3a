#!/usr/bin/env bash
# Static checks of deploy/: YAML lint, Kubernetes manifests against the API
# schemas (kubernetes-validate, strict, the oldest and newest Kubernetes the
# manifests are for; the ServiceMonitor against the Prometheus Operator's
# models) and compose.yaml against the compose specification
# (check-jsonschema's built-in schema, and the duration, port and subnet
# formats: deploy/test/validate.py), the Prometheus config with promtool,
# the Grafana dashboard as JSON. Then the same validator on a copy of
# deploy/ with three errors put in, which must fail (the checks can fail).
#
# Installs what it needs and starts nothing: yamllint and python3-venv from
# Debian (apt), the pinned Python tools of deploy/test/requirements.txt
# into deploy/test/.venv (pip --require-hashes, PyPI), and promtool from
# Debian's prometheus package, unpacked into deploy/test/.tools (the
# package itself is not installed: it would start a Prometheus server).
# About a minute the first time, seconds after.
set -euo pipefail
cd "$(dirname "$0")/../.."
here=deploy/test
SUDO=""
[ "$(id -u)" = 0 ] || SUDO=sudo

apt_missing=()
command -v yamllint >/dev/null || apt_missing+=(yamllint)
if [ ! -x $here/.venv/bin/python ] &&
  ! python3 -c 'import ensurepip, venv' 2>/dev/null; then
  apt_missing+=(python3-venv)
fi
if ((${#apt_missing[@]})); then
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
    --no-install-recommends "${apt_missing[@]}" >/dev/null
fi

# Python tools, pinned by hash; reinstalled when requirements.txt changes.
stamp=$(sha256sum $here/requirements.txt | cut -d' ' -f1)
if [ "$(cat $here/.venv/.requirements 2>/dev/null)" != "$stamp" ]; then
  rm -rf $here/.venv
  python3 -m venv $here/.venv
  $here/.venv/bin/pip install -q --disable-pip-version-check --no-deps \
    --require-hashes -r $here/requirements.txt
  echo "$stamp" >$here/.venv/.requirements
fi

# promtool: the one on PATH, else Debian's, unpacked here.
PROMTOOL=$(command -v promtool || true)
if [ -z "$PROMTOOL" ]; then
  PROMTOOL=$here/.tools/usr/bin/promtool
  if [ ! -x "$PROMTOOL" ]; then
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    if ! (cd "$tmp" && apt-get download prometheus >/dev/null 2>&1); then
      $SUDO apt-get update -qq >/dev/null
      (cd "$tmp" && apt-get download prometheus >/dev/null)
    fi
    rm -rf $here/.tools
    dpkg-deb -x "$tmp"/prometheus_*.deb $here/.tools
  fi
fi

yamllint -d '{extends: relaxed, rules: {line-length: {max: 100}}}' \
  deploy/compose.yaml deploy/k8s deploy/prometheus deploy/grafana/provisioning
echo "check: yamllint ok"
"$PROMTOOL" check config deploy/prometheus/prometheus.yml
$here/.venv/bin/python $here/validate.py deploy
python3 -c 'import json,sys; json.load(open("deploy/grafana/mnemo.json"))' &&
  echo "check: deploy/grafana/mnemo.json is JSON"

# The validator must find errors: a copy with a misspelt field in a
# Kubernetes object and in the ServiceMonitor, a duration that is not, and
# a GPU overlay patch whose path is not in the base.
bad=$(mktemp -d)
trap 'rm -rf "$bad" "${tmp:-}"' EXIT
cp -r deploy/k8s deploy/compose.yaml "$bad/"
sed -i '0,/replicas:/s/replicas:/replicaz:/' "$bad/k8s/memstore.yaml"
sed -i '0,/interval:/s/interval:/intervalz:/' "$bad/k8s/servicemonitor.yaml"
sed -i '0,/interval: 5s/s/interval: 5s/interval: 5 seconds/' "$bad/compose.yaml"
sed -i '0,/resources\/limits/s/resources\/limits/resourcez\/limits/' "$bad/k8s/gpu/kustomization.yaml"
if out=$($here/.venv/bin/python $here/validate.py "$bad" 2>&1); then
  echo "check: FAILED: the validator passed a copy of deploy/ with errors" >&2
  exit 1
fi
for want in "'replicaz' was unexpected" "unknown field .spec.endpoints\[0\].intervalz" \
  "'5 seconds' is not a duration" "gpu/kustomization.yaml patches\[0\]: patch path"; do
  grep -q "$want" <<<"$out" || {
    echo "check: FAILED: the validator did not report: $want" >&2
    echo "$out" >&2
    exit 1
  }
done
echo "check: the validator reports errors put into a copy (4 of 4)"
