#!/usr/bin/env bash
# Call of the thirteenth session (README.md): base (the landed tree) vs v16e (vec16 with an early start:
# trigger, L2 prefetch of the block's tile, then wait; vec16-early-start/vec16-early-start.diff, against 4356583).
set -u
R=$OUT/r; mkdir -p $R; out=$R
. scripts/gpu-env.sh
tar -xJf ab.tar.xz
V=transpose.cuda.vec16,transpose.cuda.vec16_wide,convert_layout.cuda.vec16
echo "== conformance v16e, $V ($SECONDS s)"
COALESCE_CONFORMANCE_VARIANTS=$V timeout 60 ab/v16e/cuda_conformance_test > $R/tests-v16e.log 2>&1; echo "rc=$?" >> $R/tests-v16e.log; tail -n 2 $R/tests-v16e.log
for tool in memcheck racecheck; do
  echo "== $tool v16e, $V <= 2 MB ($SECONDS s)"
  COALESCE_CONFORMANCE_VARIANTS=$V COALESCE_CONFORMANCE_MAX_BYTES=2097152 timeout 50 compute-sanitizer --tool $tool --error-exitcode 9 ab/v16e/cuda_conformance_test --gtest_filter='*EveryVariant*:*BackToBack*' > $R/$tool-v16e.log 2>&1; echo "rc=$?" >> $R/$tool-v16e.log; tail -n 2 $R/$tool-v16e.log
done
runs=()
for r in 1 2 3; do
  for n in base v16e; do
    [ $SECONDS -lt 250 ] || { echo "past 250 s: stop"; break 2; }
    echo "round $r $n ($SECONDS s)"
    for s in 1,1024,1024 32,1024,1024 1,4096,4096 1,8192,8192; do
      timeout 40 ab/$n/coalesce-bench kernels --ops=transpose --shape=$s --dtypes=bfloat16,float32 --variants=vec16 --json=$R/$n-$r-t$s.json > $R/$n-$r-t$s.txt 2>&1
      [ -s $R/$n-$r-t$s.json ] && runs+=("$n=$R/$n-$r-t$s.json")
    done
    for s in 8,512,28,28 8,28,28,512 64,256,56,56 64,56,56,256; do
      timeout 40 ab/$n/coalesce-bench kernels --ops=convert_layout --shape=$s --dtypes=bfloat16,float32 --variants=vec16 --json=$R/$n-$r-l$s.json > $R/$n-$r-l$s.txt 2>&1
      [ -s $R/$n-$r-l$s.json ] && runs+=("$n=$R/$n-$r-l$s.json")
    done
  done
done
python3 bench/ab_report.py "${runs[@]}" > $R/ab.md 2> $R/ab.err
tar -C $OUT -cf $OUT/r.tar r && rm -rf $R
