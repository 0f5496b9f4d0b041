#!/usr/bin/env bash
# clang-format (the repo's .clang-format, Google base) over every C++ and CUDA
# source tracked by git (*.cc *.h *.cu *.cuh; outside a git checkout, the
# same names found on disk, build trees and bundles left out):
#   scripts/format.sh           formats them in place
#   scripts/format.sh --check   changes nothing; lists the files that are not
#                               formatted and exits 1 (scripts/test.sh runs
#                               this before the build, so CI fails on them)
set -euo pipefail
cd "$(dirname "$0")/.."
check=
[ "${1:-}" = --check ] && check=1
if ! command -v clang-format >/dev/null; then
  echo "format: clang-format not found (scripts/install-deps.sh installs it)" >&2
  exit 2
fi
files=()
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  while IFS= read -r -d '' f; do
    [ -f "$f" ] && files+=("$f")
  done < <(git ls-files -z -- '*.cc' '*.h' '*.cu' '*.cuh')
else
  mapfile -d '' -t files < <(
    find . \( -path './build*' -o -path './gpu-bundle' -o -path './ab' -o -path './.git' \) -prune \
      -o -type f \( -name '*.cc' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) -printf '%P\0' |
      sort -z)
fi
[ ${#files[@]} -gt 0 ] || { echo "format: no C++ or CUDA files found" >&2; exit 2; }
if [ -z "$check" ]; then
  clang-format -i "${files[@]}"
  echo "format: ${#files[@]} files formatted"
  exit 0
fi
# One run for all files; each violation reads
# "FILE:LINE:COL: error: code should be clang-formatted".
rc=0
report=$(clang-format --dry-run -Werror "${files[@]}" 2>&1 >/dev/null) || rc=$?
mapfile -t bad < <(sed -n 's/^\(.*\):[0-9]*:[0-9]*: error: code should be clang-formatted.*/\1/p' \
                     <<<"$report" | sort -u)
if [ $rc -ne 0 ] && [ ${#bad[@]} -eq 0 ]; then
  echo "format: clang-format failed:" >&2
  echo "$report" >&2
  exit 2
fi
if [ ${#bad[@]} -gt 0 ]; then
  echo "format: ${#bad[@]} of ${#files[@]} files are not clang-formatted:" >&2
  printf '  %s\n' "${bad[@]}" >&2
  echo "scripts/format.sh formats them in place." >&2
  exit 1
fi
echo "format: ${#files[@]} files formatted ($(clang-format --version | head -n 1))"
