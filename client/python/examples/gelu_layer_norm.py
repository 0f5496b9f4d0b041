#!/usr/bin/env python3
"""The fused transformer epilogue: y = LayerNorm(gelu(x + bias) + residual)
* gamma + beta, also returning the pre-norm sum h."""

import argparse
import math

import numpy as np

import coalesce

parser = argparse.ArgumentParser(description=__doc__)
parser.add_argument("--target", default="127.0.0.1:50051")
args = parser.parse_args()

rng = np.random.default_rng()
rows, hidden = 32, 768
x = rng.standard_normal((rows, hidden)).astype(np.float32)
bias, gamma, beta = (rng.standard_normal(hidden).astype(np.float32)
                     for _ in range(3))
residual = rng.standard_normal((rows, hidden)).astype(np.float32)
with coalesce.Client(args.target) as client:
    (y, h), report = client.gelu_layer_norm(
        x, bias, residual, gamma, beta, approximation="tanh",
        return_pre_norm=True, report=True)

t = x.astype(np.float64) + bias
want_h = 0.5 * t * (1 + np.tanh(math.sqrt(2 / math.pi) * (t + 0.044715 * t**3)))
want_h += residual
norm = (want_h - want_h.mean(-1, keepdims=True)) / np.sqrt(
    want_h.var(-1, keepdims=True) + 1e-5)
want_y = norm * gamma + beta
assert np.allclose(h, want_h, atol=1e-4) and np.allclose(y, want_y, atol=1e-3)
print(f"gelu_layer_norm [{rows}, {hidden}]: {report.variant}, "
      f"{report.kernel_seconds * 1e6:.1f} us")
