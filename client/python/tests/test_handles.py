"""Tensors kept on the server: chunked upload and download, and ops chained
through handles without the intermediate bytes leaving the server."""

import secrets

import grpc
import numpy as np
import pytest

import coalesce
from refs import DTYPE_IDS, DTYPES, assert_close, gelu_layer_norm, random_array
import refs


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_put_get_roundtrip_in_chunks(client, rng, dtype):
    x = random_array(rng, (33, 17, 5), dtype)
    # Chunks that split elements, and a download in odd-sized chunks.
    h = client.put_tensor(x, chunk_bytes=997)
    try:
        assert h.dtype == dtype and h.shape == x.shape
        assert h.byte_size == x.nbytes
        back = client.get_tensor(h, chunk_bytes=1001)
        assert back.dtype == dtype
        np.testing.assert_array_equal(back, x)
        back[0, 0, 0] = 0  # a writable array
        listed = {t.handle: t for t in client.list_tensors().tensors}
        assert listed[h.handle].shape == x.shape
    finally:
        assert client.delete_tensor(h) == x.nbytes
    assert h.handle not in {t.handle for t in client.list_tensors().tensors}


def test_named_handle(client, rng):
    name = f"py-{secrets.token_hex(6)}"
    x = random_array(rng, (8, 8), np.float32)
    h = client.put_tensor(x, name=name)
    try:
        assert h.handle == name
        with pytest.raises(coalesce.CoalesceError) as e:
            client.put_tensor(x, name=name)
        assert e.value.code == grpc.StatusCode.ALREADY_EXISTS
        np.testing.assert_array_equal(client.get_tensor(name), x)
    finally:
        client.delete_tensor(name)


def test_delete_tensors_all_or_none(client, rng):
    xs = [random_array(rng, (n, 3), np.float32) for n in (1, 2, 3)]
    hs = [client.put_tensor(x) for x in xs]
    listed = lambda: {t.handle for t in client.list_tensors().tensors}
    with pytest.raises(coalesce.CoalesceError) as e:
        client.delete_tensors([hs[0], "no-such-tensor", hs[1]])
    assert e.value.code == grpc.StatusCode.NOT_FOUND
    assert "handles[1]" in e.value.message
    assert {h.handle for h in hs} <= listed()
    assert client.delete_tensors(hs) == sum(x.nbytes for x in xs)
    assert not {h.handle for h in hs} & listed()


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_chain_gemm_transpose_gelu_ln(client, rng, dtype):
    """put A, B -> D = A@B (handle) -> D^T (handle) -> gelu_ln(D^T) (handle)
    -> get. Only the last result is downloaded."""
    m, n, k = 24, 64, 16
    a = random_array(rng, (m, k), dtype)
    b = random_array(rng, (k, n), dtype)
    ha, hb = client.put_tensor(a), client.put_tensor(b)
    made = [ha, hb]
    try:
        hd = client.gemm(ha, hb, output=coalesce.HANDLE)
        made.append(hd)
        assert isinstance(hd, coalesce.TensorHandle)
        assert hd.shape == (m, n) and hd.dtype == dtype
        ht = client.transpose(hd, output=coalesce.HANDLE)
        made.append(ht)
        assert ht.shape == (n, m)
        hy = client.gelu_layer_norm(ht, output=coalesce.HANDLE)
        made.append(hy)
        d = client.get_tensor(hd)
        assert_close(d, refs.gemm(a, b), dtype, scale=k)
        # Each later step checked against the server's own previous output,
        # so the rounding of intermediate results is the server's.
        np.testing.assert_array_equal(client.get_tensor(ht), d.T)
        want, _ = gelu_layer_norm(d.T)
        assert_close(client.get_tensor(hy), want, dtype, scale=4)
    finally:
        for h in made:
            client.delete_tensor(h)


def test_output_into_existing_handle(client, rng):
    x1 = random_array(rng, (12, 20), np.float32)
    x2 = random_array(rng, (12, 20), np.float32)
    out = client.put_tensor(random_array(rng, (20, 12), np.float32))
    try:
        for x in (x1, x2):
            got = client.transpose(x, output=out)
            assert got.handle == out.handle
            np.testing.assert_array_equal(client.get_tensor(out), x.T)
    finally:
        client.delete_tensor(out)


def test_mixed_inline_and_handle_inputs(client, rng):
    a = random_array(rng, (10, 14), np.float16)
    b = random_array(rng, (14, 6), np.float16)
    hb = client.put_tensor(b)
    try:
        d = client.gemm(a, hb)  # inline A, handle B, inline D
        assert_close(d, refs.gemm(a, b), np.float16, scale=14)
    finally:
        client.delete_tensor(hb)


def test_unknown_handle_not_found(client):
    with pytest.raises(coalesce.CoalesceError) as e:
        client.get_tensor("t-does-not-exist")
    assert e.value.code == grpc.StatusCode.NOT_FOUND
    with pytest.raises(coalesce.CoalesceError) as e:
        client.transpose(coalesce.TensorHandle("t-does-not-exist"))
    assert e.value.code == grpc.StatusCode.NOT_FOUND


def test_put_on_a_named_device(client, rng):
    x = random_array(rng, (4, 6), np.float32)
    h = client.put_tensor(x, device=0)
    try:
        assert h.device_ordinal == 0
        y, report = client.transpose(h, report=True)
        assert report.device_ordinal == 0
        np.testing.assert_array_equal(y, x.T)
    finally:
        client.delete_tensor(h)
    with pytest.raises(coalesce.CoalesceError) as e:
        client.put_tensor(x, device=5)
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "header.device_ordinal: 5" in str(e.value)
