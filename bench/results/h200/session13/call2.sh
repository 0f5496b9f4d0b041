#!/usr/bin/env bash
# Call of the thirteenth session (README.md): final (tree: tma early start past 1.5x L2; small_dim early start on segmented 16-bit input)
# vs sd-all (small_dim early start everywhere, flat-in prefetching its warp's lines) vs tma-all (tma early start at every size).
set -u
R=$OUT/r; mkdir -p $R; out=$R
. scripts/gpu-env.sh
tar -xJf ab.tar.xz
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > $R/nvidia-smi.csv
for n in final sd-all tma-all; do
  echo "== conformance $n (transpose, convert_layout) ($SECONDS s)"
  COALESCE_CONFORMANCE_OPS=transpose,convert_layout timeout 60 ab/$n/cuda_conformance_test > $R/tests-$n.log 2>&1; echo "rc=$?" >> $R/tests-$n.log; tail -n 2 $R/tests-$n.log
done
V=transpose.cuda.small_dim,convert_layout.cuda.small_dim
for tool in memcheck racecheck; do
  echo "== $tool final, $V <= 2 MB ($SECONDS s)"
  COALESCE_CONFORMANCE_VARIANTS=$V COALESCE_CONFORMANCE_MAX_BYTES=2097152 timeout 60 compute-sanitizer --tool $tool --error-exitcode 9 ab/final/cuda_conformance_test --gtest_filter='*EveryVariant*:*BackToBack*' > $R/$tool-final.log 2>&1; echo "rc=$?" >> $R/$tool-final.log; tail -n 2 $R/$tool-final.log
done
runs=()
for r in 1 2 3; do
  for n in final sd-all tma-all; do
    [ $SECONDS -lt 420 ] || { echo "past 420 s: stop"; break 2; }
    echo "round $r $n ($SECONDS s)"
    if [ $n != sd-all ]; then
      for s in 1,4096,4096 1,8192,8192; do
        timeout 40 ab/$n/coalesce-bench kernels --ops=transpose --shape=$s --dtypes=bfloat16,float32 --variants=tma --json=$R/$n-$r-t$s.json > $R/$n-$r-t$s.txt 2>&1
        [ -s $R/$n-$r-t$s.json ] && runs+=("$n=$R/$n-$r-t$s.json")
      done
    fi
    if [ $n != tma-all ]; then
      for s in 32,3,224,224 32,224,224,3 67108864,3 3,67108864; do
        timeout 40 ab/$n/coalesce-bench kernels --ops=convert_layout --shape=$s --dtypes=float32,float16 --variants=small_dim --json=$R/$n-$r-l$s.json > $R/$n-$r-l$s.txt 2>&1
        [ -s $R/$n-$r-l$s.json ] && runs+=("$n=$R/$n-$r-l$s.json")
      done
    fi
  done
done
python3 bench/ab_report.py "${runs[@]}" > $R/ab.md 2> $R/ab.err
tar -C $OUT -cf $OUT/r.tar r && rm -rf $R
