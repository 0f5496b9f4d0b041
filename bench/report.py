#!/usr/bin/env python3
"""Merges a coalesce-bench JSON and a torch_bench JSON of the same run into
Markdown tables (best variant per case, every variant) and, where
matplotlib is present, a chart of each variant's fraction of the copy peak.

    python3 bench/report.py COALESCE_JSON [TORCH_JSON] [--md OUT.md]
        [--png OUT.png]
"""
import argparse
import json
from collections import defaultdict


def shape_str(s):
    return "x".join(str(d) for d in s)


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
                  f"{t['torch_copy_GBps']:.0f} GB/s (torch {t['torch']})"
                  if "torch_copy_GBps" in t else "") + ".\n")
    out.append("| case | dtype | shape | best variant | us | GB/s | x copy "
               "peak | x same-size copy | naive GB/s | torch GB/s | vs torch "
               "| vs torch.compile | TFLOP/s | vs torch (FLOP/s) | check |")
    out.append("|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
               "---:|---|")
    for key, rows in groups.items():
        best = min(rows, key=lambda r: r["median_us"])
        naive = [r for r in rows if r["variant"].endswith(".naive")]
        tr = torch_by.get(key)
        checks = {r["check"] for r in rows}
        check = "ok" if checks == {"ok"} else ", ".join(sorted(checks))[:40]
        out.append(
            f"| {key[0]} | {key[1]} | {shape_str(key[2])} | "
            f"{best['variant']} | {best['median_us']:.1f} | "
            f"{best['GBps']:.0f} | {best['frac_copy_peak']:.3f} | "
            + (f"{best['GBps'] / tr['same_size_copy_GBps']:.3f}"
               if tr and "same_size_copy_GBps" in tr else "-") + " | "
            + (f"{naive[0]['GBps']:.0f}" if naive else "-") + " | "
            + (f"{tr['torch_GBps']:.0f} | {best['GBps'] / tr['torch_GBps']:.2f}"
               if tr else "- | -") + " | "
            + (f"{best['GBps'] / tr['torch_compile_GBps']:.2f}"
               if tr and "torch_compile_GBps" in tr else "-") + " | "
            + (f"{best['flops'] / best['median_us'] / 1e6:.1f}"
               if best["flops"] else "-") + " | "
            + (f"{best['flops'] / best['median_us'] / 1e6 / tr['torch_TFLOPs']:.2f}"
               if tr and "torch_TFLOPs" in tr else "-") + f" | {check} |")
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
    out.append("| case | dtype | shape | variant | us | GB/s | x peak | "
               "occupancy | regs | smem |")
    out.append("|---|---|---|---|---:|---:|---:|---:|---:|---:|")
    for key, rows in groups.items():
        for r in sorted(rows, key=lambda r: r["median_us"]):
            out.append(
                f"| {key[0]} | {key[1]} | {shape_str(key[2])} | "
                f"{r['variant']} | {r['median_us']:.1f} | {r['GBps']:.0f} | "
                f"{r['frac_copy_peak']:.3f} | "
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
        variants = sorted({r["variant"].split(".")[-1] for r in c["rows"]})
        fig, ax = plt.subplots(figsize=(max(8, len(keys) * 0.6), 5))
        width = 0.8 / max(1, len(variants))
        for vi, v in enumerate(variants):
            xs, ys = [], []
            for ki, k in enumerate(keys):
                for r in groups[k]:
                    if r["variant"].split(".")[-1] == v:
                        xs.append(ki + vi * width)
                        ys.append(r["frac_copy_peak"])
            ax.bar(xs, ys, width, label=v)
        ax.axhline(1.0, color="k", lw=0.8)
        ax.set_xticks([i + 0.4 for i in range(len(keys))])
        ax.set_xticklabels([f"{k[0]}\n{k[1]}\n{shape_str(k[2])}"
                            for k in keys], fontsize=6, rotation=90)
        ax.set_ylabel("fraction of measured copy peak")
        ax.set_title(f"Coalesce variants on {c['device']}")
        ax.legend(fontsize=7, ncol=3)
        fig.tight_layout()
        fig.savefig(args.png, dpi=120)


if __name__ == "__main__":
    main()
