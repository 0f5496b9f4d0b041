#!/usr/bin/env python3
"""D = alpha * A @ B + beta * C in float16 on the server, checked against
NumPy in float64."""

import argparse

import numpy as np

import coalesce

parser = argparse.ArgumentParser(description=__doc__)
parser.add_argument("--target", default="127.0.0.1:50051")
args = parser.parse_args()

rng = np.random.default_rng()
m, n, k = 128, 96, 64
a = rng.standard_normal((m, k)).astype(np.float16)
b = rng.standard_normal((k, n)).astype(np.float16)
c = rng.standard_normal((m, n)).astype(np.float16)
with coalesce.Client(args.target) as client:
    d, report = client.gemm(a, b, c, alpha=0.5, beta=2.0, report=True)
want = 0.5 * a.astype(np.float64) @ b.astype(np.float64) + 2.0 * c
error = np.abs(d.astype(np.float64) - want).max()
assert error < 0.05, f"max error {error}"
print(f"gemm {m}x{n}x{k} float16: {report.variant}, max error {error:.4f}, "
      f"{report.achieved_flops_per_second / 1e9:.2f} GFLOP/s")
