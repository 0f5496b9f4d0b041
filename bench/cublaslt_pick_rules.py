#!/usr/bin/env python3
"""Rules for which of cuBLASLt's offered algorithms the gemm.cuda.cublaslt
variant takes in float32, scored on timed offers.

  python3 bench/cublaslt_pick_rules.py shapes \\
      kernels/cuda/testdata/gemm_classes_seed7.txt > seed7-shapes.txt
  CUBLASLT_SHAPES=seed7-shapes.txt scripts/gpu-check.sh OUT7 cublaslt
  python3 bench/cublaslt_pick_rules.py score OUT7/cublaslt.txt OUT8/cublaslt.txt

`shapes`: the float32 GEMMs of a selection testdata file that a split-K
algorithm may serve (K over 128, fewer than 64K outputs, no GEMVs), in
coalesce-cublaslt-algos' M,N,K,BATCH[,ta][,tb] form.

`table-shapes`: one shape per float32 GEMM entry of a shipped tuning table
(the middle of its buckets, with its alignment classes and transposes),
the same form; `moved` then lists, per timed file, the shapes where the
variant's pick differs from the previous revision's (previous_rule), which
tells whether a revision leaves the table's float32 entries valid:

  python3 bench/cublaslt_pick_rules.py table-shapes \
      deploy/tuning/nvidia-h200.txt > entries.txt
  CUBLASLT_SHAPES=entries.txt scripts/gpu-check.sh OUT cublaslt
  python3 bench/cublaslt_pick_rules.py moved OUT/cublaslt.txt

`score`: per rule and file, the geometric mean of the rule's pick over the
fastest offered algorithm, how many shapes it leaves over 1.1x and 1.25x,
and the worst. A rule says, from K and the heuristic's first offer, whether
the plan avoids split K, and where every offer splits, which it takes; the
pick mirrors PickLtAlgorithm (kernels/cuda/gemm/cublaslt_pick.h): the first
unsplit of the first 8 offers, else the first of the fewest splits (or of
the least workspace, as before). The first rule is the variant's (K <= 128;
K <= 512 where the first offer fills 0.2 waves or splits K into parts of
under 2 steps; any K where it splits K 256 ways or more).
Plain Python 3.
"""

import math
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sweep_shapes import align_class  # noqa: E402

HEURISTIC_RESULTS = 8  # kLtHeuristicResults
NO_SPLIT_MAX_K = 128  # kLtNoSplitMaxK
WIDE_NO_SPLIT_MAX_K = 512  # kLtWideNoSplitMaxK
NO_SPLIT_MIN_WAVES = 0.2  # kLtNoSplitMinWaves
NO_SPLIT_MIN_STEPS = 2  # kLtNoSplitMinStepsPerSplit
NO_SPLIT_MIN_FIRST_SPLITS = 256  # kLtNoSplitMinFirstSplits

OFFER = re.compile(
    r"(?P<shape>\S+)\s+rank\s+(?P<rank>\d+)\s+algo\s+-?\d+\s+tile\s+-?\d+\s+"
    r"splitk\s+(?P<split>-?\d+)\s+reduction\s+-?\d+\s+stages\s+-?\d+\s+"
    r"workspace\s+(?P<workspace>\d+)\s+waves\s+(?P<waves>[\d.]+)\s+"
    r"(?P<us>[\d.]+) us")


def split_shapes(lines):
    """coalesce-cublaslt-algos shapes of a gemm_classes testdata file."""
    out = []
    for line in lines:
        if not line.startswith("float32\t"):
            continue
        m, n, k, batch, ta, tb = map(int, line.split("\t")[1].split(","))
        if k <= NO_SPLIT_MAX_K or m == 1 or n == 1 or batch * m * n >= 65536:
            continue
        out.append("%d,%d,%d,%d%s%s" % (m, n, k, batch, ",ta" if ta else "",
                                        ",tb" if tb else ""))
    return out


def read_offers(lines):
    """{shape: [offer, ...]} in the heuristic's order; offer: dict of
    split, workspace, waves, us."""
    shapes = {}
    for line in lines:
        m = OFFER.match(line)
        if not m:
            continue
        shapes.setdefault(m["shape"], []).append({
            "split": int(m["split"]),
            "workspace": int(m["workspace"]),
            "waves": float(m["waves"]),
            "us": float(m["us"]),
        })
    return shapes


