#!/usr/bin/env bash
# Builds of the GPU bench side by side, for `scripts/gpu-check.sh OUT ab`:
#   scripts/ab-build.sh [--ops=OP,...] NAME [FILE[=ALT_SOURCE]]...
# recompiles the named kernels/cuda sources (from ALT_SOURCE where given,
# e.g. a candidate kept outside the tree) into build-gpu's objects, relinks
# coalesce-bench and cuda_conformance_test and copies them to ab/NAME/;
# with no FILE it builds and copies the working tree's binaries (the
# baseline). Then
#   scripts/ab-build.sh --pack
# writes ab.tar.xz, to be carried with gpu-bundle.tar.xz (its libraries serve
# every build). Names sort into the report's column order: the first is the
# baseline. The objects it compiled are deleted afterwards, so the next
# ninja build recompiles them from the working tree.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
if [ "${1:-}" = --pack ]; then
  # One xz stream with a dictionary larger than a build: the builds differ
  # in a few objects, so each one after the first costs little.
  tar -cf - ab | xz -6 --lzma2=dict=192MiB >ab.tar.xz
  ls -l ab.tar.xz
  exit 0
fi
ops=
if [[ "${1:-}" == --ops=* ]]; then
  ops=${1#--ops=}
  shift
fi
name=${1:?usage: ab-build.sh [--ops=OP,...] NAME [FILE[=ALT_SOURCE]]... | --pack}
shift
cd build-gpu
# The baseline is the working tree: relink what an earlier candidate left.
[ $# -gt 0 ] || ninja bench/coalesce-bench kernels/cuda/cuda_conformance_test >/dev/null
objects=()
for spec in "$@"; do
  src=${spec%%=*}
  alt=${spec#*=}
  [ "$alt" = "$spec" ] && alt=$root/kernels/cuda/$src
  alt=$(readlink -f "$alt")
  target=coalesce_kernels_cuda
  [ "$src" = gemm_wgmma.cu ] && target=coalesce_gemm_wgmma
  obj=kernels/cuda/CMakeFiles/$target.dir/$src.o
  objects+=("$obj")
  cmd=$(ninja -t commands "$obj" | tail -n 1 |
    sed "s# -MD -MT [^ ]* -MF [^ ]*##; s#-c $root/kernels/cuda/$src#-c $alt#")
  echo "$name: compiling $src from $alt"
  eval "$cmd"
done
if [ $# -gt 0 ]; then
  archive=$(ninja -t commands bench/coalesce-bench |
    grep 'ar qc kernels/cuda/libcoalesce_kernels_cuda.a')
  # Objects an earlier run deleted come from the working tree.
  missing=()
  for o in $(grep -o 'kernels/cuda/CMakeFiles/[^ ]*\.o' <<<"$archive"); do
    [ -e "$o" ] || missing+=("$o")
  done
  [ ${#missing[@]} -eq 0 ] || ninja "${missing[@]}" >/dev/null
  eval "$archive"
  eval "$(ninja -t commands bench/coalesce-bench | tail -n 1)"
  eval "$(ninja -t commands kernels/cuda/cuda_conformance_test | tail -n 1)"
fi
mkdir -p "$root/ab/$name"
cp bench/coalesce-bench kernels/cuda/cuda_conformance_test "$root/ab/$name/"
[ -z "$ops" ] || echo "$ops" >"$root/ab/$name/conformance-ops"
rm -f ${objects[@]+"${objects[@]}"}
ls -l "$root/ab/$name"
