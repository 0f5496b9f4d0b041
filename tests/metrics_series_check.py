#!/usr/bin/env python3
"""How many series coalesce-server exports, and whether docs/METRICS.md
lists exactly what it serves (standard library only).

Starts the real coalesce-server (CPU backend, port 0 of 127.0.0.1) and, with
the real `coalesce` CLI, runs a mixed workload: every kernel variant of
every op, forced, in every dtype at three sizes (le_1MiB, le_4MiB and
le_16MiB moved), every other RPC, errors, and stored tensors. Then:

  * the series on /metrics (sample lines) must be at most --max_series
    with default flags; the count with --metrics_detail=full is reported;
  * every family served must have its row in METRICS.md's tables, and every
    family there must be served, except those this backend cannot produce
    (ABSENT_ON_CPU, each with its reason).

Exit status 0 on success, 1 on failure. Bounded in time (--deadline).
"""

import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from metrics_e2e import Deadline, Server, drive_traffic  # noqa: E402

# Families METRICS.md lists that a CPU-backend server never serves.
ABSENT_ON_CPU = {
    "coalesce_device_pool_reserved_bytes": "CUDA only",
    "coalesce_device_block_cache_bytes": "CUDA only",
    "coalesce_variant_plans": "cuBLASLt's plans, CUDA only",
    "coalesce_variant_plan_capacity": "cuBLASLt's plans, CUDA only",
    "coalesce_variant_plan_evictions_total": "cuBLASLt's plans, CUDA only",
    "coalesce_kernel_theoretical_occupancy_ratio":
        "CPU variants launch nothing",
    "coalesce_kernel_waves": "CPU variants launch nothing",
    "coalesce_kernel_achieved_occupancy_ratio":
        "device-counter sampling (CUDA, --profile_sampling)",
    "coalesce_kernel_sampled_dram_bytes_per_second":
        "device-counter sampling (CUDA, --profile_sampling)",
    "coalesce_kernel_profile_samples_total":
        "device-counter sampling (CUDA, --profile_sampling)",
    "coalesce_device_sm_occupancy_ratio": "NVML GPM, CUDA only",
    "coalesce_device_dram_bytes_per_second": "NVML GPM, CUDA only",
}

# Per op: the CLI arguments of a problem moving about `mib` MiB in float32
# (half that in 16-bit types), and its flag name in the CLI.
SIZES_MIB = (0.25, 2, 6)
OPS = {"transpose": "transpose", "gemm": "gemm",
       "convert_layout": "layout", "gelu_layer_norm": "gelu-ln"}


def log(message):
    print(f"[metrics_series] {message}", flush=True)


def problem(op, mib):
    """CLI flags for op moving roughly mib MiB of float32."""
    floats = int(mib * (1 << 20) / 4)
    if op == "transpose":  # read and write: 2 x rows x cols
        rows = max(8, int((floats / 2) ** 0.5))
        return [f"--shape={rows},{rows}"]
    if op == "convert_layout":
        c = 16
        hw = max(2, int((floats / 2 / c / 4) ** 0.5))
        return [f"--shape=4,{c},{hw},{hw}", "--from=NCHW", "--to=NHWC"]
    if op == "gelu_layer_norm":  # x, residual and y
        return [f"--shape={max(1, floats // 3 // 256)},256"]
    # gemm: A, B and D, square
    n = max(8, int((floats / 3) ** 0.5))
    return [f"--m={n}", f"--n={n}", f"--k={n}"]


def variants(cli, port):
    r = subprocess.run([cli, f"--server=127.0.0.1:{port}", "info"],
                       capture_output=True, text=True, timeout=30)
    if r.returncode != 0:
        raise RuntimeError(f"coalesce info failed:\n{r.stdout}{r.stderr}")
    found = collections.defaultdict(set)
    for op, name in re.findall(
            r"\b((?:transpose|gemm|convert_layout|gelu_layer_norm))"
            r"(\.[a-z]+\.[a-z0-9_]+)", r.stdout):
        found[op].add(op + name)
    if set(found) != set(OPS):
        raise RuntimeError(f"coalesce info lists variants of {sorted(found)}"
                           f", not of every op:\n{r.stdout}")
    return found


