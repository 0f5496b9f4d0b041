"""Every op on random inputs, float32/float16/bfloat16, against NumPy."""

import numpy as np
import pytest

import coalesce
from refs import (DTYPE_IDS, DTYPES, assert_close, f64, gelu_layer_norm,
                  random_array)
import refs

dtypes = pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)


@dtypes
@pytest.mark.parametrize("shape", [(37, 53), (3, 17, 29), (1, 128)])
def test_transpose(client, rng, dtype, shape):
    x = random_array(rng, shape, dtype)
    y = client.transpose(x)
    assert y.dtype == dtype
    np.testing.assert_array_equal(y, np.swapaxes(x, -1, -2))


@dtypes
def test_transpose_report(client, rng, dtype):
    x = random_array(rng, (64, 48), dtype)
    y, report = client.transpose(x, report=True)
    np.testing.assert_array_equal(y, x.T)
    assert isinstance(report, coalesce.KernelReport)
    assert report.backend == "cpu"
    assert report.variant.startswith("transpose.cpu.")
    assert report.bytes_moved == 2 * x.nbytes  # read once, written once
    assert report.kernel_seconds > 0
    assert report.batch_size >= 1
    assert report.selection_source in ("cache", "table", "heuristic")


def test_forced_variant(client, rng):
    x = random_array(rng, (40, 24), np.float32)
    for variant in ("transpose.cpu.naive", "transpose.cpu.blocked"):
        y, report = client.transpose(x, variant=variant, report=True)
        np.testing.assert_array_equal(y, x.T)
        assert report.variant == variant
        assert report.selection_source == "forced"


@dtypes
@pytest.mark.parametrize("trans_a,trans_b", [(False, False), (True, False),
                                             (False, True), (True, True)])
def test_gemm(client, rng, dtype, trans_a, trans_b):
    m, n, k = 19, 23, 37
    a = random_array(rng, (k, m) if trans_a else (m, k), dtype)
    b = random_array(rng, (n, k) if trans_b else (k, n), dtype)
    d = client.gemm(a, b, trans_a=trans_a, trans_b=trans_b)
    assert_close(d, refs.gemm(a, b, trans_a=trans_a, trans_b=trans_b), dtype,
                 scale=k)


@dtypes
def test_gemm_alpha_beta_c(client, rng, dtype):
    a = random_array(rng, (16, 32), dtype)
    b = random_array(rng, (32, 24), dtype)
    c = random_array(rng, (16, 24), dtype)
    d, report = client.gemm(a, b, c, alpha=0.5, beta=-1.5, report=True)
    assert_close(d, refs.gemm(a, b, c, alpha=0.5, beta=-1.5), dtype, scale=32)
    assert report.variant.startswith("gemm.")
    assert report.flops >= 2 * 16 * 24 * 32


@dtypes
def test_gemm_batched_broadcast(client, rng, dtype):
    a = random_array(rng, (3, 8, 12), dtype)
    b = random_array(rng, (12, 10), dtype)  # rank 2: broadcast over the batch
    d = client.gemm(a, b)
    assert d.shape == (3, 8, 10)
    assert_close(d, refs.gemm(a, b), dtype, scale=12)


@dtypes
def test_convert_layout_nchw_nhwc(client, rng, dtype):
    x = random_array(rng, (2, 5, 7, 3), dtype)
    nhwc = client.convert_layout(x, layouts=("NCHW", "NHWC"))
    np.testing.assert_array_equal(nhwc, x.transpose(0, 2, 3, 1))
    back = client.convert_layout(nhwc, layouts=("NHWC", "NCHW"))
    np.testing.assert_array_equal(back, x)


@dtypes
def test_convert_layout_permutation(client, rng, dtype):
    x = random_array(rng, (2, 3, 4, 5, 6), dtype)
    perm = [3, 0, 4, 2, 1]
    y = client.convert_layout(x, permutation=perm)
    np.testing.assert_array_equal(y, np.transpose(x, perm))


