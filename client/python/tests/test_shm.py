"""POSIX shared memory: regions made here, inputs and outputs in place."""

import os

import grpc
import numpy as np
import pytest

import coalesce
from refs import DTYPE_IDS, DTYPES, assert_close, gelu_layer_norm, random_array
import refs


def shm_exists(region):
    return os.path.exists("/dev/shm/" + region.key[1:])


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_transpose_in_shared_memory(unix_client, rng, dtype):
    x = random_array(rng, (31, 45), dtype)
    with unix_client.shared_memory(2 * x.nbytes + 128) as region:
        assert shm_exists(region)
        registered = {r.name: r for r in unix_client.list_shared_memory()}
        assert registered[region.name].key == region.key
        src = region.place(x)
        dst = region.allocate((45, 31), dtype)
        dst.numpy()[...] = random_array(rng, (45, 31), dtype)  # not the answer
        got, report = unix_client.transpose(src, output=dst, report=True)
        assert isinstance(got, coalesce.ShmTensor)
        assert (got.offset, got.shape, got.dtype) == (dst.offset, dst.shape,
                                                      dst.dtype)
        np.testing.assert_array_equal(dst.numpy(), x.T)
        assert report.bytes_moved == 2 * x.nbytes
    assert not shm_exists(region)
    assert region.name not in {r.name for r in
                               unix_client.list_shared_memory()}


def test_gemm_and_gelu_ln_outputs_in_shared_memory(unix_client, rng):
    dtype = np.dtype(np.float32)
    a = random_array(rng, (8, 16), dtype)
    b = random_array(rng, (16, 32), dtype)
    with unix_client.shared_memory(1 << 16) as region:
        d = unix_client.gemm(region.place(a), region.place(b),
                             output=region.allocate((8, 32), dtype))
        assert_close(d.numpy(), refs.gemm(a, b), dtype, scale=16)
        # D stays in the region and feeds the next op; y and h land there too.
        y_slot = region.allocate((8, 32), dtype)
        h_slot = region.allocate((8, 32), dtype)
        y, h = unix_client.gelu_layer_norm(d, return_pre_norm=True,
                                           output=y_slot, h_output=h_slot)
        want_y, want_h = gelu_layer_norm(d.numpy())
        assert_close(y.numpy(), want_y, dtype, scale=4)
        assert_close(h.numpy(), want_h, dtype, scale=2)


def test_shared_memory_input_to_handle_output(unix_client, rng):
    x = random_array(rng, (2, 3, 4, 5), np.float16)
    with unix_client.shared_memory(x.nbytes) as region:
        handle = unix_client.convert_layout(region.place(x),
                                            permutation=[0, 2, 3, 1],
                                            output=coalesce.HANDLE)
    try:
        np.testing.assert_array_equal(unix_client.get_tensor(handle),
                                      x.transpose(0, 2, 3, 1))
    finally:
        unix_client.delete_tensor(handle)


def test_overlapping_output_refused(unix_client, rng):
    x = random_array(rng, (16, 16), np.float32)
    with unix_client.shared_memory(x.nbytes) as region:
        src = region.place(x)
        with pytest.raises(coalesce.CoalesceError) as e:
            unix_client.transpose(src, output=src)
        assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT


def test_registration_needs_the_local_socket(client):
    with pytest.raises(coalesce.CoalesceError) as e:
        client.shared_memory(4096)
    assert e.value.code == grpc.StatusCode.PERMISSION_DENIED


def test_slot_must_fit(unix_client):
    with unix_client.shared_memory(256) as region:
        with pytest.raises(ValueError):
            region.allocate((100,), np.float32)
