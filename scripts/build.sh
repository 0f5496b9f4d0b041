#!/usr/bin/env bash
# Configures and builds Coalesce into build/ (Release, Ninja).
#   COALESCE_CUDA=AUTO|ON|OFF (default AUTO: the CUDA backend whenever nvcc
#   is found), BUILD_DIR (default build), TARGETS (default all).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
if [ -z "${CMAKE_CUDA_COMPILER:-}" ] && ! command -v nvcc >/dev/null &&
   [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCOALESCE_CUDA="${COALESCE_CUDA:-AUTO}" >/dev/null
# shellcheck disable=SC2086
cmake --build "$build" -j "$(nproc)" ${TARGETS:+--target $TARGETS}
