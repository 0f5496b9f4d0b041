"""The KServe v2 protocol over HTTP/REST (--http_listen) as Triton's own
HTTP client (tritonclient.http) and perf_analyzer see it: JSON and binary
tensor data, statistics, shared memory."""

import base64
import os

import numpy as np
import pytest
import tritonclient.grpc as tc
import tritonclient.http as th
import tritonclient.utils.shared_memory as tshm
from tritonclient.utils import InferenceServerException

import refs
from test_kserve_interop import MODELS, check_perf_analyzer


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
    index = triton_http.get_model_repository_index()
    assert {m["name"]: m["state"] for m in index} == {
        m: "READY" for m in MODELS}
    config = triton_http.get_model_config("transpose")
    assert config["max_batch_size"] == 0
    assert config["input"][0]["name"] == "INPUT0"
    assert config["input"][0]["dims"] == [-1, -1]


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
    # A parameter the model needs, and a datatype it does not take.
    with pytest.raises(InferenceServerException) as e:
        triton_http.infer("convert_layout", [http_input(x, "INPUT0", False)])
    assert "parameters" in e.value.message()
    with pytest.raises(InferenceServerException) as e:
        triton_http.infer("transpose", [http_input(
            rng.integers(1, 100, (4, 5)).astype(np.int32), "INPUT0", False)])
    assert "inputs[0].datatype" in e.value.message()


def test_every_model(triton_http, rng):
    x = refs.random_array(rng, (7, 11), np.float32)
    got = triton_http.infer("identity", [http_input(x, "INPUT0", False)])
    np.testing.assert_array_equal(got.as_numpy("OUTPUT0"), x)
    x = refs.random_array(rng, (2, 3, 5, 7), np.float32)
    got = triton_http.infer("convert_layout", [http_input(x, "INPUT0", True)],
                            parameters={"layout_from": "NCHW",
                                        "layout_to": "NHWC"})
    np.testing.assert_array_equal(got.as_numpy("OUTPUT0"),
                                  x.transpose(0, 2, 3, 1))
    x = refs.random_array(rng, (8, 64), np.float32)
    bias, gamma, beta = (refs.random_array(rng, (64,), np.float32)
                         for _ in range(3))
    residual = refs.random_array(rng, (8, 64), np.float32)
    got = triton_http.infer("gelu_layer_norm", [
        http_input(x, "x", False), http_input(bias, "bias", True),
        http_input(residual, "residual", True),
        http_input(gamma, "gamma", False), http_input(beta, "beta", False)])
    want, _ = refs.gelu_layer_norm(x, bias, residual, gamma, beta)
    refs.assert_close(got.as_numpy("y"), want, np.float32, scale=8)


def test_results_equal_the_native_protocol(triton_http, client, rng):
    x = refs.random_array(rng, (3, 41, 29), np.float32)
    got = triton_http.infer("transpose", [http_input(x, "INPUT0", True)])
    np.testing.assert_array_equal(got.as_numpy("OUTPUT0"), client.transpose(x))
    a = refs.random_array(rng, (33, 47), np.float32)
    b = refs.random_array(rng, (47, 21), np.float32)
    got = triton_http.infer("gemm", [http_input(a, "a", False),
                                     http_input(b, "b", False)])
    np.testing.assert_array_equal(got.as_numpy("d"), client.gemm(a, b))


def test_statistics_count_inferences(triton_http, rng):
    def count():
        stats = triton_http.get_inference_statistics("transpose")
        s = stats["model_stats"][0]
        return s["inference_count"], s["inference_stats"]["fail"]["count"]

    before, failed_before = count()
    x = refs.random_array(rng, (5, 6), np.float32)
    for _ in range(3):
        triton_http.infer("transpose", [http_input(x, "INPUT0", True)])
    with pytest.raises(InferenceServerException):
        triton_http.infer("transpose", [http_input(x.reshape(30), "INPUT0",
                                                   True)])
    after, failed_after = count()
    assert after - before == 3
    assert failed_after - failed_before == 1
    every = triton_http.get_inference_statistics()["model_stats"]
    assert sorted(s["name"] for s in every) == sorted(MODELS)


def test_system_shared_memory(server, triton_http, rng):
    # Registration needs the local socket's peer credentials: over HTTP it
    # is refused, saying so. A region registered there serves HTTP requests
    # that carry the same client identity.
    key = f"/coalesce-kserve-http-{os.getpid()}"
    x = refs.random_array(rng, (16, 24), np.float32)
    with pytest.raises(InferenceServerException) as e:
        triton_http.register_system_shared_memory("io", key, 2 * x.nbytes)
    assert "local socket" in e.value.message()
    me = {"x-coalesce-client": "http-shm-test"}
    region = tshm.create_shared_memory_region("io", key, 2 * x.nbytes)
    local = tc.InferenceServerClient(server.unix_target)
    try:
        tshm.set_shared_memory_region(region, [x])
        local.register_system_shared_memory("io", key, 2 * x.nbytes,
                                            headers=me)
        status = triton_http.get_system_shared_memory_status(headers=me)
        assert [(r["name"], r["byte_size"]) for r in status] == [
            ("io", 2 * x.nbytes)]
        # Another identity sees none of it.
        assert triton_http.get_system_shared_memory_status() == []
        inp = th.InferInput("INPUT0", list(x.shape), "FP32")
        inp.set_shared_memory("io", x.nbytes)
        out = th.InferRequestedOutput("OUTPUT0")
        out.set_shared_memory("io", x.nbytes, offset=x.nbytes)
        triton_http.infer("transpose", [inp], outputs=[out], headers=me)
        got = tshm.get_contents_as_numpy(region, np.float32, [24, 16],
                                         offset=x.nbytes)
        np.testing.assert_array_equal(got, x.T)
        triton_http.unregister_system_shared_memory("io", headers=me)
        assert triton_http.get_system_shared_memory_status(headers=me) == []
    finally:
        local.close()
        tshm.destroy_shared_memory_region(region)


# perf_analyzer 2.41 sends request parameters (--request-parameter) over
# gRPC only, and convert_layout needs its layouts as parameters.
@pytest.mark.parametrize("model", [m for m in MODELS if m != "convert_layout"])
def test_perf_analyzer_over_http(server, tmp_path, model):
    check_perf_analyzer("http", server.http_target, model, tmp_path)


def test_cuda_shared_memory_needs_the_cuda_backend(triton_http):
    # The CPU backend has no device memory to map; the handle is well formed.
    with pytest.raises(InferenceServerException) as e:
        triton_http.register_cuda_shared_memory(
            "gpu", base64.b64encode(bytes(range(64))).decode(), 0, 64)
    assert "CUDA shared memory needs the CUDA backend" in e.value.message()
    assert triton_http.get_cuda_shared_memory_status() == []
    # A handle that is not base64 is refused before the service sees it.
    with pytest.raises(InferenceServerException) as e:
        triton_http.register_cuda_shared_memory("gpu", "*not base64*", 0, 64)
    assert "raw_handle" in e.value.message()
