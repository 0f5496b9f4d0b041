#!/usr/bin/env bash
# Prints, NUL-separated, the C++ and CUDA sources that scripts/format.sh and
# scripts/check-format.sh cover: every *.cc *.h *.cu *.cuh tracked by git
# and present in the working tree (outside a git checkout, e.g. a source
# archive, the same names found on disk, build trees and bundles left out).
set -euo pipefail
cd "$(dirname "$0")/.."
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  git ls-files -z -- '*.cc' '*.h' '*.cu' '*.cuh' |
    while IFS= read -r -d '' f; do
      [ -f "$f" ] && printf '%s\0' "$f"
    done
else
  find . \( -path './build*' -o -path './gpu-bundle' -o -path './ab' -o -path './.git' \) -prune \
    -o -type f \( -name '*.cc' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) -printf '%P\0' |
    sort -z
fi
