#!/usr/bin/env bash
# Builds, here, everything the GPU check needs for the H200 (Release, CUDA on,
# sm_90) and bundles the binaries with their Debian libraries
# (scripts/bundle-libs.sh) into gpu-bundle.tar.xz (git-ignored; OpenBLAS
# alone is 35 MB uncompressed, so the archive is xz-compressed), to be
# carried to the GPU machine and unpacked there by scripts/gpu-check.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
export BUILD_DIR=${BUILD_DIR:-build-gpu}
COALESCE_CUDA=ON TARGETS="${TARGETS:-coalesce-bench cuda_conformance_test stacked_test profile_sampling_gpu_test gpu_data_plane_test coalesce-server coalesce-cli coalesce-kernel-gap abuse_test tls_test}" \
  scripts/build.sh
rm -rf gpu-bundle gpu-bundle.tar.xz
# Each binary is found by name anywhere in the build tree, so the bundle
# does not depend on where the build places it.
bins=()
for name in coalesce-bench coalesce-kernel-gap cuda_conformance_test stacked_test \
            profile_sampling_gpu_test gpu_data_plane_test coalesce-server \
            coalesce abuse_test tls_test; do
  path=$(find "$BUILD_DIR" -type f -name "$name" -perm -u+x -not -path '*/CMakeFiles/*' -print -quit)
  if [ -n "$path" ]; then
    bins+=("$path")
  else
    echo "gpu-bundle: $name not built, left out" >&2
  fi
done
# EXTRA_BINS: more executables to carry, by path (a baseline build's server
# to compare with, say, renamed so that its name is its own).
for extra in ${EXTRA_BINS:-}; do bins+=("$extra"); done
# The TLS tests make their certificates with the openssl command.
if command -v openssl >/dev/null; then bins+=("$(command -v openssl)"); fi
scripts/bundle-libs.sh gpu-bundle "${bins[@]}"
# --profile_sampling loads CUPTI with dlopen (ldd, which bundle-libs.sh
# follows, does not list it) and CUPTI loads libnvperf_host/_target itself.
# The build's own copies go along, as one release, from the directory where
# the build found libcupti; lib/ comes first on the run line's
# LD_LIBRARY_PATH, so they are the ones loaded.
cupti=$(sed -n 's/^COALESCE_CUPTI_LIBRARY:FILEPATH=//p' "$BUILD_DIR/CMakeCache.txt")
case "$cupti" in
  ""|*NOTFOUND) echo "no CUPTI in this build: the bundle samples nothing" >&2 ;;
  *)
    cuda_lib=$(dirname "$(readlink -f "$cupti")")
    for lib in libcupti.so.13 libnvperf_host.so libnvperf_target.so; do
      cp -L "$cuda_lib/$lib" gpu-bundle/lib/
    done ;;
esac
tar -cJf gpu-bundle.tar.xz gpu-bundle
rm -rf gpu-bundle
ls -l gpu-bundle.tar.xz
