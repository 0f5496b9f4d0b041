#!/usr/bin/env bash
# Installs what Coalesce needs to build and test on Debian 12 (or Ubuntu
# 24.04), and nothing when it is all there already. The CUDA Toolkit is not a
# Debian package: where nvcc is found (/usr/local/cuda/bin), the CUDA backend
# is built too; elsewhere the CPU backend alone.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git ca-certificates
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libopenblas-dev libcivetweb-dev libspdlog-dev
  prometheus-cpp-dev  # the metrics registry (core) and /metrics (pull)
  nlohmann-json3-dev  # the HTTP/REST front end's JSON
  libcurl4-openssl-dev  # its tests' HTTP client
  libgtest-dev libgmock-dev libbenchmark-dev
  python3 python3-numpy python3-venv  # python3-venv: the Python client test
  libb64-0d  # perf_analyzer (the KServe interop test)
  clang-format  # scripts/format.sh --check, run by scripts/test.sh
  prometheus  # promtool and a real Prometheus for the metrics e2e tests
  openssl  # certificates for the TLS end-to-end tests
  clang libclang-rt-14-dev libomp-dev  # libFuzzer targets (scripts/fuzz.sh)
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed"; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi
echo "install-deps: installing ${missing[*]}"
sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
