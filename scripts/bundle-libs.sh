#!/usr/bin/env bash
# Copies executables and the shared libraries they need into one folder
# that runs on a GPU machine without this machine's packages (gRPC,
# protobuf, Abseil, OpenBLAS, ...):
#
#   scripts/bundle-libs.sh OUT_DIR BINARY [BINARY...]
#
# writes OUT_DIR/bin/ (the executables) and OUT_DIR/lib/ (their libraries,
# as ldd resolves them here). It leaves out what the GPU machine provides
# and must not be replaced: the C runtime, libstdc++ and libgcc (newer
# there, backward compatible), the driver (libcuda, libnvidia-*) and the
# CUDA toolkit libraries (cudart, cuBLAS, cuBLASLt, CUPTI, nvperf, cuDNN,
# NCCL), which the CUDA installation there holds (/usr/local/cuda/lib64).
# Run there as:
#   LD_LIBRARY_PATH=$PWD/OUT_DIR/lib:/usr/local/cuda/lib64 OUT_DIR/bin/NAME ...
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 OUT_DIR BINARY [BINARY...]" >&2; exit 2; }
out=$1
shift
mkdir -p "$out/bin" "$out/lib"
skip='linux-vdso|ld-linux|/libc\.so|/libm\.so|/libpthread|/libdl\.so|/librt\.so|libstdc\+\+|libgcc_s|libcuda\.so|libnvidia-|libcublas|libcupti|libnvperf|libcudart|libcudnn|libnccl'
for b in "$@"; do
  cp -L "$b" "$out/bin/"
  ldd "$b" | awk '/=>/ && $3 ~ /^\// {print $3}' | { grep -Ev "$skip" || true; } |
    while read -r lib; do
      cp -Lu "$lib" "$out/lib/"
    done
  if ldd "$b" | grep -q "not found"; then
    echo "warning: $b has unresolved libraries here:" >&2
    ldd "$b" | grep "not found" >&2
  fi
done
du -sh "$out" | awk '{print "bundle: " $1 " in " $2}'
