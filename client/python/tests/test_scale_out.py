"""load_balancing="round_robin" spreads calls over two real servers."""

import re
import shutil
import tempfile
import time
import urllib.request

import numpy as np
import pytest

import coalesce
import refs
from conftest import Server


def served_transposes(server):
    # The server's own count, from its /metrics.
    text = urllib.request.urlopen(
        f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=10).read()
    m = re.search(rb'coalesce_requests_total\{code="OK",op="transpose"\} (\S+)',
                  text)
    return int(float(m.group(1))) if m else 0


@pytest.fixture
def two_servers(server_binary):
    workdir = tempfile.mkdtemp(prefix="coalesce-py-lb-")
    servers = [Server(server_binary, workdir + f"/{i}") for i in range(2)]
    yield servers
    for s in servers:
        assert s.stop() == 0, s.log()
    shutil.rmtree(workdir, ignore_errors=True)


@pytest.mark.parametrize("policy, spread", [("round_robin", True),
                                            (None, False)])
def test_calls_spread_over_both_servers(two_servers, rng, policy, spread):
    target = "ipv4:" + ",".join(f"127.0.0.1:{s.port}" for s in two_servers)
    x = refs.random_array(rng, (8, 12), np.float32)
    with coalesce.Client(target, load_balancing=policy) as c:
        if spread:
            # round_robin picks among the connections that are ready: until
            # the second one is, every call goes to the first (a loaded
            # machine connects slowly).
            deadline = time.monotonic() + 30
            while (min(served_transposes(s) for s in two_servers) == 0
                   and time.monotonic() < deadline):
                np.testing.assert_array_equal(c.transpose(x), x.T)
        before = [served_transposes(s) for s in two_servers]
        for _ in range(40):
            np.testing.assert_array_equal(c.transpose(x), x.T)
    counts = sorted(served_transposes(s) - b
                    for s, b in zip(two_servers, before))
    assert sum(counts) == 40
    if spread:
        assert counts[0] >= 10, counts  # round robin: about 20 each
    else:
        assert counts == [0, 40], counts  # one server takes every call


def test_an_unknown_policy_is_refused():
    with pytest.raises(ValueError, match="load_balancing"):
        coalesce.Client("127.0.0.1:1", load_balancing="random")
