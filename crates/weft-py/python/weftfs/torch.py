"""PyTorch over weftfs: datasets that read straight from the file system, and
checkpoints written with a layout chosen for their size.

``WeftMapDataset`` and ``WeftIterableDataset`` need torch (they are made on first use,
so ``import weftfs.torch`` works without it); :func:`shard`, :func:`list_files`,
:func:`checkpoint_layout`, :func:`save` and :func:`load` work without torch too (without
it, ``save``/``load`` fall back to ``pickle``).

Paths are ``HOST:PORT:/FSNAME/PATH`` or ``weft://HOST:PORT/FSNAME/PATH``. DataLoader
workers, forked or spawned, connect on their own (see the package's docstring).
"""

from __future__ import annotations

import io
import os
import pickle
import random
from collections import deque
from concurrent.futures import ThreadPoolExecutor

from . import connect, split_url

__all__ = [
    "WeftMapDataset",
    "WeftIterableDataset",
    "list_files",
    "shard",
    "checkpoint_layout",
    "save",
    "load",
]

#: Checkpoints at least this large are striped over every OST.
STRIPE_ALL_FROM = 64 << 20
#: Stripe size of striped checkpoints.
CHECKPOINT_STRIPE_SIZE = 4 << 20


def list_files(prefix: str) -> tuple[str, list[str]]:
    """Every regular file under directory ``prefix`` (recursively), sorted, as
    (``HOST:PORT:/FSNAME``, [inner paths])."""
    spec, top = split_url(prefix)
    fs = connect(spec)
    out = []
    stack = [top]
    while stack:
        d = stack.pop()
        for e in fs.scandir(d):
            if e.is_dir(follow_symlinks=False):
                stack.append(e.path)
            elif e.is_file(follow_symlinks=False):
                out.append(e.path)
    out.sort()
    return spec, out


def _rank_and_world() -> tuple[int, int]:
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return dist.get_rank(), dist.get_world_size()
    except ImportError:
        pass
    return int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))


def _worker() -> tuple[int, int]:
    try:
        from torch.utils.data import get_worker_info
    except ImportError:
        return 0, 1
    info = get_worker_info()
    return (info.id, info.num_workers) if info is not None else (0, 1)


def shard(items: list, *, rank: int, world: int, worker: int, workers: int,
          shuffle: bool = False, seed: int = 0, epoch: int = 0) -> list:
    """The part of ``items`` one worker of one rank reads: every rank and worker gets a
    disjoint slice, together all of them, each once. With ``shuffle`` the order is a
    permutation drawn from ``seed + epoch`` (the same in every process)."""
    if world < 1 or workers < 1 or not (0 <= rank < world) or not (0 <= worker < workers):
        raise ValueError("bad rank/world or worker/workers")
    items = list(items)
    if shuffle:
        random.Random(seed + epoch).shuffle(items)
    n = world * workers
    return items[rank * workers + worker :: n]


def _prefetched(fs, paths, transform, depth: int):
    """Reads ``paths`` in order, ``depth`` of them at once ahead of the consumer."""
    if depth <= 1:
        for p in paths:
            data = fs.read_bytes(p)
            yield transform(data) if transform else data
        return
    with ThreadPoolExecutor(max_workers=depth, thread_name_prefix="weftfs-prefetch") as pool:
        it = iter(paths)
        pending = deque()
        for p in it:
            pending.append(pool.submit(fs.read_bytes, p))
            if len(pending) >= depth:
                break
        while pending:
            data = pending.popleft().result()
            nxt = next(it, None)
            if nxt is not None:
                pending.append(pool.submit(fs.read_bytes, nxt))
            yield transform(data) if transform else data


