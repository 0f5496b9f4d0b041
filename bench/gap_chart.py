#!/usr/bin/env python3
"""What a kernel boundary costs, drawn from `coalesce-kernel-gap --json`:
the best copy's time back to back against the bytes it moves, beside the
bytes at the copy peak and one empty kernel plus them (left), and the same
copy as a fraction of the peak with a 0.85 line (right), so that where a
size cannot reach a target is plain to see.

    gap_chart.py GAP.json --png OUT.png [--mark BYTES_MOVED ...]

Needs matplotlib (present on the H200 machine; Debian: python3-matplotlib).
"""
import argparse
import json


def series(data):
    """(bytes moved, best copy us, us at the peak, empty kernel us) per size,
    sorted by size; the empty kernel is the faster of its two launches."""
    peak = data["peak_GBps"] * 1e9
    empty = min(e["us"] for e in data["empty"])
    rows = []
    for c in data["copy"]:
        moved = 2 * c["bytes_each_way"]
        rows.append((moved, c["us"], moved / peak * 1e6, empty))
    return sorted(rows)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("json")
    ap.add_argument("--png", required=True)
    ap.add_argument("--mark", type=float, nargs="*", default=[],
                    help="bytes moved to mark (e.g. a target case's)")
    args = ap.parse_args()
    with open(args.json) as f:
        data = json.load(f)
    rows = series(data)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no chart")
        return
    mb = [r[0] / 1e6 for r in rows]
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 5))
    left.plot(mb, [r[1] for r in rows], marker="o", label="best copy, back to back")
    left.plot(mb, [r[2] for r in rows], ls="--", color="0.4",
              label="bytes at the copy peak")
    left.plot(mb, [r[2] + r[3] for r in rows], ls=":", color="C3",
              label="one empty kernel + bytes at the peak")
    left.set_xscale("log")
    left.set_yscale("log")
    left.set_xlabel("MB moved (read + written)")
    left.set_ylabel("us per launch")
    left.legend()
    right.plot(mb, [r[2] / r[1] for r in rows], marker="o",
               label="best copy, back to back")
    right.plot(mb, [r[2] / (r[2] + r[3]) for r in rows], ls=":", color="C3",
               label="one empty kernel + bytes at the peak")
    right.axhline(0.85, color="0.5", lw=1, label="0.85")
    right.set_xscale("log")
    right.set_ylim(0, 1.1)
    right.set_xlabel("MB moved (read + written)")
    right.set_ylabel("x copy peak")
    for m in args.mark:
        for ax in (left, right):
            ax.axvline(m / 1e6, color="C2", lw=0.8)
    right.legend(loc="lower right")
    fig.suptitle("%s: copy peak %.0f GB/s, empty kernel %.2f us back to back"
                 % (data["device"], data["peak_GBps"], rows[0][3]))
    fig.tight_layout()
    fig.savefig(args.png, dpi=110)
    print("wrote", args.png)


if __name__ == "__main__":
    main()
