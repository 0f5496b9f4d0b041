#!/usr/bin/env bash
# Sanitizer builds and the tests that run under them; CPU only
# (-DCOALESCE_CUDA=OFF), as CI has no GPU.
#   scripts/sanitize.sh [asan|tsan|all]      (default all)
#   asan  build-asan/, AddressSanitizer + UndefinedBehaviorSanitizer (with
#         LeakSanitizer): the unit and e2e tests
#   tsan  build-tsan/, ThreadSanitizer: the unit tests of server/ and the
#         e2e tests but one (below)
# Only the executables the chosen tests run are built (their paths, read
# from `ctest --show-only=json-v1`, are ninja targets), through ccache when
# CCACHE_DIR is set. Every sanitizer report fails the process that found it
# and is also written under <build>/sanitizer-reports/, so that a report
# from a server an e2e test started (and stopped with a signal) fails the
# script too. One line per phase with its time.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
mode=${1:-all}
case $mode in
  asan | tsan | all) ;;
  *)
    echo "usage: $0 [asan|tsan|all]" >&2
    exit 2
    ;;
esac
jobs=$(nproc)
supp=$root/scripts/sanitizers
# OpenMP workers sleep when idle instead of spinning (as scripts/test.sh).
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}

t0=$SECONDS
phase_t0=$SECONDS
phase() { # phase NAME: the time since the previous phase ended
  echo "[sanitize] $1: $((SECONDS - phase_t0)) s (total $((SECONDS - t0)) s)"
  phase_t0=$SECONDS
}

# configure DIR SANITIZERS. -O1: tests at a bearable speed. -g1: line
# tables, inlined frames included, which is all a report's stack needs,
# for a sixth less compile time than -g.
configure() {
  local launcher=
  if [ -n "${CCACHE_DIR:-}" ]; then launcher=ccache; fi
  cmake -S . -B "$1" -G Ninja -DCOALESCE_CUDA=OFF \
    -DCOALESCE_SANITIZE="$2" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" \
    -DCMAKE_C_COMPILER_LAUNCHER="$launcher" \
    -DCMAKE_CXX_COMPILER_LAUNCHER="$launcher" >/dev/null
}

# select_tests DIR LABEL_REGEX EXCLUDE_REGEX [SUBDIR...]: the tests with a
# label that matches (and, where SUBDIRs are given, defined under one of
# them) and a name that EXCLUDE_REGEX (when not empty) does not match, and
# those labelled sanitizer (checks of the sanitizer build itself), as one
# line "^(a|b|...)$" for ctest -R; then the ninja targets that build what
# they run, one a line.
select_tests() {
  local dir=$1
  shift
  ctest --test-dir "$dir" --show-only=json-v1 |
    python3 -c '
import json, os, re, subprocess, sys
build = os.path.realpath(sys.argv[1])
labels = re.compile(sys.argv[2])
exclude = re.compile(sys.argv[3]) if sys.argv[3] else None
subdirs = [os.path.join(build, s) for s in sys.argv[4:]]
names, files = [], []
targets = {line.split(":")[0] for line in subprocess.run(
    ["ninja", "-C", build, "-t", "targets", "all"], check=True,
    capture_output=True, text=True).stdout.splitlines()}
for t in json.load(sys.stdin)["tests"]:
    props = {p["name"]: p["value"] for p in t.get("properties", [])}
    wd = props.get("WORKING_DIRECTORY", "")
    own = props.get("LABELS", [])
    chosen = (any(labels.fullmatch(l) for l in own)
              and not (exclude and exclude.fullmatch(t["name"]))
              and (not subdirs or any(wd == s or wd.startswith(s + "/")
                                      for s in subdirs)))
    if not chosen and "sanitizer" not in own:
        continue
    names.append(re.escape(t["name"]))
    # A test not built yet has no command in this listing: a test named
    # after its executable target (coalesce_cc_test) is built by name.
    if t["name"] in targets:
        files.append(t["name"])
    for arg in t.get("command", []):
        for path in re.findall(re.escape(build) + r"/[\w./+-]+", arg):
            rel = os.path.relpath(path, build)
            if rel not in files:
                files.append(rel)
if not names:
    sys.exit("no tests selected")
print("^(" + "|".join(names) + ")$")
print("\n".join(files))
' "$dir" "$@"
}

