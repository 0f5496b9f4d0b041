#!/usr/bin/env bash
# The whole GPU check in one call, on the GPU machine, from the repo root
# with gpu-bundle.tar.xz carried (scripts/gpu-bundle.sh builds it):
#   scripts/gpu-check.sh OUT_DIR [STEPS] [BENCH FLAGS...]
# STEPS, comma-separated (default tests,sanitize,ncu,bench):
#   tests     the GPU conformance suite
#   sanitize  compute-sanitizer memcheck and racecheck over that suite
#   ncu       Nsight Compute counters for one launch of the fast transposes
#   bench     coalesce-bench kernels, PyTorch on the same cases in the same
#             call, and the merged report (table last)
#   tune      issue 6's quality sweep: a server on this GPU, `coalesce tune`
#             over TUNE_SHAPES (default 200) random shapes per op, cold (table
#             and heuristic only), then again with the tables it wrote loaded
# Never touches clocks, power or MIG settings.
set -uo pipefail
out=${1:?usage: gpu-check.sh OUT_DIR [STEPS] [bench flags]}
steps=${2:-tests,sanitize,ncu,bench}
shift 2 2>/dev/null || shift $#
mkdir -p "$out"
[ -d gpu-bundle ] || tar -xJf gpu-bundle.tar.xz
export LD_LIBRARY_PATH=$PWD/gpu-bundle/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export PYTHONUNBUFFERED=1
bin=gpu-bundle/bin
has() { [[ ",$steps," == *",$1,"* ]]; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu \
  --format=csv | tee "$out/nvidia-smi.csv"
status=0
if has tests; then
  echo "== GPU conformance suite"
  "$bin/cuda_conformance_test" 2>&1 | tail -n 30 | tee "$out/gpu-tests.log"
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
fi
if has sanitize; then
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
if has ncu; then
  echo "== ncu (first launch of transpose.cuda.vec16 at 8192^2)"
  metrics=gpu__time_duration.sum,dram__bytes.sum.per_second,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_active,sm__maximum_warps_per_active_cycle_pct,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum,l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum,l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum,l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum,l1tex__t_requests_pipe_lsu_mem_global_op_st.sum
  for dt in float32 bfloat16; do
    ncu --clock-control none --kernel-name regex:'TransposeVec16' \
      --launch-count 1 --metrics "$metrics" --csv \
      "$bin/coalesce-bench" kernels --ops=transpose --dtypes=$dt \
      --shape=1,8192,8192 --variants=vec16 --reps=1 --warmup=0 \
      >"$out/ncu-transpose-$dt.csv" 2>"$out/ncu-transpose-$dt.err"
    grep -E '"(gpu__time|dram__|sm__|l1tex)' "$out/ncu-transpose-$dt.csv" |
      awk -F'","' '{print $5, $(NF-2), $NF}' | cut -c1-150
  done
fi
if has bench; then
  echo "== coalesce-bench kernels"
  "$bin/coalesce-bench" kernels --json="$out/kernels.json" "$@" \
    >"$out/kernels.txt" || status=1
  echo "== PyTorch side by side"
  python3 bench/torch_bench.py "$out/kernels.json" "$out/torch.json" || status=1
  python3 bench/report.py "$out/kernels.json" "$out/torch.json" \
    --md "$out/report.md" --png "$out/chart.png" >/dev/null || status=1
  tail -n 1 "$out/kernels.txt"
  sed -n '1,/<details>/p' "$out/report.md"
fi
if has tune; then
  echo "== selection quality sweep"
  shapes=${TUNE_SHAPES:-200}
  serve() {  # starts a server with extra flags; sets $port and $server_pid
    "$bin/coalesce-server" --listen=127.0.0.1:0 --metrics_listen=127.0.0.1:0 "$@" \
      >"$out/server.out" 2>>"$out/server.log" &
    server_pid=$!
    for _ in $(seq 1 100); do
      port=$(sed -n 's/.*listening on [^ ]*:\([0-9]*\).*/\1/p' "$out/server.out")
      [ -n "$port" ] && break
      sleep 0.2
    done
  }
  sweep() {  # $1: cold or tuned
    for op in transpose layout gelu-ln gemm; do
      max=268435456
      [ "$op" = gemm ] && max=67108864
      "$bin/coalesce" --server=127.0.0.1:$port tune $op --random_shapes=$shapes \
        --max_shape_bytes=$max --reps=3 --out="$out/table-$op.txt" \
        >"$out/tune-$1-$op.txt" 2>/dev/null || status=1
      echo "$1 $op: $(grep 'within 10%' "$out/tune-$1-$op.txt")"
    done
  }
  serve
  sweep cold
  kill $server_pid; wait $server_pid 2>/dev/null
  # One table file: the first's header, every file's entries.
  head -n 4 "$out/table-transpose.txt" >"$out/table.txt"
  for f in "$out"/table-*.txt; do grep '^entry ' "$f" >>"$out/table.txt"; done
  serve --tuning_table="$out/table.txt"
  sweep tuned
  kill $server_pid; wait $server_pid 2>/dev/null
fi
exit $status
