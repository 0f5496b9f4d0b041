#!/usr/bin/env bash
# Checks the deployment files without a cluster or an engine (under a
# minute once its tools are installed):
#   - deploy/docker-compose.yml, alone and with the GPU override, through
#     `docker-compose config` (Debian 12's Compose);
#   - every kustomization under deploy/k8s rendered with `kubectl kustomize`
#     (Debian 12's kubernetes-client where no kubectl is installed) and
#     validated with kubernetes-validate (strict, Kubernetes 1.27 and 1.37)
#     and, for the ServiceMonitor, deploy/k8s/schemas/servicemonitor.json;
#   - a deliberately broken copy must fail, so that the check can fail.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
log() { echo "[deploy-check] $*"; }

need=()
command -v docker-compose >/dev/null || need+=(docker-compose)
command -v kubectl >/dev/null || need+=(kubernetes-client)
if [ ${#need[@]} -gt 0 ]; then
  log "installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

for files in "deploy/docker-compose.yml" \
             "deploy/docker-compose.yml deploy/docker-compose.gpu.yml"; do
  args=()
  for f in $files; do args+=(-f "$f"); done
  docker-compose "${args[@]}" config -q
  log "compose: $files valid"
done

venv="$build/deploy-venv"
if [ ! -x "$venv/bin/kubernetes-validate" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q kubernetes-validate==1.37.0
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
rendered=()
for dir in deploy/k8s/overlays/* deploy/k8s/prometheus-adapter; do
  name=$(basename "$dir")
  # kubectl prints kustomize's deprecation notes on stderr: the files use
  # the fields that kubectl 1.20 (Debian 12) also reads.
  kubectl kustomize "$dir" >"$out/$name.yaml" 2>"$out/$name.err" ||
    { cat "$out/$name.err"; exit 1; }
  rendered+=("$out/$name.yaml")
done
"$venv/bin/python" scripts/k8s_validate.py "${rendered[@]}"

# The check must be able to fail: a wrong type in a built-in kind and an
# unknown field in the ServiceMonitor.
sed -e 's/^  replicas: 2$/  replicas: two/' -e 's/^      interval: 15s$/      intervl: 15s/' \
  "$out/cpu.yaml" >"$out/broken.yaml"
if "$venv/bin/python" scripts/k8s_validate.py "$out/broken.yaml" >"$out/broken.txt"; then
  log "FAIL: a broken manifest passed validation"; exit 1
fi
[ "$(grep -c '^INVALID' "$out/broken.txt")" -ge 2 ] ||
  { cat "$out/broken.txt"; log "FAIL: not every break was caught"; exit 1; }
log "passed: ${#rendered[@]} kustomizations rendered and valid"