@dtypes
def test_convert_layout_aos_soa(client, rng, dtype):
    aos = random_array(rng, (50, 4), dtype)
    soa = client.convert_layout(aos, aos_soa="aos_to_soa")
    np.testing.assert_array_equal(soa, aos.T)
    again = client.convert_layout(soa, aos_soa="soa_to_aos", fields=4)
    np.testing.assert_array_equal(again, aos)


@dtypes
@pytest.mark.parametrize("approximation", ["none", "tanh"])
def test_gelu_layer_norm(client, rng, dtype, approximation):
    rows, h = 6, 96
    x = random_array(rng, (rows, h), dtype)
    bias = random_array(rng, (h,), dtype)
    residual = random_array(rng, (rows, h), dtype)
    gamma = random_array(rng, (h,), dtype, 0.5, 1.5)
    beta = random_array(rng, (h,), dtype)
    (y, pre), report = client.gelu_layer_norm(
        x, bias, residual, gamma, beta, epsilon=1e-3,
        approximation=approximation, return_pre_norm=True, report=True)
    want_y, want_h = gelu_layer_norm(x, bias, residual, gamma, beta, 1e-3,
                                     approximation)
    assert_close(y, want_y, dtype, scale=4)
    assert_close(pre, want_h, dtype, scale=2)
    assert report.variant.startswith("gelu_layer_norm.")


@dtypes
def test_gelu_layer_norm_defaults(client, rng, dtype):
    # No bias, residual, gamma or beta: zero, zero, one, zero; y only.
    x = random_array(rng, (2, 3, 64), dtype)
    y = client.gelu_layer_norm(x)
    want, _ = gelu_layer_norm(x)
    assert_close(y, want, dtype, scale=4)


def test_server_info(client):
    info = client.server_info()
    assert info.backend == "cpu"
    ops = {v.op for v in info.variants}
    assert {"transpose", "gemm", "convert_layout", "gelu_layer_norm"} <= ops
    assert info.limits.max_tensor_bytes > 0


@pytest.mark.parametrize("op,args,kwargs", [
    ("transpose", [coalesce.TensorSpec((256, 512), np.float32)], {}),
    ("gemm", [coalesce.TensorSpec((64, 32), np.float16),
              coalesce.TensorSpec((32, 48), np.float16)], {"trans_b": False}),
    ("convert_layout", [coalesce.TensorSpec((2, 8, 4, 4), "bfloat16")],
     {"layouts": ("NCHW", "NHWC")}),
    ("gelu_layer_norm", [coalesce.TensorSpec((4, 256), np.float32)],
     {"approximation": "tanh"}),
])
def test_explain_selection(client, op, args, kwargs):
    info = client.server_info()
    names = {v.name for v in info.variants if v.op == op}
    e = client.explain_selection(op, *args, **kwargs)
    assert e.chosen_variant in names
    assert e.candidates
    assert {c.variant for c in e.candidates} <= names
    assert any(c.eligible and c.variant == e.chosen_variant
               for c in e.candidates)
    assert e.reason


def test_explain_selection_takes_arrays(client, rng):
    # Only dtype and shape travel; the same answer as for a TensorSpec.
    x = random_array(rng, (96, 80), np.float32)
    by_array = client.explain_selection("transpose", x)
    by_spec = client.explain_selection(
        "transpose", coalesce.TensorSpec(x.shape, x.dtype))
    assert by_array.key == by_spec.key
    assert by_array.chosen_variant == by_spec.chosen_variant


def test_explain_selection_measure(client):
    e = client.explain_selection(
        "transpose", coalesce.TensorSpec((128, 96), np.float32), measure=True)
    eligible = [c for c in e.candidates if c.eligible]
    assert eligible and all(c.measured_seconds > 0 for c in eligible)


def test_bfloat16_by_name(client, rng):
    # "bfloat16" resolves through ml_dtypes; results come back as bfloat16.
    x = random_array(rng, (9, 11), coalesce.BFLOAT16)
    y = client.transpose(x)
    assert y.dtype == coalesce.BFLOAT16
    np.testing.assert_array_equal(f64(y), f64(x).T)
