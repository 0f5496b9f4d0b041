"""Random inputs and float64 NumPy references for the op tests."""

import math

import ml_dtypes
import numpy as np

DTYPES = [np.dtype(np.float32), np.dtype(np.float16),
          np.dtype(ml_dtypes.bfloat16)]
DTYPE_IDS = ["float32", "float16", "bfloat16"]

# Relative error allowed in a result rounded to dtype (a few units in the
# last place, plus float32 accumulation).
TOLERANCE = {np.dtype(np.float32): 1e-4, np.dtype(np.float16): 4e-3,
             np.dtype(ml_dtypes.bfloat16): 3e-2}


def random_array(rng, shape, dtype, low=0.25, high=1.0):
    """Magnitudes in [low, high) with random signs: never zero, so a result
    left unwritten or zero-filled cannot match."""
    magnitude = rng.uniform(low, high, size=shape)
    sign = rng.choice([-1.0, 1.0], size=shape)
    return (magnitude * sign).astype(dtype)


def f64(a):
    return np.asarray(a).astype(np.float64)


def assert_close(got, want, dtype, scale=1.0):
    """got (dtype) against a float64 reference; atol is relative to scale,
    the magnitude of the terms that were summed."""
    assert got.dtype == dtype, (got.dtype, dtype)
    assert got.shape == want.shape, (got.shape, want.shape)
    tol = TOLERANCE[np.dtype(dtype)]
    np.testing.assert_allclose(f64(got), want, rtol=tol, atol=tol * scale)


def gemm(a, b, c=None, trans_a=False, trans_b=False, alpha=1.0, beta=None):
    a, b = f64(a), f64(b)
    if trans_a:
        a = np.swapaxes(a, -1, -2)
    if trans_b:
        b = np.swapaxes(b, -1, -2)
    d = alpha * np.matmul(a, b)
    if c is not None:
        d = d + (1.0 if beta is None else beta) * f64(c)
    return d


_erf = np.vectorize(math.erf)


def gelu(x, approximation):
    if approximation == "tanh":
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) *
                                      (x + 0.044715 * x**3)))
    return 0.5 * x * (1 + _erf(x / math.sqrt(2)))


def gelu_layer_norm(x, bias=None, residual=None, gamma=None, beta=None,
                    epsilon=1e-5, approximation="none"):
    x = f64(x)
    if bias is not None:
        x = x + f64(bias)
    h = gelu(x, approximation)
    if residual is not None:
        h = h + f64(residual)
    mean = h.mean(axis=-1, keepdims=True)
    var = ((h - mean) ** 2).mean(axis=-1, keepdims=True)
    y = (h - mean) / np.sqrt(var + epsilon)
    if gamma is not None:
        y = y * f64(gamma)
    if beta is not None:
        y = y + f64(beta)
    return y, h
