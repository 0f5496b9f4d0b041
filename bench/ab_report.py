#!/usr/bin/env python3
"""Side-by-side table of coalesce-bench runs of different builds in one call.

    ab_report.py LABEL=FILE.json [LABEL=FILE.json ...]

Each FILE is a `coalesce-bench kernels --json` file of one build (the same
label may appear several times: rounds run alternately, A B A B, so that a
drifting clock touches every build alike). For every (op, dtype, shape,
variant) the table gives each build's best per-launch median and best
back-to-back mean over its rounds, and the ratio of each build's time to the
first label's (below 1: faster than the first build). A build whose output
failed the bench's check on a case (in any round) gets FAIL beside its
figures there, whose timings then say nothing, and the exit status is 1.
A second table does the same for each case's same-size copy (the copy
kernels timed beside it), where the files have one.
"""
import json
import sys
from collections import OrderedDict


def main(argv):
    if len(argv) < 2:
        sys.exit(__doc__)
    labels = []
    best = {}  # (case key, label) -> [median_us, b2b_us, frac, b2b_frac]
    cases = OrderedDict()
    failed = set()  # (case key, label) whose check failed
    copies = {}  # (case key less variant, label) -> [us, b2b_us, b2b frac]
    for arg in argv[1:]:
        label, _, path = arg.partition("=")
        if not path:
            sys.exit(f"expected LABEL=FILE, got {arg!r}")
        if label not in labels:
            labels.append(label)
        with open(path) as f:
            data = json.load(f)
        peak = data.get("copy_peak_GBps") or 0
        for row in data["rows"]:
            key = (row["op"], row["dtype"], "x".join(map(str, row["shape"])),
                   row["variant"].split(".")[-1])
            if "copy_b2b_us" in row:
                cur = copies.setdefault((key[:3], label),
                                        [float("inf")] * 2 + [0])
                cur[0] = min(cur[0], row["copy_us"])
                cur[1] = min(cur[1], row["copy_b2b_us"])
                if peak:
                    cur[2] = max(cur[2], row["copy_b2b_GBps"] / peak)
            if row.get("check") not in ("ok", "skipped"):
                print(f"{label}: {row['variant']} {row['shape']} check "
                      f"{row.get('check')}", file=sys.stderr)
                failed.add((key, label))
            cases[key] = None
            cur = best.setdefault((key, label), [float("inf")] * 2 + [0, 0])
            cur[0] = min(cur[0], row["median_us"])
            cur[1] = min(cur[1], row.get("b2b_us") or float("inf"))
            cur[2] = max(cur[2], row.get("frac_copy_peak") or 0)
            cur[3] = max(cur[3], row.get("b2b_frac_copy_peak") or 0)
    print_table(
        ["op", "dtype", "shape", "variant"], list(cases), labels, best,
        lambda l: [f"{l} us", f"{l} us b2b", f"{l} x peak (b2b)"],
        lambda cur, key, l: [
            f"{cur[0]:.1f}", f"{cur[1]:.1f}",
            f"{cur[2]:.3f} ({cur[3]:.3f})"
            + (" FAIL" if (key, l) in failed else "")],
        lambda l: [f"{l}/{labels[0]}", f"{l}/{labels[0]} b2b"],
        lambda cur, base: [f"{cur[0] / base[0]:.3f}",
                           f"{cur[1] / base[1]:.3f}"])
    # The same-size copy of each case, per build, as the variants above.
    shapes = list(OrderedDict.fromkeys(key[:3] for key in cases))
    shapes = [k for k in shapes if any((k, l) in copies for l in labels)]
    if shapes:
        print("\nSame-size copy (best of the copy kernels, per build):\n")
        print_table(
            ["op", "dtype", "shape"], shapes, labels, copies,
            lambda l: [f"{l} copy us", f"{l} copy us b2b",
                       f"{l} x peak (b2b)"],
            lambda cur, key, l: [f"{cur[0]:.1f}", f"{cur[1]:.1f}",
                                 f"{cur[2]:.3f}"],
            lambda l: [f"{l}/{labels[0]} b2b"],
            lambda cur, base: [f"{cur[1] / base[1]:.3f}"])
    return 1 if failed else 0


def print_table(key_head, keys, labels, table, own_head, own_cells,
                ratio_head, ratio_cells):
    """One markdown row per key: each build's cells from table[(key, label)]
    (own_head/own_cells), and after every build but the first its ratios
    to the first (ratio_head/ratio_cells); "-" where a build lacks it."""
    head = list(key_head)
    for label in labels:
        head += own_head(label)
        if label != labels[0]:
            head += ratio_head(label)
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(key_head) + "---:|" * (len(head) - len(key_head)))
    for key in keys:
        base = table.get((key, labels[0]))
        cells = list(key)
        for label in labels:
            cur = table.get((key, label))
            ratios = len(ratio_head(label)) if label != labels[0] else 0
            if cur is None:
                cells += ["-"] * (len(own_head(label)) + ratios)
                continue
            cells += own_cells(cur, key, label)
            if ratios:
                cells += (ratio_cells(cur, base) if base is not None
                          else ["-"] * ratios)
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    sys.exit(main(sys.argv))
