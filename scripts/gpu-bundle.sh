#!/usr/bin/env bash
# Builds, here, everything the GPU check needs for the H200 (Release, CUDA on,
# sm_90) and bundles the binaries with their Debian libraries
# (scripts/bundle-libs.sh) into gpu-bundle.tar.xz (git-ignored; OpenBLAS
# alone is 35 MB uncompressed, so the archive is xz-compressed), to be
# carried to the GPU machine and unpacked there by scripts/gpu-check.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
export BUILD_DIR=${BUILD_DIR:-build-gpu}
COALESCE_CUDA=ON TARGETS="${TARGETS:-coalesce-bench cuda_conformance_test stacked_test kernel_span_gpu_test profile_sampling_gpu_test gpm_reader_gpu_test gpu_data_plane_test coalesce-server coalesce-cli coalesce-kernel-gap coalesce-cublaslt-algos abuse_test tls_test cuda_shm_gpu_test cuda_ipc_exporter}" \
  scripts/build.sh
rm -rf gpu-bundle gpu-bundle.tar.xz
# Each binary is found by name anywhere in the build tree, so the bundle
# does not depend on where the build places it.
bins=()
for name in coalesce-bench coalesce-kernel-gap coalesce-cublaslt-algos \
            cuda_conformance_test stacked_test kernel_span_gpu_test \
            profile_sampling_gpu_test gpm_reader_gpu_test gpu_data_plane_test \
            coalesce-server coalesce abuse_test tls_test cuda_shm_gpu_test \
            cuda_ipc_exporter; do
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
# The kserve step's perf_analyzer, from tritonclient 2.41's wheel (the last
# that carries it), with what it links that the GPU machine lacks: Debian's
# libb64 and the CUDA 12 runtime (the nvidia-cuda-runtime-cu12 wheel); in
# gpu-bundle/perf_analyzer/, apart from the server's libraries.
if [ "${BUNDLE_PERF_ANALYZER:-1}" = 1 ]; then
  dpkg-query -W -f='${Status}' libb64-0d 2>/dev/null | grep -q "ok installed" ||
    apt-get install -y -qq --no-install-recommends libb64-0d >/dev/null
  wheels=$(mktemp -d)
  python3 -m pip download --quiet --no-deps --only-binary=:all: -d "$wheels" \
    tritonclient==2.41.0 nvidia-cuda-runtime-cu12
  mkdir -p gpu-bundle/perf_analyzer/lib
  python3 - "$wheels" gpu-bundle/perf_analyzer <<'PY'
import glob, os, shutil, sys, zipfile
wheels, dest = sys.argv[1:]
for whl in glob.glob(os.path.join(wheels, "*.whl")):
    with zipfile.ZipFile(whl) as z:
        for name in z.namelist():
            base = os.path.basename(name)
            if name.endswith("/bin/perf_analyzer"):
                target = os.path.join(dest, "perf_analyzer")
            elif base.startswith("libcudart.so."):
                target = os.path.join(dest, "lib", base)
            else:
                continue
            with z.open(name) as src, open(target, "wb") as dst:
                shutil.copyfileobj(src, dst)
            os.chmod(target, 0o755)
PY
  cp -L /usr/lib/x86_64-linux-gnu/libb64.so.0d gpu-bundle/perf_analyzer/lib/
  rm -rf "$wheels"
fi
# Nsight Systems' importer (QdstrmImporter, shipped with Nsight Compute)
# needs elfutils' libdw, which the GPU machine lacks; a folder of its own,
# on the path of that one command only.
mkdir -p gpu-bundle/importer-lib
for lib in libdw.so.1 libelf.so.1; do
  cp -L "/usr/lib/x86_64-linux-gnu/$lib" gpu-bundle/importer-lib/ 2>/dev/null ||
    echo "gpu-bundle: no $lib here (apt-get install libdw1)" >&2
done
# xz -9's 64 MiB window spans several binaries, which share their kernels:
# half the size of the default's.
tar -cf - gpu-bundle | xz -9 -T0 >gpu-bundle.tar.xz
rm -rf gpu-bundle
ls -l gpu-bundle.tar.xz
