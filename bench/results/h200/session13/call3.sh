#!/usr/bin/env bash
# Call of the thirteenth session (README.md): base (small_dim as at 4356583, tma as the tree) vs final (tree: small_dim early start for
# 16-bit elements), then the docs tables at the tree (gpu-bundle).
set -u
R=$OUT/r; mkdir -p $R; out=$R
. scripts/gpu-env.sh
tar -xJf ab.tar.xz
echo "== conformance final (transpose, convert_layout) ($SECONDS s)"
COALESCE_CONFORMANCE_OPS=transpose,convert_layout timeout 60 $bin/cuda_conformance_test > $R/tests.log 2>&1; echo "rc=$?" >> $R/tests.log; tail -n 2 $R/tests.log
V=transpose.cuda.small_dim,convert_layout.cuda.small_dim
for tool in memcheck racecheck; do
  echo "== $tool final, $V <= 2 MB ($SECONDS s)"
  COALESCE_CONFORMANCE_VARIANTS=$V COALESCE_CONFORMANCE_MAX_BYTES=2097152 timeout 60 compute-sanitizer --tool $tool --error-exitcode 9 $bin/cuda_conformance_test --gtest_filter='*EveryVariant*:*BackToBack*' > $R/$tool.log 2>&1; echo "rc=$?" >> $R/$tool.log; tail -n 2 $R/$tool.log
done
runs=()
for r in 1 2; do
  for n in base final; do
    [ $SECONDS -lt 230 ] || { echo "past 230 s: stop"; break 2; }
    echo "round $r $n ($SECONDS s)"
    for s in 32,3,224,224 32,224,224,3 67108864,3 3,67108864 67108864,4 4,67108864 67108864,8 8,67108864; do
      timeout 40 ab/$n/coalesce-bench kernels --ops=convert_layout --shape=$s --dtypes=float16,bfloat16,float32 --variants=small_dim --json=$R/$n-$r-l$s.json > $R/$n-$r-l$s.txt 2>&1
      [ -s $R/$n-$r-l$s.json ] && runs+=("$n=$R/$n-$r-l$s.json")
    done
  done
done
python3 bench/ab_report.py "${runs[@]}" > $R/ab.md 2> $R/ab.err
echo "== transposes bench ($SECONDS s)"
mkdir -p $R/transpose; timeout 150 scripts/gpu-check.sh $R/transpose bench --ops=transpose --dtypes=float32,bfloat16 --variants=vec16,tma > $R/transpose/call.log 2>&1; echo "rc=$?" >> $R/transpose/call.log
echo "== layouts bench ($SECONDS s)"
[ $SECONDS -lt 380 ] && { mkdir -p $R/layout; timeout $((560 - SECONDS)) scripts/gpu-check.sh $R/layout bench --ops=convert_layout --dtypes=float32,float16,bfloat16 --variants=vec16,small_dim > $R/layout/call.log 2>&1; echo "rc=$?" >> $R/layout/call.log; }
echo "done ($SECONDS s)"
tar -C $OUT -cf $OUT/r.tar r && rm -rf $R
