"""The KServe v2 front end as the inference ecosystem's own tools see it:
Triton's Python client (tritonclient.grpc) and perf_analyzer, against the
real server, on the same port as coalesce.v1."""

import csv
import glob
import os
import queue
import re
import subprocess
import sys

import numpy as np
import pytest
import tritonclient.grpc as tc
import tritonclient.utils.shared_memory as tshm
from tritonclient.utils import InferenceServerException

import refs
from conftest import Server

MODELS = ["identity", "transpose", "convert_layout", "gelu_layer_norm", "gemm"]


@pytest.fixture(scope="module")
def triton(server):
    c = tc.InferenceServerClient(server.target)
    yield c
    c.close()


def infer_input(name, array, datatype=None):
    t = tc.InferInput(name, list(array.shape),
                      datatype or tc.np_to_triton_dtype(array.dtype))
    t.set_data_from_numpy(array)
    return t


def test_health_metadata_and_repository(triton):
    assert triton.is_server_live()
    assert triton.is_server_ready()
    meta = triton.get_server_metadata()
    assert "system_shared_memory" in meta.extensions
    index = {m.name: m.state for m in triton.get_model_repository_index().models}
    assert index == {m: "READY" for m in MODELS}
    for m in MODELS:
        assert triton.is_model_ready(m)
    config = triton.get_model_config("transpose").config
    assert config.max_batch_size == 0
    assert [i.name for i in config.input] == ["INPUT0"]
    assert list(config.input[0].dims) == [-1, -1]
    with pytest.raises(InferenceServerException) as e:
        triton.is_model_ready("no_such_model")
    assert "NOT_FOUND" in str(e.value.status())


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_transpose_and_identity(triton, rng, dtype):
    x = refs.random_array(rng, (37, 53), dtype)
    got = triton.infer("transpose", [infer_input("INPUT0", x)])
    np.testing.assert_array_equal(got.as_numpy("OUTPUT0"), x.T)
    got = triton.infer("identity", [infer_input("INPUT0", x)])
    np.testing.assert_array_equal(got.as_numpy("OUTPUT0"), x)


def test_convert_layout_parameters(triton, rng):
    x = refs.random_array(rng, (2, 3, 5, 7), np.float32)
    got = triton.infer("convert_layout", [infer_input("INPUT0", x)],
                       parameters={"layout_from": "NCHW",
                                   "layout_to": "NHWC"})
    np.testing.assert_array_equal(got.as_numpy("OUTPUT0"),
                                  x.transpose(0, 2, 3, 1))


def test_gemm_and_gelu_layer_norm(triton, rng):
    a = refs.random_array(rng, (24, 40), np.float32)
    b = refs.random_array(rng, (40, 16), np.float32)
    # This tritonclient sends no double parameters: a number as a string.
    got = triton.infer("gemm", [infer_input("a", a), infer_input("b", b)],
                       parameters={"alpha": "0.5"})
    refs.assert_close(got.as_numpy("d"), refs.gemm(a, b, alpha=0.5),
                      np.float32, scale=40)
    x = refs.random_array(rng, (8, 64), np.float32)
    bias, gamma, beta = (refs.random_array(rng, (64,), np.float32)
                         for _ in range(3))
    residual = refs.random_array(rng, (8, 64), np.float32)
    got = triton.infer("gelu_layer_norm", [
        infer_input("x", x), infer_input("bias", bias),
        infer_input("residual", residual), infer_input("gamma", gamma),
        infer_input("beta", beta)])
    want, _ = refs.gelu_layer_norm(x, bias, residual, gamma, beta)
    refs.assert_close(got.as_numpy("y"), want, np.float32, scale=8)


