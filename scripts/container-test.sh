#!/usr/bin/env bash
# Builds the CPU image from the repository's Dockerfile and smoke-tests it:
# the server runs as non-root on a read-only root filesystem with no
# capabilities, the image's HEALTHCHECK turns healthy, every op and `info`
# answer through the host's `coalesce` CLI, `coalesce health` answers inside
# the container, /metrics scrapes, and every library the server can load
# dlopens inside the image. Prints the image's size above its base.
#
# No image registry is assumed: the base image is Debian 12 made here with
# debootstrap --variant=minbase and docker import (about 2 minutes, once:
# kept while the Docker daemon keeps its images). Every build and container
# uses the host network, and the tests talk to 127.0.0.1 only.
#
#   CONTAINER_BUILD=prebuilt (default): package the binaries of BUILD_DIR
#     (default build, built by scripts/build.sh on this Debian 12 host) with
#     the Dockerfile's BINARIES=prebuilt path. Where BUILD_DIR holds the
#     CUDA backend (nvcc was found), the server and CLI are first built
#     without it into BUILD_DIR-cpu-image, as the Dockerfile's CPU build
#     does: the CPU image has no cuBLASLt or CUPTI to load. Measured on CI's machine
#     kind (2 cores): 128 s with a new base image (74 s of it debootstrap),
#     66 s with a kept one; installing docker.io and debootstrap first, when
#     missing, adds what apt takes.
#   CONTAINER_BUILD=source: the Dockerfile's from-source build stage, as a
#     user builds it (a full build inside the image: tens of minutes on 2
#     cores; docs/DEPLOY.md has the measured time).
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
mode=${CONTAINER_BUILD:-prebuilt}
build=${BUILD_DIR:-build}
base=coalesce-base:bookworm
image=coalesce-server:ci
name=coalesce-ci-$$
log() { echo "[container-test] $*"; }

# The engine, BuildKit and base-image tools, from Debian.
need=()
for p in docker.io debootstrap; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" ||
    need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  log "installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
# Debian's client: BuildKit is built into it (a newer client elsewhere on
# PATH may want the buildx plugin, which Debian 12 does not ship).
docker=/usr/bin/docker
export DOCKER_BUILDKIT=1

dockerd_pid=""
workdir=$(mktemp -d)
cleanup() {
  $docker rm -f "$name" >/dev/null 2>&1 || true
  rm -rf .prebuilt "$workdir"
  if [ -n "$dockerd_pid" ]; then
    kill "$dockerd_pid" 2>/dev/null || true
    wait "$dockerd_pid" 2>/dev/null || true
  fi
}
trap cleanup EXIT
# timeout(1) sends TERM: exit through the EXIT trap, which cleans up.
trap 'exit 143' TERM INT
if ! $docker info >/dev/null 2>&1; then
  log "starting dockerd"
  dockerd >"$workdir/dockerd.log" 2>&1 &
  dockerd_pid=$!
  for _ in $(seq 60); do
    $docker info >/dev/null 2>&1 && break
    sleep 1
  done
  $docker info >/dev/null 2>&1 || { cat "$workdir/dockerd.log"; exit 1; }
fi

if ! $docker image inspect "$base" >/dev/null 2>&1; then
  log "making $base with debootstrap"
  t=$SECONDS
  rootfs="$workdir/rootfs"
  debootstrap --variant=minbase bookworm "$rootfs" \
    http://deb.debian.org/debian >"$workdir/debootstrap.log" 2>&1 ||
    { tail -20 "$workdir/debootstrap.log"; exit 1; }
  # The same suites as a Debian 12 host, so that the runtime packages found
  # on the host (prebuilt) have the same versions in the image.
  cat >"$rootfs/etc/apt/sources.list" <<'EOF'
deb http://deb.debian.org/debian bookworm main
deb http://deb.debian.org/debian bookworm-updates main
deb http://deb.debian.org/debian-security bookworm-security main
EOF
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
  tar -C "$rootfs" -c . | $docker import - "$base" >/dev/null
  rm -rf "$rootfs"
  log "base image: $((SECONDS - t)) s"
fi

args=(--network host
      --build-arg BUILD_IMAGE="$base" --build-arg RUNTIME_IMAGE="$base"
      --build-arg GIT_SHA="$(git rev-parse HEAD 2>/dev/null || echo unknown)")
if [ "$mode" = prebuilt ]; then
  if grep -q '^COALESCE_BUILT_WITH_CUDA:INTERNAL=ON' "$build/CMakeCache.txt" \
       2>/dev/null; then
    log "$build has the CUDA backend: building the CPU-only server in $build-cpu-image"
    t=$SECONDS
    COALESCE_CUDA=OFF BUILD_DIR="$build-cpu-image" \
      TARGETS="coalesce-server coalesce-cli" scripts/build.sh >"$workdir/cpu-build.log" 2>&1 ||
      { tail -40 "$workdir/cpu-build.log"; exit 1; }
    build=$build-cpu-image
    log "CPU-only build: $((SECONDS - t)) s"
  fi
  for bin in server/coalesce-server client/coalesce; do
    [ -x "$build/$bin" ] || { log "no $build/$bin: run scripts/build.sh"; exit 1; }
  done
  rm -rf .prebuilt
  scripts/image-files.sh "$build" .prebuilt
  args+=(--build-arg BINARIES=prebuilt)