# run_tests NAME DIR TEST_REGEX: ctest, then fail on any report file.
run_tests() {
  local name=$1 dir=$2 regex=$3 rc=0
  rm -rf "$dir/sanitizer-reports"
  mkdir -p "$dir/sanitizer-reports"
  ctest --test-dir "$dir" --output-on-failure -j "$jobs" -R "$regex" ||
    rc=$?
  local reports
  reports=$(find "$dir/sanitizer-reports" -type f -size +0 | sort)
  if [ -n "$reports" ]; then
    echo "[sanitize] $name: sanitizer reports:" >&2
    for f in $reports; do
      echo "---- $f" >&2
      cat "$f" >&2
    done
    rc=1
  fi
  phase "$name tests"
  return "$rc"
}

# sanitize NAME DIR SANITIZERS LABEL_REGEX EXCLUDE_REGEX [SUBDIR...]: the
# arguments after SANITIZERS select the tests (select_tests). Called where set -e
# does not apply (cmd || status=1), hence every step's || return.
sanitize() {
  local name=$1 dir=$2 sanitizers=$3
  shift 3
  configure "$dir" "$sanitizers" || return
  phase "$name configure"
  local selection regex
  selection=$(select_tests "$dir" "$@") || return
  regex=$(head -n1 <<<"$selection")
  # shellcheck disable=SC2046
  ninja -C "$dir" -j "$jobs" $(tail -n +2 <<<"$selection") || return
  phase "$name build"
  run_tests "$name" "$dir" "$regex"
}

status=0
if [ "$mode" = asan ] || [ "$mode" = all ]; then
  reports=$root/build-asan/sanitizer-reports/report
  # Every finding stops its process with a report (log_path adds .PID).
  # detect_stack_use_after_return: references to dead stack frames, which
  # the request paths' views and spans could otherwise hide.
  # handle_sigbus=0: SIGBUS belongs to the shared-memory mapping guard, and
  # one it does not own must still end the process (a death test), by the
  # signal as without ASan.
  # quarantine_size_mb=16: freed blocks wait there before reuse, so that a
  # use after free is caught; the default 256 MiB would count in the abuse
  # suite's bounds on the server's memory (+48 MiB), as if it were ours.
  export ASAN_OPTIONS="halt_on_error=1:detect_leaks=1:detect_stack_use_after_return=1:check_initialization_order=1:strict_init_order=1:handle_sigbus=0:quarantine_size_mb=16:log_path=$reports"
  export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:log_path=$reports"
  export LSAN_OPTIONS="suppressions=$supp/lsan.supp:print_suppressions=0"
  sanitize asan build-asan address,undefined 'unit|e2e' '' || status=1
  unset ASAN_OPTIONS UBSAN_OPTIONS LSAN_OPTIONS
fi
if [ "$mode" = tsan ] || [ "$mode" = all ]; then
  reports=$root/build-tsan/sanitizer-reports/report
  # libgomp is not instrumented, so TSan cannot see its barriers and would
  # report every OpenMP loop. OMP_THREAD_LIMIT=1 caps every team at its
  # encountering thread, which omp_set_num_threads and num_threads clauses
  # (the CPU backend uses both) cannot lift: kernels run serially on the
  # request's own thread, and the threads left are the server's own.
  # OpenBLAS's own threads touch our buffers only inside the library, where
  # TSan sees nothing (below).
  export OMP_THREAD_LIMIT=1
  # Debian's gRPC, protobuf and Abseil are not instrumented either. TSan
  # sees none of their loads and stores, nor the lock-free queues by which
  # gRPC hands a call from thread to thread; ignore_noninstrumented_modules
  # makes it ignore their malloc, free and memcpy too, which it would
  # otherwise count as accesses racing with ours. What stays checked: every
  # access in our code, with absl::Mutex visible through
  # scripts/sanitizers/tsan_absl_mutex.cc (see also the generated protobuf
  # code in the top-level CMakeLists.txt). What is left to suppress is
  # gRPC's own inline callback code (scripts/sanitizers/tsan.supp says
  # what and why).
  # exitcode 66: a test with a report fails even when it passed.
  # handle_sigbus=0: as for asan.
  export TSAN_OPTIONS="ignore_noninstrumented_modules=1:halt_on_error=0:exitcode=66:second_deadlock_stack=1:handle_sigbus=0:suppressions=$supp/tsan.supp:log_path=$reports"
  # metrics_prometheus_dashboard drives traffic for a fixed time and needs
  # several rounds of it for its rates; TSan's slowdown leaves one (it runs
  # in the asan build).
  sanitize tsan build-tsan thread 'unit|e2e' 'metrics_prometheus_dashboard' \
    server tests || status=1
  unset OMP_THREAD_LIMIT TSAN_OPTIONS
fi
echo "[sanitize] $mode: $([ "$status" = 0 ] && echo clean || echo FAILED)" \
  "in $((SECONDS - t0)) s"
exit "$status"
