#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/*_fuzzer.cc) into build-fuzz/ with clang,
# AddressSanitizer and UndefinedBehaviorSanitizer (COALESCE_FUZZ=ON, CPU
# only), then runs each on a fresh copy of its corpus (fuzz/corpus/<target>/)
# for a bounded time, and prints one line per target: executions, rate,
# corpus size before and after, result.
#   scripts/fuzz.sh [--seconds=N | --runs=N | --long] [--jobs=N] [TARGET...]
#   --seconds=N  run each target N seconds (default 20)
#   --runs=N     run each target for N executions instead
#   --long       run each target 10 minutes
#   --jobs=N     run N targets at once (default 1; nproc to use every core)
#   TARGET...    only these (default every fuzz/*_fuzzer.cc)
# Exits non-zero when any target crashes, leaks, runs out of memory or
# exceeds the time one input may take; the input that did it is kept under
# build-fuzz/fuzz-runs/<target>/ (never in the source tree) and its path
# printed with the command that replays it. Compiles through ccache when
# the caller sets CCACHE_DIR. BUILD_DIR overrides build-fuzz.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
build=${BUILD_DIR:-build-fuzz}

seconds=20
runs=""
jobs=1
targets=()
for arg in "$@"; do
  case $arg in
    --seconds=*) seconds=${arg#*=} ;;
    --runs=*) runs=${arg#*=} ;;
    --long) seconds=600 ;;
    --jobs=*) jobs=${arg#*=} ;;
    -h | --help)
      sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
      exit 0
      ;;
    -*)
      echo "fuzz.sh: unknown option $arg (see --help)" >&2
      exit 2
      ;;
    *) targets+=("$arg") ;;
  esac
done
for n in "$seconds" "$jobs" ${runs:+"$runs"}; do
  if ! [[ $n =~ ^[1-9][0-9]*$ ]]; then
    echo "fuzz.sh: '$n' is not a positive number" >&2
    exit 2
  fi
done
if [ ${#targets[@]} -eq 0 ]; then
  for f in fuzz/*_fuzzer.cc; do
    targets+=("$(basename "$f" .cc)")
  done
fi
for t in "${targets[@]}"; do
  if [ ! -f "fuzz/$t.cc" ] || [ ! -d "fuzz/corpus/$t" ]; then
    echo "fuzz.sh: no target $t (fuzz/$t.cc and fuzz/corpus/$t/)" >&2
    exit 2
  fi
done
for tool in clang clang++ cmake ninja; do
  if ! command -v $tool >/dev/null; then
    echo "fuzz.sh: $tool not found; scripts/install-deps.sh installs it" >&2
    exit 2
  fi
done

t0=$SECONDS
launcher=""
if [ -n "${CCACHE_DIR:-}" ] && command -v ccache >/dev/null; then
  launcher=ccache
fi
CC=clang CXX=clang++ cmake -S . -B "$build" -G Ninja \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCOALESCE_CUDA=OFF -DCOALESCE_FUZZ=ON \
  -DCMAKE_C_COMPILER_LAUNCHER="$launcher" \
  -DCMAKE_CXX_COMPILER_LAUNCHER="$launcher" >/dev/null
ninja -C "$build" -j "$(nproc)" "${targets[@]}" >"$build/fuzz-build.log" 2>&1 || {
  tail -n 40 "$build/fuzz-build.log"
  echo "[fuzz] build failed (log: $build/fuzz-build.log)"
  exit 1
}
echo "[fuzz] build: $((SECONDS - t0)) s${launcher:+ (through ccache)}"

if [ -n "$runs" ]; then
  limit=(-runs="$runs")
  budget="$runs runs"
else
  limit=(-max_total_time="$seconds")
  budget="$seconds s"
fi
# Sanitizer findings abort with a stack; a leak fails the run like a crash.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
runs_dir=$root/$build/fuzz-runs

# run TARGET: fuzzes it, then prints its line; returns non-zero on a
# finding.
run() {
  local t=$1 dir=$runs_dir/$1 start=$SECONDS
  rm -rf "$dir"
  mkdir -p "$dir/corpus" "$dir/findings"
  cp "fuzz/corpus/$t"/* "$dir/corpus/"
  local before
  before=$(find "$dir/corpus" -type f | wc -l)
  local rc=0
  # From the run folder: libFuzzer writes nothing into the source tree.
  (cd "$dir" && "$root/$build/fuzz/$t" "${limit[@]}" -timeout=10 \
    -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$dir/findings/" corpus >log 2>&1) || rc=$?
  local execs rate after finding result
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$dir/log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$dir/log" | tail -1)
  after=$(find "$dir/corpus" -type f | wc -l)
  finding=$(find "$dir/findings" -type f | head -1)
  if [ "$rc" -eq 0 ] && [ -z "$finding" ]; then
    result=ok
  else
    case $(basename "${finding:-none}") in
      crash-*) result="CRASH" ;;
      leak-*) result="LEAK" ;;
      timeout-*) result="TIMEOUT" ;;
      oom-* | slow-unit-*) result="OUT OF MEMORY" ;;
      *) result="FAILED (exit $rc)" ;;
    esac
  fi
  printf '[fuzz] %-24s %10s execs %8s execs/s  corpus %4s -> %-5s %s (%d s)\n' \
    "$t" "${execs:-?}" "${rate:-?}" "$before" "$after" "$result" \
    $((SECONDS - start))
  if [ "$result" != ok ]; then
    grep -m1 -E "ERROR: |check failed|runtime error" "$dir/log" |
      sed 's/^/[fuzz]   /' || true
    echo "[fuzz]   log: $dir/log"
    if [ -n "$finding" ]; then
      echo "[fuzz]   input: $finding"
      echo "[fuzz]   replay: $build/fuzz/$t $finding"
    fi
    return 1
  fi
}

echo "[fuzz] ${#targets[@]} targets, $budget each, $jobs at a time"
t1=$SECONDS
failed=0
running=0
for t in "${targets[@]}"; do
  if [ "$running" -ge "$jobs" ]; then
    wait -n || failed=1
    running=$((running - 1))
  fi
  run "$t" &
  running=$((running + 1))
done
while [ "$running" -gt 0 ]; do
  wait -n || failed=1
  running=$((running - 1))
done
echo "[fuzz] run: $((SECONDS - t1)) s, total $((SECONDS - t0)) s"
if [ "$failed" -ne 0 ]; then
  echo "[fuzz] FAILED: findings above"
  exit 1
fi
echo "[fuzz] no findings"