fi
t=$SECONDS
$docker build "${args[@]}" -t "$image" . >"$workdir/build.log" 2>&1 ||
  { tail -40 "$workdir/build.log"; exit 1; }
log "image build ($mode): $((SECONDS - t)) s"
# The check step's output; none when BuildKit reused the step's cache.
checked=$(grep -E "libraries loaded" "$workdir/build.log" | tail -1 || true)
log "at build time: ${checked:-dlopen check cached from an identical build}"

size=$($docker image inspect -f '{{.Size}}' "$image")
base_size=$($docker image inspect -f '{{.Size}}' "$base")
log "image size: $((size / 1000000)) MB, $(((size - base_size) / 1000000)) MB" \
    "above the base ($((base_size / 1000000)) MB)"
[ "$($docker image inspect -f '{{.Config.User}}' "$image")" != "" ] ||
  { log "FAIL: the image names no USER"; exit 1; }
for label in version revision; do
  v=$($docker image inspect \
        -f "{{index .Config.Labels \"org.opencontainers.image.$label\"}}" "$image")
  [ -n "$v" ] || { log "FAIL: no org.opencontainers.image.$label label"; exit 1; }
done

# Two free loopback ports (the host network is shared with other work).
read -r port mport < <(python3 -c '
import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(*(x.getsockname()[1] for x in s))')
# As docs/DEPLOY.md and deploy/k8s run it: read-only root filesystem, no
# capabilities, no privilege gain, a memory-backed /dev/shm.
$docker run -d --name "$name" --network host --read-only \
  --cap-drop ALL --security-opt no-new-privileges --shm-size 64m \
  -e COALESCE_HEALTH_PORT="$port" "$image" \
  --listen="127.0.0.1:$port" --metrics_listen="127.0.0.1:$mport" >/dev/null

fail() {
  log "FAIL: $*"
  $docker logs "$name" 2>&1 | tail -20
  exit 1
}
health=""
for _ in $(seq 90); do
  health=$($docker inspect -f '{{.State.Health.Status}}' "$name")
  [ "$health" = healthy ] && break
  [ "$($docker inspect -f '{{.State.Running}}' "$name")" = true ] ||
    fail "the server exited"
  sleep 1
done
[ "$health" = healthy ] || fail "HEALTHCHECK status is '$health'"
log "HEALTHCHECK: healthy"

uid=$($docker exec "$name" awk '/^Uid:/ {print $2}' /proc/1/status)
[ "$uid" != 0 ] || fail "the server runs as root"
log "server uid: $uid"

cli=("$build/client/coalesce" "--server=127.0.0.1:$port" --timeout_s=60)
run_cli() {
  local out
  out=$("${cli[@]}" "$@" 2>&1) || fail "coalesce $* -> $out"
  printf '%s\n' "$out"
}
info=$(run_cli info)
grep -q "cpu" <<<"$info" || fail "info names no CPU backend: $info"
for op in "transpose --shape=96,80" "gemm --m=64 --n=48 --k=32" \
          "layout --shape=2,3,8,8 --from=NCHW --to=NHWC" \
          "gelu-ln --shape=16,128"; do
  # shellcheck disable=SC2086
  out=$(run_cli $op --report)
  # Here-strings, not pipes: grep -q stopping early fails a pipe (pipefail).
  grep -q "variant" <<<"$out" || fail "coalesce $op: no report: $out"
  log "${op%% *}: $(grep -m1 variant <<<"$out" | tr -s ' ')"
done
inside=$($docker exec "$name" coalesce --server="localhost:$port" health) ||
  fail "coalesce health inside the container: $inside"
[ "$inside" = SERVING ] || fail "health inside: $inside"
log "coalesce health inside: $inside"

metrics=$(curl -fsS "http://127.0.0.1:$mport/metrics") || fail "/metrics"
for family in coalesce_build_info coalesce_requests_total \
              coalesce_device_queue_requests; do
  grep -q "^$family" <<<"$metrics" || fail "/metrics lacks $family"
done
log "/metrics: $(grep -c '^coalesce_' <<<"$metrics") coalesce_ samples"

$docker exec "$name" coalesce-dlopen-check \
  -f /usr/local/share/coalesce/libraries.txt >"$workdir/dlopen.txt" 2>&1 ||
  { cat "$workdir/dlopen.txt"; fail "a library does not load"; }
log "in the image: $(tail -1 "$workdir/dlopen.txt")"

# SIGTERM drains and exits 0 within --shutdown_grace_s (10 s) + 1 s.
t=$SECONDS
$docker stop -t 30 "$name" >/dev/null
code=$($docker inspect -f '{{.State.ExitCode}}' "$name")
[ "$code" = 0 ] || fail "exit status $code after SIGTERM"
log "SIGTERM: exit 0 after $((SECONDS - t)) s"
log "passed in $((SECONDS - start)) s"
