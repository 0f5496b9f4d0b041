#!/usr/bin/env bash
# one-off device call (untracked): ncu DRAM bytes of tma / vec16 transposes at 8192^2
R=$OUT/r; mkdir -p $R
out=$R; . scripts/gpu-env.sh
m=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_sectors_op_read.sum,lts__t_sectors_op_write.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__warps_active.avg.pct_of_peak_sustained_active,smsp__average_warp_latency_issue_stalled_long_scoreboard,smsp__average_warp_latency_issue_stalled_barrier,smsp__average_warp_latency_issue_stalled_lg_throttle,smsp__average_warp_latency_issue_stalled_long_scoreboard,launch__grid_size
for c in "bfloat16 tma TransposeTma" "float32 tma TransposeTma" "bfloat16 vec16_wide TransposeVec16" "float32 vec16_wide TransposeVec16"; do
  read -r dt v k <<<"$c"
  for shape in 1,8192,8192 1,4096,12288; do
  echo "== $dt $v $shape"
  timeout 80 ncu --clock-control none --kernel-name regex:"$k" --launch-skip 2 --launch-count 1 --metrics "$m" --csv \
    $bin/coalesce-bench kernels --ops=transpose --dtypes=$dt --shape=$shape --variants=transpose.cuda.$v\$ --reps=3 --warmup=2 --check_max_elements=0 > $R/ncu-$dt-$v-$shape.csv 2>$R/ncu-$dt-$v-$shape.err
  grep -E '"(gpu__|dram__|sm__|smsp__|lts__|launch__)' $R/ncu-$dt-$v-$shape.csv | awk -F'","' '{print $(NF-2), $NF}' | tr -d '"'
  done
done
tar -C $OUT -cf $OUT/r.tar r && rm -rf $R
