#!/usr/bin/env bash
# Builds, here, everything the GPU check needs for the H200 (Release, CUDA on,
# sm_90) and bundles the binaries with their Debian libraries into
# gpu-bundle.tar.xz (git-ignored; OpenBLAS alone is 35 MB uncompressed and
# the device tool carries 64 MiB), to be carried to the GPU machine and
# unpacked there by scripts/gpu-check.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
export BUILD_DIR=${BUILD_DIR:-build-gpu}
COALESCE_CUDA=ON TARGETS="${TARGETS:-coalesce-bench cuda_conformance_test coalesce-server coalesce-cli}" \
  scripts/build.sh
rm -rf gpu-bundle gpu-bundle.tar.xz
bins=()
for b in bench/coalesce-bench kernels/cuda/cuda_conformance_test \
         server/coalesce-server client/coalesce; do
  [ -x "$BUILD_DIR/$b" ] && bins+=("$BUILD_DIR/$b")
done
../shared/gpu/bundle-libs.sh gpu-bundle "${bins[@]}"
tar -cJf gpu-bundle.tar.xz gpu-bundle
rm -rf gpu-bundle
ls -l gpu-bundle.tar.xz