def _make_classes():
    from torch.utils.data import Dataset, IterableDataset

    class WeftMapDataset(Dataset):
        """Every file under ``prefix`` (sorted): item ``i`` is ``transform(bytes)`` of
        the i-th file (its bytes without a transform)."""

        def __init__(self, prefix: str, transform=None):
            self.spec, self.paths = list_files(prefix)
            self.transform = transform

        def __len__(self):
            return len(self.paths)

        def __getitem__(self, i):
            data = connect(self.spec).read_bytes(self.paths[i])
            return self.transform(data) if self.transform else data

    class WeftIterableDataset(IterableDataset):
        """The files under ``prefix``, sharded by distributed rank and DataLoader worker
        (each file read by exactly one of them per epoch), shuffled with ``seed`` (and
        :meth:`set_epoch`), ``prefetch`` files read ahead by threads of the library."""

        def __init__(self, prefix: str, transform=None, *, shuffle: bool = False,
                     seed: int = 0, prefetch: int = 8):
            self.spec, self.paths = list_files(prefix)
            self.transform = transform
            self.shuffle = shuffle
            self.seed = seed
            self.prefetch = prefetch
            self.epoch = 0

        def set_epoch(self, epoch: int) -> None:
            self.epoch = epoch

        def __iter__(self):
            rank, world = _rank_and_world()
            worker, workers = _worker()
            mine = shard(self.paths, rank=rank, world=world, worker=worker, workers=workers,
                         shuffle=self.shuffle, seed=self.seed, epoch=self.epoch)
            return _prefetched(connect(self.spec), mine, self.transform, self.prefetch)

    return {"WeftMapDataset": WeftMapDataset, "WeftIterableDataset": WeftIterableDataset}


_classes = None


def __getattr__(name):
    global _classes
    if name in ("WeftMapDataset", "WeftIterableDataset"):
        if _classes is None:
            try:
                _classes = _make_classes()
            except ImportError as e:
                raise ImportError(f"weftfs.torch.{name} needs PyTorch: {e}") from e
        return _classes[name]
    raise AttributeError(f"module 'weftfs.torch' has no attribute {name!r}")


def checkpoint_layout(size: int, ost_count: int) -> dict:
    """The layout a checkpoint of ``size`` bytes gets: one stripe below
    ``STRIPE_ALL_FROM``, else striped over every OST in ``CHECKPOINT_STRIPE_SIZE``
    chunks (so that all OSTs write it at once)."""
    if size < STRIPE_ALL_FROM or ost_count <= 1:
        return {"count": 1, "size": 0}
    return {"count": -1, "size": CHECKPOINT_STRIPE_SIZE}


def _dumps(obj) -> bytes:
    buf = io.BytesIO()
    try:
        import torch
    except ImportError:
        pickle.dump(obj, buf, protocol=pickle.HIGHEST_PROTOCOL)
    else:
        torch.save(obj, buf)
    return buf.getbuffer()


def save(obj, path: str) -> dict:
    """Writes ``obj`` (``torch.save``'s format; pickle without torch) to ``path``
    atomically: into a temporary name created with the layout for its size (see
    :func:`checkpoint_layout`), in one write that the client library sends to the
    stripes' OSTs in parallel, made durable, then renamed over ``path``. Returns the
    layout used."""
    spec, inner = split_url(path)
    fs = connect(spec)
    data = _dumps(obj)
    layout = checkpoint_layout(len(data), fs.ost_count())
    parent, _, name = inner.rpartition("/")
    tmp = f"{parent}/.{name}.tmp-{os.getpid()}"
    try:
        fs.remove(tmp)
    except FileNotFoundError:
        pass
    fs.setstripe(tmp, count=layout["count"], size=layout["size"])
    try:
        with fs.open(tmp, "r+b", buffering=0) as f:
            view = memoryview(data)
            while view:
                view = view[f.write(view):]
            f.fsync()
        fs.rename(tmp, inner)
    except BaseException:
        try:
            fs.remove(tmp)
        except OSError:
            pass
        raise
    return layout


def load(path: str, **torch_load_kwargs):
    """Reads a checkpoint written by :func:`save` (``torch.load`` arguments such as
    ``map_location`` and ``weights_only`` pass through)."""
    spec, inner = split_url(path)
    data = connect(spec).read_bytes(inner)
    try:
        import torch
    except ImportError:
        return pickle.loads(data)
    return torch.load(io.BytesIO(data), **torch_load_kwargs)
