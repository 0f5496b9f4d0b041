#!/usr/bin/env bash
# Formats, in place, every C++ and CUDA source tracked by git (*.cc *.h *.cu
# *.cuh) as .clang-format says (Google style): the files that
# scripts/check-format.sh checks.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v clang-format >/dev/null; then
  echo "format: clang-format not found (scripts/install-deps.sh installs it)" >&2
  exit 2
fi
mapfile -d '' -t files < <(scripts/format-files.sh)
[ ${#files[@]} -eq 0 ] || clang-format -i "${files[@]}"
echo "format: ${#files[@]} files formatted"