def test_errors_name_the_field(triton, rng):
    x = refs.random_array(rng, (2, 3, 4, 5), np.float32)
    with pytest.raises(InferenceServerException) as e:
        triton.infer("convert_layout", [infer_input("INPUT0", x)],
                     parameters={"layout_from": "XYZW", "layout_to": "NHWC"})
    assert "layout_from" in e.value.message()
    with pytest.raises(InferenceServerException) as e:
        triton.infer("transpose", [infer_input("INPUT0", x)])
    assert "inputs[0].shape" in e.value.message()
    # A datatype the model does not take.
    with pytest.raises(InferenceServerException) as e:
        triton.infer("transpose", [infer_input(
            "INPUT0", rng.integers(1, 100, (4, 5)).astype(np.int32))])
    assert "inputs[0].datatype" in e.value.message()
    # A parameter the model needs.
    with pytest.raises(InferenceServerException) as e:
        triton.infer("convert_layout", [infer_input("INPUT0", x)])
    assert "parameters" in e.value.message()
    with pytest.raises(InferenceServerException) as e:
        triton.infer("no_such_model", [infer_input("INPUT0", x)])
    assert "no_such_model" in e.value.message()
    assert "NOT_FOUND" in str(e.value.status())


def test_results_equal_the_native_protocol(triton, client, rng):
    # The same kernels behind both protocols: moves bit for bit, and the
    # GEMM too (the same variant is chosen for the same shape and dtype).
    x = refs.random_array(rng, (3, 41, 29), np.float32)
    kserve = triton.infer("transpose", [infer_input("INPUT0", x)])
    np.testing.assert_array_equal(kserve.as_numpy("OUTPUT0"),
                                  client.transpose(x))
    a = refs.random_array(rng, (33, 47), np.float32)
    b = refs.random_array(rng, (47, 21), np.float32)
    kserve = triton.infer("gemm", [infer_input("a", a), infer_input("b", b)])
    np.testing.assert_array_equal(kserve.as_numpy("d"), client.gemm(a, b))


def test_stream_answers_in_order_past_an_error(triton, rng):
    answers = queue.Queue()
    triton.start_stream(callback=lambda result, error: answers.put(
        (result, error)))
    try:
        sent = []
        for i in range(5):
            # The third request is a rank-4 transpose: refused, and the
            # stream goes on.
            shape = (2, 3, 4, 5) if i == 2 else (3 + i, 9)
            x = refs.random_array(rng, shape, np.float32)
            sent.append(x)
            triton.async_stream_infer("transpose", [infer_input("INPUT0", x)],
                                      request_id=str(i))
        for i, x in enumerate(sent):
            result, error = answers.get(timeout=60)
            if i == 2:
                assert result is None and "shape" in error.message()
                continue
            assert error is None, error
            assert result.get_response().id == str(i)
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), x.T)
    finally:
        triton.stop_stream()


def test_statistics_count_inferences(triton, rng):
    def count():
        stats = triton.get_inference_statistics("transpose").model_stats
        return stats[0].inference_count, stats[0].inference_stats.fail.count

    before, failed_before = count()
    x = refs.random_array(rng, (5, 6), np.float32)
    for _ in range(3):
        triton.infer("transpose", [infer_input("INPUT0", x)])
    with pytest.raises(InferenceServerException):
        triton.infer("transpose", [infer_input("INPUT0", x.reshape(30))])
    after, failed_after = count()
    assert after - before == 3
    assert failed_after - failed_before == 1


def test_system_shared_memory(server, rng):
    # Registration is served on the local socket only.
    c = tc.InferenceServerClient(server.unix_target)
    x = refs.random_array(rng, (16, 24), np.float32)
    key = f"/coalesce-kserve-{os.getpid()}"
    region = tshm.create_shared_memory_region("io", key, 2 * x.nbytes)
    try:
        tshm.set_shared_memory_region(region, [x])
        c.register_system_shared_memory("io", key, 2 * x.nbytes)
        status = c.get_system_shared_memory_status()
        assert [r.name for r in status.regions.values()] == ["io"]
        inp = tc.InferInput("INPUT0", list(x.shape), "FP32")
        inp.set_shared_memory("io", x.nbytes)
        out = tc.InferRequestedOutput("OUTPUT0")
        out.set_shared_memory("io", x.nbytes, offset=x.nbytes)
        c.infer("transpose", [inp], outputs=[out])
        got = tshm.get_contents_as_numpy(region, np.float32, [24, 16],
                                         offset=x.nbytes)
        np.testing.assert_array_equal(got, x.T)
        c.unregister_system_shared_memory("io")
        assert not c.get_system_shared_memory_status().regions
    finally:
        tshm.destroy_shared_memory_region(region)
        c.close()


