"""A DataLoader-like pool: worker processes (forked after the parent connected, spawned,
or from a fork server) read every file of a directory exactly once through weftfs."""

import errno
import hashlib
import multiprocessing as mp
import os

import pytest

import weftfs

FILES = 120


def _content(i: int) -> bytes:
    return hashlib.sha256(str(i).encode()).digest() * (1 + i % 50)


@pytest.fixture(scope="module")
def dataset(fs):
    d = "/workers-data"
    fs.makedirs(d, exist_ok=True)
    for i in range(FILES):
        fs.write_bytes(f"{d}/{i:04d}", _content(i))
    return d


def _read(args):
    """Worker: reads one file (the FileSystem came pickled, or inherited by fork)."""
    fs, path = args
    data = fs.read_bytes(path)
    return path, hashlib.sha256(data).hexdigest(), os.getpid()


def _check(results, fs, d):
    paths = [r[0] for r in results]
    assert sorted(paths) == sorted(f"{d}/{i:04d}" for i in range(FILES))
    assert len(set(paths)) == FILES, "a file was read twice"
    for path, digest, _ in results:
        i = int(path.rsplit("/", 1)[1])
        assert digest == hashlib.sha256(_content(i)).hexdigest(), path
    pids = {r[2] for r in results}
    assert os.getpid() not in pids
    assert len(pids) > 1, "the work did not spread over workers"


@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
def test_pool_reads_every_file_once(fs, dataset, method):
    # The parent has a live connection (and its runtime threads) before the fork.
    assert len(fs.listdir(dataset)) == FILES
    with fs.open(f"{dataset}/0000", "rb") as f:
        f.read(10)
    ctx = mp.get_context(method)
    jobs = [(fs, f"{dataset}/{n}") for n in sorted(fs.listdir(dataset))]
    with ctx.Pool(4) as pool:
        results = pool.map(_read, jobs, chunksize=3)
    _check(results, fs, dataset)
    # The parent's connection still works after its children came and went.
    assert fs.read_bytes(f"{dataset}/0001") == _content(1)


def _use_inherited(conn, f, fs, path):
    try:
        f.read(1)
        conn.send(("read", None))
    except OSError as e:
        conn.send(("oserror", e.errno))
    # A new open in the child works.
    conn.send(("new", fs.read_bytes(path)))
    # Writes from the child are seen by the parent.
    fs.write_bytes(path + ".child", b"from the child")
    conn.send(("done", None))


def test_file_opened_before_fork_is_ebadf_in_child(fs, dataset):
    path = f"{dataset}/0002"
    f = fs.open(path, "rb", buffering=0)
    ctx = mp.get_context("fork")
    parent, child = ctx.Pipe()
    p = ctx.Process(target=_use_inherited, args=(child, f, fs, path))
    p.start()
    assert parent.recv() == ("oserror", errno.EBADF)
    assert parent.recv() == ("new", _content(2))
    assert parent.recv() == ("done", None)
    p.join(30)
    assert p.exitcode == 0
    # The parent's handle is untouched by the child.
    assert f.read() == _content(2)
    f.close()
    assert fs.read_bytes(path + ".child") == b"from the child"
    fs.remove(path + ".child")


def test_threads_share_a_connection(fs, dataset):
    from concurrent.futures import ThreadPoolExecutor

    paths = [f"{dataset}/{i:04d}" for i in range(FILES)]
    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(fs.read_bytes, paths))
    assert got == [_content(i) for i in range(FILES)]
