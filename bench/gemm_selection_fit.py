#!/usr/bin/env python3
"""The float32 GEMM selection heuristic against an H200 selection sweep.

The selection bar: over 200 random GEMM shapes, the automatic choice of a
cold server (shipped table, then the heuristic) runs within 10% of the
fastest variant for >= 95% of the shapes. A tune sweep's output folder
(`TUNE_OPS=gemm scripts/gpu-check.sh OUT tune`) holds the tables
table-heuristic-gemm.txt (seed 7) and table-cold-gemm.txt (seed 8), which
keep one measurement per selection key, whose log2 buckets do not name the
shape; this tool regenerates the exact shapes (`coalesce tune gemm --random_shapes=200`
draws them with RandomShapes in client/cli/selection_commands.cc: std::mt19937_64,
libstdc++'s uniform_real_distribution, re-implemented here bit for bit) and
gives each table entry to the last shape with its key (the table is written
shape by shape, a later shape's entry replacing an earlier one's; the earlier
shapes of a shared key have no measurement of their own and are left out).

It mirrors the EstimateSeconds of gemm.cuda.{naive,smem_tiled,reg_tiled,
cublaslt} (kernels/cuda/gemm/common.cc, cublaslt.cc) on the H200
description of kernels/cuda/selection_estimate_test.cc, the previous model
(`old`, the largest of three bounds) and the current one (`new`), and
prints how often the variant with the lowest estimate ran within 10% of
the fastest:

  python3 bench/gemm_selection_fit.py --sweep OUT             # seed 7: the training shapes
  python3 bench/gemm_selection_fit.py --sweep OUT --fit       # the regressions behind the constants
  python3 bench/gemm_selection_fit.py --sweep OUT --held-out  # seed 8 too (never fitted on)
  python3 bench/gemm_selection_fit.py --sweep OUT --write-testdata kernels/cuda/testdata

--write-testdata writes gemm_selection_seed7.txt and gemm_selection_seed8.txt
("M,N,K<TAB>variant=seconds,..." lines) for selection_estimate_test.
Plain Python 3, no packages.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sweep_shapes  # noqa: E402
from sweep_shapes import align_class, log2_bucket, random_shapes  # noqa: E402

SWEEP = None  # the sweep's output folder (--sweep)


def set_sweep(directory):
    """Reads the tables from directory instead (--sweep)."""
    global SWEEP
    SWEEP = directory


TRAIN = (7, "table-heuristic-gemm.txt")
HELD_OUT = (8, "table-cold-gemm.txt")
VARIANTS = ("cublaslt", "naive", "smem_tiled", "reg_tiled")

# --- the shapes -------------------------------------------------------------

def random_gemm_shapes(count, seed, max_bytes=64 << 20):
    """RandomShapes("gemm", count, seed, max_bytes) as (m, n, k) tuples."""
    return random_shapes("gemm", count, seed, max_bytes)


def shape_key(m, n, k):
    """ShapeKey (kernels/selection/selection_key.cc) of a float32 GEMM, t00."""
    return "gemm|float32|b0|m%d|n%d|k%d|a%d.%d.%d|t00" % (
        log2_bucket(m), log2_bucket(n), log2_bucket(k), align_class(m),
        align_class(n), align_class(k))


def read_table(path):
    """{shape key: {variant: seconds}} of a tuning table's float32 GEMMs."""
    return sweep_shapes.read_table(path, "gemm|float32|", 8, short_names=True)


def measured_shapes(seed, table_file):
    """[(shape, {variant: seconds})] of the shapes with their own
    measurement, and of all 200 shapes, each with its key's entry."""
    table = read_table(os.path.join(SWEEP, table_file))
    shapes = random_gemm_shapes(200, seed)
    rows = sweep_shapes.last_of_each_key(
        shapes, table, shape_key, "%s (seed %d)" % (table_file, seed))
    return rows, [(s, table[shape_key(*s)]) for s in shapes]


# --- the device (H200() in kernels/cuda/selection_estimate_test.cc) --------

