#!/usr/bin/env bash
# Gathers what the runtime image holds from a build tree, into OUT:
#   coalesce-server, coalesce            the binaries
#   coalesce-dlopen-check                deploy/image/dlopen-check.c
#   runtime-packages.txt                 the Debian/Ubuntu package of every
#                                        shared library they link (ldd, dpkg -S)
#   libraries.txt                        every library the server can load:
#                                        the linked ones and OPTIONAL_LIBRARIES
#                                        (the dlopened ones: cuBLASLt, CUPTI)
# Used by the Dockerfile's build stage and by scripts/container-test.sh (the
# prebuilt path), so both images are assembled by the same steps.
#   scripts/image-files.sh BUILD_DIR OUT
set -euo pipefail
build=$1
out=$2
mkdir -p "$out"
cd "$(dirname "$0")/.."
bins=("$build/server/coalesce-server" "$build/client/coalesce")
install -m 0755 "${bins[@]}" "$out/"
cc -O2 -Wall -Wextra -o "$out/coalesce-dlopen-check" \
  deploy/image/dlopen-check.c -ldl

missing=$(ldd "${bins[@]}" | grep "not found" || true)
if [ -n "$missing" ]; then
  echo "image-files: unresolved libraries: $missing" >&2
  exit 1
fi
# Linked libraries by soname (the vDSO and the loader have no "=> /path").
ldd "${bins[@]}" | awk '/=> \// {print $1}' | sort -u > "$out/libraries.txt"
for lib in ${OPTIONAL_LIBRARIES:-}; do echo "$lib"; done >> "$out/libraries.txt"

# A library name the server carries as a string is one it may dlopen: each
# must be covered by the list (a prefix counts: the compiler may store a
# short literal in pieces), or the image check would not look for it. A
# guard, not a proof: a name built at run time is not seen. The driver's
# libraries (libcuda, libnvidia-*) are exempt: the NVIDIA Container Toolkit
# mounts them from the host when the container starts.
for name in $(grep -aoE 'lib[A-Za-z0-9_+-]+\.so(\.[0-9]+)*' \
                "${bins[0]}" | sort -u); do
  case $name in libcuda.so* | libnvidia-*) continue ;; esac
  if ! grep -q "^${name//./\\.}" "$out/libraries.txt"; then
    echo "image-files: the server names $name, which neither ldd nor" \
         "OPTIONAL_LIBRARIES lists" >&2
    exit 1
  fi
done

# The package of every linked library. usrmerge: ldd may print /lib/... for
# a file dpkg knows as /usr/lib/..., so match on the last directory and name.
ldd "${bins[@]}" | awk '/=> \// {print $3}' | sort -u \
  | while read -r lib; do
      dpkg -S "*/$(basename "$(dirname "$lib")")/*$(basename "$lib")" \
        | cut -d: -f1 | tr ',' '\n' | tr -d ' '
    done | sort -u > "$out/runtime-packages.txt"
echo "image-files: $(wc -l < "$out/libraries.txt") libraries," \
     "$(wc -l < "$out/runtime-packages.txt") packages:" \
     "$(tr '\n' ' ' < "$out/runtime-packages.txt")"
