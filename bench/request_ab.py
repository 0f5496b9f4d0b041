#!/usr/bin/env python3
"""Servers of different settings or builds, side by side over rounds of the
requests step.

  request_ab.py LABEL=DIR [LABEL=DIR ...] [--prefix=requests]

Each DIR holds the JSON files of one `scripts/gpu-check.sh DIR requests`
run (requests-t64k.json and so on: the batching-on server's; another
--prefix reads PREFIX-*.json), against a server of the setting or build
LABEL names. A label comes once per round, in the order the rounds ran
(best alternated, A B then B A, so that a drifting host touches both
alike): the Nth DIR of a label is its round N, and every label needs as
many rounds as the first.

For each case (file, op, transport, bytes, concurrency) in every DIR, a
markdown table gives each other label's requests a second over the first
label's in the same round, round by round, with their geometric mean and
how many rounds it led; then each label's p50 and, where the rows carry
one, its kernel time (the server's report, coalesce-bench's "kernel us")
in microseconds, the medians over its rounds. Echo's rows come first: they say how far the host itself
moved between the servers, which bounds what the other rows can tell.
"""
import argparse
import glob
import json
import math
import os
import statistics
import sys


def load(directory, prefix):
    """{(case, op, transport, bytes, concurrency): row} of one run."""
    rows = {}
    for path in sorted(glob.glob(os.path.join(directory, f"{prefix}-*.json"))):
        case = os.path.basename(path)[len(prefix) + 1:-len(".json")]
        with open(path) as f:
            for r in json.load(f).get("results", []):
                if r.get("protocol", "native") != "native":
                    continue
                key = (case, r["op"], r["transport"], r["tensor_bytes"],
                       r["concurrency"])
                rows[key] = r
    return rows


def size(n):
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} B"


def report(runs):
    """runs: [(label, rows)] in the order given. Returns markdown lines."""
    labels = []
    rounds = {}
    for label, rows in runs:
        if label not in rounds:
            labels.append(label)
            rounds[label] = []
        rounds[label].append(rows)
    if len(labels) < 2:
        raise ValueError("two labels at least: one to compare against")
    n = len(rounds[labels[0]])
    for label in labels:
        if len(rounds[label]) != n:
            raise ValueError(f"{label} has {len(rounds[label])} rounds, "
                             f"{labels[0]} has {n}")
    keys = set.intersection(*(set(rows) for _, rows in runs))
    # Echo first, then by case, op, transport, bytes and concurrency.
    ordered = sorted(keys, key=lambda k: (k[1] != "echo", k))
    base = labels[0]
    head = ["case"]
    for label in labels[1:]:
        head.append(f"{label} / {base}, rounds 1-{n}" if n > 1 else
                    f"{label} / {base}")
        head.append("mean (led)")
    head.append("p50 us, " + " / ".join(labels))
    timed = any(rows[key].get("kernel_seconds") for key in keys
                for _, rows in runs)
    if timed:
        head.append("kernel us, " + " / ".join(labels))
    lines = ["| " + " | ".join(head) + " |",
             "|" + "---|" * len(head)]
    for key in ordered:
        case, op, transport, nbytes, conc = key
        cells = [f"{op} {transport} {size(nbytes)}, conc. {conc} ({case})"]
        for label in labels[1:]:
            ratios = [rounds[label][i][key]["requests_per_second"] /
                      rounds[base][i][key]["requests_per_second"]
                      for i in range(n)]
            mean = math.exp(sum(math.log(r) for r in ratios) / n)
            led = sum(r > 1 for r in ratios)
            cells.append(", ".join(f"{r:.3f}" for r in ratios))
            cells.append(f"{mean:.3f} ({led} of {n})")
        p50s_us = [statistics.median(r[key]["latency_ms"]["p50"]
                                     for r in rounds[label]) * 1e3
                   for label in labels]
        cells.append(" / ".join(f"{p:.0f}" for p in p50s_us))
        if timed:
            kernels = []
            for label in labels:
                seen = [r[key]["kernel_seconds"] for r in rounds[label]
                        if r[key].get("kernel_seconds")]
                kernels.append(f"{statistics.median(seen) * 1e6:.1f}"
                               if seen else "-")
            cells.append(" / ".join(kernels))
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def main(argv):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("runs", nargs="+", metavar="LABEL=DIR")
    parser.add_argument("--prefix", default="requests")
    args = parser.parse_args(argv)
    runs = []
    for arg in args.runs:
        label, _, directory = arg.partition("=")
        if not label or not directory:
            parser.error(f"expected LABEL=DIR, got {arg!r}")
        rows = load(directory, args.prefix)
        if not rows:
            parser.error(f"{directory}: no {args.prefix}-*.json results")
        runs.append((label, rows))
    try:
        lines = report(runs)
    except ValueError as e:
        parser.error(str(e))
    print("\n".join(lines))


if __name__ == "__main__":
    main(sys.argv[1:])
