#!/usr/bin/env python3
"""The KServe v2 path against the native one, from a gpu-check kserve run:

  bench/kserve_compare.py OUT_DIR

reads OUT_DIR/kserve-MODEL-BYTES-CONC-native[-ROUND].json (coalesce-bench
service on coalesce.v1; identity against its Echo row) and -v2[-ROUND].csv
(perf_analyzer over KServe v2 gRPC, same inputs) and prints a Markdown
table: each side's best round (requests/s, and that round's median
latency), and v2 over native (target 0.95). With -benchv2[-ROUND].json
(coalesce-bench service --protocol=kserve, the same inputs), a last column
gives its best round over native: the protocol alone, one client.
Exits 1 when a case lacks either side or a round's figures."""
import csv
import glob
import json
import os
import re
import sys

TARGET = 0.95


def native(path, model, protocol="native"):
    """The op's row (identity: Echo's) of coalesce-bench's JSON over
    protocol; None when it failed, or (protocol other than native) when the
    run had no such row."""
    with open(path) as f:
        rows = json.load(f)["results"]
    want = "echo" if model == "identity" else None
    for r in rows:
        if r.get("protocol", "native") != protocol:
            continue
        if (r["op"] == "echo") == (want == "echo"):
            if r.get("errors"):
                return None
            return (r["requests_per_second"],
                    r["latency_ms"]["p50"] * 1e3)
    return None


def v2(path):
    with open(path) as f:
        rows = list(csv.DictReader(f))
    if not rows:
        return None
    r = rows[-1]
    return float(r["Inferences/Second"]), float(r["p50 latency"])


def best(paths, read):
    """The round with the most requests/s; None if any round failed."""
    rounds = [read(p) for p in sorted(paths)]
    if not rounds or any(r is None for r in rounds):
        return None
    return max(rounds)


def main(out):
    cases = []
    for path in glob.glob(os.path.join(out, "kserve-*-native.json")):
        m = re.match(r"kserve-(\w+)-(\d+)-(\d+)-native\.json$",
                     os.path.basename(path))
        if m:
            cases.append((m.group(1), int(m.group(2)), int(m.group(3))))
    if not cases:
        print(f"no kserve-*-native.json in {out}", file=sys.stderr)
        return 1
    order = ["identity", "transpose", "convert_layout", "gelu_layer_norm",
             "gemm"]
    cases.sort(key=lambda c: (order.index(c[0]) if c[0] in order else 99,
                              c[1], c[2]))
    print("| model | bytes per input | concurrency | coalesce.v1 req/s "
          "(p50 us) | KServe v2 req/s (p50 us) | v2 / native | "
          "v2 by coalesce-bench / native |")
    print("|---|---|---|---|---|---|---|")
    failed = 0
    below = []
    for model, size, conc in cases:
        base = os.path.join(out, f"kserve-{model}-{size}-{conc}")
        n = v = same = None
        try:
            n = best(glob.glob(base + "-native*.json"),
                     lambda p: native(p, model))
            v = best(glob.glob(base + "-v2*.csv"), v2)
            same_paths = glob.glob(base + "-benchv2*.json")
            if same_paths:
                same = best(same_paths, lambda p: native(p, model, "kserve"))
        except (OSError, KeyError, ValueError) as e:
            print(f"{base}: {e}", file=sys.stderr)
        same_cell = "-" if same is None or n is None else \
            f"{same[0] / n[0]:.3f}x ({same[0]:.0f})"
        label = f"{size >> 20} MiB" if size >= 1 << 20 else f"{size >> 10} KiB"
        if n is None or v is None:
            failed += 1
            print(f"| {model} | {label} | {conc} | "
                  f"{'-' if n is None else f'{n[0]:.0f} ({n[1]:.0f})'} | "
                  f"{'-' if v is None else f'{v[0]:.0f} ({v[1]:.0f})'} | - | "
                  f"{same_cell} |")
            continue
        ratio = v[0] / n[0]
        if ratio < TARGET:
            below.append(f"{model} {label} x{conc}")
        print(f"| {model} | {label} | {conc} | {n[0]:.0f} ({n[1]:.0f}) | "
              f"{v[0]:.0f} ({v[1]:.0f}) | {ratio:.3f}x | {same_cell} |")
    print()
    print(f"below {TARGET}x: {', '.join(below) if below else 'none'}")
    return 1 if failed else 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1]))
