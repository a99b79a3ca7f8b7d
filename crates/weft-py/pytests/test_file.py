"""File objects and namespace functions of weftfs checked against the same operations on
a local directory: each scenario runs on both and their transcripts (results, and
exceptions as type and errno) must be equal."""

import errno
import io
import os
import stat

import pytest


class LocalFS:
    """The subset of weftfs.FileSystem's API, on a local directory."""

    def __init__(self, root):
        self.root = str(root)

    def _p(self, path):
        return os.path.join(self.root, path.lstrip("/"))

    def open(self, path, mode="r", buffering=-1, **kw):
        return open(self._p(path), mode, buffering, **kw)

    def listdir(self, path):
        return os.listdir(self._p(path))

    def scandir(self, path):
        return os.scandir(self._p(path))

    def stat(self, path):
        return os.stat(self._p(path))

    def mkdir(self, path):
        os.mkdir(self._p(path))

    def makedirs(self, path, exist_ok=False):
        os.makedirs(self._p(path), exist_ok=exist_ok)

    def remove(self, path):
        os.remove(self._p(path))

    def rmdir(self, path):
        os.rmdir(self._p(path))

    def rename(self, a, b):
        os.rename(self._p(a), self._p(b))

    def truncate(self, path, n):
        os.truncate(self._p(path), n)

    def exists(self, path):
        return os.path.exists(self._p(path))


class Recorder:
    def __init__(self):
        self.log = []

    def __call__(self, f, *a, **kw):
        try:
            r = f(*a, **kw)
        except Exception as e:  # noqa: BLE001 - the point is to record it
            self.log.append(("raise", type(e).__name__, getattr(e, "errno", None)))
            return None
        if isinstance(r, (bytes, bytearray, memoryview)):
            r = bytes(r)
        self.log.append(("ok", r))
        return r


def compare(fs, wdir, tmp_path, scenario):
    """Runs scenario(fs, base, rec) on weftfs and on a local directory; returns the
    transcript after checking they are equal."""
    local, here = Recorder(), Recorder()
    scenario(LocalFS(tmp_path), "/", local)
    scenario(fs, wdir + "/", here)
    assert here.log == local.log
    assert local.log, "the scenario recorded nothing"
    return here.log


def test_write_read_seek_tell(fs, wdir, tmp_path):
    data = bytes(range(256)) * 1000 + b"tail"

    def s(fs, b, rec):
        with fs.open(b + "f", "wb") as f:
            rec(f.write, data)
            rec(f.tell)
        with fs.open(b + "f", "rb") as f:
            rec(f.read, 10)
            rec(f.tell)
            rec(f.seek, 1000)
            rec(f.read, 300)
            rec(f.seek, -4, io.SEEK_END)
            rec(f.read)
            rec(f.read)
            rec(f.seek, 5, io.SEEK_CUR)
            rec(f.read, 1)
            rec(f.seek, -1)
            rec(f.seek, 0)
            rec(f.readline)
            rec(f.seekable)
            rec(f.readable)
            rec(f.writable)
        with fs.open(b + "f", "rb", buffering=0) as f:
            rec(f.read)
        rec(lambda: fs.stat(b + "f").st_size)
        rec(lambda: stat.S_ISREG(fs.stat(b + "f").st_mode))

    compare(fs, wdir, tmp_path, s)


def test_readinto_fills_the_callers_buffer(fs, wdir, tmp_path):
    data = os.urandom(3 * 1024 * 1024 + 17)

    def s(fs, b, rec):
        with fs.open(b + "g", "wb") as f:
            f.write(data)
        for buffering in (0, -1):
            with fs.open(b + "g", "rb", buffering=buffering) as f:
                ba = bytearray(1 << 20)
                rec(f.readinto, ba)
                rec(lambda: bytes(ba[:64]))
                mv = memoryview(bytearray(2 << 20))
                rec(f.readinto, mv[100:])
                rec(lambda: bytes(mv[100:200]))
                rec(f.seek, len(data) - 10)
                small = bytearray(100)
                rec(f.readinto, small)
                rec(lambda: bytes(small))
                rec(f.readinto, bytearray(8))
                rec(f.readinto, b"readonly")

    compare(fs, wdir, tmp_path, s)


