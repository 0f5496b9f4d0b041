#!/usr/bin/env bash
# README command 2: install what is missing, check the C++/CUDA formatting
# (scripts/format.sh --check; scripts/format.sh fixes it), build, run every
# test. GPU tests (CTest label gpu) skip with a reason where no GPU is
# visible.
set -euo pipefail
cd "$(dirname "$0")/.."
# OpenMP workers sleep when idle instead of spinning: the server and the
# tests share the cores with other work.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
scripts/install-deps.sh
scripts/format.sh --check
scripts/build.sh
ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j "$(nproc)" "$@"
