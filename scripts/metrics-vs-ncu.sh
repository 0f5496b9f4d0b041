#!/usr/bin/env bash
# Checks the exported metrics against Nsight Compute, on the GPU machine,
# from the repo root with gpu-bundle.tar.xz carried:
#   scripts/metrics-vs-ncu.sh OUT_DIR
# 1. A server answers each op's request twice with --report (the first is
#    cold and kept out of the metrics); the second gives the variant it
#    chose and the achieved bandwidth and theoretical occupancy it exports
#    (the report and /metrics carry the same computed figures).
# 2. Nsight Compute profiles that variant on the same problem in a separate
#    process (a process holding CUPTI cannot also be profiled by ncu):
#    dram__bytes.sum.per_second, gpu__time_duration.sum,
#    sm__maximum_warps_per_active_cycle_pct.
# 3. The same requests in a server running under ncu (cache-control none,
#    then all): the kernel of each op's third request, profiled in place.
# 4. A server sampling every launch (--profile_sampling): its achieved
#    occupancy and DRAM throughput per op, from /metrics.
# 5. NVML GPM's device-level figures during a back-to-back loop of each
#    variant, against step 4's, and the gpu_uuid label against nvidia-smi.
# 6. A table of all of them, with the ratios, in OUT_DIR/metrics-vs-ncu.md.
set -uo pipefail
out=${1:?usage: metrics-vs-ncu.sh OUT_DIR}
mkdir -p "$out"
# shellcheck source=scripts/gpu-env.sh
. "$(dirname "$0")/gpu-env.sh"
serve
cli() { "$bin/coalesce" --server="127.0.0.1:$port" "$@" --report; }
# Every case's request three times, answers discarded.
send_cases() {
  local c name cli_args bench_args
  for c in "${cases[@]}"; do
    IFS='|' read -r name cli_args bench_args <<<"$c"
    for _ in 1 2 3; do
      # shellcheck disable=SC2086
      cli $cli_args >/dev/null 2>&1
    done
  done
}
# name | CLI arguments | coalesce-bench arguments for the same problem
cases=(
  "transpose|transpose --shape=8192,8192|--ops=transpose --shape=1,8192,8192 --dtypes=float32"
  "layout|layout --shape=64,256,56,56 --from=NCHW --to=NHWC|--ops=convert_layout --shape=64,256,56,56 --dtypes=float32"
  "gelu_layer_norm|gelu-ln --shape=8192,4096|--ops=gelu_layer_norm --shape=8192,4096 --dtypes=float32"
  "gemm|gemm --m=4096 --n=4096 --k=4096 --dtype=bfloat16|--ops=gemm --shape=1,4096,4096,4096 --dtypes=bfloat16"
)
# The SM and memory clocks every 10 ms while the server runs: whether a lone
# request's kernel starts on a clock that idled down.
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,utilization.gpu \
  --format=csv,noheader -lms 10 >"$out/clocks.csv" 2>/dev/null &
clocks=$!
for c in "${cases[@]}"; do
  IFS='|' read -r name cli_args bench_args <<<"$c"
  # The first call is cold (module loading, cuBLASLt's plan; its report
  # says so and the metrics skip it); the third is compared.
  # shellcheck disable=SC2086
  cli $cli_args >"$out/report-$name-cold.txt" 2>&1
  # shellcheck disable=SC2086
  cli $cli_args >/dev/null 2>&1
  # shellcheck disable=SC2086
  cli $cli_args >"$out/report-$name.txt" 2>&1
done
kill "$server_pid"; wait "$server_pid" 2>/dev/null
kill $clocks; wait $clocks 2>/dev/null
echo "SM clock (MHz) while the server ran: $(cut -d, -f2 "$out/clocks.csv" |
  tr -dc '0-9\n' | sort -n | awk '{a[NR]=$1} END {if (NR) print "min", a[1], "median", a[int((NR+1)/2)], "max", a[NR]}')"
metrics=gpu__time_duration.sum,dram__bytes.sum.per_second,sm__maximum_warps_per_active_cycle_pct,sm__warps_active.avg.pct_of_peak_sustained_active
for c in "${cases[@]}"; do
  IFS='|' read -r name cli_args bench_args <<<"$c"
  variant=$(sed -n 's/^  variant: *//p' "$out/report-$name.txt")
  # The first launch that is not the start-up copy probe or an input fill.
  # shellcheck disable=SC2086
  ncu --clock-control none --kernel-name 'regex:^(?!.*(CopyKernel|CopyFlatKernel|FillKernel)).*$' \
    --launch-count 1 --metrics "$metrics" --csv \
    "$bin/coalesce-bench" kernels $bench_args "--variants=$variant\$" \
    --reps=1 --warmup=0 --check_max_elements=0 \
    >"$out/ncu-$name.csv" 2>"$out/ncu-$name.err"
