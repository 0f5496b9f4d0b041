#!/usr/bin/env bash
# Call of the thirteenth session (README.md): final (working tree: tma early start past 1.5x L2, small_dim segmented-in early start) vs base.
set -u
R=$OUT/r; mkdir -p $R; out=$R
. scripts/gpu-env.sh
tar -xJf ab.tar.xz
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > $R/nvidia-smi.csv
echo "== conformance (transpose, convert_layout) ($SECONDS s)"
COALESCE_CONFORMANCE_OPS=transpose,convert_layout timeout 150 $bin/cuda_conformance_test > $R/tests.log 2>&1; echo "rc=$?" >> $R/tests.log; tail -n 4 $R/tests.log
V=transpose.cuda.tma,transpose.cuda.small_dim,convert_layout.cuda.small_dim
echo "== memcheck, large chained tma ($SECONDS s)"
COALESCE_CONFORMANCE_VARIANTS=transpose.cuda.tma timeout 100 compute-sanitizer --tool memcheck --error-exitcode 9 $bin/cuda_conformance_test --gtest_filter='*BackToBack*' > $R/memcheck-chained-tma.log 2>&1; echo "rc=$?" >> $R/memcheck-chained-tma.log; tail -n 3 $R/memcheck-chained-tma.log
for tool in memcheck racecheck; do
  echo "== $tool, $V <= 2 MB ($SECONDS s)"
  COALESCE_CONFORMANCE_VARIANTS=$V COALESCE_CONFORMANCE_MAX_BYTES=2097152 timeout 90 compute-sanitizer --tool $tool --error-exitcode 9 $bin/cuda_conformance_test --gtest_filter='*EveryVariant*:*BackToBack*' > $R/$tool.log 2>&1; echo "rc=$?" >> $R/$tool.log; tail -n 3 $R/$tool.log
done
runs=()
for r in 1 2 3; do
  for n in base final; do
    [ $SECONDS -lt 520 ] || { echo "past 520 s: stop"; break 2; }
    echo "round $r $n ($SECONDS s)"
    for s in 1,4096,4096 1,8192,8192 1,4096,12288 1,16384,16384; do
      timeout 60 ab/$n/coalesce-bench kernels --ops=transpose --shape=$s --dtypes=bfloat16,float32 --variants=vec16,tma --json=$R/$n-$r-t$s.json > $R/$n-$r-t$s.txt 2>&1
      [ -s $R/$n-$r-t$s.json ] && runs+=("$n=$R/$n-$r-t$s.json")
    done
    for s in 32,3,224,224 32,224,224,3; do
      timeout 60 ab/$n/coalesce-bench kernels --ops=convert_layout --shape=$s --dtypes=float32,float16 --variants=small_dim --json=$R/$n-$r-l$s.json > $R/$n-$r-l$s.txt 2>&1
      [ -s $R/$n-$r-l$s.json ] && runs+=("$n=$R/$n-$r-l$s.json")
    done
  done
done
python3 bench/ab_report.py "${runs[@]}" > $R/ab.md 2> $R/ab.err
tar -C $OUT -cf $OUT/r.tar r && rm -rf $R
