"""weftfs from Python, without a mount.

``weftfs.connect("HOST:PORT:/FSNAME")`` gives a :class:`FileSystem` whose ``open()``
returns real binary (or text) file objects and whose namespace functions mirror
``os``'s (``listdir``, ``scandir``, ``stat``, ``makedirs``, ``remove``, ``rename``...).
Everything runs in this process through the weftfs client library (the native module
``weftfs._native``); blocking calls release the GIL. A process forked after connecting
(a DataLoader worker) connects again by itself on first use; files opened before the
fork must be opened again in the child. ``fsspec`` (``weft://``) and PyTorch helpers
live in ``weftfs.fsspec`` and ``weftfs.torch``.
"""

from __future__ import annotations

import io
import os
import stat as _stat
import threading

from . import _native

__all__ = ["connect", "FileSystem", "FileIO", "DirEntry", "split_url", "open_url"]

#: Buffer size of the buffered file objects ``open()`` returns (reads and writes reach the
#: client library in pieces this large).
DEFAULT_BUFFER_SIZE = 1 << 20


def _stat_result(t) -> os.stat_result:
    mode, ino, dev, nlink, uid, gid, size, atime, mtime, ctime, blocks, rdev = t
    return os.stat_result(
        (mode, ino, dev, nlink, uid, gid, size, atime // 10**9, mtime // 10**9, ctime // 10**9),
        {
            "st_atime": atime / 1e9,
            "st_mtime": mtime / 1e9,
            "st_ctime": ctime / 1e9,
            "st_atime_ns": atime,
            "st_mtime_ns": mtime,
            "st_ctime_ns": ctime,
            "st_blksize": DEFAULT_BUFFER_SIZE,
            "st_blocks": blocks,
            "st_rdev": rdev,
        },
    )


class FileIO(io.RawIOBase):
    """A weftfs file as an unbuffered binary stream (like ``io.FileIO``); ``readinto``
    fills the caller's buffer directly. Has no file descriptor (``fileno()`` raises)."""

    def __init__(self, raw, name: str, mode: str):
        super().__init__()
        self._raw = raw
        self.name = name
        self.mode = mode
        if raw.append:
            raw.seek(0, 2)

    def readable(self) -> bool:
        self._checkClosed()
        return self._raw.readable

    def writable(self) -> bool:
        self._checkClosed()
        return self._raw.writable

    def seekable(self) -> bool:
        self._checkClosed()
        return True

    def readinto(self, b) -> int:
        self._checkClosed()
        return self._raw.readinto(b)

    def read(self, size: int = -1) -> bytes:
        self._checkClosed()
        return self._raw.read(-1 if size is None else size)

    def readall(self) -> bytes:
        self._checkClosed()
        return self._raw.readall()

    def pread(self, size: int, offset: int) -> bytes:
        """Reads ``size`` bytes at ``offset`` without moving the position."""
        self._checkClosed()
        return self._raw.pread(size, offset)

    def write(self, b) -> int:
        self._checkClosed()
        return self._raw.write(b)

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        self._checkClosed()
        return self._raw.seek(offset, whence)

    def tell(self) -> int:
        self._checkClosed()
        return self._raw.tell()

    def truncate(self, size: int | None = None) -> int:
        self._checkClosed()
        return self._raw.truncate(size)

    def flush(self) -> None:
        self._checkClosed()
        self._raw.flush()

    def fsync(self) -> None:
        """Makes everything written durable on the servers."""
        self._checkClosed()
        self._raw.fsync()

    def fileno(self) -> int:
        raise io.UnsupportedOperation("weftfs files have no file descriptor")

    def isatty(self) -> bool:
        self._checkClosed()
        return False

    def close(self) -> None:
        if not self.closed:
            try:
                self._raw.close()
            finally:
                super().close()

    @property
    def size(self) -> int:
        return self._raw.size()

    def __repr__(self) -> str:
        return f"<weftfs.FileIO name={self.name!r} mode={self.mode!r} closed={self.closed}>"


def _parse_mode(mode: str):
    """``open()``'s mode string as (read, write, create, exclusive, truncate, append,
    binary), with ``open()``'s errors."""
    if not isinstance(mode, str):
        raise TypeError(f"open() argument 'mode' must be str, not {type(mode).__name__}")
    modes = set(mode)
    if len(modes) != len(mode) or modes - set("rwxabt+"):
        raise ValueError(f"invalid mode: {mode!r}")
    kinds = modes & set("rwxa")
    if len(kinds) != 1:
        raise ValueError("must have exactly one of create/read/write/append mode")
    if "b" in modes and "t" in modes:
        raise ValueError("can't have text and binary mode at once")
    (kind,) = kinds
    plus = "+" in modes
    return (
        kind == "r" or plus,
        kind != "r" or plus,
        kind in "wxa",
        kind == "x",
        kind == "w",
        kind == "a",
        "b" in modes,
    )


class DirEntry:
    """One entry of :meth:`FileSystem.scandir`, like ``os.DirEntry``."""

    __slots__ = ("name", "path", "_kind", "_stat", "_fs")

    def __init__(self, fs, dirpath: str, name: str, kind: str, st):
        self._fs = fs
        self.name = name
        self.path = dirpath.rstrip("/") + "/" + name
        self._kind = kind
        self._stat = _stat_result(st) if st is not None else None

    def is_dir(self, *, follow_symlinks: bool = True) -> bool:
        if self._kind == "l" and follow_symlinks:
            return self._fs.isdir(self.path)
        return self._kind == "d"

    def is_file(self, *, follow_symlinks: bool = True) -> bool:
        if self._kind == "l" and follow_symlinks:
            return self._fs.isfile(self.path)
        return self._kind == "f"

    def is_symlink(self) -> bool:
        return self._kind == "l"

    def stat(self, *, follow_symlinks: bool = True) -> os.stat_result:
        if self._stat is None or (self._kind == "l" and follow_symlinks):
            return self._fs.stat(self.path, follow_symlinks=follow_symlinks)
        return self._stat

    def inode(self) -> int:
        return self.stat(follow_symlinks=False).st_ino

    def __fspath__(self) -> str:
        return self.path

    def __repr__(self) -> str:
        return f"<weftfs.DirEntry {self.name!r}>"


class FileSystem:
    """A weftfs file system reached through the client library in this process.

    Paths are absolute inside the file system (``/a/b``; ``a/b`` means the same).
    Errors are ``OSError`` subclasses with the errno a local file system gives."""

    def __init__(self, native):
        self._fs = native

    @property
    def spec(self) -> str:
        """``HOST:PORT:/FSNAME``."""
        return self._fs.spec

    def __reduce__(self):
        # Pickled into spawned workers as the address: they connect on arrival.
        return (connect, (self.spec,))

    def __repr__(self) -> str:
        return f"weftfs.FileSystem({self.spec!r})"

    # Files.

    def open(self, path, mode="r", buffering=-1, encoding=None, errors=None, newline=None):
        """Opens ``path`` like the builtin ``open()`` (binary modes give buffered
        binary files, ``buffering=0`` the raw :class:`FileIO`, text modes a
        ``TextIOWrapper``)."""
        path = os.fspath(path)
        read, write, create, exclusive, truncate, append, binary = _parse_mode(mode)
        if binary and encoding is not None:
            raise ValueError("binary mode doesn't take an encoding argument")
        if buffering == 0 and not binary:
            raise ValueError("can't have unbuffered text I/O")
        raw = self._fs.open(
            path,
            read,
            write,
            create=create,
            exclusive=exclusive,
            truncate=truncate,
            append=append,
        )
        f = FileIO(raw, path, mode)
        if buffering == 0:
            return f
        size = DEFAULT_BUFFER_SIZE if buffering in (-1, 1) else buffering
        try:
            if read and write:
                buffered = io.BufferedRandom(f, size)
            elif write:
                buffered = io.BufferedWriter(f, size)
            else:
                buffered = io.BufferedReader(f, size)
            if binary:
                return buffered
            text = io.TextIOWrapper(
                buffered, encoding, errors, newline, line_buffering=buffering == 1
            )
            text.mode = mode
            return text
        except BaseException:
            f.close()
            raise

    def read_bytes(self, path) -> bytes:
        """The whole content of file ``path``."""
        with self.open(path, "rb", buffering=0) as f:
            return f.readall()

    def write_bytes(self, path, data) -> int:
        """Creates or replaces file ``path`` with ``data``."""
        with self.open(path, "wb", buffering=0) as f:
            return f.write(data)

    # Names.

    def stat(self, path, *, follow_symlinks: bool = True) -> os.stat_result:
        return _stat_result(self._fs.stat(os.fspath(path), follow_symlinks))

    def lstat(self, path) -> os.stat_result:
        return self.stat(path, follow_symlinks=False)

    def exists(self, path) -> bool:
        try:
            self.stat(path)
        except (FileNotFoundError, NotADirectoryError):
            return False
        return True

    def isdir(self, path) -> bool:
        try:
            return _stat.S_ISDIR(self.stat(path).st_mode)
        except (FileNotFoundError, NotADirectoryError):
            return False

    def isfile(self, path) -> bool:
        try:
            return _stat.S_ISREG(self.stat(path).st_mode)
        except (FileNotFoundError, NotADirectoryError):
            return False

    def getsize(self, path) -> int:
        return self.stat(path).st_size

    def listdir(self, path="/") -> list[str]:
        return self._fs.listdir(os.fspath(path))

    def scandir(self, path="/"):
        """The entries of directory ``path`` with their attributes (one listing)."""
        path = os.fspath(path)
        return iter([DirEntry(self, path, n, k, st) for n, k, st in self._fs.scandir(path)])

    def walk(self, top="/"):
        """Like ``os.walk`` (top-down)."""
        dirs, files = [], []
        for e in self.scandir(top):
            (dirs if e.is_dir(follow_symlinks=False) else files).append(e.name)
        yield top, dirs, files
        for d in dirs:
            yield from self.walk(top.rstrip("/") + "/" + d)

    def mkdir(self, path, mode=0o777) -> None:
        self._fs.mkdir(os.fspath(path), mode)

    def makedirs(self, path, mode=0o777, exist_ok=False) -> None:
        path = os.fspath(path)
        head, tail = path.rstrip("/").rsplit("/", 1) if "/" in path.rstrip("/") else ("", path)
        if head and not self.exists(head):
            try:
                self.makedirs(head, mode, exist_ok=True)
            except FileExistsError:
                pass
        try:
            self.mkdir(path, mode)
        except FileExistsError:
            if not exist_ok or not self.isdir(path):
                raise

    def remove(self, path) -> None:
        self._fs.unlink(os.fspath(path))

    unlink = remove

    def rmdir(self, path) -> None:
        self._fs.rmdir(os.fspath(path))

    def rename(self, src, dst) -> None:
        self._fs.rename(os.fspath(src), os.fspath(dst))

    replace = rename

    def truncate(self, path, length: int) -> None:
        self._fs.truncate(os.fspath(path), length)

    def chmod(self, path, mode: int) -> None:
        self._fs.chmod(os.fspath(path), mode)

    def symlink(self, target, path) -> None:
        self._fs.symlink(os.fspath(target), os.fspath(path))

    def readlink(self, path) -> str:
        return self._fs.readlink(os.fspath(path))

    def rmtree(self, path) -> None:
        """Removes ``path`` and everything under it."""
        for e in self.scandir(path):
            if e.is_dir(follow_symlinks=False):
                self.rmtree(e.path)
            else:
                self.remove(e.path)
        self.rmdir(path)

    # Administration (no `weft` subprocess).

    def setstripe(self, path, count: int = 0, size: int = 0, offset: int = -1, pool=None):
        """Sets the layout of ``path``: a directory's default for new files, an empty
        file's, or a new empty file made with it (``weft setstripe -c -S -i -p``).
        ``count=-1`` stripes over every OST; 0 inherits."""
        self._fs.setstripe(os.fspath(path), count, size, offset, pool)

    def getstripe(self, path) -> dict:
        """The layout of ``path`` (``weft getstripe``) as a dict."""
        return self._fs.getstripe(os.fspath(path))

    def df(self) -> list[dict]:
        """Usage of every MDT and OST (``weft df``)."""
        return self._fs.df()

    def ost_count(self) -> int:
        return sum(1 for t in self.df() if t["kind"] == "ost")

    def hsm_state(self, path) -> dict:
        """The HSM state of ``path`` (``weft hsm_state``): flags, their names and the
        archive id."""
        flags, archive_id, names = self._fs.hsm_state(os.fspath(path))
        return {"flags": flags, "states": names, "archive_id": archive_id}

    def sync(self) -> None:
        self._fs.sync()


_connections: dict[str, FileSystem] = {}
_connections_lock = threading.Lock()


def connect(spec: str) -> FileSystem:
    """Connects to ``HOST:PORT:/FSNAME`` (one connection per file system and process is
    kept and shared)."""
    with _connections_lock:
        fs = _connections.get(spec)
        if fs is None:
            fs = FileSystem(_native.connect(spec))
            _connections[spec] = fs
        return fs


def split_url(url: str) -> tuple[str, str]:
    """``HOST:PORT:/FSNAME/PATH`` or ``weft://HOST:PORT/FSNAME/PATH`` as
    (``HOST:PORT:/FSNAME``, ``/PATH``)."""
    url = os.fspath(url)
    if url.startswith("weft://"):
        rest = url[len("weft://"):]
        addr, _, path = rest.partition("/")
    else:
        addr, sep, path = url.partition(":/")
        if not sep:
            raise ValueError(f"{url!r} is not HOST:PORT:/FSNAME/PATH or weft://HOST:PORT/FSNAME/PATH")
    fsname, _, inner = path.partition("/")
    if not addr or not fsname:
        raise ValueError(f"{url!r} names no file system")
    return f"{addr}:/{fsname}", "/" + inner


def open_url(url, mode="r", **kwargs):
    """Opens a file named by a full URL (see :func:`split_url`)."""
    spec, path = split_url(url)
    return connect(spec).open(path, mode, **kwargs)

