"""A secured cluster from Python: `weft up` started with a cluster key and TLS (a CA and a
node certificate made with openssl); `weftfs.connect` proves the client key and speaks
TLS when WEFT_KEY and WEFT_TLS_* name the files (as the `weft` tools do), and is refused
without them."""

import os
import subprocess
import sys
import tempfile
import time

import pytest

import weftfs
from conftest import ROOT, _free_port, _wait_listening


def _run(*args, **kw):
    subprocess.run(args, check=True, capture_output=True, **kw)


def _pki(d: str) -> dict:
    """A CA and one certificate for 127.0.0.1 (server and client use), as WEFT_TLS_*."""
    key = lambda path: _run("openssl", "genpkey", "-algorithm", "EC",
                            "-pkeyopt", "ec_paramgen_curve:P-256", "-out", path)
    key(f"{d}/ca-key.pem")
    _run("openssl", "req", "-x509", "-new", "-key", f"{d}/ca-key.pem", "-out", f"{d}/ca.pem",
         "-days", "2", "-subj", "/CN=weft-test-ca")
    key(f"{d}/key.pem")
    _run("openssl", "req", "-new", "-key", f"{d}/key.pem", "-out", f"{d}/node.csr",
         "-subj", "/CN=weft-node")
    with open(f"{d}/ext", "w") as f:
        f.write("subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n")
    _run("openssl", "x509", "-req", "-in", f"{d}/node.csr", "-CA", f"{d}/ca.pem",
         "-CAkey", f"{d}/ca-key.pem", "-CAcreateserial", "-out", f"{d}/cert.pem",
         "-days", "2", "-extfile", f"{d}/ext")
    return {"WEFT_TLS_CA": f"{d}/ca.pem", "WEFT_TLS_CERT": f"{d}/cert.pem",
            "WEFT_TLS_KEY": f"{d}/key.pem"}


class _Env:
    """Sets environment variables for the body of a `with`, then restores them."""

    def __init__(self, values):
        self.values, self.saved = values, {}

    def __enter__(self):
        for k, v in self.values.items():
            self.saved[k] = os.environ.get(k)
            os.environ[k] = v

    def __exit__(self, *exc):
        for k, v in self.saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture(scope="module")
def secured():
    """(spec, environment of a client) of a `weft up` with a key and TLS."""
    weft = os.environ.get("WEFT_BIN") or str(ROOT / "target" / "debug" / "weft")
    d = tempfile.mkdtemp(prefix="weftfs-py-secure-")
    tls = _pki(d)
    with open(f"{d}/server.key", "wb") as f:
        subprocess.run([weft, "key", "generate"], stdout=f, check=True)
    os.chmod(f"{d}/server.key", 0o600)
    with open(f"{d}/client.key", "wb") as f:
        subprocess.run([weft, "key", "client", f"{d}/server.key"], stdout=f, check=True)
    os.chmod(f"{d}/client.key", 0o600)
    port = _free_port()
    log = open(f"{d}/up.log", "wb")
    proc = subprocess.Popen(
        [weft, "up", "--no-mount", "--data", f"{d}/data", "--listen", f"127.0.0.1:{port}",
         "--osts", "1", "--key", f"{d}/server.key", "--tls-ca", tls["WEFT_TLS_CA"],
         "--tls-cert", tls["WEFT_TLS_CERT"], "--tls-key", tls["WEFT_TLS_KEY"]],
        stdout=log, stderr=subprocess.STDOUT,
    )
    env = dict(tls, WEFT_KEY=f"{d}/client.key")
    spec = f"127.0.0.1:{port}:/weft"
    try:
        deadline = time.monotonic() + 60
        _wait_listening(port, proc, deadline)
        with _Env(env):
            while True:
                try:
                    fs = weftfs.connect(spec)
                    if any(t["kind"] == "ost" and t["online"] for t in fs.df()):
                        break
                except OSError:
                    if time.monotonic() > deadline:
                        raise
                time.sleep(0.2)
        yield spec, env
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        log.close()


def test_a_client_with_the_key_and_certificate_reads_and_writes(secured):
    spec, env = secured
    data = os.urandom(3 << 20)
    with _Env(env):
        fs = weftfs.connect(spec)
        with fs.open("/secret.bin", "wb") as f:
            f.write(data)
        with fs.open("/secret.bin", "rb") as f:
            assert f.read() == data


def test_a_client_without_them_is_refused(secured):
    """In fresh processes (this one keeps its connection): without the key, and without
    TLS, the connection is refused with an OSError."""
    spec, env = secured
    base = {k: v for k, v in os.environ.items() if k not in env}
    probe = (f"import sys, weftfs\ntry:\n    weftfs.connect({spec!r}).stat('/')\n"
             "except OSError as e:\n    print('refused', e)\n    sys.exit(3)\n")
    without_key = {k: v for k, v in env.items() if k != "WEFT_KEY"}
    for partial in (without_key, {"WEFT_KEY": env["WEFT_KEY"]}, env):
        r = subprocess.run([sys.executable, "-c", probe], env=dict(base, **partial),
                           capture_output=True, text=True, timeout=120)
        if partial is env:
            assert r.returncode == 0, r.stderr
        else:
            assert r.returncode == 3 and "refused" in r.stdout, r.stdout + r.stderr
