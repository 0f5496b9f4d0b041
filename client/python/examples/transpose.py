#!/usr/bin/env python3
"""Transpose a random [M, N] float32 matrix on the server and check it."""

import argparse

import numpy as np

import coalesce

parser = argparse.ArgumentParser(description=__doc__)
parser.add_argument("--target", default="127.0.0.1:50051")
args = parser.parse_args()

x = np.random.default_rng().standard_normal((512, 384)).astype(np.float32)
with coalesce.Client(args.target) as client:
    y, report = client.transpose(x, report=True)
assert np.array_equal(y, x.T), "transpose differs from NumPy"
print(f"transpose {x.shape} -> {y.shape}: {report.variant} "
      f"({report.selection_source}), {report.kernel_seconds * 1e6:.1f} us, "
      f"{report.achieved_bytes_per_second / 1e9:.2f} GB/s")
