#!/usr/bin/env python3
"""The float32 transposes of an H200 selection sweep, shape by shape.

`scripts/gpu-check.sh OUT tune` times every transpose variant on 200 random
shapes per seed (`coalesce tune transpose --random_shapes=200`), but its
tables keep one measurement per selection key. As bench/gemm_selection_fit.py
does for GEMM, this regenerates the exact shapes (RandomShapes in
client/cli/selection_commands.cc, re-implemented bit for bit there) and gives each
table entry to the last shape with its key. It writes
transpose_selection_seed{7,8}.txt ("M,N<TAB>variant=seconds,..." lines) for
selection_estimate_test, which checks the C++ estimates against them:

  python3 bench/transpose_selection_data.py --sweep OUT \\
      --write-testdata kernels/cuda/testdata

where OUT is a tune sweep's output folder (`TUNE_OPS=transpose
scripts/gpu-check.sh OUT tune`). The sweep also writes every shape's times
(shapes-PHASE-transpose.tsv, `coalesce tune --shapes_out`), which this tool
could read instead of the tables. Plain Python 3, no packages.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sweep_shapes  # noqa: E402
from sweep_shapes import align_class, log2_bucket, random_shapes  # noqa: E402

PHASES = ((7, "table-heuristic-transpose.txt"), (8, "table-cold-transpose.txt"))
MAX_BYTES = 256 << 20  # gpu-check.sh's --max_shape_bytes for transposes


def shape_key(rows, cols):
    """ShapeKey (kernels/selection/selection_key.cc) of a float32 transpose."""
    return "transpose|float32|b0|r%d|c%d|a%d.%d" % (
        log2_bucket(rows), log2_bucket(cols), align_class(rows),
        align_class(cols))


def read_table(path):
    """{shape key: {variant: seconds}} of a tuning table's transposes."""
    return sweep_shapes.read_table(path, "transpose|float32|", 6)


def measured_shapes(sweep, seed, table_file):
    """[(shape, {variant: seconds})] of the shapes with their own
    measurement (the last of each key)."""
    table = read_table(os.path.join(sweep, table_file))
    shapes = random_shapes("transpose", 200, seed, MAX_BYTES)
    return sweep_shapes.last_of_each_key(
        shapes, table, shape_key, "%s (seed %d)" % (table_file, seed))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sweep", required=True,
                   help="a tune sweep's output folder (scripts/gpu-check.sh "
                   "OUT tune), with its transpose tables")
    p.add_argument("--write-testdata", metavar="DIR", required=True)
    args = p.parse_args()
    for seed, table_file in PHASES:
        rows = measured_shapes(args.sweep, seed, table_file)
        path = os.path.join(args.write_testdata,
                            "transpose_selection_seed%d.txt" % seed)
        with open(path, "w") as f:
            f.write("# RandomShapes(\"transpose\", 200, %d, 256 MiB), float32,"
                    " the last shape of each key, with its entry in\n"
                    "# a tune sweep's %s (bench/transpose_selection_data.py)\n"
                    % (seed, table_file))
            for (r, c), seconds in rows:
                f.write("%d,%d\t%s\n" % (r, c, ",".join(
                    "%s=%.9g" % kv for kv in sorted(seconds.items()))))
        print("%s: %d shapes" % (path, len(rows)))


if __name__ == "__main__":
    main()
