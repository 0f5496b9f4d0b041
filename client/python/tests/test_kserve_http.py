"""The KServe v2 protocol over HTTP/REST (--http_listen) as Triton's own
HTTP client (tritonclient.http) sees it: JSON and binary tensor data."""

import numpy as np
import pytest
import tritonclient.http as th
from tritonclient.utils import InferenceServerException

import refs


@pytest.fixture(scope="module")
def triton_http(server):
    c = th.InferenceServerClient(server.http_target)
    yield c
    c.close()


def http_input(array, name, binary):
    t = th.InferInput(name, list(array.shape), th.np_to_triton_dtype(array.dtype))
    t.set_data_from_numpy(array, binary_data=binary)
    return t


def test_health_and_metadata(triton_http):
    assert triton_http.is_server_live()
    assert triton_http.is_server_ready()
    assert triton_http.is_model_ready("gemm")
    assert triton_http.get_server_metadata()["name"] == "coalesce"
    meta = triton_http.get_model_metadata("transpose")
    assert meta["versions"] == ["1"]
    assert [i["name"] for i in meta["inputs"]] == ["INPUT0"]
    assert not triton_http.is_model_ready("no_such_model")


@pytest.mark.parametrize("binary", [False, True])
def test_transpose(triton_http, rng, binary):
    x = refs.random_array(rng, (19, 31), np.float32)
    out = th.InferRequestedOutput("OUTPUT0", binary_data=binary)
    got = triton_http.infer("transpose", [http_input(x, "INPUT0", binary)],
                            outputs=[out])
    np.testing.assert_array_equal(got.as_numpy("OUTPUT0"), x.T)


def test_fp16_through_binary_data(triton_http, rng):
    x = refs.random_array(rng, (8, 12), np.float16)
    got = triton_http.infer("transpose", [http_input(x, "INPUT0", True)])
    np.testing.assert_array_equal(got.as_numpy("OUTPUT0"), x.T)


def test_gemm(triton_http, rng):
    a = refs.random_array(rng, (12, 20), np.float32)
    b = refs.random_array(rng, (20, 9), np.float32)
    got = triton_http.infer(
        "gemm", [http_input(a, "a", False), http_input(b, "b", True)],
        parameters={"alpha": 2.0})
    refs.assert_close(got.as_numpy("d"), 2.0 * refs.f64(a) @ refs.f64(b),
                      np.float32)


def test_errors_name_the_field(triton_http, rng):
    x = refs.random_array(rng, (3, 4, 5, 6), np.float32)
    with pytest.raises(InferenceServerException) as e:
        triton_http.infer("transpose", [http_input(x, "INPUT0", False)])
    assert "inputs[0].shape" in e.value.message()
    with pytest.raises(InferenceServerException) as e:
        triton_http.infer("no_such_model", [http_input(x, "INPUT0", False)])
    assert "model_name" in e.value.message()
