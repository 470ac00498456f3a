#!/usr/bin/env bash
# Static checks of deploy/: YAML lint, Kubernetes manifests against the API
# schemas (kubernetes-models) and compose.yaml against the compose
# specification (deploy/test/validate.mjs), the Prometheus config with
# promtool. Installs what it needs (Debian: yamllint, prometheus; npm: the
# locked packages of deploy/test). About a minute.
set -euo pipefail
cd "$(dirname "$0")/../.."
missing=()
command -v yamllint >/dev/null || missing+=(yamllint)
command -v promtool >/dev/null || missing+=(prometheus)
command -v node >/dev/null || missing+=(nodejs npm)
if ((${#missing[@]})); then
  SUDO=""
  [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  # Debian's prometheus package starts a server: not wanted here.
  pkill -x prometheus 2>/dev/null || true
fi
yamllint -d '{extends: relaxed, rules: {line-length: {max: 100}}}' \
  deploy/compose.yaml deploy/k8s deploy/prometheus deploy/grafana/provisioning
echo "check: yamllint ok"
promtool check config deploy/prometheus/prometheus.yml
[ -d deploy/test/node_modules ] ||
  npm ci --prefix deploy/test --no-audit --no-fund --silent
node deploy/test/validate.mjs 2>&1 | grep -v '^unknown format' 
python3 -c 'import json,sys; json.load(open("deploy/grafana/mnemo.json"))' &&
  echo "check: deploy/grafana/mnemo.json is JSON"
