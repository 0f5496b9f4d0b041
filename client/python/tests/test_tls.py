"""TLS with bearer tokens, and mutual TLS, against real servers; the
certificates are made here by the openssl command."""

import secrets
import shutil
import subprocess
import tempfile

import grpc
import numpy as np
import pytest

import coalesce
from conftest import Server
from refs import random_array

# The server's certificate names only this host, so every client must
# override the name it checks (server_name) when connecting to 127.0.0.1.
SERVER_NAME = "coalesce.test"
LEAF = "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n"


def openssl(*args):
    subprocess.run(["openssl", *args], check=True, capture_output=True,
                   timeout=60)


def certificate(pki, name, subject, ext=None):
    """A P-256 key and certificate: self-signed CA when ext is None, else a
    leaf signed by pki/ca."""
    key, cert = f"{pki}/{name}.key", f"{pki}/{name}.pem"
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
          "-nodes", "-keyout", key, "-subj", subject]
    if ext is None:
        openssl("req", "-x509", *ec, "-out", cert, "-days", "2",
                "-addext", "basicConstraints=critical,CA:TRUE",
                "-addext", "keyUsage=critical,keyCertSign,cRLSign")
        return cert, key
    with open(f"{pki}/{name}.ext", "w") as f:
        f.write(LEAF + ext)
    openssl("req", "-new", *ec, "-out", f"{pki}/{name}.csr")
    openssl("x509", "-req", "-in", f"{pki}/{name}.csr", "-CA", f"{pki}/ca.pem",
            "-CAkey", f"{pki}/ca.key", "-set_serial",
            f"0x{secrets.token_hex(8)}", "-out", cert, "-days", "2",
            "-extfile", f"{pki}/{name}.ext")
    return cert, key


@pytest.fixture(scope="module")
def pki():
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is not installed (Debian package "
                    "openssl): it makes the test certificates")
    d = tempfile.mkdtemp(prefix="coalesce-py-pki-")
    p = {"dir": d}
    p["ca"], _ = certificate(d, "ca", "/CN=coalesce python test CA")
    p["server"] = certificate(
        d, "server", f"/CN={SERVER_NAME}",
        f"extendedKeyUsage=serverAuth\nsubjectAltName=DNS:{SERVER_NAME}\n")
    p["alice"] = certificate(d, "alice", "/CN=alice",
                             "extendedKeyUsage=clientAuth\n")
    p["token"] = secrets.token_hex(16)
    with open(f"{d}/tokens", "w") as f:
        f.write(f"{p['token']} alice user\n")
    yield p
    shutil.rmtree(d, ignore_errors=True)


def start(binary, pki, flags):
    return Server(binary, pki["dir"], [f"--tls_cert={pki['server'][0]}",
                                       f"--tls_key={pki['server'][1]}",
                                       *flags])


@pytest.fixture(scope="module")
def tls_server(server_binary, pki):
    workdir = tempfile.mkdtemp(prefix="coalesce-py-tls-", dir=pki["dir"])
    s = start(server_binary, dict(pki, dir=workdir),
              [f"--auth_tokens={pki['dir']}/tokens"])
    yield s
    assert s.stop() == 0, s.log()


@pytest.fixture(scope="module")
def mtls_server(server_binary, pki):
    workdir = tempfile.mkdtemp(prefix="coalesce-py-mtls-", dir=pki["dir"])
    s = start(server_binary, dict(pki, dir=workdir),
              [f"--tls_client_ca={pki['ca']}"])
    yield s
    assert s.stop() == 0, s.log()


def roundtrip(client):
    x = random_array(np.random.default_rng(), (6, 10), np.float32)
    np.testing.assert_array_equal(client.transpose(x), x.T)
    h = client.put_tensor(x)
    try:
        return h.owner
    finally:
        client.delete_tensor(h)


def test_tls_with_token(tls_server, pki):
    with coalesce.Client(tls_server.target, root_certificates=pki["ca"],
                         server_name=SERVER_NAME, token=pki["token"]) as c:
        assert roundtrip(c) == "alice"


def test_tls_pem_bytes(tls_server, pki):
    with open(pki["ca"], "rb") as f:
        ca = f.read()
    with coalesce.Client(tls_server.target, root_certificates=ca,
                         server_name=SERVER_NAME, token=pki["token"]) as c:
        assert c.server_info().backend == "cpu"


@pytest.mark.parametrize("token", [None, "0" * 32])
def test_tls_without_a_good_token(tls_server, pki, token):
    with coalesce.Client(tls_server.target, root_certificates=pki["ca"],
                         server_name=SERVER_NAME, token=token) as c:
        with pytest.raises(coalesce.CoalesceError) as e:
            c.server_info()
    assert e.value.code == grpc.StatusCode.UNAUTHENTICATED


def test_tls_name_checked(tls_server, pki):
    # 127.0.0.1 is not in the certificate: without server_name it fails.
    with coalesce.Client(tls_server.target, root_certificates=pki["ca"],
                         token=pki["token"], timeout=10) as c:
        with pytest.raises(coalesce.CoalesceError) as e:
            c.server_info()
    assert e.value.code == grpc.StatusCode.UNAVAILABLE


def test_plaintext_to_tls_server(tls_server, pki):
    with coalesce.Client(tls_server.target, token=pki["token"],
                         timeout=10) as c:
        with pytest.raises(coalesce.CoalesceError) as e:
            c.server_info()
    assert e.value.code == grpc.StatusCode.UNAVAILABLE


def test_mutual_tls(mtls_server, pki):
    cert, key = pki["alice"]
    with coalesce.Client(mtls_server.target, root_certificates=pki["ca"],
                         certificate_chain=cert, private_key=key,
                         server_name=SERVER_NAME) as c:
        assert roundtrip(c) == "alice"


def test_mutual_tls_needs_a_certificate(mtls_server, pki):
    with coalesce.Client(mtls_server.target, root_certificates=pki["ca"],
                         server_name=SERVER_NAME, timeout=10) as c:
        with pytest.raises(coalesce.CoalesceError) as e:
            c.server_info()
    assert e.value.code == grpc.StatusCode.UNAVAILABLE


def test_half_a_key_pair_refused(pki):
    with pytest.raises(ValueError):
        coalesce.Client("127.0.0.1:1", root_certificates=pki["ca"],
                        certificate_chain=pki["alice"][0])