def mixed_workload(cli, port, deadline):
    """Every variant x dtype x size, forced; returns (runs, refused)."""
    server = f"--server=127.0.0.1:{port}"
    runs = refused = 0
    for op, names in sorted(variants(cli, port).items()):
        for variant in sorted(names):
            for dtype in ("float32", "float16", "bfloat16"):
                for mib in SIZES_MIB:
                    deadline.check("running the mixed workload")
                    args = [cli, server, OPS[op], f"--variant={variant}",
                            f"--dtype={dtype}"] + problem(op, mib)
                    r = subprocess.run(args, capture_output=True, text=True,
                                       timeout=max(1, deadline.left()))
                    runs += 1
                    # A variant may refuse a dtype or shape: an error series.
                    if r.returncode != 0:
                        refused += 1
                        if "INVALID_ARGUMENT" not in r.stdout + r.stderr:
                            raise RuntimeError(
                                f"{' '.join(args[2:])} failed unexpectedly:"
                                f"\n{r.stdout}{r.stderr}")
    # Stored tensors: upload, list, delete.
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "t.npy")
        subprocess.run([cli, server, "transpose", "--shape=64,64",
                        f"--output={out}"], check=True, capture_output=True,
                       timeout=30)
        put = subprocess.run([cli, server, "put", out], check=True,
                             capture_output=True, text=True, timeout=30)
        handle = put.stdout.split()[-1]
        subprocess.run([cli, server, "ls"], check=True, capture_output=True,
                       timeout=30)
        subprocess.run([cli, server, "rm", handle], check=True,
                       capture_output=True, timeout=30)
    return runs, refused


def series(text):
    """Sample lines, and the families declared by # TYPE lines."""
    samples = [l for l in text.splitlines() if l and not l.startswith("#")]
    families = set(re.findall(r"^# TYPE (\S+) \S+$", text, re.M))
    return samples, families


def documented_families(doc_path):
    """The metric names in the first column of the tables of METRICS.md's
    "Every metric" section."""
    with open(doc_path) as f:
        text = f.read()
    m = re.search(r"^## Every metric\n(.*?)^## ", text, re.M | re.S)
    if not m:
        raise RuntimeError(f"{doc_path} has no '## Every metric' section")
    return set(re.findall(r"^\| `([a-zA-Z_:][a-zA-Z0-9_:]*)` \|", m.group(1),
                          re.M))


def by_family(samples, families):
    counts = collections.Counter()
    for line in samples:
        name = re.match(r"[a-zA-Z_:][a-zA-Z0-9_:]*", line).group(0)
        family = next((f for f in (name, re.sub(
            r"_(bucket|sum|count)$", "", name)) if f in families), name)
        counts[family] += 1
    return counts


def measure(args, flags, deadline, workdir):
    server = Server(args.server, workdir, deadline, flags)
    try:
        runs, refused = mixed_workload(args.cli, server.grpc_port, deadline)
        drive_traffic(args.cli, server.grpc_port, 0, deadline)
        text = server.metrics()
    except Exception:
        log("coalesce-server stderr:\n" + server.log())
        raise
    finally:
        server.stop()
    samples, families = series(text)
    log(f"{' '.join(flags) or 'default flags'}: {runs} forced runs "
        f"({refused} refused), then every RPC: {len(samples)} series in "
        f"{len(families)} families")
    return samples, families


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", required=True, help="coalesce-server")
    parser.add_argument("--cli", required=True, help="the coalesce CLI")
    parser.add_argument("--doc", required=True, help="docs/METRICS.md")
    parser.add_argument("--max_series", type=int, default=3000)
    parser.add_argument("--deadline", type=float, default=300)
    args = parser.parse_args()
    deadline = Deadline(args.deadline)
    workdir = tempfile.mkdtemp(prefix="coalesce-metrics-series-")
    failed = False
    try:
        samples, families = measure(args, [], deadline, workdir)
        counts = by_family(samples, families)
        log("largest families: " + ", ".join(
            f"{f} {n}" for f, n in counts.most_common(6)))
        if len(samples) > args.max_series:
            failed = True
            log(f"FAIL: {len(samples)} series with default flags, above "
                f"{args.max_series}")
        full, _ = measure(args, ["--metrics_detail=full"], deadline, workdir)
        log(f"--metrics_detail=full: {len(full)} series "
            f"({len(full) / len(samples):.1f}x the default)")

        documented = documented_families(args.doc)
        undocumented = sorted(families - documented)
        unserved = sorted(documented - families - set(ABSENT_ON_CPU))
        stale = sorted(set(ABSENT_ON_CPU) - documented)
        for what, names in (("served but not in METRICS.md", undocumented),
                            ("in METRICS.md but not served", unserved),
                            ("ABSENT_ON_CPU names no METRICS.md row", stale)):
            if names:
                failed = True
                log(f"FAIL: {what}: {', '.join(names)}")
        if not (undocumented or unserved or stale):
            log(f"METRICS.md lists the {len(families)} families served and "
                f"{len(set(ABSENT_ON_CPU))} this backend does not serve")
    except Exception as e:  # report, then fail the test
        log(f"FAIL {type(e).__name__}: {e}")
        return 1
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
