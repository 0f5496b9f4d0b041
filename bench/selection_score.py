#!/usr/bin/env python3
"""Scores variant selection on held-out shapes: reads `coalesce tune
--shapes_out` files (shapes-*.tsv: shape, key, automatic choice, its
source, then variant=seconds fastest first), groups the shapes by op, dtype
and shape class, and prints a Markdown table: how many shapes, the share
where the automatic choice ran within 10% and within 5% of the fastest
measured variant, the worst ratio (automatic time / fastest time) with its
shape, the share answered by the shipped table (source "table"), and PASS
or MISS against the targets.

  python3 bench/selection_score.py OUT/shapes-cold-*.tsv > selection-score.md

A shape whose automatic choice was not measured counts as a miss with an
infinite ratio. Plain Python 3.8+."""

import argparse
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sweep_shapes import KEY_OPS, shape_class  # noqa: E402

# Ratios are quotients of measured times: 1.1 * t / t can exceed 1.1 by an
# ulp, which must not turn a shape at the limit into a miss.
SLACK = 1e-9


class Shape:
    def __init__(self, label, key, automatic, source, measured, where):
        self.label, self.key = label, key
        self.automatic, self.source = automatic, source
        self.measured = measured  # [(variant, seconds)]
        self.where = where  # file:line
        self.fastest, self.fastest_seconds = min(measured, key=lambda m: m[1])
        chosen = [s for name, s in measured if name == automatic]
        self.ratio = (chosen[0] / self.fastest_seconds
                      if chosen and self.fastest_seconds > 0 else math.inf)


def read_shapes(path):
    """[Shape] of one shapes TSV; exits naming the line on a malformed one."""
    out = []
    with open(path) as f:
        for i, line in enumerate(f, 1):
            if line.startswith("#") or not line.strip():
                continue
            where = "%s:%d" % (path, i)
            cols = line.rstrip("\n").split("\t")
            measured = []
            try:
                if len(cols) != 5:
                    raise ValueError("%d columns, not 5" % len(cols))
                for kv in cols[4].split(","):
                    name, _, seconds = kv.rpartition("=")
                    if not name:
                        raise ValueError("measurement %r" % kv)
                    measured.append((name, float(seconds)))
            except ValueError as e:
                sys.exit("%s: malformed line: %s" % (where, e))
            out.append(Shape(cols[0], cols[1], cols[2], cols[3], measured,
                             where))
    return out


def group_of(shape):
    """(op, dtype, class) of a shape, from its key and its label."""
    fields = shape.key.split("|")
    if len(fields) < 2:
        sys.exit("%s: key %r has no op and dtype" % (shape.where, shape.key))
    op = KEY_OPS.get(fields[0], fields[0])
    try:
        cls = shape_class(op, shape.label)
    except ValueError as e:
        sys.exit("%s: %s" % (shape.where, e))
    return op, fields[1], cls


class Score:
    def __init__(self, shapes):
        self.n = len(shapes)
        self.within10 = sum(s.ratio <= 1.10 + SLACK for s in shapes)
        self.within5 = sum(s.ratio <= 1.05 + SLACK for s in shapes)
        self.table = sum(s.source == "table" for s in shapes)
        # The worst shape; among equal ratios the first read.
        self.worst = max(shapes, key=lambda s: s.ratio)

    def misses(self, t):
        """The targets this score misses, by name."""
        out = []
        if self.within10 < t.within_10 * self.n:
            out.append("within 10%")
        if self.within5 < t.within_5 * self.n:
            out.append("within 5%")
        if not self.worst.ratio <= t.worst + SLACK:
            out.append("worst")
        if self.n < t.min_shapes:
            out.append("shapes")
        return out


def share(k, n):
    return "%d (%.1f%%)" % (k, 100.0 * k / n)


def ratio_text(r):
    return "inf" if math.isinf(r) else "%.2fx" % r


def row(op, dtype, cls, score, targets):
    w = score.worst
    misses = score.misses(targets)
    chosen = w.automatic + ("" if not math.isinf(w.ratio) else
                            ", not measured")
    return "| %s | %s | %s | %d | %s | %s | %s | `%s`: %s (%s), fastest %s " \
        "| %s | %s |" % (op, dtype, cls, score.n,
                         share(score.within10, score.n),
                         share(score.within5, score.n), ratio_text(w.ratio),
                         w.label, chosen, w.source, w.fastest,
                         share(score.table, score.n),
                         "MISS: " + ", ".join(misses) if misses else "PASS")


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+", metavar="SHAPES.tsv")
    ap.add_argument("--within-10", type=float, default=0.97,
                    help="least share of shapes within 10%% of the fastest "
                    "(default 0.97)")
    ap.add_argument("--within-5", type=float, default=0.93,
                    help="least share within 5%% (default 0.93)")
    ap.add_argument("--worst", type=float, default=1.5,
                    help="largest worst ratio (default 1.5)")
    ap.add_argument("--min-shapes", type=int, default=200,
                    help="fewest shapes per row (default 200)")
    ap.add_argument("--title", default="Selection on held-out shapes")
    ap.add_argument("--fail-on-miss", action="store_true",
                    help="exit 1 when an op and dtype misses a target")
    args = ap.parse_args(argv[1:])

    groups = {}  # (op, dtype) -> {class: [Shape]}
    for path in args.files:
        for s in read_shapes(path):
            op, dtype, cls = group_of(s)
            groups.setdefault((op, dtype), {}).setdefault(cls, []).append(s)
    if not groups:
        sys.exit("selection_score: no shape in %s" % " ".join(args.files))

    print("# %s\n" % args.title)
    print("From %s.\n" % ", ".join("`%s`" % os.path.basename(p)
                                  for p in args.files))
    print("Targets per op and dtype: the automatic choice within 10%% of "
          "the fastest variant on >= %.1f%% of the shapes, within 5%% on "
          ">= %.1f%%, worst ratio (automatic / fastest) <= %.2fx, >= %d "
          "shapes. Rows of one class (below an op's \"all\" row) break "
          "the op down and are held to the same targets.\n"
          % (100 * args.within_10, 100 * args.within_5, args.worst,
             args.min_shapes))
    print("| op | dtype | class | shapes | within 10% | within 5% | worst "
          "ratio | worst shape: automatic (source), fastest | table hits "
          "| verdict |")
    print("| --- | --- | --- | ---: | ---: | ---: | ---: | --- | ---: | --- |")
    judged = missed = 0
    for (op, dtype), classes in sorted(groups.items()):
        everything = [s for cls in sorted(classes) for s in classes[cls]]
        whole = Score(everything)
        judged += 1
        missed += bool(whole.misses(args))
        if len(classes) == 1:
            print(row(op, dtype, next(iter(classes)), whole, args))
            continue
        print(row(op, dtype, "all", whole, args))
        for cls in sorted(classes):
            print(row(op, dtype, cls, Score(classes[cls]), args))
    print("\n%d of %d op and dtype rows PASS." % (judged - missed, judged))
    return 1 if missed and args.fail_on_miss else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
