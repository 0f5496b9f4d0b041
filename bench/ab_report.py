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
    head = ["op", "dtype", "shape", "variant"]
    for label in labels:
        head += [f"{label} us", f"{label} us b2b", f"{label} x peak (b2b)"]
        if label != labels[0]:
            head += [f"{label}/{labels[0]}", f"{label}/{labels[0]} b2b"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * 4 + "---:|" * (len(head) - 4))
    for key in cases:
        base = best.get((key, labels[0]))
        cells = list(key)
        for label in labels:
            cur = best.get((key, label))
            if cur is None:
                cells += ["-"] * (3 if label == labels[0] else 5)
                continue
            mark = " FAIL" if (key, label) in failed else ""
            cells += [f"{cur[0]:.1f}", f"{cur[1]:.1f}",
                      f"{cur[2]:.3f} ({cur[3]:.3f}){mark}"]
            if label != labels[0]:
                if base is None:
                    cells += ["-", "-"]
                else:
                    cells += [f"{cur[0] / base[0]:.3f}",
                              f"{cur[1] / base[1]:.3f}"]
        print("| " + " | ".join(cells) + " |")
    print_copies(labels, cases, copies)
    return 1 if failed else 0


def print_copies(labels, cases, copies):
    """The same-size copy of each case, per build, as the variants above."""
    shapes = list(OrderedDict.fromkeys(key[:3] for key in cases))
    shapes = [k for k in shapes if any((k, l) in copies for l in labels)]
    if not shapes:
        return
    head = ["op", "dtype", "shape"]
    for label in labels:
        head += [f"{label} copy us", f"{label} copy us b2b",
                 f"{label} x peak (b2b)"]
        if label != labels[0]:
            head += [f"{label}/{labels[0]} b2b"]
    print("\nSame-size copy (best of the copy kernels, per build):\n")
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * 3 + "---:|" * (len(head) - 3))
    for key in shapes:
        base = copies.get((key, labels[0]))
        cells = list(key)
        for label in labels:
            cur = copies.get((key, label))
            if cur is None:
                cells += ["-"] * (3 if label == labels[0] else 4)
                continue
            cells += [f"{cur[0]:.1f}", f"{cur[1]:.1f}", f"{cur[2]:.3f}"]
            if label != labels[0]:
                cells += [f"{cur[1] / base[1]:.3f}" if base else "-"]
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    sys.exit(main(sys.argv))
