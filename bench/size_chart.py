#!/usr/bin/env python3
"""Fraction of the copy peak against the bytes a case moves: for every
case of one or more `coalesce-bench kernels --json` files, its fastest
variant back to back and the copy of the same bytes timed beside it
(same-size copy), on a log axis of bytes. It shows where a case is bound
by its size rather than by its kernel: the copy's own curve.

    size_chart.py KERNELS.json [KERNELS.json ...] --png OUT.png [--title T]

Needs matplotlib (present on the H200 machine; `pip install matplotlib`
elsewhere).
"""
import argparse
import json


def cases(paths):
    """[(op case, dtype, shape, bytes, best b2b fraction, copy fraction)]."""
    best = {}
    for path in paths:
        with open(path) as f:
            data = json.load(f)
        peak = data["copy_peak_GBps"]
        for r in data["rows"]:
            if "b2b_frac_copy_peak" not in r or "copy_b2b_GBps" not in r:
                continue
            key = (r["case"], r["dtype"], tuple(r["shape"]))
            cur = best.get(key)
            if cur is None or r["b2b_frac_copy_peak"] > cur[1]:
                best[key] = (r["bytes"], r["b2b_frac_copy_peak"],
                             r["copy_b2b_GBps"] / peak)
    return [(k[0], k[1], k[2], *v) for k, v in best.items()]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("json", nargs="+")
    ap.add_argument("--png", required=True)
    ap.add_argument("--title", default="")
    args = ap.parse_args()
    rows = sorted(cases(args.json), key=lambda c: c[3])
    if not rows:
        print("no case with a back-to-back time and a same-size copy: no chart")
        return
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no chart")
        return
    fig, ax = plt.subplots(figsize=(10, 5.5))
    ax.plot([c[3] for c in rows], [c[5] for c in rows], color="0.4", lw=1,
            marker=".", label="same-size copy (b2b)", zorder=1)
    ops = sorted({c[0] for c in rows})
    markers = "o^sDvP*X"
    for i, op in enumerate(ops):
        pts = [c for c in rows if c[0] == op]
        ax.scatter([c[3] for c in pts], [c[4] for c in pts], s=22,
                   marker=markers[i % len(markers)], label=op, zorder=2)
    # Name each case under 0.85 once, by its shape and dtypes.
    named = {}
    for c in rows:
        if c[4] < 0.85:
            named.setdefault((c[0], c[2]), []).append(c)
    for (op, shape), cs in named.items():
        low = min(cs, key=lambda c: c[4])
        dtypes = ",".join(sorted({c[1] for c in cs}))
        ax.annotate(f"{op} {'x'.join(map(str, shape))} ({dtypes})",
                    (low[3], low[4]), fontsize=6, xytext=(5, -10),
                    textcoords="offset points")
    for t in (0.75, 0.85, 0.90):
        ax.axhline(t, color="r", lw=0.6, ls="--")
        ax.annotate(f"target {t:.2f}", (rows[0][3], t), fontsize=7,
                    color="r", xytext=(0, 2), textcoords="offset points")
    ax.set_xscale("log")
    ax.set_xlabel("bytes moved (read + written)")
    ax.set_ylabel("fraction of the start-up copy peak, back to back")
    ax.set_title(args.title or "Fastest variant per case and a copy of the "
                 "same bytes")
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(args.png, dpi=120)
    print(f"{len(rows)} cases -> {args.png}")


if __name__ == "__main__":
    main()
