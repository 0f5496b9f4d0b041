#!/usr/bin/env python3
"""Chaining ops through tensors kept on the server: upload A and B once,
D = A @ B and D^T stay on the server, only the final result comes back."""

import argparse

import numpy as np

import coalesce

parser = argparse.ArgumentParser(description=__doc__)
parser.add_argument("--target", default="127.0.0.1:50051")
args = parser.parse_args()

rng = np.random.default_rng()
a = rng.standard_normal((256, 64)).astype(np.float32)
b = rng.standard_normal((64, 128)).astype(np.float32)
with coalesce.Client(args.target) as client:
    ha = client.put_tensor(a)                         # uploaded in chunks
    hb = client.put_tensor(b)
    hd = client.gemm(ha, hb, output=coalesce.HANDLE)  # no bytes move
    ht = client.transpose(hd, output=coalesce.HANDLE)
    print("on the server:", [(t.handle, t.shape) for t in
                             client.list_tensors().tensors])
    result = client.get_tensor(ht)
    for h in (ha, hb, hd, ht):
        client.delete_tensor(h)
assert np.allclose(result, (a.astype(np.float64) @ b).T, atol=1e-3)
print(f"(A @ B)^T {result.shape} matches NumPy")