done
# 3. The same requests again, in a server running under ncu: the kernels
#    of each op's third request, profiled where the exported figure was
#    measured (right after the request's own host-to-device copy), once with
#    the caches as the request left them (--cache-control none) and once
#    flushed first (all, ncu's default and the bench comparison's setting).
#    The server's own figures are not used here: profiling slows them.
for cache in none all; do
  # shellcheck disable=SC2054  # the commas separate ncu's metric names
  serve_wrap=(ncu --clock-control none --cache-control "$cache"
    --kernel-name 'regex:^(?!.*(CopyKernel|CopyFlatKernel|FillKernel)).*$'
    --metrics gpu__time_duration.sum,dram__bytes.sum.per_second --csv
    --log-file "$out/ncu-server-$cache.csv")
  serve
  serve_wrap=()
  if [ -z "$port" ]; then
    echo "the server under ncu did not come up (cache-control $cache)" >&2
  else
    send_cases
  fi
  # The server, not ncu, gets the signal: ncu writes its results when the
  # profiled process exits.
  pkill -TERM -x coalesce-server
  wait "$server_pid" 2>/dev/null
done
# 4. A server sampling every launch with CUPTI (--profile_sampling): each
#    op's requests again, then its /metrics, whose achieved occupancy and
#    DRAM throughput (means over the op's sampled requests) go beside ncu's.
serve --profile_sampling=sampled --profile_sampling_fraction=1
mport=$(sed -n 's/.*metrics on [^ ]*:\([0-9]*\).*/\1/p' "$out/server.out")
send_cases
curl -s "http://127.0.0.1:$mport/metrics" >"$out/metrics-sampled.txt"
kill "$server_pid"; wait "$server_pid" 2>/dev/null
# 5. NVML GPM, the device-level figures (--profile_sampling=gpm): while
#    coalesce-bench runs each op's chosen variant back to back in another
#    process for about 5 s (no same-size copies beside it), /metrics is read
#    every 0.25 s; the readings from the middle half of the loop are
#    compared with the CUPTI figures of step 4. The server's gpu_uuid label
#    is compared with nvidia-smi's.
serve --profile_sampling=gpm
mport=$(sed -n 's/.*metrics on [^ ]*:\([0-9]*\).*/\1/p' "$out/server.out")
"$bin/coalesce" --server="127.0.0.1:$port" info >"$out/info.txt" 2>&1
nvidia-smi --query-gpu=uuid --format=csv,noheader >"$out/nvidia-smi-uuid.txt"
for c in "${cases[@]}"; do
  IFS='|' read -r name cli_args bench_args <<<"$c"
  variant=$(sed -n 's/^  variant: *//p' "$out/report-$name.txt")
  us=$(sed -n 's/^  kernel: *\([0-9.]*\) us.*/\1/p' "$out/report-$name.txt")
  # Each run is timed twice (per launch, then back to back).
  reps=$(awk -v us="${us:-100}" 'BEGIN {r = int(5e6 / (2 * us + 3)); print (r < 100 ? 100 : r)}')
  echo "== GPM: $name ($variant), $reps runs"
  t0=$(date +%s.%N)
  # shellcheck disable=SC2086
  "$bin/coalesce-bench" kernels $bench_args "--variants=$variant\$" \
    --reps="$reps" --warmup=5 --check_max_elements=0 --same_size_copy=false \
    >"$out/gpm-loop-$name.txt" 2>&1 &
  loop=$!
  : >"$out/gpm-$name.tsv"
  while kill -0 "$loop" 2>/dev/null; do
    t=$(date +%s.%N)
    curl -s "http://127.0.0.1:$mport/metrics" | awk -v t="$t" '
      /^coalesce_device_sm_occupancy_ratio\{/ {print t, "occupancy", $NF}
      /^coalesce_device_dram_bytes_per_second\{/ {print t, "dram", $NF}' \
      >>"$out/gpm-$name.tsv"
    sleep 0.25
  done
  wait "$loop"
  echo "$t0 $(date +%s.%N)" >"$out/gpm-$name.span"
done
curl -s "http://127.0.0.1:$mport/metrics" >"$out/metrics-gpm.txt"
kill "$server_pid"; wait "$server_pid" 2>/dev/null
python3 - "$out" <<'PY'
import csv, re, sys
out = sys.argv[1]
# Bandwidth: the exported figure is the op's minimum bytes over the kernel
# time, ncu's the DRAM bytes it counted over its duration; they may differ
# only where the kernel moves more than the minimum (GEMM re-reads its
# operands), so the kernel times are compared too.
def ncu_rows(path):
    """(ID, kernel name, {metric: (value, unit)}) per profiled launch."""
    launches = {}
    try:
        hdr = None
        for r in csv.reader(open(path)):
            if "Metric Name" in r:
                hdr = r
            elif hdr and len(r) == len(hdr):
                d = dict(zip(hdr, r))
                key = int(d["ID"])
                launches.setdefault(key, [d["Kernel Name"], {}])[1][
                    d["Metric Name"]] = (float(d["Metric Value"].replace(",", "")), d["Metric Unit"])
    except (OSError, ValueError, KeyError):
        pass
    return [(k, v[0], v[1]) for k, v in sorted(launches.items())]

def base_name(kernel):
    """The function's own name: ncu writes the same kernel as
    "void coalesce::<unnamed>::K<4, 64, 32>(...)" in one process and
    "void unnamed>::K<4, 64, 32>(...)" in another."""
    head = re.split(r"[<(]", kernel.replace("<unnamed>", "unnamed"), 1)[0]
    words = re.findall(r"\w+", head)
    return words[-1] if words else kernel

def micros(m):
    dur = m.get("gpu__time_duration.sum")
    tscale = {"ns": 1e-3, "nsecond": 1e-3, "us": 1, "usecond": 1, "ms": 1e3, "msecond": 1e3}
    return dur[0] * tscale.get(dur[1], float("nan")) if dur else float("nan")

# The kernel of each op's third request in the profiled servers: the op's
# kernel (named by the bench profile) is looked for in launch order, three
# times per op, the ops in the order they were sent.
names = ["transpose", "layout", "gelu_layer_norm", "gemm"]
# The bench profile of each op: one launch, (ID, kernel name, metrics).
bench = {}
for name in names:
    rows_ = ncu_rows(f"{out}/ncu-{name}.csv")
    bench[name] = rows_[0] if rows_ else (None, None, {})
bench_kernel = {name: base_name(b[1]) if b[1] else None
                for name, b in bench.items()}
in_server = {}
for cache in ["none", "all"]:
    launches = ncu_rows(f"{out}/ncu-server-{cache}.csv")
    pos = 0
    for name in names:
        seen = 0
        while pos < len(launches) and seen < 3:
            if base_name(launches[pos][1]) == bench_kernel[name]:
                seen += 1
                if seen == 3:
                    in_server[(name, cache)] = micros(launches[pos][2])
            pos += 1

# Means of the sampled histograms per variant: _sum / _count.
sampled = {}
try:
    for line in open(f"{out}/metrics-sampled.txt"):
        m = re.match(r'coalesce_kernel_(achieved_occupancy_ratio|sampled_dram_bytes_per_second)_(sum|count)\{.*variant="([^"]+)".*\} (\S+)', line)
        if m:
            d = sampled.setdefault(m.group(3), {})
            key = (m.group(1), m.group(2))
            d[key] = d.get(key, 0.0) + float(m.group(4))
except OSError:
    pass

def sampled_mean(variant, family):
    d = sampled.get(variant, {})
    n = d.get((family, "count"), 0)
    return d.get((family, "sum"), 0) / n if n else float("nan")

rows = ["| op | variant | exported GB/s | ncu DRAM GB/s | ratio | exported kernel us | ncu duration us | ratio | ncu in server, caches as left / flushed, us | ratio to exported | exported occupancy | ncu max warps % | ncu achieved warps % | sampled achieved occupancy % | sampled DRAM GB/s |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
for name in names:
    rep = open(f"{out}/report-{name}.txt").read()
    variant = re.search(r"variant: *(\S+)", rep)
    gbps = re.search(r"([0-9.]+) GB/s", rep)
    occ = re.search(r"occupancy ([0-9.]+)", rep)
    kern = re.search(r"kernel: *([0-9.]+) us", rep)
    m = bench[name][2]
    dram = m.get("dram__bytes.sum.per_second")
    # ncu writes "byte/s" or "byte/second", with a K/M/G/T prefix.
    unit = dram[1].replace("/second", "/s") if dram else ""
    scale = {"byte/s": 1e-9, "Kbyte/s": 1e-6, "Mbyte/s": 1e-3,
             "Gbyte/s": 1, "Tbyte/s": 1e3}
    dram_gbps = dram[0] * scale.get(unit, float("nan")) if dram else float("nan")
    exported = float(gbps.group(1)) if gbps else float("nan")
    ncu_us = micros(m)
    exp_us = float(kern.group(1)) if kern else float("nan")
    srv_none = in_server.get((name, "none"), float("nan"))
    srv_all = in_server.get((name, "all"), float("nan"))
    rows.append("| %s | %s | %.0f | %.0f | %.3f | %.1f | %.1f | %.3f | %.1f / %.1f | %.3f | %s | %s | %s | %.1f | %.0f |" % (
        name, variant.group(1) if variant else "-", exported, dram_gbps,
        exported / dram_gbps if dram_gbps == dram_gbps and dram_gbps else float("nan"),
        exp_us, ncu_us, ncu_us / exp_us if exp_us == exp_us and exp_us else float("nan"),
        srv_none, srv_all, srv_none / exp_us if exp_us == exp_us and exp_us else float("nan"),
        "%.1f%%" % (100 * float(occ.group(1))) if occ else "-",
        "%.1f" % m["sm__maximum_warps_per_active_cycle_pct"][0] if "sm__maximum_warps_per_active_cycle_pct" in m else "-",
        "%.1f" % m["sm__warps_active.avg.pct_of_peak_sustained_active"][0] if "sm__warps_active.avg.pct_of_peak_sustained_active" in m else "-",
        100 * sampled_mean(variant.group(1) if variant else "", "achieved_occupancy_ratio"),
        1e-9 * sampled_mean(variant.group(1) if variant else "", "sampled_dram_bytes_per_second")))
text = "\n".join(rows) + "\n"

# NVML GPM against CUPTI: points of 100% occupancy and of the theoretical
# DRAM bandwidth (coalesce info's), within 10 each.
theoretical = float("nan")
try:
    m = re.search(r"theoretical ([0-9.]+) GB/s", open(f"{out}/info.txt").read())
    theoretical = float(m.group(1)) if m else float("nan")
except OSError:
    pass
def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2] if xs else float("nan")
gpm_rows = ["| op | variant | CUPTI achieved occupancy %% | GPM SM occupancy %% | points | CUPTI DRAM GB/s | GPM DRAM GB/s | points of %.0f GB/s | within 10 |" % theoretical,
            "|---|---|---:|---:|---:|---:|---:|---:|---|"]
for name in names:
    variant = re.search(r"variant: *(\S+)", open(f"{out}/report-{name}.txt").read())
    variant = variant.group(1) if variant else ""
    readings = {"occupancy": [], "dram": []}
    try:
        t0, t1 = map(float, open(f"{out}/gpm-{name}.span").read().split())
        for line in open(f"{out}/gpm-{name}.tsv"):
            t, kind, value = line.split()
            if t0 + 0.25 * (t1 - t0) <= float(t) <= t0 + 0.75 * (t1 - t0):
                readings[kind].append(float(value))
    except (OSError, ValueError):
        t0 = t1 = float("nan")
    cupti_occ = 100 * sampled_mean(variant, "achieved_occupancy_ratio")
    cupti_dram = 1e-9 * sampled_mean(variant, "sampled_dram_bytes_per_second")
    gpm_occ = 100 * median(readings["occupancy"])
    gpm_dram = 1e-9 * median(readings["dram"])
    occ_pts = gpm_occ - cupti_occ
    dram_pts = 100 * (gpm_dram - cupti_dram) / theoretical
    ok = abs(occ_pts) <= 10 and abs(dram_pts) <= 10
    gpm_rows.append("| %s | %s | %.1f | %.1f | %+.1f | %.0f | %.0f | %+.1f | %s |" % (
        name, variant or "-", cupti_occ, gpm_occ, occ_pts, cupti_dram, gpm_dram,
        dram_pts, "yes" if ok else "NO"))
text += ("\nNVML GPM (whole device, median of the readings in the middle half "
         "of a 5 s back-to-back loop) against CUPTI (the server's sampled "
         "requests):\n\n" + "\n".join(gpm_rows) + "\n")

exported = sorted(set(re.findall(r'gpu_uuid="([^"]*)"',
                                 open(f"{out}/metrics-gpm.txt").read())))
try:
    smi = open(f"{out}/nvidia-smi-uuid.txt").read().split()
except OSError:
    smi = []
text += "\ngpu_uuid: %s; nvidia-smi: %s; %s\n" % (
    ", ".join(exported) or "-", ", ".join(smi) or "-",
    "equal" if exported and exported == sorted(smi) else "DIFFERENT")
open(f"{out}/metrics-vs-ncu.md", "w").write(text)
print(text)
PY
