#!/usr/bin/env python3
"""The float32 NCHW -> NHWC layouts of an H200 selection sweep, shape by
shape, as selection_estimate_test reads them.

A tune sweep's output folder (`TUNE_OPS=layout scripts/gpu-check.sh OUT
tune`) holds every shape's measured times
(shapes-PHASE-layout.tsv, `coalesce tune layout --shapes_out`: shape, key,
automatic choice, its source, then variant=seconds fastest first). This
keeps the shape and the times, one "N,C,H,W<TAB>variant=seconds,..." line
per shape, as layout_selection_seed{7,8}.txt:

  python3 bench/layout_selection_data.py --sweep OUT \\
      --write-testdata kernels/cuda/testdata

Plain Python 3, no packages.
"""

import argparse
import os

PHASES = ((7, "shapes-heuristic-layout.tsv"), (8, "shapes-cold-layout.tsv"))


def rows(path):
    """[(shape, times)] of a shapes TSV, in its order."""
    out = []
    with open(path) as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            cols = line.rstrip("\n").split("\t")
            out.append((cols[0], cols[4]))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sweep", metavar="DIR", required=True,
                    help="a tune sweep's output folder (scripts/gpu-check.sh "
                    "OUT tune)")
    ap.add_argument("--write-testdata", required=True)
    args = ap.parse_args()
    for seed, name in PHASES:
        src = os.path.join(args.sweep, name)
        dst = os.path.join(args.write_testdata,
                           "layout_selection_seed%d.txt" % seed)
        with open(dst, "w") as f:
            f.write("# RandomShapes(\"layout\", 200, %d, 256 MiB), float32 "
                    "NCHW -> NHWC, every shape of\n# a tune sweep's %s "
                    "(bench/layout_selection_data.py)\n" % (seed, name))
            for shape, times in rows(src):
                f.write("%s\t%s\n" % (shape, times))
        print("wrote", dst)


if __name__ == "__main__":
    main()
