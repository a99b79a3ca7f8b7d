"""Fixtures: a real `weft up --no-mount` (four OSTs) on a free loopback port with a
temporary data directory, started once per test session, and a connection to it.

The binary is $WEFT_BIN, else target/debug/weft of the workspace (test.sh builds it).
"""

import os
import pathlib
import shutil
import socket
import subprocess
import tempfile
import time

import pytest

import weftfs

ROOT = pathlib.Path(__file__).resolve().parents[3]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_listening(port: int, proc, deadline: float) -> None:
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"weft up exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("weft up did not listen in time")


@pytest.fixture(scope="session")
def cluster():
    """``HOST:PORT:/FSNAME`` of a running file system."""
    weft = os.environ.get("WEFT_BIN") or str(ROOT / "target" / "debug" / "weft")
    if not os.access(weft, os.X_OK):
        pytest.fail(f"{weft} is missing: build it with `cargo build -p weft-cli --bin weft`")
    data = tempfile.mkdtemp(prefix="weftfs-py-")
    port = _free_port()
    log = open(os.path.join(data, "up.log"), "wb")
    proc = subprocess.Popen(
        [weft, "up", "--no-mount", "--data", os.path.join(data, "d"),
         "--listen", f"127.0.0.1:{port}", "--osts", "4"],
        stdout=log, stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 60
        _wait_listening(port, proc, deadline)
        spec = f"127.0.0.1:{port}:/weft"
        # Ready when MDT0 and the four OSTs have registered with the MGS and answer.
        while True:
            try:
                fs = weftfs.connect(spec)
                fs.stat("/")
                osts = [t for t in fs.df() if t["kind"] == "ost" and t["online"]]
                if len(osts) == 4:
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise
            if time.monotonic() > deadline:
                raise RuntimeError("the OSTs did not come up in time")
            time.sleep(0.2)
        yield spec
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        if os.environ.get("WEFTFS_KEEP_DATA") is None:
            shutil.rmtree(data, ignore_errors=True)


@pytest.fixture(scope="session")
def fs(cluster):
    return weftfs.connect(cluster)


@pytest.fixture
def wdir(fs, request):
    """A fresh directory in the file system for one test."""
    name = "/t-" + request.node.name.replace("[", "-").replace("]", "").replace("/", "_")
    fs.makedirs(name, exist_ok=True)
    yield name
    fs.rmtree(name)
