#!/usr/bin/env python3
"""NCHW -> NHWC, an arbitrary permutation, and AoS -> SoA, in bfloat16."""

import argparse

import ml_dtypes
import numpy as np

import coalesce

parser = argparse.ArgumentParser(description=__doc__)
parser.add_argument("--target", default="127.0.0.1:50051")
args = parser.parse_args()

rng = np.random.default_rng()
x = rng.standard_normal((4, 16, 12, 12)).astype(ml_dtypes.bfloat16)
with coalesce.Client(args.target) as client:
    nhwc = client.convert_layout(x, layouts=("NCHW", "NHWC"))
    perm = client.convert_layout(x, permutation=[2, 0, 3, 1])
    points = rng.standard_normal((1000, 3)).astype(ml_dtypes.bfloat16)
    soa = client.convert_layout(points, aos_soa="aos_to_soa")
assert np.array_equal(nhwc, x.transpose(0, 2, 3, 1))
assert np.array_equal(perm, x.transpose(2, 0, 3, 1))
assert np.array_equal(soa, points.T)
print(f"NCHW {x.shape} -> NHWC {nhwc.shape}; permuted {perm.shape}; "
      f"AoS {points.shape} -> SoA {soa.shape}")