def pick(offers, avoid_split, fallback="split"):
    """PickLtAlgorithm over the first HEURISTIC_RESULTS offers; where all
    split, the first of the fewest splits ("split") or of the least
    workspace ("workspace")."""
    offers = offers[:HEURISTIC_RESULTS]
    if not avoid_split:
        return offers[0]
    for o in offers:
        if o["split"] <= 1:
            return o
    least = min(o[fallback] for o in offers)
    return next(o for o in offers if o[fallback] == least)


def no_split_rule(max_k, wide_max_k=0, min_waves=math.inf, min_steps=0,
                  min_first_splits=math.inf, steps_max_k=None):
    """avoids_split(k, first_offer): always with K <= max_k or where the
    first offer splits K min_first_splits ways or more; with K <=
    wide_max_k where the first offer fills min_waves; with K <= steps_max_k
    (default wide_max_k) where it splits K into parts of under min_steps
    steps (LtAvoidsSplitK's form)."""
    if steps_max_k is None:
        steps_max_k = wide_max_k

    def avoids_split(k, first):
        if k <= max_k or first["split"] >= min_first_splits:
            return True
        return ((k <= wide_max_k and first["waves"] >= min_waves) or
                (k <= steps_max_k and first["split"] > 1 and
                 k < min_steps * first["split"]))
    return avoids_split


def wide_rule(**extra):
    """no_split_rule with revision 2's bounds, and extra's clauses."""
    return no_split_rule(NO_SPLIT_MAX_K, WIDE_NO_SPLIT_MAX_K,
                         NO_SPLIT_MIN_WAVES, NO_SPLIT_MIN_STEPS, **extra)


def rules():
    """(name, avoids_split(k, first_offer), fallback) triples, the
    variant's first."""
    wide = ("K <= %d, or K <= %d and (waves >= %.1f or K / split < %d)" %
            (NO_SPLIT_MAX_K, WIDE_NO_SPLIT_MAX_K, NO_SPLIT_MIN_WAVES,
             NO_SPLIT_MIN_STEPS))
    out = [("%s, or first split >= %d; fewest splits (the variant)" %
            (wide, NO_SPLIT_MIN_FIRST_SPLITS),
            wide_rule(min_first_splits=NO_SPLIT_MIN_FIRST_SPLITS), "split")]
    out.append(previous_rule())
    out.append(("%s; fewest splits" % wide, wide_rule(), "split"))
    out.append(("%s, or first split >= %d; least workspace" %
                (wide, NO_SPLIT_MIN_FIRST_SPLITS),
                wide_rule(min_first_splits=NO_SPLIT_MIN_FIRST_SPLITS),
                "workspace"))
    for splits in (128, 200):
        out.append(("%s, or first split >= %d; fewest splits" %
                    (wide, splits), wide_rule(min_first_splits=splits),
                    "split"))
    for steps in (4, 8):
        out.append(("K <= %d, or K <= %d and waves >= %.1f, or K / split < "
                    "%d; fewest splits" %
                    (NO_SPLIT_MAX_K, WIDE_NO_SPLIT_MAX_K, NO_SPLIT_MIN_WAVES,
                     steps),
                    no_split_rule(NO_SPLIT_MAX_K, WIDE_NO_SPLIT_MAX_K,
                                  NO_SPLIT_MIN_WAVES, steps,
                                  steps_max_k=math.inf), "split"))
    for bound in (NO_SPLIT_MAX_K, 256, 512, 1024):
        out.append(("K <= %d; fewest splits" % bound, no_split_rule(bound),
                    "split"))
    return out


def previous_rule():
    """Revision 2 of the variant: (name, avoids_split, fallback)."""
    return ("K <= %d, or K <= %d and (waves >= %.1f or K / split < %d); "
            "least workspace (revision 2)" %
            (NO_SPLIT_MAX_K, WIDE_NO_SPLIT_MAX_K, NO_SPLIT_MIN_WAVES,
             NO_SPLIT_MIN_STEPS), wide_rule(), "workspace")


