#!/usr/bin/env bash
# Checks that every C++ and CUDA source tracked by git (*.cc *.h *.cu *.cuh)
# is formatted as .clang-format says (Google style), without changing any:
#   scripts/check-format.sh
# Lists the files that are not and exits 1; scripts/format.sh fixes them.
# scripts/test.sh runs it before the build, so CI fails on unformatted code.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v clang-format >/dev/null; then
  echo "check-format: clang-format not found (scripts/install-deps.sh installs it)" >&2
  exit 2
fi
mapfile -d '' -t files < <(scripts/format-files.sh)
[ ${#files[@]} -gt 0 ] || { echo "check-format: no C++ or CUDA files found" >&2; exit 2; }
# One clang-format run for all files; each violation is reported as
# "FILE:LINE:COL: error: code should be clang-formatted".
rc=0
report=$(clang-format --dry-run -Werror "${files[@]}" 2>&1 >/dev/null) || rc=$?
bad=()
while IFS= read -r f; do
  bad+=("$f")
done < <(sed -n 's/^\(.*\):[0-9]*:[0-9]*: error: code should be clang-formatted.*/\1/p' \
           <<<"$report" | sort -u)
if [ $rc -ne 0 ] && [ ${#bad[@]} -eq 0 ]; then
  echo "check-format: clang-format failed:" >&2
  echo "$report" >&2
  exit 2
fi
if [ ${#bad[@]} -gt 0 ]; then
  echo "check-format: ${#bad[@]} of ${#files[@]} files are not clang-formatted:" >&2
  printf '  %s\n' "${bad[@]}" >&2
  echo "scripts/format.sh formats them in place." >&2
  exit 1
fi
echo "check-format: ${#files[@]} files formatted ($(clang-format --version | head -n 1))"
