#!/usr/bin/env bash
# The whole GPU check in one call, on the GPU machine, from the repo root
# with gpu-bundle.tar.xz carried (scripts/gpu-bundle.sh builds it):
#   scripts/gpu-check.sh OUT_DIR [STEPS] [BENCH FLAGS...]
# STEPS, comma-separated (default tests,sanitize,ncu,bench):
#   tests     the GPU conformance suite, stacked launches (stacked_test:
#             batches against each part alone), the kernels' spans on the
#             device's clock (kernel_span_gpu_test), then handles in device memory
#             through a server (gpu_data_plane_test) and the CUPTI sampler
#             (profile_sampling_gpu_test), NVML GPM's device-level counters
#             under a copy loop (gpm_reader_gpu_test) and CUDA shared memory
#             from another process through the KServe API (cuda_shm_gpu_test)
#             (TESTS_CONFORMANCE_FILTER: a gtest filter of the conformance
#             suite, default all)
#   sanitize  compute-sanitizer memcheck and racecheck over that suite
#             (every variant, resident operands, chained transposes;
#             SANITIZE_SKIP_CONFORMANCE=1 leaves it out,
#             SANITIZE_CONFORMANCE_FILTER narrows it: "*Replays*" for the
#             graph replays), over the stacked launches and
#             gpu_data_plane_test (a server's scheduler and batched
#             requests on the device)
#             (COALESCE_CONFORMANCE_OPS=gemm,... limits it to some ops;
#             SANITIZE_TIMEOUT seconds per tool, default 240;
#             SANITIZE_TOOLS: the tools, default "memcheck racecheck";
#             SANITIZE_STACKED_FILTER, SANITIZE_SERVER_FILTER: gtest filters
#             of stacked_test and gpu_data_plane_test, default all; "-*"
#             leaves that binary out)
#   ncu       Nsight Compute counters (DRAM, instructions, shared-memory
#             wavefronts, sectors per request, stalls) for one launch of the
#             transposes and layout kernels named in NCU_CASES
#   bench     coalesce-bench kernels, PyTorch on the same cases in the same
#             call, and the merged report (table last), with chart.png
#             (each variant's fraction of the peak) and size-chart.png
#             (the fastest variant and the same-size copy against bytes)
#   gap       coalesce-kernel-gap: what a kernel boundary costs back to
#             back (empty kernels, copies from 1 to 256 MiB each way, block
#             timelines from the global timer, one request's submission as
#             stream calls against a CUDA graph); gap.json, gap.txt
#             (GAP_PARTS: a subset of empty,copy,submit;
#             GAP_SUBMIT_PAUSE_US: pauses before each submitted request,
#             e.g. 0,150,300, each above 0 asleep and spinning)
#   cublaslt  coalesce-cublaslt-algos: cuBLASLt's heuristic algorithms for
#             the GEMM shapes of CUBLASLT_SHAPES (a file, default the float32
#             GEMMs of the held-out selection sweep's worst picks), each
#             timed; cublaslt.txt
#   sass      cuobjdump of the bundled kernels: HGMMA count per wgmma kernel
#   profile   ncu detail (instructions, issue slots, stalls, DRAM) for one
#             launch of the fastest GELU-LN variant at [8192,4096], fp32
#             and bf16: whether a kernel is bound by memory or by issue
#   security  the abuse suite and the TLS tests (abuse_test, tls_test)
#             against a CUDA server here: other identities' handles and
#             regions, a region truncated while the GPU copies it, quota
#             games, stalled uploads, cancellation storms, SIGTERM during a
#             long measure, slow /metrics clients; security.log
#   devices   one GPU named: a server with --devices=0 (coalesce info, and
#             transposes whose reports name ordinal 0), and an ordinal the
#             host lacks refused at start-up; devices.log
#   service   the service benchmark: coalesce-bench service against a server
#             here (GELU-LN on device handles, transposes inline, Echo)
#             and the GELU-LN kernel's own bandwidth at the same shape
#   requests  the request path: coalesce-bench service over loopback at
#             concurrency 1, 64 and 256 (64 KiB and 1 KiB transposes:
#             inline, handle, pipeline), 16 MiB transposes on handles at
#             64, GELU-LN [16,1024] on handles at 256; each case against
#             Echo of its size and a 1 KiB Echo in the same rounds
#             (--floor_bytes), with the kernel-only bound and the server's GPU-busy
#             ratio from its /metrics; requests-*.txt/json and the server's
#             /metrics after each group; with batching on (the server's
#             default) and off (--batch_ops=none: the cases at concurrency
#             64 and up, files *-batch-off.*); REQUESTS_BATCHING lists the
#             modes (default "on off"; "delay": batching with
#             --batch_max_delay_us=REQUESTS_BATCH_DELAY_US, default 300,
#             files *-batch-delay.*); REQUESTS_CASES: case names to run
#             (t64k,t1k,t16m,ln16,t128) (REQUESTS_SERVER: another
#             coalesce-server binary;
#             REQUESTS_FLAGS: its flags;
#             REQUESTS_TRANSPORTS: the transports;
#             REQUESTS_CONCURRENCY: the concurrencies; REQUESTS_DURATION:
#             seconds per phase, default 2; REQUESTS_ROUNDS: rounds of
#             each case, Echo first and last in turn, medians reported,
#             default 1); then requests-targets.md, each
#             target of the request path with this run's figure
#             (bench/request_targets.py)
#   requests-ab  servers of different flags side by side: REQUESTS_AB,
#             "LABEL=FLAGS;LABEL=FLAGS..." (FLAGS may be empty), each
#             server's requests step (batching on; the REQUESTS_* knobs
#             above apply) in ab-LABEL-ROUND/, REQUESTS_AB_ROUNDS rounds
#             (default 2), the order reversed every other round
#             (REQUESTS_AB_SERVER_LABEL: another coalesce-server binary for
#             LABEL's server, a baseline build's, say); then
#             requests-ab.md, each server's req/s over the first's, round
#             by round (bench/request_ab.py)
#   latency   where a lone request's time goes: a fresh server per
#             transport (inline, handle, pipeline) and size (1 KiB, 64 KiB),
#             coalesce-bench service at concurrency 1, then the server's
#             mean stage times (bench/request_profile.py stages); with
#             Nsight Systems present, the 64 KiB inline case again under
#             nsys (CUDA API and OS runtime summaries, latency-nsys-*;
#             LATENCY_SKIP_NSYS=1 leaves it out; LATENCY_NSYS_CASES:
#             TRANSPORT:BYTES words to trace instead, e.g. "pipeline:65536";
#             each trace's request timeline: latency-nsys*-timeline.txt,
#             bench/request_profile.py timeline; LATENCY_KEEP_SQLITE=1
#             keeps each trace's database, xz'd);
#             LATENCY_FLAG_SETS: server flag sets separated by ';', a round
#             each (files lat-*-FLAGS); LATENCY_TRANSPORTS and
#             LATENCY_BYTES: the rounds' cases (LATENCY_BYTES="": none)
#   busy      coalesce_device_busy_ratio against Nsight Systems: a server
#             under nsys, 16 MiB transposes on handles at concurrency 64
#             64 KiB ones pipelined at 64 and GELU-LN [16,1024] pipelined
#             at 256; the server's busy ratio over the timed phase beside
#             nsys' kernel sum and union over the same length
#             (bench/request_profile.py busy; skipped without nsys) and
#             nvidia-smi's utilization sampled every 100 ms; busy-*.txt
#             (BUSY_SERVER: another coalesce-server binary; BUSY_FLAGS: its
#             flags; BUSY_NSYS_FLAGS:
#             more flags for nsys profile); how many of the server's
#             launches the trace kept, and the busy time per launch against
#             the trace's, which still compare if it lost some
#             (the Nsight Systems reports of busy and latency are deleted
#             once read, their traces kept as CSV; KEEP_NSYS_REP=1 keeps
#             them)
#   kserve    the KServe v2 path against the native one, one server: each
#             model (identity, transpose, convert_layout, gelu_layer_norm,
#             gemm) at 64 KiB and 16 MiB per input, concurrency 1 and 64
#             (KSERVE_CONCURRENCY), perf_analyzer over gRPC (the bundle's,
#             from tritonclient 2.41) beside coalesce-bench service on
#             coalesce.v1 with the same inputs (identity: Echo), inline,
#             KSERVE_DURATION seconds per window (default 3), KSERVE_ROUNDS
#             rounds alternating the two (default 1; the best of each
#             side is compared), KSERVE_CASES: MODEL-BYTES names to run
#             (e.g. "gemm-65536 transpose-16777216"; default all); the
#             server queues up to 8 GiB (64 requests of 32 MiB);
#             KSERVE_SAME_CLIENT=1: coalesce-bench over KServe v2 too
#             (--protocol=kserve), after perf_analyzer, each round;
#             bench/kserve_compare.py tables them: kserve.md; the
#             server's stage means for each side of each case (from its
#             /metrics before and after): kserve-stages.txt
#   tune      the selection quality sweep, held out: a server on this GPU
#             (autotuning off), `coalesce tune` over TUNE_SHAPES (default
#             200) random shapes per op, shape class and dtype: heuristic
#             only on the fit shapes (seed TUNE_FIT_SEED, default 7), whose
#             table is the one shipped; cold, i.e. that table and the
#             heuristic, on other shapes, once per seed of TUNE_SCORE_SEEDS
#             (default "8 9"; TUNE_COLD_SEED=S alone means "S"), phases
#             "cold" (the first seed) and "cold-SEED" (the others); tuned,
#             the first score seed again with its own table loaded
#             (TUNE_TUNED=0 leaves it out); TUNE_TABLE=PATH scores that
#             table (file or folder, e.g. deploy/tuning) with no fit
#             phase. TUNE_OPS limits the ops,
#             TUNE_DTYPES lists the dtypes (default float32), TUNE_CLASSES
#             the shape classes (`coalesce tune --shape_class`): "all", or
#             OP=C1,C2 words for the ops to widen (default: each op's
#             default class). shapes-PHASE-OP[-CLASS][-DTYPE].tsv (class and
#             dtype named only when not the default) has every shape's
#             times, for refits; selection-score.md scores the cold phases
#             (bench/selection_score.py: per op and dtype, PASS or MISS).
#             Without these knobs: the former three phases plus a cold
#             phase on seed 9 and the score. Each phase prints its
#             estimate (the fit phase's time) and each run the elapsed
#             seconds
#   ab        builds side by side in one call: ab.tar.xz (scripts/ab-build.sh)
#             holds ab/NAME/ for each build; each runs its conformance suite
#             (on the ops in ab/NAME/conformance-ops, else on
#             COALESCE_CONFORMANCE_OPS), then the bench flags AB_ROUNDS
#             times (default 2), the builds alternating (AB_NAMES: a subset,
#             in order; --shape=A:B:... in the bench flags keeps a few
#             cases, across ops); bench/ab_report.py tables each build's best times
#             against the first build's, marks FAIL where a build's output
#             failed the bench's check, and then fails the call. With
#             AB_DEADLINE=SECONDS (since the script started), a bench run
#             that would start later is skipped and the report covers the
#             runs made, so a call's time limit does not take them all.
#             AB_SANITIZE=1 runs each build's suite under compute-sanitizer
#             memcheck and racecheck too (as the sanitize step; with
#             COALESCE_CONFORMANCE_MAX_BYTES=2097152 and _VARIANTS naming
#             the variants under test it takes seconds, without _VARIANTS
#             ~95 s per build for transpose and convert_layout).
#             The conformance suites take ~5 s per build for transpose
#             and convert_layout, ~90 s for every op (H200):
#             COALESCE_CONFORMANCE_OPS / _VARIANTS narrow them
# Never touches clocks, power or MIG settings.
set -uo pipefail
out=${1:?usage: gpu-check.sh OUT_DIR [STEPS] [bench flags]}
steps=${2:-tests,sanitize,ncu,bench}
shift 2 2>/dev/null || shift $#
mkdir -p "$out"
# shellcheck source=scripts/gpu-env.sh
. "$(dirname "$0")/gpu-env.sh"
export PYTHONUNBUFFERED=1
has() { [[ ",$steps," == *",$1,"* ]]; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu \
  --format=csv | tee "$out/nvidia-smi.csv"
status=0
if has tests; then
  echo "== GPU conformance suite"
  "$bin/cuda_conformance_test" --gtest_filter="${TESTS_CONFORMANCE_FILTER:-*}" \
    2>&1 | tail -n 30 | tee "$out/gpu-tests.log"
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
  for t in stacked_test kernel_span_gpu_test gpu_data_plane_test \
           profile_sampling_gpu_test gpm_reader_gpu_test cuda_shm_gpu_test; do
    [ -x "$bin/$t" ] || continue
    echo "== $t"
    "$bin/$t" 2>&1 | tail -n 30 | tee -a "$out/gpu-tests.log"
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
  done
fi
# compute-sanitizer memcheck and racecheck over a test binary ($1; the
# conformance suite's tests that cover every kernel unless $3 names a gtest
# filter; "-*" leaves the binary out, as compute-sanitizer fails a run that
# makes no CUDA call), logs named $out/$2-TOOL.log.
sanitize() {
  if [ "${3:-}" = "-*" ]; then
    echo "== compute-sanitizer: $1 left out (filter -*)"
    return
  fi
  for tool in ${SANITIZE_TOOLS:-memcheck racecheck}; do
    echo "== compute-sanitizer --tool $tool ($1)"
    timeout "${SANITIZE_TIMEOUT:-240}" \
      compute-sanitizer --tool "$tool" --error-exitcode 9 \
      "$1" --gtest_filter="${3:-*EveryVariant*:*Resident*:*BackToBack*:*CopyKernels*:*Stamped*}" \
      >"$out/$2-$tool.log" 2>&1
    rc=$?
    tail -n 4 "$out/$2-$tool.log"
    echo "compute-sanitizer $tool exit code: $rc"
    [ $rc -eq 0 ] || status=1
  done
}
if has sanitize; then
  [ -n "${SANITIZE_SKIP_CONFORMANCE:-}" ] ||
    sanitize "$bin/cuda_conformance_test" sanitizer \
      "${SANITIZE_CONFORMANCE_FILTER:-}"
  # The stacked launches (BatchCopy, mixed spaces) and a server's request
  # path on the device: the scheduler, batches of concurrent callers.
  sanitize "$bin/stacked_test" sanitizer-stacked "${SANITIZE_STACKED_FILTER:-*}"
  sanitize "$bin/gpu_data_plane_test" sanitizer-server \
    "${SANITIZE_SERVER_FILTER:-*}"
fi
if has ncu; then
  # One launch each of the transposes and layout kernels the targets hinge
  # on (NCU_CASES overrides: "name ops dtype shape variant kernel-regex;...").
  cases=${NCU_CASES:-"transpose-float32-8192 transpose float32 1,8192,8192 transpose.cuda.vec16\$ TransposeVec16;transpose-bfloat16-4096 transpose bfloat16 1,4096,4096 transpose.cuda.vec16\$ TransposeVec16;aos-float16-f3 convert_layout float16 67108864,3 small_dim SmallDim;soa-float16-f3 convert_layout float16 3,67108864 small_dim SmallDim;nchw-float16-c3 convert_layout float16 32,3,224,224 small_dim SmallDim;nchw-float32-c512 convert_layout float32 8,512,28,28 convert_layout.cuda.vec16\$ TransposeVec16"}
  metrics=gpu__time_duration.sum,dram__bytes.sum.per_second,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_active,sm__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum,l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum,l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum,l1tex__t_requests_pipe_lsu_mem_global_op_st.sum,lts__t_sectors_srcunit_tex_op_write.sum,smsp__average_warp_latency_issue_stalled_long_scoreboard,smsp__average_warp_latency_issue_stalled_barrier,smsp__average_warp_latency_issue_stalled_mio_throttle,smsp__average_warp_latency_issue_stalled_lg_throttle,smsp__average_warp_latency_issue_stalled_short_scoreboard,launch__grid_size,launch__registers_per_thread
  IFS=';' read -ra list <<<"$cases"
  for c in "${list[@]}"; do
    read -r name op dt shape variant regex <<<"$c"
    echo "== ncu $name ($variant)"
    ncu --clock-control none --kernel-name regex:"$regex" \
      --launch-count 1 --metrics "$metrics" --csv \
      "$bin/coalesce-bench" kernels --ops="$op" --dtypes="$dt" \
      --shape="$shape" --variants="$variant" --reps=1 --warmup=0 \
      --check_max_elements=0 >"$out/ncu-$name.csv" 2>"$out/ncu-$name.err"
    grep -E '"(gpu__|dram__|sm__|smsp__|l1tex|lts__|launch__)' \
      "$out/ncu-$name.csv" | awk -F'","' '{print $(NF-2), $NF}' | tr -d '"'
  done
fi
if has gap; then
  echo "== kernel boundary: coalesce-kernel-gap"
  "$bin/coalesce-kernel-gap" --json="$out/gap.json" \
    ${GAP_PARTS:+--parts="$GAP_PARTS"} \
    ${GAP_SUBMIT_PAUSE_US:+--submit_pause_us="$GAP_SUBMIT_PAUSE_US"} |
    tee "$out/gap.txt"
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
fi
if has cublaslt; then
  echo "== cuBLASLt: the heuristic's algorithms, each timed"
  shapes=${CUBLASLT_SHAPES:-bench/cublaslt_shapes.txt}
  "$bin/coalesce-cublaslt-algos" --shapes_file="$shapes" \
    --dtype="${CUBLASLT_DTYPE:-float32}" >"$out/cublaslt.txt" || status=1
  sed -n '/^$/,$p' "$out/cublaslt.txt"
fi
if has sass; then
  echo "== SASS: HGMMA instructions per wgmma kernel"
  cuobjdump -sass "$bin/coalesce-bench" >"$out/all.sass" 2>&1
  awk '/Function :/ {f=$3} /HGMMA/ {n[f]++} END {for (k in n) print n[k], k}' \
    "$out/all.sass" | sort -k2 | tee "$out/hgmma-count.txt" | cut -c1-160
  grep -m3 HGMMA "$out/all.sass" | sed 's/^ *//' | cut -c1-120
  [ -s "$out/hgmma-count.txt" ] || status=1
  rm -f "$out/all.sass"
fi
if has profile; then
  echo "== ncu: GELU-LN [8192,4096], issue and memory"
  metrics=gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes.sum.per_second,sm__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__warps_active.avg.pct_of_peak_sustained_active,launch__registers_per_thread,launch__occupancy_limit_registers,smsp__average_warp_latency_issue_stalled_long_scoreboard,smsp__average_warp_latency_issue_stalled_barrier,smsp__average_warp_latency_issue_stalled_math_pipe_throttle,smsp__average_warp_latency_issue_stalled_wait,smsp__average_warp_latency_issue_stalled_mio_throttle,smsp__average_warp_latency_issue_stalled_lg_throttle,smsp__average_warp_latency_issue_stalled_not_selected,smsp__average_warp_latency_issue_stalled_selected,smsp__average_warp_latency_issue_stalled_short_scoreboard
  for dt in float32 bfloat16; do
    ncu --clock-control none --kernel-name regex:'GeluLnBlockKernel' \
      --launch-count 1 --metrics "$metrics" --csv \
      "$bin/coalesce-bench" kernels --ops=gelu_layer_norm --dtypes=$dt \
      --shape=8192,4096 --variants=block_per_row --reps=1 --warmup=0 \
      --check_max_elements=0 >"$out/ncu-gelu-$dt.csv" 2>"$out/ncu-gelu-$dt.err"
    grep -E '"(gpu__|dram__|sm__|smsp__|launch__)' "$out/ncu-gelu-$dt.csv" |
      awk -F'","' '{print $(NF-2), $NF}' | sed "s/^/$dt /" | tr -d '"'
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
  python3 bench/size_chart.py "$out/kernels.json" --png "$out/size-chart.png" \
    >/dev/null || status=1
  tail -n 1 "$out/kernels.txt"
  sed -n '1,/<details>/p' "$out/report.md"
fi
if has tune; then
  echo "== selection quality sweep"
  shapes=${TUNE_SHAPES:-200}
  ops=${TUNE_OPS:-transpose layout gelu-ln gemm}
  dtypes=${TUNE_DTYPES:-float32}
  fit_seed=${TUNE_FIT_SEED:-7}
  read -r -a score_seeds <<<"${TUNE_SCORE_SEEDS:-${TUNE_COLD_SEED:-8 9}}"
  # Each op's shape classes, its default first (client/cli/tune_shapes.h).
  op_classes() {
    case $1 in
      transpose) echo "2d batched" ;;
      gemm) echo "plain transposed batched" ;;
      layout) echo "nchw_nhwc nhwc_nchw permutation aos_soa soa_aos" ;;
      *) echo default ;;
    esac
  }
  tune_classes() {  # $1: op; the classes to sweep
    local all spec
    all=$(op_classes "$1")
    [ "${TUNE_CLASSES:-}" = all ] && { echo "$all"; return; }
    for spec in ${TUNE_CLASSES:-}; do
      [ "${spec%%=*}" = "$1" ] && { echo "${spec#*=}" | tr , ' '; return; }
    done
    echo "${all%% *}"
  }
  runs=()  # "OP CLASS DTYPE TAG", TAG naming the files
  for op in $ops; do
    default_class=$(op_classes "$op"); default_class=${default_class%% *}
    for cls in $(tune_classes "$op"); do
      for dt in $dtypes; do
        tag=$op
        [ "$cls" = "$default_class" ] || tag+="-$cls"
        [ "$dt" = float32 ] || tag+="-$dt"
        runs+=("$op $cls $dt $tag")
      done
    done
  done
  # TUNE_TABLE: score that table (a file, or a folder such as deploy/tuning,
  # where the server loads the one measured on this GPU) instead of
  # fitting one first.
  fit_phases=1
  [ -z "${TUNE_TABLE:-}" ] || fit_phases=0
  phases=$((fit_phases + ${#score_seeds[@]} + (${TUNE_TUNED:-1} != 0)))
  if [ -n "${TUNE_TABLE:-}" ]; then
    echo "tune: $phases phases of ${#runs[@]} runs of $shapes shapes" \
      "(table $TUNE_TABLE, score seeds ${score_seeds[*]})"
  else
    echo "tune: $phases phases of ${#runs[@]} runs of $shapes shapes" \
      "(fit seed $fit_seed, score seeds ${score_seeds[*]})"
  fi
  t_tune=$SECONDS phase=0 fit_s=''
  sweep() {  # $1: phase name, $2: shape seed; writes table-$1.txt
    local t0=$SECONDS first='' run op cls dt tag n=0 max estimate
    phase=$((phase + 1))
    if [ -n "$fit_s" ]; then
      estimate="estimate $fit_s s, as the first phase took"
    else
      estimate="no estimate before the first phase"
    fi
    echo "phase $phase/$phases: $1, seed $2, ${#runs[@]} runs; $estimate"
    for run in "${runs[@]}"; do
      read -r op cls dt tag <<<"$run"
      n=$((n + 1))
      max=268435456
      [ "$op" = gemm ] && max=67108864
      "$bin/coalesce" --server="127.0.0.1:$port" tune "$op" --random_shapes="$shapes" \
        --shape_class="$cls" --dtype="$dt" \
        --shapes_seed="$2" --max_shape_bytes=$max --out="$out/table-$1-$tag.txt" \
        --shapes_out="$out/shapes-$1-$tag.tsv" \
        >"$out/tune-$1-$tag.txt" 2>/dev/null || status=1
      [ -f "$out/table-$1-$tag.txt" ] && first=${first:-$tag}
      echo "[$((SECONDS - t_tune)) s] $1 $tag ($n/${#runs[@]}):" \
        "$(grep 'within 10%' "$out/tune-$1-$tag.txt")"
    done
    echo "$1: $((SECONDS - t0)) s"
    # One table file: the first's header with every file's variants
    # (each op's variant set version, once), every file's entries.
    if [ -n "$first" ]; then
      head -n 3 "$out/table-$1-$first.txt" >"$out/table-$1.txt"
      echo "variants $(for run in "${runs[@]}"; do
        sed -n 's/^variants //p' "$out/table-$1-${run##* }.txt" 2>/dev/null
      done | tr , '\n' | awk 'NF && !seen[$0]++' | paste -sd,)" >>"$out/table-$1.txt"
      for run in "${runs[@]}"; do
        grep -s '^entry ' "$out/table-$1-${run##* }.txt" >>"$out/table-$1.txt"
      done
    fi
    kill "$server_pid"; wait "$server_pid" 2>/dev/null
  }
  # 1. The heuristic alone, over the fit shapes: their table is the one
  #    shipped (deploy/tuning/).
  if [ -n "${TUNE_TABLE:-}" ]; then
    table=$TUNE_TABLE
  else
    serve --autotune=off
    sweep heuristic "$fit_seed"
    fit_s=$((SECONDS - t_tune))
    table=$out/table-heuristic.txt
  fi
  # 2. Cold, per score seed: that table plus the heuristic, over shapes it
  #    was not fitted on.
  score_files=()
  for seed in "${score_seeds[@]}"; do
    name=cold
    [ "$seed" = "${score_seeds[0]}" ] || name=cold-$seed
    serve --autotune=off --tuning_table="$table"
    sweep "$name" "$seed"
    [ -n "$fit_s" ] || fit_s=$((SECONDS - t_tune))
    for run in "${runs[@]}"; do
      f="$out/shapes-$name-${run##* }.tsv"
      [ -f "$f" ] && score_files+=("$f")
    done
  done
  # 3. After tuning: the first score seed's shapes with their own
  #    measurements loaded, re-measured.
  if [ "${TUNE_TUNED:-1}" != 0 ]; then
    serve --autotune=off --tuning_table="$out/table-cold.txt"
    sweep tuned "${score_seeds[0]}"
  fi
  if [ ${#score_files[@]} -gt 0 ]; then
    python3 bench/selection_score.py --title="Selection on held-out shapes" \
      "${score_files[@]}" >"$out/selection-score.md" || status=1
    cat "$out/selection-score.md"
  else
    echo "tune: no cold phase wrote shapes to score"; status=1
  fi
fi
if has security; then
  echo "== security: abuse_test and tls_test against a CUDA server"
  for t in abuse_test tls_test; do
    [ -x "$bin/$t" ] || { echo "$t not in the bundle"; status=1; continue; }
    COALESCE_TEST_DEVICE=cuda COALESCE_SERVER_BINARY="$bin/coalesce-server" \
      COALESCE_CLI_BINARY="$bin/coalesce" PATH="$bin:$PATH" \
      "$bin/$t" 2>&1 | tee -a "$out/security.log" | grep -E '^\[ *(OK|FAILED|SKIPPED|PASSED) ' 
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
  done
fi
if has devices; then
  echo "== devices: --devices=0, and an ordinal this host lacks"
  serve --devices=0
  if [ -z "$port" ]; then
    echo "the server with --devices=0 did not come up"
    status=1
  else
    {
      "$bin/coalesce" --server="127.0.0.1:$port" info
      for _ in 1 2; do
        "$bin/coalesce" --server="127.0.0.1:$port" transpose \
          --shape=4096,4096 --report
      done
    } 2>&1 | tee "$out/devices.log"
    grep -q "ordinal 0" "$out/devices.log" || status=1
    kill "$server_pid"; wait "$server_pid" 2>/dev/null
  fi
  count=$(nvidia-smi -L | grep -c '^GPU ')
  timeout 120 "$bin/coalesce-server" --listen=127.0.0.1:0 \
    --metrics_listen=127.0.0.1:0 --devices="$count" >>"$out/devices.log" 2>&1
  rc=$?
  tail -n 2 "$out/devices.log"
  echo "--devices=$count on a host of $count GPUs: exit code $rc" |
    tee -a "$out/devices.log"
  [ $rc -ne 0 ] && [ $rc -ne 124 ] || status=1
fi
if has service; then
  # The service on this GPU: 64 MiB float32 GELU-LN with its input a
  # device-resident handle and its output kept as one, at concurrency 8,
  # against the kernel's own bandwidth (kernels mode, same shape); and 64 MiB
  # transposes inline against Echo. The bench waits for SERVING.
  echo "== service bench"
  serve
  for c in "gelu-ln handle,inline" "transpose inline,handle"; do
    read -r op transports <<<"$c"
    "$bin/coalesce-bench" service --server="127.0.0.1:$port" --op="$op" \
      --transport="$transports" --bytes=67108864 --concurrency=8 \
      --duration_s=4 --json="$out/service-$op.json" 2>/dev/null |
      tee "$out/service-$op.txt" | tail -n 4 || status=1
  done
  kill "$server_pid"; wait "$server_pid" 2>/dev/null
  # The kernel on the service's own problem (x alone) and with every
  # operand.
  for operands in "" "bias,residual,gamma,beta"; do
    "$bin/coalesce-bench" kernels --ops=gelu_layer_norm --dtypes=float32 \
      --shape=16384,1024 --gelu_operands="$operands" \
      --json="$out/service-kernel-gelu${operands:+-all-operands}.json" \
      2>/dev/null | tail -n 4 || status=1
  done
fi
# Nsight Systems, where the machine has it (not always on the PATH; the
# copy inside Nsight Compute's folder last).
find_nsys() {
  command -v nsys && return
  local all
  all=$(find /opt/nvidia /usr/local -name nsys -type f -perm -u+x 2>/dev/null)
  grep -v target-linux <<<"$all" | grep -m 1 . || grep -m 1 . <<<"$all"
}
# The collector that ships inside Nsight Compute writes only the raw
# stream (BASE.qdstrm); its importer turns that into BASE.nsys-rep.
nsys_report() {
  [ -f "$1.nsys-rep" ] || [ ! -f "$1.qdstrm" ] && return
  local importer
  importer=$(find /opt/nvidia /usr/local -name QdstrmImporter -type f 2>/dev/null |
    head -n 1)
  [ -n "$importer" ] &&
    LD_LIBRARY_PATH=$PWD/gpu-bundle/importer-lib:$LD_LIBRARY_PATH \
      "$importer" -i "$1.qdstrm" >"$1.import.log" 2>&1
  rm -f "$1.qdstrm"
}
# A server (server_bin, default the bundle's) under "$@" (a wrapper, or
# nothing) with the flags in the array server_flags, its stdout and stderr
# in $out/server$server_suffix.{out,log}; its ports in $port/$mport.
server_flags=() server_suffix=
serve_profiled() {
  local o=$out/server$server_suffix.out
  : >"$o"
  "$@" "${server_bin:-$bin/coalesce-server}" --listen=127.0.0.1:0 \
    --metrics_listen=127.0.0.1:0 ${server_flags[@]+"${server_flags[@]}"} \
    >"$o" 2>>"$out/server$server_suffix.log" &
  server_pid=$!
  port= mport=
  for _ in $(seq 1 600); do
    port=$(sed -n 's/.*listening on [^ ]*:\([0-9]*\).*/\1/p' "$o")
    mport=$(sed -n 's/.*metrics on [^ ]*:\([0-9]*\).*/\1/p' "$o")
    [ -n "$port" ] && [ -n "$mport" ] && break
    sleep 0.2
  done
}
# SIGTERM to the server itself (under nsys, the wrapper's child), then wait
# for the wrapper, which writes its report.
stop_profiled() {
  pkill -TERM -f "^$bin/coalesce-server " || kill "$server_pid"
  wait "$server_pid" 2>/dev/null
}
scrape() {
  python3 -c 'import sys, urllib.request
sys.stdout.write(urllib.request.urlopen(sys.argv[1]).read().decode())' \
    "http://127.0.0.1:$mport/metrics"
}
if has requests; then
  echo "== request path"
  server_bin=${REQUESTS_SERVER:-}
  transports=${REQUESTS_TRANSPORTS:-inline,handle,pipeline}
  duration=${REQUESTS_DURATION:-2}
  # Batching on (the server's default) runs every case; off
  # (--batch_ops=none) the cases at concurrency 64 and up, where requests
  # wait together and batching can change the figures.
  for batching in ${REQUESTS_BATCHING:-on off}; do
    suffix= batch_flags=
    case $batching in
      off) suffix=-batch-off batch_flags=--batch_ops=none ;;
      delay)
        suffix=-batch-delay
        batch_flags=--batch_max_delay_us=${REQUESTS_BATCH_DELAY_US:-300}
        ;;
    esac
    # shellcheck disable=SC2206  # REQUESTS_FLAGS: words
    server_flags=($batch_flags ${REQUESTS_FLAGS:-}) server_suffix=$suffix
    serve_profiled
    # name op transports bytes concurrency [--shape=...]
    while read -r name op trs bytes conc shape; do
      [ -n "$name" ] || continue
      # The case's transports that REQUESTS_TRANSPORTS allows.
      trs=$(tr , '\n' <<<"$trs" | grep -xF -f <(tr , '\n' <<<"$transports") |
        paste -sd, -)
      [ -n "$trs" ] || continue
      if [ -n "${REQUESTS_CASES:-}" ] &&
        ! tr , '\n' <<<"$REQUESTS_CASES" | grep -qxF "$name"; then
        continue
      fi
      if [ "$batching" != on ]; then
        conc=$(tr , '\n' <<<"$conc" | awk '$1 >= 64' | paste -sd, -)
      fi
      if [ -n "${REQUESTS_CONCURRENCY:-}" ]; then
        conc=$(tr , '\n' <<<"$conc" |
          grep -xF -f <(tr , '\n' <<<"$REQUESTS_CONCURRENCY") | paste -sd, -)
      fi
      [ -n "$conc" ] || continue
      echo "-- $name (batching $batching): $op $trs ${bytes} B x$conc"
      "$bin/coalesce-bench" service --server="127.0.0.1:$port" \
        --metrics="127.0.0.1:$mport" --op="$op" --transport="$trs" \
        --bytes="$bytes" --concurrency="$conc" --duration_s="$duration" \
        --warmup_s=0.5 --rounds="${REQUESTS_ROUNDS:-1}" --floor_bytes=1024 \
        ${shape:+--shape=$shape} \
        --json="$out/requests-$name$suffix.json" 2>/dev/null |
        tee "$out/requests-$name$suffix.txt" || status=1
      scrape >"$out/requests-$name$suffix.metrics" || true
    done <<EOF
t64k transpose inline,handle,pipeline 65536 1,64,256
t1k transpose inline,handle,pipeline 1024 1,16,64,256
t16m transpose handle,pipeline 16777216 64
ln16 gelu-ln handle,pipeline 65536 256 16,1024
t128 transpose handle,pipeline 65536 256 128,128
EOF
    kill "$server_pid"
    wait "$server_pid" 2>/dev/null
  done
  server_flags=() server_suffix= server_bin=
  # Every target of the request path against this run (the batching-on
  # server's files).
  python3 bench/request_targets.py "$out" --md "$out/requests-targets.md" ||
    true
fi
if has requests-ab; then
  echo "== request path, servers side by side"
  # Each round runs the requests step (batching on) once per server, the
  # order reversed every other round; bench/request_ab.py tables them.
  IFS=';' read -r -a ab_sets <<<"${REQUESTS_AB:?set REQUESTS_AB}"
  ab_args=()
  for round in $(seq 1 "${REQUESTS_AB_ROUNDS:-2}"); do
    order=("${ab_sets[@]}")
    if [ $((round % 2)) -eq 0 ]; then
      mapfile -t order < <(printf '%s\n' "${ab_sets[@]}" | tac)
    fi
    for set in "${order[@]}"; do
      label=${set%%=*}
      echo "-- round $round: $label (${set#*=})"
      server_var=REQUESTS_AB_SERVER_$label
      REQUESTS_SERVER="${!server_var:-}" REQUESTS_FLAGS="${set#*=}" \
        REQUESTS_BATCHING=on \
        "$0" "$out/ab-$label-$round" requests >"$out/ab-$label-$round.log" 2>&1 ||
        status=1
      ab_args+=("$label=$out/ab-$label-$round")
    done
  done
  python3 bench/request_ab.py "${ab_args[@]}" | tee "$out/requests-ab.md" ||
    status=1
fi
nsys_bin=
if has latency || has busy; then
  nsys_bin=$(find_nsys)
  echo "Nsight Systems: ${nsys_bin:-not found}"
  find /opt/nvidia /usr/local -name 'QdstrmImporter*' 2>/dev/null | head -n 2
fi
if has latency; then
  echo "== latency (concurrency 1, a fresh server per case)"
  # LATENCY_FLAG_SETS: server flag sets separated by ';', each a round of
  # its own (files lat-*-FLAGS); default one round with none.
  IFS=';' read -r -a flag_sets <<<"${LATENCY_FLAG_SETS:-}"
  [ ${#flag_sets[@]} -gt 0 ] || flag_sets=("")
  for flags in "${flag_sets[@]}"; do
  # shellcheck disable=SC2206  # the flags are words
  server_flags=($flags)
  sfx=${flags:+-$(tr -c 'A-Za-z0-9=_\n' '-' <<<"${flags// /}" | tr -d '\n')}
  [ -z "$flags" ] || echo "-- server flags: $flags"
  for bytes in ${LATENCY_BYTES-1024 65536}; do
    for tr in ${LATENCY_TRANSPORTS:-inline handle pipeline}; do
      name=lat-$tr-$bytes$sfx
      serve_profiled
      "$bin/coalesce-bench" service --server="127.0.0.1:$port" \
        --metrics="127.0.0.1:$mport" --op=transpose --transport="$tr" \
        --bytes="$bytes" --concurrency=1 --duration_s=2 --warmup_s=0.5 \
        --json="$out/$name.json" 2>/dev/null | tee "$out/$name.txt" || status=1
      scrape >"$out/$name.metrics" || true
      python3 bench/request_profile.py stages "$out/$name.metrics" |
        tee -a "$out/$name.txt"
      stop_profiled
    done
  done
  done
  server_flags=()
  if [ -n "$nsys_bin" ] && [ -z "${LATENCY_SKIP_NSYS:-}" ]; then
    for case in ${LATENCY_NSYS_CASES:-inline:65536}; do
      tr=${case%%:*} bytes=${case#*:}
      name=latency-nsys
      [ "$case" = inline:65536 ] || name=latency-nsys-$tr-$bytes
      serve_profiled "$nsys_bin" profile -t cuda,osrt --sample=none \
        --cpuctxsw=none -o "$out/$name" --force-overwrite true
      "$bin/coalesce-bench" service --server="127.0.0.1:$port" \
        --op=transpose --transport="$tr" --bytes="$bytes" --concurrency=1 \
        --duration_s=2 --warmup_s=0.5 2>/dev/null |
        tee "$out/$name.txt"
      stop_profiled
      nsys_report "$out/$name"
      "$nsys_bin" stats -q -r cuda_api_sum,osrt_sum -f csv \
        -o "$out/$name" "$out/$name.nsys-rep" >/dev/null 2>&1
      "$nsys_bin" stats -q -r cuda_api_trace -f csv \
        -o "$out/$name" "$out/$name.nsys-rep" >/dev/null 2>&1
      gzip -f "$out/${name}_cuda_api_trace.csv" 2>/dev/null
      [ -f "$out/$name.sqlite" ] &&
        python3 bench/request_profile.py timeline "$out/$name.sqlite" |
        tee "$out/$name-timeline.txt"
      # The whole trace (OS runtime calls with their threads and stacks):
      # LATENCY_KEEP_SQLITE=1.
      if [ -n "${LATENCY_KEEP_SQLITE:-}" ]; then
        xz -f -T0 "$out/$name.sqlite" 2>/dev/null
      else
        rm -f "$out/$name.sqlite"
      fi
      [ -n "${KEEP_NSYS_REP:-}" ] || rm -f "$out/$name.nsys-rep"
    done
  fi
fi
if has busy; then
  echo "== GPU busy: the server's ratio against Nsight Systems and nvidia-smi"
  server_bin=${BUSY_SERVER:-}
  # shellcheck disable=SC2206  # BUSY_FLAGS: the server's flags, words
  server_flags=(${BUSY_FLAGS:-}) server_suffix=
  [ -n "$nsys_bin" ] || echo "busy: Nsight Systems not found; nvidia-smi only"
  # name transport bytes concurrency [shape] [op]
  while read -r name tr bytes conc shape op; do
    wrap=()
    # shellcheck disable=SC2206  # BUSY_NSYS_FLAGS are words
    [ -z "$nsys_bin" ] || wrap=("$nsys_bin" profile -t cuda --sample=none \
      --cpuctxsw=none ${BUSY_NSYS_FLAGS:-} -o "$out/busy-$name" \
      --force-overwrite true)
    serve_profiled ${wrap[@]+"${wrap[@]}"}
    nvidia-smi --query-gpu=utilization.gpu --format=csv,noheader,nounits \
      -lms 100 >"$out/busy-$name-smi.csv" &
    smi_pid=$!
    "$bin/coalesce-bench" service --server="127.0.0.1:$port" \
      --metrics="127.0.0.1:$mport" --op="${op:-transpose}" --transport="$tr" \
      --bytes="$bytes" --concurrency="$conc" --duration_s=3 --warmup_s=0.5 \
      ${shape:+--shape=$shape} --json="$out/busy-$name.json" 2>/dev/null |
      tee "$out/busy-$name.txt" || status=1
    scrape | grep '^coalesce_device_event_overhead_seconds' |
      tee -a "$out/busy-$name.txt"
    kill "$smi_pid"
    stop_profiled
    # The samples while kernels ran (the bench's warm-up and phase).
    awk '$1 > 0 { s += $1; n++ } END { if (n) printf "nvidia-smi utilization.gpu, mean of %d nonzero 100 ms samples: %.1f%%\n", n, s / n }' \
      "$out/busy-$name-smi.csv" | tee -a "$out/busy-$name.txt"
    [ -n "$nsys_bin" ] || continue
    nsys_report "$out/busy-$name"
    "$nsys_bin" stats -q -r cuda_gpu_trace -f csv -o "$out/busy-$name" \
      "$out/busy-$name.nsys-rep" >>"$out/busy-$name.txt" 2>&1
    read -r seconds server_busy launches < <(python3 -c 'import json, sys
rows = [r for r in json.load(open(sys.argv[1]))["results"] if r["op"] != "echo"]
r = rows[-1]
print(r["seconds"], r["server_busy"], round(r["requests"] / (r["mean_batch"] or 1)))' \
      "$out/busy-$name.json")
    if [ ! -f "$out/busy-${name}_cuda_gpu_trace.csv" ]; then
      echo "busy: no Nsight Systems report for $name (busy-$name.import.log)" |
        tee -a "$out/busy-$name.txt"
      continue
    fi
    python3 bench/request_profile.py busy "$out/busy-${name}_cuda_gpu_trace.csv" \
      --window="$seconds" --server_busy="$server_busy" --launches="$launches" |
      tee -a "$out/busy-$name.txt"
    gzip -f "$out/busy-${name}_cuda_gpu_trace.csv"
    rm -f "$out/busy-$name.sqlite"
    # The gzipped trace keeps what the comparison used; a report is tens
    # of MB, too many to bring back from the machine.
    [ -n "${KEEP_NSYS_REP:-}" ] || rm -f "$out/busy-$name.nsys-rep"
  done <<EOF
t16m handle 16777216 64
t64k pipeline 65536 64
ln16 pipeline 65536 256 16,1024 gelu-ln
EOF
  server_bin=
fi
if has kserve; then
  echo "== KServe v2 (perf_analyzer) against coalesce.v1 (coalesce-bench)"
  pa=gpu-bundle/perf_analyzer/perf_analyzer
  if [ ! -x "$pa" ]; then
    echo "kserve: no perf_analyzer in the bundle (BUNDLE_PERF_ANALYZER=1)"
    status=1
  else
    # 64 requests of 32 MiB (GELU-LN's x and residual) must all queue.
    server_flags=(--max_queue_bytes=8589934592) server_suffix=-kserve
    serve_profiled
    duration=${KSERVE_DURATION:-3}
    # model native-op bytes shape perf_analyzer-flags (| for spaces)
    while read -r model op bytes shape pa_flags; do
      [ -n "$model" ] || continue
      if [ -n "${KSERVE_CASES:-}" ] &&
        ! grep -qw -- "$model-$bytes" <<<"$KSERVE_CASES"; then
        continue
      fi
      for conc in ${KSERVE_CONCURRENCY:-1 64}; do
        for round in $(seq "${KSERVE_ROUNDS:-1}"); do
          name=kserve-$model-$bytes-$conc
          r=; [ "$round" = 1 ] || r=-$round
          extra=()
          [ "$op" = echo ] || extra=(--shape="$shape" --all_operands)
          scrape >"$out/m0.txt"
          "$bin/coalesce-bench" service --server="127.0.0.1:$port" --op="$op" \
            --transport=inline --bytes="$bytes" --concurrency="$conc" \
            --duration_s="$duration" --warmup_s=0.5 "${extra[@]}" \
            --json="$out/$name-native$r.json" >/dev/null \
            2>>"$out/kserve.log" || status=1
          scrape >"$out/m1.txt"
          # shellcheck disable=SC2046  # the flags are words
          LD_LIBRARY_PATH=$PWD/gpu-bundle/perf_analyzer/lib:$LD_LIBRARY_PATH \
            "$pa" -m "$model" -i grpc -u "127.0.0.1:$port" \
            $(tr '|' ' ' <<<"$pa_flags") --concurrency-range "$conc" \
            --measurement-interval "$((duration * 1000))" \
            --stability-percentage 999 -f "$out/$name-v2$r.csv" \
            >"$out/$name-v2$r.txt" 2>&1 ||
            { status=1; tail -5 "$out/$name-v2$r.txt"; }
          scrape >"$out/m2.txt"
          if [ -n "${KSERVE_SAME_CLIENT:-}" ]; then
            # The same client over KServe v2: the protocol alone.
            "$bin/coalesce-bench" service --server="127.0.0.1:$port" \
              --op="$op" --transport=inline --bytes="$bytes" \
              --concurrency="$conc" --duration_s="$duration" --warmup_s=0.5 \
              "${extra[@]}" --protocol=kserve \
              --json="$out/$name-benchv2$r.json" >/dev/null \
              2>>"$out/kserve.log" || status=1
          fi
          # Each side's stage means, from the server's own histograms.
          if [ "$op" != echo ]; then
            for side in native:m0:m1 v2:m1:m2; do
              IFS=: read -r label from to <<<"$side"
              echo "$name$r $label:"
              python3 bench/request_profile.py stages "$out/$to.txt" \
                --since="$out/$from.txt" --op="$model" 2>&1
            done >>"$out/kserve-stages.txt"
          fi
        done
        echo "-- $model $bytes B x$conc done"
      done
    done <<EOF
identity echo 65536 128,128 --shape|INPUT0:128,128
identity echo 16777216 2048,2048 --shape|INPUT0:2048,2048
transpose transpose 65536 128,128 --shape|INPUT0:128,128
transpose transpose 16777216 2048,2048 --shape|INPUT0:2048,2048
convert_layout convert-layout 65536 1,16,32,32 --shape|INPUT0:1,16,32,32|--request-parameter|layout_from:NCHW:string|--request-parameter|layout_to:NHWC:string
convert_layout convert-layout 16777216 16,64,64,64 --shape|INPUT0:16,64,64,64|--request-parameter|layout_from:NCHW:string|--request-parameter|layout_to:NHWC:string
gelu_layer_norm gelu-ln 65536 16,1024 --shape|x:16,1024|--shape|bias:1024|--shape|residual:16,1024|--shape|gamma:1024|--shape|beta:1024
gelu_layer_norm gelu-ln 16777216 4096,1024 --shape|x:4096,1024|--shape|bias:1024|--shape|residual:4096,1024|--shape|gamma:1024|--shape|beta:1024
gemm gemm 65536 128,128 --shape|a:128,128|--shape|b:128,128|--shape|c:128,128
gemm gemm 16777216 2048,2048 --shape|a:2048,2048|--shape|b:2048,2048|--shape|c:2048,2048
EOF
    # The server's view of the run, and its gpu_uuid against nvidia-smi's.
    scrape >"$out/server-kserve-metrics.txt"
    uuid=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | head -1)
    if grep -q "gpu_uuid=\"$uuid\"" "$out/server-kserve-metrics.txt"; then
      echo "gpu_uuid on /metrics = nvidia-smi's ($uuid)"
    else
      echo "gpu_uuid on /metrics is not nvidia-smi's $uuid"
      status=1
    fi
    kill "$server_pid"
    wait "$server_pid" 2>/dev/null
    server_flags=() server_suffix=
    rm -f "$out/m0.txt" "$out/m1.txt" "$out/m2.txt"
    python3 bench/kserve_compare.py "$out" | tee "$out/kserve.md"
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
  fi
fi
if has ab; then
  echo "== builds side by side"
  rm -rf ab && tar -xJf ab.tar.xz
  names=${AB_NAMES:-$(ls ab)}
  for n in $names; do
    [ -x "ab/$n/cuda_conformance_test" ] || continue
    ops=$(cat "ab/$n/conformance-ops" 2>/dev/null || true)
    ops=${ops:-${COALESCE_CONFORMANCE_OPS:-}}
    COALESCE_CONFORMANCE_OPS=$ops \
      "ab/$n/cuda_conformance_test" --gtest_filter='*EveryVariant*:*CopyKernels*' 2>&1 |
      tail -n 3 | tee "$out/ab-$n-tests.log" | sed "s/^/$n: /"
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
    if [ -n "${AB_SANITIZE:-}" ]; then
      COALESCE_CONFORMANCE_OPS=$ops sanitize "ab/$n/cuda_conformance_test" "ab-$n-sanitizer"
    fi
  done
  reports=()
  for r in $(seq 1 "${AB_ROUNDS:-2}"); do
    for n in $names; do
      if [ -n "${AB_DEADLINE:-}" ] && [ "$SECONDS" -ge "$AB_DEADLINE" ]; then
        echo "round $r: $n skipped: past AB_DEADLINE=$AB_DEADLINE s"
        continue
      fi
      echo "round $r: $n"
      "ab/$n/coalesce-bench" kernels --json="$out/ab-$n-$r.json" "$@" \
        >"$out/ab-$n-$r.txt" || status=1
      reports+=("$n=$out/ab-$n-$r.json")
    done
  done
  python3 bench/ab_report.py "${reports[@]}" | tee "$out/ab.md"
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1  # a build failed the bench's check
fi
exit $status
