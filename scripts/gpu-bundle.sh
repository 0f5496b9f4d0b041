#!/usr/bin/env bash
# Builds, here, everything the GPU check needs for the H200 (Release, CUDA on,
# sm_90) and bundles the binaries with their Debian libraries into
# gpu-bundle/ (git-ignored), to be carried to the GPU machine.
set -euo pipefail
cd "$(dirname "$0")/.."
export BUILD_DIR=${BUILD_DIR:-build-gpu}
COALESCE_CUDA=ON TARGETS="coalesce-bench cuda_conformance_test coalesce-server coalesce-cli" \
  scripts/build.sh
rm -rf gpu-bundle
../shared/gpu/bundle-libs.sh gpu-bundle \
  "$BUILD_DIR/bench/coalesce-bench" \
  "$BUILD_DIR/kernels/cuda/cuda_conformance_test" \
  "$BUILD_DIR/server/coalesce-server" \
  "$BUILD_DIR/client/coalesce"
