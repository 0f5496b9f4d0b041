#!/usr/bin/env bash
# README command 1: install what is missing, build, start coalesce-server
# (the CUDA backend where a GPU is visible, else the CPU backend), run a
# short demo of every op against it, then keep serving until Ctrl-C.
#   LISTEN (default 127.0.0.1:50051), DEMO_ONLY=1 stops after the demo.
set -euo pipefail
cd "$(dirname "$0")/.."
# OpenMP workers sleep when idle instead of spinning: the server and the
# tests share the cores with other work.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
scripts/install-deps.sh
TARGETS="coalesce-server coalesce-cli" scripts/build.sh
build=${BUILD_DIR:-build}
# The binaries, found by name wherever the build tree places them.
find_bin() {
  find "$build" -type f -name "$1" -perm -u+x -not -path '*/CMakeFiles/*' -print -quit
}
server_bin=$(find_bin coalesce-server)
cli_bin=$(find_bin coalesce)
if [ -z "$server_bin" ] || [ -z "$cli_bin" ]; then
  echo "coalesce-server or coalesce not found in $build" >&2
  exit 1
fi
listen=${LISTEN:-127.0.0.1:50051}
# On a GPU machine, the shipped selection tables: the one measured on a
# device of this model loads (none: a warning, and the heuristic chooses).
table=()
if nvidia-smi -L >/dev/null 2>&1; then
  table=(--tuning_table=deploy/tuning)
fi
"$server_bin" --listen="$listen" "${table[@]}" &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null' EXIT
cli() { "$cli_bin" --server="$listen" "$@"; }
for _ in $(seq 1 100); do
  cli health >/dev/null 2>&1 && break
  kill -0 $server 2>/dev/null || { echo "server exited"; exit 1; }
  sleep 0.1
done
set -x
cli health
cli info
cli transpose --shape=4096,4096 --report
cli gemm --m=1024 --n=1024 --k=1024 --report
cli layout --shape=8,64,56,56 --from=NCHW --to=NHWC --report
cli layout --shape=1048576,4 --aos_fields=4 --direction=aos_to_soa --report
cli gelu-ln --shape=4096,1024 --return_pre_norm --report
set +x
if [ -n "${DEMO_ONLY:-}" ]; then exit 0; fi
echo "coalesce-server is serving on $listen; Ctrl-C to stop."
wait $server
