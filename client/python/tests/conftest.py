"""Fixtures: the real coalesce-server (CPU backend) started on port 0.

The server binary comes from --server=PATH or COALESCE_SERVER_BINARY; the
tests refuse to run without one rather than pass on nothing.
"""

import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time

import numpy as np
import pytest

import coalesce

START_LIMIT_S = 60


def pytest_addoption(parser):
    parser.addoption("--server", default=os.environ.get(
        "COALESCE_SERVER_BINARY", ""), help="path to coalesce-server")


# The server gets SIGKILL if pytest dies without tearing it down: setpriv
# (util-linux) sets PR_SET_PDEATHSIG in the child, which keeps it across
# exec. Not a preexec_fn: that makes subprocess fork the whole interpreter,
# grpcio's threads included, and some such children failed before their
# exec (grpc's "epoll_wait error: Bad file descriptor", then no server).
_DIE_WITH_PARENT = (["setpriv", "--pdeathsig", "KILL"]
                    if shutil.which("setpriv") else [])


class Server:
    """coalesce-server on 127.0.0.1:0; the port comes from its first line."""

    def __init__(self, binary, workdir, flags=()):
        os.makedirs(workdir, exist_ok=True)
        self.workdir = workdir
        self.log_path = os.path.join(workdir, "stderr.txt")
        self.unix_socket = os.path.join(workdir, "coalesce.sock")
        argv = [*_DIE_WITH_PARENT, binary, "--listen=127.0.0.1:0",
                "--metrics_listen=127.0.0.1:0",
                "--device=cpu", "--threads=2",
                f"--unix_socket={self.unix_socket}", *flags]
        env = dict(os.environ, OMP_WAIT_POLICY="passive")
        with open(self.log_path, "w") as log:
            self.process = subprocess.Popen(
                argv, stdout=subprocess.PIPE, stderr=log, text=True, env=env)
        self.port = None
        self._metrics_port = None
        self.http_port = None
        # With --http_listen, its line comes last: wait for it too.
        wants_http = any(f.startswith("--http_listen=") for f in flags)
        found = threading.Event()
        self._metrics_found = threading.Event()

        def read():
            for line in self.process.stdout:
                m = re.search(r"listening on \S*:(\d+) \(backend (\w+)\)", line)
                if m:
                    self.port = int(m.group(1))
                    self.backend = m.group(2)
                m = re.search(r"http on \S*:(\d+)", line)
                if m:
                    self.http_port = int(m.group(1))
                if self.port is not None and (
                        self.http_port is not None or not wants_http):
                    found.set()
                m = re.search(r"metrics on \S*:(\d+)", line)
                if m:
                    self._metrics_port = int(m.group(1))
                    self._metrics_found.set()
            found.set()  # EOF: the server exited
            self._metrics_found.set()

        threading.Thread(target=read, daemon=True).start()
        found.wait(START_LIMIT_S)
        if self.port is None or (wants_http and self.http_port is None):
            self.process.kill()
            self.process.wait()
            raise RuntimeError(f"{binary} did not start; stderr:\n{self.log()}")

    @property
    def metrics_port(self):
        """The /metrics port, printed just after the gRPC one."""
        self._metrics_found.wait(START_LIMIT_S)
        return self._metrics_port

    @property
    def target(self):
        return f"127.0.0.1:{self.port}"

    @property
    def http_target(self):
        return f"127.0.0.1:{self.http_port}"

    @property
    def unix_target(self):
        return f"unix:{self.unix_socket}"

    def log(self):
        with open(self.log_path) as f:
            return f.read()

    def stop(self):
        """SIGTERM; the server must exit cleanly within the limit."""
        if self.process.poll() is not None:
            return self.process.returncode
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            return None


@pytest.fixture(scope="session")
def server_binary(request):
    path = request.config.getoption("--server")
    if not path or not os.access(path, os.X_OK):
        raise pytest.UsageError(
            "pass the coalesce-server binary: --server=PATH or "
            f"COALESCE_SERVER_BINARY (got {path!r})")
    return path


@pytest.fixture(scope="session")
def server(server_binary):
    workdir = tempfile.mkdtemp(prefix="coalesce-py-")
    s = Server(server_binary, workdir,
               ["--allow_client_shm", "--http_listen=127.0.0.1:0"])
    yield s
    alive = s.process.poll() is None
    code = s.stop()
    shutil.rmtree(workdir, ignore_errors=True)
    assert alive, f"the server died during the tests:\n{s.log()}"
    assert code == 0, f"the server exited {code}:\n{s.log()}"


@pytest.fixture(scope="session")
def client(server):
    with coalesce.Client(server.target, timeout=60) as c:
        yield c


@pytest.fixture(scope="session")
def unix_client(server):
    # Shared memory is registered only over the local socket.
    with coalesce.Client(server.unix_target, timeout=60) as c:
        yield c


@pytest.fixture
def rng(request):
    # A different draw per test and run, printed on failure to reproduce.
    seed = int(time.time_ns() % (2**32)) ^ (hash(request.node.nodeid) & 0xFFFF)
    print(f"seed {seed}")
    return np.random.default_rng(seed)
