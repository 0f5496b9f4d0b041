#!/usr/bin/env python3
"""Merges a coalesce-bench JSON and a torch_bench JSON of the same run into
Markdown tables (best variant per case, every variant) and, where
matplotlib is present, a chart of each variant's fraction of the copy peak.

    python3 bench/report.py COALESCE_JSON [TORCH_JSON] [--md OUT.md]
        [--png OUT.png]

Files written before the back-to-back timing (no b2b_* fields) still work:
their new columns read "-" and everything is ranked by the per-launch median.
"""
import argparse
import json
from collections import defaultdict


def shape_str(s):
    return "x".join(str(d) for d in s)


def time_key(rows):
    """The time to rank rows by: back to back where every row has it (a
    short kernel's own duration), else the per-launch median."""
    return "b2b_us" if all("b2b_us" in r for r in rows) else "median_us"


def fmt(x, spec):
    return "-" if x is None else format(x, spec)


def vs_torch(best, tr, what):
    """Our bandwidth over PyTorch's `what` ('torch', 'torch_compile',
    'same_size_copy'): back to back against back to back where both files
    have it, else per-launch median against median; None where PyTorch's
    is missing."""
    if not tr:
        return None
    if "b2b_GBps" in best and f"{what}_b2b_GBps" in tr:
        return best["b2b_GBps"] / tr[f"{what}_b2b_GBps"]
    if f"{what}_GBps" in tr:
        return best["GBps"] / tr[f"{what}_GBps"]
    return None


def torch_shown(best, tr):
    """PyTorch's GB/s as vs_torch compared with it."""
    if "b2b_GBps" in best and "torch_b2b_GBps" in tr:
        return tr["torch_b2b_GBps"]
    return tr["torch_GBps"]


