#!/usr/bin/env bash
# The whole GPU check in one call, on the GPU machine, from the repo root
# with gpu-bundle/ carried (scripts/gpu-bundle.sh builds it):
#   scripts/gpu-check.sh OUT_DIR [sanitize|nosanitize] [BENCH FLAGS...]
# 1. the GPU conformance suite; 2. compute-sanitizer memcheck and racecheck
# over it (unless nosanitize); 3. coalesce-bench kernels; 4. PyTorch on the
# same cases in the same call; 5. the merged report (table last).
# Never touches clocks, power or MIG settings.
set -uo pipefail
out=${1:?usage: gpu-check.sh OUT_DIR [sanitize|nosanitize] [bench flags]}
mode=${2:-sanitize}
shift 2 2>/dev/null || shift $#
mkdir -p "$out"
export LD_LIBRARY_PATH=$PWD/gpu-bundle/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export PYTHONUNBUFFERED=1
bin=gpu-bundle/bin
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu \
  --format=csv | tee "$out/nvidia-smi.csv"
status=0
echo "== GPU conformance suite"
"$bin/cuda_conformance_test" 2>&1 | tail -n 30 | tee "$out/gpu-tests.log" || status=1
if [ "$mode" = sanitize ]; then
  for tool in memcheck racecheck; do
    echo "== compute-sanitizer --tool $tool"
    compute-sanitizer --tool "$tool" --error-exitcode 9 \
      "$bin/cuda_conformance_test" --gtest_filter='*EveryVariant*' \
      >"$out/sanitizer-$tool.log" 2>&1
    rc=$?
    tail -n 4 "$out/sanitizer-$tool.log"
    echo "compute-sanitizer $tool exit code: $rc"
    [ $rc -eq 0 ] || status=1
  done
fi
echo "== coalesce-bench kernels"
"$bin/coalesce-bench" kernels --json="$out/kernels.json" "$@" \
  >"$out/kernels.txt" || status=1
echo "== PyTorch side by side"
python3 bench/torch_bench.py "$out/kernels.json" "$out/torch.json" || status=1
python3 bench/report.py "$out/kernels.json" "$out/torch.json" \
  --md "$out/report.md" --png "$out/chart.png" >/dev/null || status=1
cat "$out/kernels.txt"
sed -n '1,/<details>/p' "$out/report.md"
exit $status
