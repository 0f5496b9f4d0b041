"""Every script in examples/ runs against the test server and exits 0 (each
checks its own result against NumPy)."""

import pathlib
import subprocess
import sys

import pytest

EXAMPLES = sorted((pathlib.Path(__file__).parent.parent / "examples").glob(
    "*.py"))


def test_every_example_is_listed():
    assert {p.stem for p in EXAMPLES} >= {
        "transpose", "gemm", "convert_layout", "gelu_layer_norm",
        "server_info", "handles", "shared_memory"}


@pytest.mark.parametrize("script", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example(server, script):
    # Shared memory is registered only over the local socket.
    target = (server.unix_target if script.stem == "shared_memory"
              else server.target)
    run = subprocess.run([sys.executable, str(script), f"--target={target}"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, f"{script.name}:\n{run.stdout}\n{run.stderr}"
    assert run.stdout.strip()
