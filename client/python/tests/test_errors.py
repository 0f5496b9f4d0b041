"""Failures arrive as CoalesceError with the gRPC code and the server's
message, which names the field."""

import grpc
import numpy as np
import pytest

import coalesce
from refs import random_array


def test_bad_transpose_rank(client, rng):
    with pytest.raises(coalesce.CoalesceError) as e:
        client.transpose(random_array(rng, (2, 3, 4, 5), np.float32))
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "input.shape" in e.value.message
    assert "INVALID_ARGUMENT" in str(e.value)


def test_gemm_inner_dimensions_differ(client, rng):
    a = random_array(rng, (4, 5), np.float32)
    b = random_array(rng, (6, 7), np.float32)
    with pytest.raises(coalesce.CoalesceError) as e:
        client.gemm(a, b)
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "b.shape" in e.value.message


def test_bad_permutation(client, rng):
    with pytest.raises(coalesce.CoalesceError) as e:
        client.convert_layout(random_array(rng, (2, 3, 4), np.float32),
                              permutation=[0, 0, 1])
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "perm" in e.value.message


def test_unknown_variant(client, rng):
    with pytest.raises(coalesce.CoalesceError) as e:
        client.transpose(random_array(rng, (4, 4), np.float32),
                         variant="transpose.cpu.nonexistent")
    assert e.value.code in (grpc.StatusCode.INVALID_ARGUMENT,
                            grpc.StatusCode.NOT_FOUND)
    assert "variant" in e.value.message


def test_unsupported_dtype_refused_here(client, rng):
    with pytest.raises(TypeError, match="float64"):
        client.transpose(random_array(rng, (2, 2), np.float64))


def test_unreachable_server():
    with coalesce.Client("127.0.0.1:1", timeout=5) as c:
        with pytest.raises(coalesce.CoalesceError) as e:
            c.server_info()
    assert e.value.code in (grpc.StatusCode.UNAVAILABLE,
                            grpc.StatusCode.DEADLINE_EXCEEDED)