def test_write_append_truncate_update(fs, wdir, tmp_path):
    def s(fs, b, rec):
        with fs.open(b + "a", "wb") as f:
            rec(f.write, b"hello ")
        with fs.open(b + "a", "ab") as f:
            rec(f.tell)
            rec(f.write, b"world")
            rec(f.seek, 0)
            rec(f.write, b"!")
        rec(lambda: fs.open(b + "a", "rb").read())
        with fs.open(b + "a", "r+b") as f:
            rec(f.write, b"J")
            rec(f.seek, 3)
            rec(f.read, 2)
            rec(f.truncate, 4)
            rec(f.tell)
            rec(f.seek, 0)
            rec(f.read)
            rec(f.seek, 10)
            rec(f.write, b"z")
        rec(lambda: fs.open(b + "a", "rb").read())
        rec(fs.truncate, b + "a", 2)
        rec(lambda: fs.open(b + "a", "rb").read())
        rec(fs.truncate, b + "a", 6)
        rec(lambda: fs.open(b + "a", "rb").read())
        with fs.open(b + "a", "w+b") as f:
            rec(f.read)
            rec(f.write, b"new")
            rec(f.seek, 0)
            rec(f.read)
        with fs.open(b + "t.txt", "w", encoding="utf-8") as f:
            rec(f.write, "ünïcode\nline 2\n")
        with fs.open(b + "t.txt", encoding="utf-8") as f:
            rec(f.readlines)
        with fs.open(b + "t.txt", "a", encoding="utf-8") as f:
            rec(f.write, "line 3\n")
        rec(lambda: list(fs.open(b + "t.txt", encoding="utf-8")))

    compare(fs, wdir, tmp_path, s)


def test_errors_are_the_right_oserrors(fs, wdir, tmp_path):
    def s(fs, b, rec):
        rec(fs.open, b + "missing", "rb")
        rec(fs.open, b + "missing/x", "wb")
        rec(fs.mkdir, b + "d")
        rec(fs.mkdir, b + "d")
        rec(fs.open, b + "d", "rb")
        rec(fs.open, b + "d", "wb")
        with fs.open(b + "d/f", "wb") as f:
            f.write(b"x")
        rec(fs.open, b + "d/f", "xb")
        rec(fs.open, b + "d/f/g", "rb")
        rec(fs.listdir, b + "d/f")
        rec(fs.rmdir, b + "d")
        rec(fs.rmdir, b + "d/f")
        rec(fs.remove, b + "d")
        rec(fs.remove, b + "nothing")
        rec(fs.stat, b + "nothing")
        rec(fs.rename, b + "nothing", b + "other")
        rec(fs.makedirs, b + "d")
        rec(fs.makedirs, b + "d", exist_ok=True)
        rec(fs.makedirs, b + "d/f/sub", exist_ok=True)
        w = fs.open(b + "d/w", "wb")
        rec(w.read)
        w.close()
        rec(w.write, b"closed")
        r = fs.open(b + "d/f", "rb")
        rec(r.write, b"no")
        r.close()
        rec(r.read)
        rec(fs.open, b + "d/f", "rwb")
        rec(fs.open, b + "d/f", "rbt")

    log = compare(fs, wdir, tmp_path, s)
    raised = {entry[2] for entry in log if entry[0] == "raise"}
    assert {errno.ENOENT, errno.EEXIST, errno.EISDIR, errno.ENOTDIR, errno.ENOTEMPTY} <= raised


def test_namespace(fs, wdir, tmp_path):
    def s(fs, b, rec):
        rec(fs.makedirs, b + "x/y/z")
        for n in ("a", "b", "c"):
            with fs.open(b + "x/" + n, "wb") as f:
                f.write(n.encode() * 3)
        rec(lambda: sorted(fs.listdir(b + "x")))
        rec(lambda: sorted((e.name, e.is_dir(), e.is_file(), e.stat().st_size if e.is_file() else None)
                           for e in fs.scandir(b + "x")))
        rec(fs.rename, b + "x/a", b + "x/y/a2")
        rec(fs.rename, b + "x/b", b + "x/c")
        rec(lambda: sorted(fs.listdir(b + "x")))
        rec(lambda: fs.open(b + "x/c", "rb").read())
        rec(fs.remove, b + "x/c")
        rec(fs.exists, b + "x/c")
        rec(fs.rename, b + "x/y", b + "x/w")
        rec(lambda: sorted(fs.listdir(b + "x/w")))
        rec(fs.rmdir, b + "x/w/z")
        rec(lambda: stat.S_ISDIR(fs.stat(b + "x/w").st_mode))

    compare(fs, wdir, tmp_path, s)


def test_large_directory_listing(fs, wdir):
    names = {f"n{i:05d}" for i in range(1100)}
    for n in names:
        with fs.open(f"{wdir}/{n}", "wb"):
            pass
    assert set(fs.listdir(wdir)) == names
    assert {e.name for e in fs.scandir(wdir)} == names


def test_stat_fields(fs, wdir):
    with fs.open(wdir + "/s", "wb") as f:
        f.write(b"x" * 5000)
    st = fs.stat(wdir + "/s")
    assert st.st_size == 5000
    assert stat.S_ISREG(st.st_mode)
    assert st.st_nlink == 1
    assert st.st_uid == os.geteuid()
    assert st.st_mtime_ns > 0 and abs(st.st_mtime - st.st_mtime_ns / 1e9) < 1
    assert fs.stat(wdir + "/s").st_ino == st.st_ino != fs.stat(wdir).st_ino
