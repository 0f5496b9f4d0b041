#!/usr/bin/env bash
# README command 2: install what is missing, check the C++/CUDA formatting
# (scripts/format.sh --check; scripts/format.sh fixes it), build, run every
# test (GPU tests, CTest label gpu, skip with a reason where no GPU is
# visible); then the unit and e2e tests again under ASan+UBSan and the
# server's tests under TSan (scripts/sanitize.sh); then each libFuzzer
# target for FUZZ_SECONDS (default 20) on its corpus (scripts/fuzz.sh);
# then the deployment files are checked (scripts/deploy-check.sh) and the
# CPU image is built from the Dockerfile with the binaries just built (a
# CPU-only server first where the build holds the CUDA backend) and
# smoke-tested (scripts/container-test.sh).
# QUICK=1 stops after the plain tests.
set -euo pipefail
cd "$(dirname "$0")/.."
# OpenMP workers sleep when idle instead of spinning: the server and the
# tests share the cores with other work.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
start=$SECONDS
scripts/install-deps.sh
scripts/format.sh --check
scripts/build.sh
ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j "$(nproc)" "$@"
echo "[test] build and tests: $((SECONDS - start)) s"
if [ "${QUICK:-0}" = 1 ]; then exit 0; fi
scripts/sanitize.sh all
scripts/fuzz.sh --seconds="${FUZZ_SECONDS:-20}" --jobs="$(nproc)"
# Compose and Kubernetes files (under a minute), then the image. Bounded:
# a hung daemon or build must not eat CI's remaining time.
timeout 600 scripts/deploy-check.sh
timeout 2400 scripts/container-test.sh
echo "[test] all done: $((SECONDS - start)) s"