SMS = 132
L2_BYTES = 60 << 20
COPY_BW = 4.2e12
FP32_PEAK = 2.0 * 128 * 132 * 1.98e9
LAUNCH = 3e-6  # kGpuLaunchSeconds


def cdiv(a, b):
    return -(-a // b)


def min_bytes(m, n, k):
    return 4.0 * (m * k + k * n + m * n)


def flops(m, n, k):
    return 2.0 * m * n * k + 2.0 * m * n


# --- the estimates before this tool's commit --------------------------------


def old_estimates(m, n, k):
    memory = min_bytes(m, n, k) / COPY_BW
    math_ = flops(m, n, k) / FP32_PEAK

    def simt(eff, extra, seconds_per_k):
        return LAUNCH + extra + max(math_ / eff, memory / 0.5,
                                    k * seconds_per_k)

    return {
        "cublaslt": max(memory, math_) / 0.72 + LAUNCH + 2e-6,
        "naive": simt(0.08, 0, 20e-9),
        "smem_tiled": simt(0.16, 1e-6, 40e-9),
        "reg_tiled": simt(0.6, 1.5e-6, 70e-9),
    }


# --- the model of this commit (SimtGemmSeconds, CublasLtFloat32Seconds) ----


def operands_from_hbm(m, n, k):
    """GemmOperandsFromHbm: the sweep keeps a shape's operands in L2 up to
    about 1% of the L2 per buffer set (it rotates up to 64 sets)."""
    return min_bytes(m, n, k) * 100 > L2_BYTES


# (tile_m, tile_n, pad_m, pad_n, k_step): a block's output tile, the
# granularity of the outputs it computes (a naive warp covers 2 rows x 16
# columns), and the K elements of one step of its K loop.
SIMT_SHAPE = {
    "naive": (16, 16, 2, 16, 1),
    "smem_tiled": (32, 32, 32, 32, 32),
    "reg_tiled": (128, 128, 128, 128, 8),
}

# (efficiency, extra_seconds, step_seconds, hbm_step_seconds, block_seconds,
# and per byte of D: vector_store_seconds, scalar_store_seconds): naive's
# rounded from --fit; smem_tiled's and reg_tiled's fitted to the sweeps of
# every class (kernels/cuda/testdata/gemm_classes_seed7.txt; smem_tiled.cu
# and reg_tiled.cu say how).
SIMT_COST = {
    "naive": (0.10, 0.55e-6, 34e-9, 22e-9, 200e-9, 0.0, 0.0),
    "smem_tiled": (0.16, 0.0, 2.12e-6, 0.465e-6, 0.52e-6, 0.0, 0.0),
    "reg_tiled": (0.74, 2.15e-6, 0.68e-6, 0.0, 1.1e-6, 0.18e-12, 0.97e-12),
}

LT = dict(
    efficiency=0.72,  # kEfficiency, 4096^3
    memory_efficiency=0.6,
    call=1.9e-6,
    split_k=2.4e-6,
    split_k_max_outputs=32768,
    no_split_max_k=128,
    hbm_step=16e-9,
    hbm_max_steps=256,
)


def simt_seconds(variant, m, n, k, cost=None):
    tile_m, tile_n, pad_m, pad_n, k_step = SIMT_SHAPE[variant]
    eff, extra, step, hbm_step, block, vec_store, scalar_store = (
        cost or SIMT_COST[variant])
    padded = 2.0 * (pad_m * cdiv(m, pad_m)) * (pad_n * cdiv(n, pad_n)) * k
    blocks = cdiv(m, tile_m) * cdiv(n, tile_n)
    if operands_from_hbm(m, n, k):
        step += hbm_step
    store = vec_store if n % 4 == 0 else scalar_store
    return (LAUNCH + extra + cdiv(k, k_step) * step + padded / (eff * FP32_PEAK)
            + blocks / SMS * block + 4.0 * m * n * store)


def lt_splits_k(m, n, k, lt=LT):
    # Plans with K <= no_split_max_k avoid split-K algorithms (LtAvoidsSplitK).
    gemv = m == 1 or n == 1
    return (k > lt["no_split_max_k"] and m * n < lt["split_k_max_outputs"]
            and not gemv)


def lt_seconds(m, n, k, lt=LT):
    t = LAUNCH + lt["call"]
    if lt_splits_k(m, n, k, lt):
        t += lt["split_k"]
    if operands_from_hbm(m, n, k):
        t += lt["hbm_step"] * min(k, lt["hbm_max_steps"])
    return (t + flops(m, n, k) / (lt["efficiency"] * FP32_PEAK) +
            min_bytes(m, n, k) / (lt["memory_efficiency"] * COPY_BW))


def new_estimates(m, n, k):
    e = {v: simt_seconds(v, m, n, k) for v in SIMT_SHAPE}
    e["cublaslt"] = lt_seconds(m, n, k)
    return e


# --- evaluation ---------------------------------------------------------------


def within(rows, estimates, table=None, worst=0):
    """Shapes whose choice ran within 10% of their fastest. With `table`
    (another sweep's {key: times}), a shape whose key it holds takes that
    entry's fastest, as a cold server with the shipped table does."""
    good, bad = 0, []
    for s, t in rows:
        if table is not None and shape_key(*s) in table:
            tt = table[shape_key(*s)]
            choice, how = min(tt, key=tt.get), "table"
        else:
            e = estimates(*s)
            choice, how = min(e, key=e.get), "heuristic"
        ratio = t[choice] / min(t.values())
        if ratio <= 1.1:
            good += 1
        else:
            bad.append((ratio, s, choice, how, min(t, key=t.get)))
    for ratio, s, choice, how, best in sorted(bad, reverse=True)[:worst]:
        print("    %d,%d,%d: %s (%s) %.2fx the fastest, %s" %
              (s + (choice, how, ratio, best)))
    return good


def report(seed, table_file, rows, all_rows, table=None):
    print("seed %d (%s): %d shapes with their own measurement (%d left out: "
          "a later shape's entry replaced theirs)" %
          (seed, table_file, len(rows), len(all_rows) - len(rows)))
    for name, est in (("old", old_estimates), ("new", new_estimates)):
        print("  %s heuristic: %d of %d within 10%% (all %d, each with its "
              "key's entry: %d)" % (name, within(rows, est), len(rows),
                                    len(all_rows), within(all_rows, est)))
        within(rows, est, worst=5)
        if table is not None:
            g = within(rows, est, table)
            print("  %s, seed-7 table first (a cold server): %d of %d" %
                  (name, g, len(rows)))


# --- the regressions behind the constants -------------------------------------


def solve(a, b):
    n = len(a)
    m = [row[:] + [b[i]] for i, row in enumerate(a)]
    for c in range(n):
        p = max(range(c, n), key=lambda r: abs(m[r][c]))
        m[c], m[p] = m[p], m[c]
        for r in range(n):
            if r != c:
                f = m[r][c] / m[c][c]
                m[r] = [x - f * y for x, y in zip(m[r], m[c])]
    return [m[i][n] / m[i][i] for i in range(n)]


def least_squares(x, y, scale):
    """Coefficients minimising the sum of ((x.c - y) / scale)^2."""
    w = [1 / v**2 for v in scale]
    n = len(x[0])
    a = [[sum(wr * xr[i] * xr[j] for wr, xr in zip(w, x)) for j in range(n)]
         for i in range(n)]
    b = [sum(wr * xr[i] * yr for wr, xr, yr in zip(w, x, y)) for i in range(n)]
    return solve(a, b)


def fit(rows):
    """Each variant's measured seconds on seed 7 against its model's terms,
    least squares of the relative error."""
    fixed_eff = {"naive": None, "smem_tiled": 0.16, "reg_tiled": 0.74}
    terms = {
        "naive": ("extra", "step", "hbm_step", "block"),
        "smem_tiled": ("extra", "step", "hbm_step", "block"),
        "reg_tiled": ("extra", "step", "block", "vec_store", "scalar_store"),
    }
    for v, (tile_m, tile_n, pad_m, pad_n, k_step) in SIMT_SHAPE.items():
        x, y, scale = [], [], []
        for (m, n, k), t in rows:
            scale.append(t[v])
            padded = 2.0 * (pad_m * cdiv(m, pad_m)) * (pad_n * cdiv(n, pad_n)) * k
            steps = cdiv(k, k_step)
            f = {
                "extra": 1.0,
                "step": steps,
                "hbm_step": steps if operands_from_hbm(m, n, k) else 0,
                "block": cdiv(m, tile_m) * cdiv(n, tile_n) / SMS,
                "vec_store": 4.0 * m * n if n % 4 == 0 else 0,
                "scalar_store": 0 if n % 4 == 0 else 4.0 * m * n,
                "1/efficiency": padded / FP32_PEAK,
            }
            x.append([f[u] for u in terms[v]] +
                     ([f["1/efficiency"]] if fixed_eff[v] is None else []))
            y.append(t[v] - LAUNCH -
                     (f["1/efficiency"] / fixed_eff[v] if fixed_eff[v] else 0))
        c = least_squares(x, y, scale)
        names = list(terms[v]) + (["efficiency"]
                                  if fixed_eff[v] is None else [])
        shown = ["%s %.3g" % (u, 1 / q if u == "efficiency" else q)
                 for u, q in zip(names, c)]
        print("  %-10s %s%s" % (v, ", ".join(shown), "" if fixed_eff[v] is None
                                else ", efficiency %.2g (fixed)" % fixed_eff[v]))
    x, y, scale = [], [], []
    for (m, n, k), t in rows:
        scale.append(t["cublaslt"])
        x.append([
            1.0, 1.0 if lt_splits_k(m, n, k) else 0.0,
            min(k, LT["hbm_max_steps"]) if operands_from_hbm(m, n, k) else 0.0,
            flops(m, n, k) / FP32_PEAK, min_bytes(m, n, k) / COPY_BW
        ])
        y.append(t["cublaslt"] - LAUNCH)
    c = least_squares(x, y, scale)
    print("  cublaslt   call %.3g, split_k %.3g, hbm_step %.3g, efficiency "
          "%.3g, memory_efficiency %.3g" % (c[0], c[1], c[2], 1 / c[3],
                                            1 / c[4]))


def write_testdata(directory, seed, rows):
    path = os.path.join(directory, "gemm_selection_seed%d.txt" % seed)
    with open(path, "w") as f:
        f.write("# Generated by bench/gemm_selection_fit.py --write-testdata "
                "from a tune sweep (seed %d); do not "
                "edit.\n# M,N,K<TAB>every eligible variant's measured seconds "
                "on the H200 (float32, no TF32).\n" % seed)
        for (m, n, k), t in rows:
            f.write("%d,%d,%d\t%s\n" % (m, n, k, ",".join(
                "gemm.cuda.%s=%.9g" % (v, t[v]) for v in VARIANTS if v in t)))
    print("wrote %s (%d shapes)" % (path, len(rows)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fit", action="store_true",
                    help="print the regressions on seed 7")
    ap.add_argument("--held-out", action="store_true",
                    help="evaluate on seed 8 too")
    ap.add_argument("--write-testdata", metavar="DIR")
    ap.add_argument("--sweep", metavar="DIR", required=True,
                    help="a tune sweep's output folder (scripts/gpu-check.sh "
                    "OUT tune), with table-heuristic-gemm.txt and "
                    "table-cold-gemm.txt")
    args = ap.parse_args()
    set_sweep(args.sweep)
    train, train_all = measured_shapes(*TRAIN)
    report(TRAIN[0], TRAIN[1], train, train_all)
    if args.fit:
        print("fit on seed %d (seconds):" % TRAIN[0])
        fit(train)
    if args.held_out or args.write_testdata:
        held, held_all = measured_shapes(*HELD_OUT)
        if args.held_out:
            report(HELD_OUT[0], HELD_OUT[1], held, held_all,
                   read_table(os.path.join(SWEEP, TRAIN[1])))
        if args.write_testdata:
            write_testdata(args.write_testdata, TRAIN[0], train)
            write_testdata(args.write_testdata, HELD_OUT[0], held)


if __name__ == "__main__":
    main()