def perf_analyzer():
    """perf_analyzer from the tritonclient wheel, with the CUDA runtime it
    links from the nvidia-cuda-runtime-cu12 wheel (it sends no CUDA work)."""
    binary = os.path.join(os.path.dirname(sys.executable), "perf_analyzer")
    libs = glob.glob(os.path.join(sys.prefix, "lib", "python3*",
                                  "site-packages", "nvidia", "cuda_runtime",
                                  "lib"))
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = ":".join(libs + [env.get("LD_LIBRARY_PATH", "")])
    return binary, env


# Each model with the shapes (and parameters) perf_analyzer needs: every
# input the metadata lists, optional ones included, gets a shape.
PERF_CASES = {
    "identity": ["--shape", "INPUT0:64,64"],
    "transpose": ["--shape", "INPUT0:64,64"],
    "convert_layout": ["--shape", "INPUT0:2,8,16,16",
                       "--request-parameter", "layout_from:NCHW:string",
                       "--request-parameter", "layout_to:NHWC:string"],
    "gelu_layer_norm": ["--shape", "x:16,64", "--shape", "bias:64",
                        "--shape", "residual:16,64", "--shape", "gamma:64",
                        "--shape", "beta:64"],
    "gemm": ["--shape", "a:32,48", "--shape", "b:48,16",
             "--shape", "c:32,16"],
}


def check_perf_analyzer(protocol, url, model, tmp_path, extra=()):
    """A short perf_analyzer run over protocol ("grpc" or "http") with the
    extra flags: no errors, and per window the requests it counted agree
    with the inferences the server's statistics counted."""
    binary, env = perf_analyzer()
    report = tmp_path / "perf.csv"
    run = subprocess.run(
        [binary, "-m", model, "-i", protocol, "-u", url,
         *PERF_CASES[model], *extra, "--concurrency-range", "1:2",
         "--measurement-interval", "300",
         # A shared 2-core machine never looks stable; the figures are not
         # the point here, that the tool drives the model is.
         "--stability-percentage", "999", "-f", str(report)],
        capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "error" not in run.stdout.lower(), run.stdout
    client_counts = [int(n) for n in
                     re.findall(r"Request count: (\d+)", run.stdout)]
    server_counts = [int(n) for n in
                     re.findall(r"Inference count: (\d+)", run.stdout)]
    assert len(client_counts) == len(server_counts) == 2, run.stdout
    for c, s in zip(client_counts, server_counts):
        assert c > 0 and abs(c - s) <= max(2, c // 100), run.stdout
    with open(report) as f:
        rows = list(csv.DictReader(f))
    assert sorted(int(r["Concurrency"]) for r in rows) == [1, 2]
    assert all(float(r["Inferences/Second"]) > 0 for r in rows)


@pytest.mark.parametrize("model", MODELS)
def test_perf_analyzer_drives_every_model(server, tmp_path, model):
    check_perf_analyzer("grpc", server.target, model, tmp_path)


def test_perf_analyzer_over_system_shared_memory(server_binary, tmp_path):
    """perf_analyzer --shared-memory=system names its regions after the
    tensors (/INPUT0, /OUTPUT0): a server that allows any key of the
    caller's (--client_shm_key_prefix=/) serves them over the local
    socket, and the tool's input and output bytes never cross gRPC."""
    s = Server(server_binary, str(tmp_path / "server"),
               ["--allow_client_shm", "--client_shm_key_prefix=/"])
    try:
        check_perf_analyzer("grpc", s.unix_target, "gemm", tmp_path,
                            ["--shared-memory=system"])
        # Every region perf_analyzer registered it also unregistered.
        c = tc.InferenceServerClient(s.unix_target)
        try:
            assert not c.get_system_shared_memory_status().regions
        finally:
            c.close()
    finally:
        assert s.stop() == 0, s.log()
