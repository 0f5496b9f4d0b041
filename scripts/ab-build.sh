#!/usr/bin/env bash
# Builds of the GPU bench side by side, for `scripts/gpu-check.sh OUT ab`:
#   scripts/ab-build.sh [--ops=OP,...] NAME [FILE[=ALT_SOURCE]]...
# FILE is a source file of the build, as a path from the repository root or
# from kernels/cuda/ (e.g. transpose/vec16.cu). Each is recompiled, with the
# build's own command line, into its object in $BUILD_DIR (default
# build-gpu, as scripts/gpu-bundle.sh builds it), from ALT_SOURCE where
# given (e.g. a candidate kept outside the tree); the static libraries that
# hold those objects are archived again, coalesce-bench and
# cuda_conformance_test relinked and copied to ab/NAME/. With no FILE it
# builds and copies the working tree's binaries (the baseline). --ops writes
# the ops whose conformance suite `gpu-check.sh OUT ab` runs for this build.
# Then
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
build=${BUILD_DIR:-build-gpu}
[ -f "$build/build.ninja" ] ||
  { echo "ab-build: no ninja build in $build (run scripts/gpu-bundle.sh first)" >&2; exit 2; }
cd "$build"
bins=(coalesce-bench cuda_conformance_test)   # CMake target names
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# The baseline is the working tree: relink what an earlier candidate left.
[ $# -gt 0 ] || ninja "${bins[@]}" >/dev/null
[ $# -eq 0 ] || ninja -t compdb >"$tmp/compdb.json"
objects=()
for spec in "$@"; do
  src=${spec%%=*}
  alt=${spec#*=}
  if [ -f "$root/$src" ]; then
    src=$root/$src
  elif [ -f "$root/kernels/cuda/$src" ]; then
    src=$root/kernels/cuda/$src
  else
    echo "ab-build: no source file $src (a path from the repository root or from kernels/cuda/)" >&2
    exit 2
  fi
  [ "$alt" = "$spec" ] && alt=$src
  alt=$(readlink -f "$alt")
  # The source's object and compile command, from the build's compilation
  # database, with the dependency-file flags dropped and ALT_SOURCE compiled
  # in the source's place.
  python3 - "$tmp/compdb.json" "$src" "$alt" >"$tmp/entry" <<'PY'
import json, os, re, sys
db, src, alt = sys.argv[1], os.path.realpath(sys.argv[2]), sys.argv[3]
for e in json.load(open(db)):
    f = os.path.join(e["directory"], e["file"])
    if os.path.realpath(f) == src:
        cmd = re.sub(r" -MD -MT \S+ -MF \S+", "", e["command"])
        cmd = cmd.replace(" -c " + e["file"], " -c " + alt, 1)
        print(e["output"])
        print(cmd)
        break
PY
  obj=$(sed -n 1p "$tmp/entry")
  cmd=$(sed -n 2p "$tmp/entry")
  [ -n "$obj" ] || { echo "ab-build: $build compiles no $src" >&2; exit 2; }
  objects+=("$obj")
  echo "$name: compiling ${src#"$root"/} from $alt"
  eval "$cmd"
done
if [ $# -gt 0 ]; then
  # Archive again every static library that holds a recompiled object; its
  # other objects come from the working tree (rebuilt where an earlier run
  # deleted them).
  for b in "${bins[@]}"; do ninja -t commands "$b"; done |
    { grep -E '(^|[ /])ar qc ' || true; } | sort -u >"$tmp/archives"
  while IFS= read -r archive; do
    hit=
    for o in "${objects[@]}"; do
      case " $archive " in *" $o "*) hit=1 ;; esac
    done
    [ -n "$hit" ] || continue
    missing=()
    # shellcheck disable=SC2086  # the archive command's words
    for word in $archive; do
      case $word in *.o) [ -e "$word" ] || missing+=("$word") ;; esac
    done
    [ ${#missing[@]} -eq 0 ] || ninja "${missing[@]}" >/dev/null
    eval "$archive"
  done <"$tmp/archives"
  for b in "${bins[@]}"; do
    eval "$(ninja -t commands "$b" | tail -n 1)"
  done
fi
mkdir -p "$root/ab/$name"
for b in "${bins[@]}"; do
  path=$(find . -type f -name "$b" -perm -u+x -not -path '*/CMakeFiles/*' -print -quit)
  [ -n "$path" ] || { echo "ab-build: $b not found in $build" >&2; exit 1; }
  cp "$path" "$root/ab/$name/"
done
[ -z "$ops" ] || echo "$ops" >"$root/ab/$name/conformance-ops"
rm -f ${objects[@]+"${objects[@]}"}
ls -l "$root/ab/$name"