def bucket_value(bucket, align):
    """A size in Log2Bucket's bucket (2^(b-1), 2^b] of the alignment class,
    nearest the bucket's geometric middle; None when the bucket has none."""
    if bucket == 0:
        return 1 if align == 1 else None
    middle = 2 ** (bucket - 0.5)
    fits = [x for x in range(2 ** (bucket - 1) + 1, 2 ** bucket + 1)
            if align_class(x) == align]
    return min(fits, key=lambda x: abs(x - middle)) if fits else None


def table_shapes(lines):
    """One coalesce-cublaslt-algos shape per float32 GEMM entry of a tuning
    table, sorted and without repeats."""
    out = set()
    for line in lines:
        if not line.startswith("entry gemm|float32|"):
            continue
        fields = {}
        for f in line.split("\t")[0].split("|")[2:]:
            if f[:1] in "bmnkat" and f[1:2].isdigit():
                fields[f[0]] = f[1:]
        aligns = [int(a) for a in fields["a"].split(".")]
        m, n, k = (bucket_value(int(fields[d]), a)
                   for d, a in zip("mnk", aligns))
        if None in (m, n, k):
            continue
        b = int(fields["b"])
        batch = 1 if b == 0 else 2 ** (b - 1) + 1
        ta, tb = fields["t"]
        out.add("%d,%d,%d,%d%s%s" % (m, n, k, batch, ",ta" if ta == "1" else "",
                                     ",tb" if tb == "1" else ""))
    return sorted(out)


def moved(shapes):
    """[(shape, previous pick's us, the variant's pick's us)] where the two
    revisions pick different offers."""
    _, rule, fallback = rules()[0]
    _, before, before_fallback = previous_rule()
    out = []
    for shape, offers in shapes.items():
        k = int(shape.split(",")[2])
        a = pick(offers, before(k, offers[0]), before_fallback)
        b = pick(offers, rule(k, offers[0]), fallback)
        if a is not b:
            out.append((shape, a["us"], b["us"]))
    return out


def score(shapes, avoids_split, fallback):
    """(geometric mean, over 1.1x, over 1.25x, worst ratio, worst shape)."""
    ratios = []
    for shape, offers in shapes.items():
        k = int(shape.split(",")[2])
        fastest = min(o["us"] for o in offers[:HEURISTIC_RESULTS])
        chosen = pick(offers, avoids_split(k, offers[0]), fallback)
        ratios.append((chosen["us"] / fastest, shape))
    geo = math.exp(sum(math.log(r) for r, _ in ratios) / len(ratios))
    worst = max(ratios)
    return (geo, sum(r > 1.1 for r, _ in ratios),
            sum(r > 1.25 for r, _ in ratios), worst[0], worst[1])


def main(argv):
    if len(argv) < 3 or argv[1] not in ("shapes", "table-shapes", "score",
                                        "moved"):
        sys.exit(__doc__)
    if argv[1] in ("shapes", "table-shapes"):
        with open(argv[2]) as f:
            print("\n".join(split_shapes(f) if argv[1] == "shapes"
                            else table_shapes(f)))
        return
    files = []
    for path in argv[2:]:
        with open(path) as f:
            shapes = read_offers(f)
        if not shapes:
            sys.exit("%s: no timed offers" % path)
        files.append((path, shapes))
    if argv[1] == "moved":
        for path, shapes in files:
            changed = moved(shapes)
            print("%s: %d of %d shapes pick another offer than %s" %
                  (path, len(changed), len(shapes), previous_rule()[0]))
            for shape, before, now in changed:
                print("  %s: %.2f -> %.2f us" % (shape, before, now))
        return
    print("| rule | " + " | ".join("%s (%d shapes)" % (p, len(s))
                                  for p, s in files) + " |")
    print("|---|" + "---|" * len(files))
    for name, rule, fallback in rules():
        cells = []
        for _, shapes in files:
            geo, over10, over25, worst, at = score(shapes, rule, fallback)
            cells.append("%.3f, >1.1x %d, >1.25x %d, worst %.2fx (%s)" %
                         (geo, over10, over25, worst, at))
        print("| %s | %s |" % (name, " | ".join(cells)))


if __name__ == "__main__":
    main(sys.argv)