def vs_torch_flops(best, tr):
    """Our FLOP/s over PyTorch's, back to back where both have it."""
    if not tr:
        return None
    if "b2b_us" in best and "torch_b2b_us" in tr:
        return tr["torch_b2b_us"] / best["b2b_us"]
    if "torch_TFLOPs" in tr:
        return best["flops"] / best["median_us"] / 1e6 / tr["torch_TFLOPs"]
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("coalesce_json")
    ap.add_argument("torch_json", nargs="?")
    ap.add_argument("--md")
    ap.add_argument("--png")
    args = ap.parse_args()
    c = json.load(open(args.coalesce_json))
    t = json.load(open(args.torch_json)) if args.torch_json else {"rows": []}
    torch_by = {(r["case"], r["dtype"], tuple(r["shape"])): r
                for r in t["rows"]}
    groups = defaultdict(list)
    for r in c["rows"]:
        groups[(r["case"], r["dtype"], tuple(r["shape"]))].append(r)
    out = []
    out.append(f"Device: {c['device']}; copy peak measured by Coalesce at "
               f"start-up: {c['copy_peak_GBps']:.0f} GB/s"
               + (f"; by PyTorch in the same run: "
                  f"{t['torch_copy_GBps']:.0f} GB/s"
                  + (f", {t['torch_copy_b2b_GBps']:.0f} GB/s back to back"
                     if "torch_copy_b2b_GBps" in t else "")
                  + f" (torch {t['torch']})"
                  if "torch_copy_GBps" in t else "") + ".\n")
    out.append("| case | dtype | shape | best variant | us | us b2b | GB/s | "
               "x copy peak | x copy peak (b2b) | x same-size copy (b2b) | "
               "x PyTorch same-size copy | naive GB/s | torch GB/s | "
               "vs torch | vs torch.compile | TFLOP/s | vs torch (FLOP/s) | "
               "check |")
    out.append("|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
               "---:|---:|---:|---:|---|")
    for key, rows in groups.items():
        best = min(rows, key=lambda r: r[time_key(rows)])
        naive = [r for r in rows if r["variant"].endswith(".naive")]
        tr = torch_by.get(key)
        checks = {r["check"] for r in rows}
        check = "ok" if checks == {"ok"} else ", ".join(sorted(checks))[:40]
        same_size = (best["b2b_GBps"] / best["copy_b2b_GBps"]
                     if "copy_b2b_GBps" in best else None)
        out.append(
            f"| {key[0]} | {key[1]} | {shape_str(key[2])} | "
            f"{best['variant']} | {best['median_us']:.1f} | "
            f"{fmt(best.get('b2b_us'), '.1f')} | {best['GBps']:.0f} | "
            f"{best['frac_copy_peak']:.3f} | "
            f"{fmt(best.get('b2b_frac_copy_peak'), '.3f')} | "
            f"{fmt(same_size, '.3f')} | "
            f"{fmt(vs_torch(best, tr, 'same_size_copy'), '.3f')} | "
            + (f"{naive[0]['GBps']:.0f}" if naive else "-") + " | "
            + (f"{torch_shown(best, tr):.0f}" if tr else "-") + " | "
            f"{fmt(vs_torch(best, tr, 'torch'), '.2f')} | "
            f"{fmt(vs_torch(best, tr, 'torch_compile'), '.2f')} | "
            + (f"{best['flops'] / best['median_us'] / 1e6:.1f}"
               if best["flops"] else "-") + " | "
            + (fmt(vs_torch_flops(best, tr), ".2f") if best["flops"] else "-")
            + f" | {check} |")
    out.append("")
    out.append("us, GB/s, x copy peak, TFLOP/s: per launch (median; an event "
               "before and after each run). us b2b and the (b2b) columns: "
               "mean per run of runs issued back to back, one event before "
               "and one after them all. x copy peak divides by the large copy "
               "timed at start-up; x same-size copy (b2b) by a copy of the "
               "case's own bytes timed back to back by coalesce-bench. "
               "Against PyTorch (torch_bench.py): back to back against back "
               "to back where both files have it, else median against "
               "median. The best variant is the fastest back to back where "
               "every variant has that time, else by median.\n")
    gemm_keys = [k for k in groups if k[0] == "gemm"]
    if gemm_keys:
        out.append("")
        out.append("GEMM variants against cuBLASLt (the gemm.cuda.cublaslt "
                   "variant) in the same run:\n")
        out.append("| dtype | shape | variant | TFLOP/s | x cuBLASLt |")
        out.append("|---|---|---|---:|---:|")
        for key in gemm_keys:
            rows = groups[key]
            lt = [r for r in rows if r["variant"].endswith(".cublaslt")]
            for r in sorted(rows, key=lambda r: r["median_us"]):
                tflops = r["flops"] / r["median_us"] / 1e6
                ratio = (f"{lt[0]['median_us'] / r['median_us']:.2f}"
                         if lt else "-")
                out.append(f"| {key[1]} | {shape_str(key[2])} | "
                           f"{r['variant']} | {tflops:.1f} | {ratio} |")
    out.append("")
    out.append("<details><summary>Every variant</summary>\n")
    out.append("| case | dtype | shape | variant | us | us b2b | GB/s | "
               "x peak | x peak (b2b) | occupancy | regs | smem |")
    out.append("|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for key, rows in groups.items():
        for r in sorted(rows, key=lambda r: r[time_key(rows)]):
            out.append(
                f"| {key[0]} | {key[1]} | {shape_str(key[2])} | "
                f"{r['variant']} | {r['median_us']:.1f} | "
                f"{fmt(r.get('b2b_us'), '.1f')} | {r['GBps']:.0f} | "
                f"{r['frac_copy_peak']:.3f} | "
                f"{fmt(r.get('b2b_frac_copy_peak'), '.3f')} | "
                f"{r['theoretical_occupancy']:.2f} | {r['registers']} | "
                f"{r['smem_bytes']} |")
    out.append("\n</details>\n")
    text = "\n".join(out)
    if args.md:
        open(args.md, "w").write(text)
    print(text)
    if args.png:
        try:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            print("matplotlib not installed: no chart")
            return
        keys = list(groups)
        frac = ("b2b_frac_copy_peak"
                if all("b2b_frac_copy_peak" in r for r in c["rows"])
                else "frac_copy_peak")
        variants = sorted({r["variant"].split(".")[-1] for r in c["rows"]})
        fig, ax = plt.subplots(figsize=(max(8, len(keys) * 0.6), 5))
        width = 0.8 / max(1, len(variants))
        for vi, v in enumerate(variants):
            xs, ys = [], []
            for ki, k in enumerate(keys):
                for r in groups[k]:
                    if r["variant"].split(".")[-1] == v:
                        xs.append(ki + vi * width)
                        ys.append(r[frac])
            ax.bar(xs, ys, width, label=v)
        ax.axhline(1.0, color="k", lw=0.8)
        ax.set_xticks([i + 0.4 for i in range(len(keys))])
        ax.set_xticklabels([f"{k[0]}\n{k[1]}\n{shape_str(k[2])}"
                            for k in keys], fontsize=6, rotation=90)
        ax.set_ylabel("fraction of measured copy peak"
                      + (", back to back" if frac.startswith("b2b") else ""))
        ax.set_title(f"Coalesce variants on {c['device']}")
        ax.legend(fontsize=7, ncol=3)
        fig.tight_layout()
        fig.savefig(args.png, dpi=120)


if __name__ == "__main__":
    main()
