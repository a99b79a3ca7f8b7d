"""fsspec for weftfs: ``weft://HOST:PORT/FSNAME/PATH``.

Registered as the ``weft`` protocol through the package's ``fsspec.specs`` entry point, so
``fsspec.open("weft://127.0.0.1:9400/weft/data.parquet")``, pandas, pyarrow datasets and
Hugging Face ``datasets`` reach weftfs through the client library in the process. Inside
the file system object paths are ``HOST:PORT/FSNAME/PATH``: a URL without its ``weft://``,
so that ``"weft://" + path`` names the same file again (Hugging Face ``datasets`` and
others rebuild URLs that way). ``FSNAME/PATH`` (no address; a file system name never
holds a ``:``) means the instance's own MGS address.
"""

from __future__ import annotations

import stat as _stat

from fsspec.spec import AbstractFileSystem

from . import connect, split_url


def _address(part: str):
    """(host, port) when ``part`` is ``HOST:PORT``, else None (a file system name)."""
    host, sep, port = part.rpartition(":")
    return (host, int(port)) if sep and host and port.isdigit() else None


class WeftFileSystem(AbstractFileSystem):
    """weftfs as an fsspec file system (``weft://HOST:PORT/FSNAME/PATH``)."""

    protocol = ("weft",)
    root_marker = ""

    def __init__(self, host: str = "127.0.0.1", port: int = 9400, **kwargs):
        super().__init__(**kwargs)
        self.host = host
        self.port = int(port)

    @classmethod
    def _strip_protocol(cls, path):
        if isinstance(path, list):
            return [cls._strip_protocol(p) for p in path]
        path = str(path)
        if path.startswith("weft://"):
            path = path[len("weft://"):]
        return path.strip("/")

    @staticmethod
    def _get_kwargs_from_urls(path):
        if not str(path).startswith("weft://"):
            return {}
        addr = _address(str(path)[len("weft://"):].partition("/")[0])
        return {} if addr is None else {"host": addr[0], "port": addr[1]}

    def unstrip_protocol(self, name: str) -> str:
        name = self._strip_protocol(name)
        if _address(name.partition("/")[0]) is not None:
            return f"weft://{name}"
        return f"weft://{self.host}:{self.port}/{name}"

    def _split(self, path):
        """(FileSystem, inner path) of a stripped path ``[HOST:PORT/]FSNAME/PATH``."""
        path = self._strip_protocol(path)
        if _address(path.partition("/")[0]) is None:
            path = f"{self.host}:{self.port}/{path}"
        spec, inner = split_url("weft://" + path)
        return connect(spec), inner

    def _info(self, name: str, st) -> dict:
        kind = (
            "directory"
            if _stat.S_ISDIR(st.st_mode)
            else "file"
            if _stat.S_ISREG(st.st_mode)
            else "other"
        )
        return {
            "name": name,
            "size": st.st_size,
            "type": kind,
            "mode": st.st_mode,
            "mtime": st.st_mtime,
            "ino": st.st_ino,
            "nlink": st.st_nlink,
            "uid": st.st_uid,
            "gid": st.st_gid,
            "islink": _stat.S_ISLNK(st.st_mode),
        }

    def info(self, path, **kwargs):
        name = self._strip_protocol(path)
        fs, inner = self._split(name)
        return self._info(name, fs.stat(inner))

    def ls(self, path, detail=True, **kwargs):
        name = self._strip_protocol(path)
        fs, inner = self._split(name)
        st = fs.stat(inner)
        if not _stat.S_ISDIR(st.st_mode):
            out = [self._info(name, st)]
        else:
            out = [
                self._info(f"{name}/{e.name}", e.stat(follow_symlinks=False))
                for e in fs.scandir(inner)
            ]
        return out if detail else sorted(o["name"] for o in out)

    def _open(self, path, mode="rb", block_size=None, autocommit=True, cache_options=None, **kwargs):
        if not autocommit:
            raise NotImplementedError("weft:// writes are committed at close")
        fs, inner = self._split(path)
        if "w" in mode or "a" in mode or "x" in mode:
            parent = inner.rsplit("/", 1)[0]
            if parent and self.auto_mkdir:
                fs.makedirs(parent, exist_ok=True)
        buffering = block_size if block_size and block_size > 1 else -1
        return fs.open(inner, mode, buffering=buffering)

    #: Writing a file makes its parent directories (as object stores appear to).
    auto_mkdir = True

    def cat_file(self, path, start=None, end=None, **kwargs):
        fs, inner = self._split(path)
        if start is None and end is None:
            return fs.read_bytes(inner)
        with fs.open(inner, "rb", buffering=0) as f:
            size = f.size
            start = 0 if start is None else (start if start >= 0 else max(0, size + start))
            end = size if end is None else (end if end >= 0 else max(0, size + end))
            return f.pread(max(0, end - start), start)

    def pipe_file(self, path, value, mode="overwrite", **kwargs):
        fs, inner = self._split(path)
        parent = inner.rsplit("/", 1)[0]
        if parent and self.auto_mkdir:
            fs.makedirs(parent, exist_ok=True)
        with fs.open(inner, "xb" if mode == "create" else "wb", buffering=0) as f:
            f.write(value)

    def mkdir(self, path, create_parents=True, **kwargs):
        fs, inner = self._split(path)
        if create_parents:
            fs.makedirs(inner, exist_ok=True)
        else:
            fs.mkdir(inner)

    def makedirs(self, path, exist_ok=False):
        fs, inner = self._split(path)
        fs.makedirs(inner, exist_ok=exist_ok)

    def rmdir(self, path):
        fs, inner = self._split(path)
        fs.rmdir(inner)

    def rm_file(self, path):
        fs, inner = self._split(path)
        fs.remove(inner)

    def _rm(self, path):
        fs, inner = self._split(path)
        if fs.isdir(inner):
            fs.rmdir(inner)
        else:
            fs.remove(inner)

    def rm(self, path, recursive=False, maxdepth=None):
        paths = self.expand_path(path, recursive=recursive, maxdepth=maxdepth)
        # Deepest first, so that directories are empty when their turn comes.
        for p in sorted(paths, key=lambda p: p.count("/"), reverse=True):
            self._rm(p)

    def mv(self, path1, path2, recursive=False, maxdepth=None, **kwargs):
        fs1, src = self._split(path1)
        fs2, dst = self._split(path2)
        if fs1 is not fs2:
            return super().mv(path1, path2, recursive=recursive, maxdepth=maxdepth, **kwargs)
        fs1.rename(src, dst)

    def cp_file(self, path1, path2, **kwargs):
        fs1, src = self._split(path1)
        fs2, dst = self._split(path2)
        if fs1.isdir(src):
            fs2.makedirs(dst, exist_ok=True)
            return
        parent = dst.rsplit("/", 1)[0]
        if parent and self.auto_mkdir:
            fs2.makedirs(parent, exist_ok=True)
        with fs1.open(src, "rb") as r, fs2.open(dst, "wb") as w:
            while chunk := r.read(8 << 20):
                w.write(chunk)

    def created(self, path):
        import datetime

        return datetime.datetime.fromtimestamp(self.info(path)["mtime"], datetime.timezone.utc)

    def modified(self, path):
        return self.created(path)

    def touch(self, path, truncate=True, **kwargs):
        fs, inner = self._split(path)
        parent = inner.rsplit("/", 1)[0]
        if parent and self.auto_mkdir:
            fs.makedirs(parent, exist_ok=True)
        if truncate or not fs.exists(inner):
            with fs.open(inner, "wb"):
                pass
        else:
            raise NotImplementedError("touch of an existing file without truncate")

    def setstripe(self, path, count=0, size=0, offset=-1, pool=None):
        fs, inner = self._split(path)
        fs.setstripe(inner, count, size, offset, pool)

    def getstripe(self, path):
        fs, inner = self._split(path)
        return fs.getstripe(inner)
