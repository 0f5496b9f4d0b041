# shellcheck shell=bash
# Sourced by the scripts that run on the GPU machine (gpu-check.sh,
# metrics-vs-ncu.sh), from the repo root with gpu-bundle.tar.xz carried and
# $out set: unpacks the bundle once, puts its libraries on the path, sets
# $bin, and defines serve.
: "${out:?set out before sourcing gpu-env.sh}"
[ -d gpu-bundle ] || tar -xJf gpu-bundle.tar.xz
export LD_LIBRARY_PATH=$PWD/gpu-bundle/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
bin=gpu-bundle/bin

# Starts a server on free loopback ports with extra flags ("$@"); sets
# $port (empty if it did not come up within 120 s) and $server_pid. With
# the array serve_wrap set (an ncu command line), the server runs under it
# and $server_pid is the wrapper's.
serve_wrap=()
serve() {
  : >"$out/server.out"
  ${serve_wrap[@]+"${serve_wrap[@]}"} "$bin/coalesce-server" --listen=127.0.0.1:0 --metrics_listen=127.0.0.1:0 "$@" \
    >"$out/server.out" 2>>"$out/server.log" &
  # shellcheck disable=SC2034  # read by the scripts that source this
  server_pid=$!
  port=
  for _ in $(seq 1 600); do
    port=$(sed -n 's/.*listening on [^ ]*:\([0-9]*\).*/\1/p' "$out/server.out")
    [ -n "$port" ] && break
    sleep 0.2
  done
}
