"""weftfs.torch: sharding, checkpoints (with and without PyTorch), and, when PyTorch is
installed, a real DataLoader with four workers over 10,000 small files and a model's
state dict saved and loaded."""

import os
import sys

import pytest

import weftfs
import weftfs.torch as wt

try:
    import torch
except ImportError:
    torch = None

NEEDS_TORCH = pytest.mark.skipif(
    torch is None,
    reason="PyTorch IS NOT INSTALLED: the real-DataLoader and state-dict tests did NOT run",
)


def test_shards_are_disjoint_and_cover_everything():
    items = list(range(1003))
    for shuffle in (False, True):
        parts = [
            wt.shard(items, rank=r, world=3, worker=w, workers=4, shuffle=shuffle, seed=7)
            for r in range(3)
            for w in range(4)
        ]
        flat = [x for p in parts for x in p]
        assert sorted(flat) == items
        assert max(map(len, parts)) - min(map(len, parts)) <= 1
    a = wt.shard(items, rank=0, world=1, worker=0, workers=1, shuffle=True, seed=1, epoch=0)
    b = wt.shard(items, rank=0, world=1, worker=0, workers=1, shuffle=True, seed=1, epoch=1)
    assert a != b and sorted(a) == sorted(b)
    with pytest.raises(ValueError):
        wt.shard(items, rank=3, world=3, worker=0, workers=1)


def test_classes_say_when_torch_is_missing():
    if torch is not None:
        assert wt.WeftMapDataset is not None
    else:
        with pytest.raises(ImportError, match="needs PyTorch"):
            wt.WeftMapDataset


def test_checkpoint_layout_by_size(cluster, fs, wdir):
    small = {"w": list(range(1000))}
    layout = wt.save(small, f"{cluster}{wdir}/small.ckpt")
    assert layout["count"] == 1
    assert len(fs.getstripe(wdir + "/small.ckpt")["components"][0]["osts"]) == 1
    back = wt.load(f"{cluster}{wdir}/small.ckpt", **({"weights_only": False} if torch else {}))
    assert back == small
    big = {"blob": os.urandom(wt.STRIPE_ALL_FROM + 12345)}
    layout = wt.save(big, f"{cluster}{wdir}/big.ckpt")
    assert layout["count"] == -1
    comps = fs.getstripe(wdir + "/big.ckpt")["components"]
    assert len(comps[0]["osts"]) == fs.ost_count() == 4
    assert comps[0]["stripe_size"] == wt.CHECKPOINT_STRIPE_SIZE
    back = wt.load(f"{cluster}{wdir}/big.ckpt", **({"weights_only": False} if torch else {}))
    assert back == big
    # No temporary file is left behind.
    assert sorted(fs.listdir(wdir)) == ["big.ckpt", "small.ckpt"]


def test_iterable_dataset_without_torch_machinery(cluster, fs, wdir):
    for i in range(50):
        fs.write_bytes(f"{wdir}/{i:03d}", str(i).encode())
    spec, paths = wt.list_files(f"{cluster}{wdir}")
    assert spec == cluster and len(paths) == 50
    got = list(wt._prefetched(weftfs.connect(spec), paths, int, 8))
    assert got == list(range(50))


@NEEDS_TORCH
def test_real_dataloader_over_10000_files(cluster, fs):
    from torch.utils.data import DataLoader

    d = "/torch-10k"
    n = int(os.environ.get("WEFTFS_TORCH_FILES", 10_000))
    fs.makedirs(d, exist_ok=True)
    for i in range(n):
        fs.write_bytes(f"{d}/{i:05d}", i.to_bytes(4, "little") * 64)
    decode = lambda b: int.from_bytes(b[:4], "little")  # noqa: E731
    ds = wt.WeftIterableDataset(f"{cluster}{d}", decode, shuffle=True, seed=3)
    seen = [int(x) for batch in DataLoader(ds, batch_size=64, num_workers=4) for x in batch]
    assert sorted(seen) == list(range(n))
    mds = wt.WeftMapDataset(f"{cluster}{d}", decode)
    assert len(mds) == n
    seen = [int(x) for batch in DataLoader(mds, batch_size=64, num_workers=4, shuffle=True) for x in batch]
    assert sorted(seen) == list(range(n))
    print(f"torch {torch.__version__}: DataLoader(num_workers=4) read {n} files twice", file=sys.stderr)


@NEEDS_TORCH
def test_state_dict_save_load(cluster, wdir):
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
    wt.save(model.state_dict(), f"{cluster}{wdir}/model.pt")
    other = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
    other.load_state_dict(wt.load(f"{cluster}{wdir}/model.pt"))
    x = torch.randn(8, 64)
    assert torch.equal(model(x), other(x))
