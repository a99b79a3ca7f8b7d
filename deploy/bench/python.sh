#!/usr/bin/env bash
# Python reading weftfs three ways, side by side in one run (issue 26): N small files
# (default 20,000 x 128 KiB) and L large ones (default 4 x 1 GiB), read whole by 4 worker
# processes through (a) the weftfs Python package (client library in the process), (b)
# plain open() on a FUSE mount of the same file system (`weft mount`, a client process of
# its own), (c) the same files on local disk.
# Page caches are dropped before each pass (the servers' backing files too), so every
# pass reads from disk; each pass is run twice and the better time kept.
# Needs root, fuse, and a Python with weftfs installed (PYTHON; build the wheel with
# `maturin build -m crates/weft-py/Cargo.toml` and pip install it).
# Env: WEFT (binary; default target/release/weft), PYTHON, DATA, MNT, LOCAL, N, SMALL_KIB,
# L, LARGE_MIB, WORKERS.
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
W=${WEFT:-$here/target/release/weft}
PY=${PYTHON:-$here/target/test-tools/pyvenv/bin/python}
D=${DATA:-/srv/pybench/data}; M=${MNT:-/srv/pybench/mnt}; LOC=${LOCAL:-/srv/pybench/local}
export N=${N:-20000} SMALL_KIB=${SMALL_KIB:-128} L=${L:-4} LARGE_MIB=${LARGE_MIB:-1024}
export WORKERS=${WORKERS:-4}
PORT=${PORT:-9610}
umount -l "$M" 2>/dev/null || true
rm -rf "$D" "$LOC"; mkdir -p "$D" "$M" "$LOC"
# The servers in one process, the FUSE client in another (`weft mount`), as on a client
# node: `weft up`'s own mount calls its targets in-process, without the network that (a)
# and every real client have.
"$W" up --data "$D" --no-mount --listen 127.0.0.1:$PORT --osts 4 > "$D.log" 2>&1 &
up=$!
trap 'umount -l "$M" 2>/dev/null; kill $up 2>/dev/null; wait $up 2>/dev/null || true' EXIT
sleep 3
"$W" mount 127.0.0.1:$PORT:/weft "$M" --daemon >> "$D.log" 2>&1
for _ in $(seq 100); do mountpoint -q "$M" && break; sleep 0.2; done
mountpoint -q "$M" || { echo "weft up did not mount; see $D.log" >&2; exit 1; }
echo "weft: $W ($("$W" --version 2>/dev/null || echo '?')); $(nproc) CPUs; workers $WORKERS"
"$PY" - "127.0.0.1:$PORT:/weft" "$M" "$LOC" <<'PY'
import os, sys, time
from multiprocessing import get_context
import weftfs

spec, mnt, loc = sys.argv[1:4]
n, small, nl, large = int(os.environ["N"]), int(os.environ["SMALL_KIB"]) << 10, int(os.environ["L"]), int(os.environ["LARGE_MIB"]) << 20
workers = int(os.environ["WORKERS"])
fs = weftfs.connect(spec)
CHUNK = 8 << 20

def make(args):
    kind, lo, hi = args
    fs = weftfs.connect(spec)
    block = os.urandom(1 << 20)
    for i in range(lo, hi):
        size = small if kind == "small" else large
        rel = f"{kind}/{i:06d}"
        with fs.open("/" + rel, "wb") as a, open(f"{loc}/{rel}", "wb") as c:
            left = size
            while left:
                piece = block[: min(left, len(block))]
                a.write(piece); c.write(piece); left -= len(piece)
    return hi - lo

for kind in ("small", "large"):
    fs.makedirs("/" + kind, exist_ok=True); os.makedirs(f"{loc}/{kind}", exist_ok=True)
t = time.time()
with get_context("fork").Pool(workers) as p:
    jobs = [("small", i, min(n, i + 500)) for i in range(0, n, 500)] + [("large", i, i + 1) for i in range(nl)]
    p.map(make, jobs)
print(f"made {n} x {small >> 10} KiB and {nl} x {large >> 20} MiB files on weftfs and local disk in {time.time() - t:.0f} s", flush=True)

def read_weft(paths):
    fs = weftfs.connect(spec)
    buf = bytearray(CHUNK); total = 0
    for p in paths:
        with fs.open(p, "rb", buffering=0) as f:
            while (k := f.readinto(buf)):
                total += k
    return total

def read_posix(paths):
    buf = bytearray(CHUNK); total = 0
    for p in paths:
        with open(p, "rb", buffering=0) as f:
            while (k := f.readinto(buf)):
                total += k
    return total

def drop_caches():
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")

def run(fn, paths, ctx):
    # Shards by worker, as a DataLoader's iterable dataset would.
    best = None
    for _ in range(2):
        drop_caches()
        t = time.perf_counter()
        with get_context(ctx).Pool(workers) as p:
            total = sum(p.map(fn, [paths[w::workers] for w in range(workers)]))
        dt = time.perf_counter() - t
        best = dt if best is None else min(best, dt)
    return total, best

for kind, count in (("small", n), ("large", nl)):
    rel = [f"{kind}/{i:06d}" for i in range(count)]
    rows = []
    for name, fn, paths in (
        ("(a) weftfs", read_weft, ["/" + r for r in rel]),
        ("(b) FUSE open()", read_posix, [f"{mnt}/{r}" for r in rel]),
        ("(c) local disk", read_posix, [f"{loc}/{r}" for r in rel]),
    ):
        total, dt = run(fn, paths, "fork")
        rows.append((name, total, dt))
        print(f"{kind:5} {name:16} {count:6} files {total / 2**20:9.0f} MiB {dt:7.2f} s "
              f"{count / dt:9.0f} files/s {total / 2**20 / dt:8.0f} MiB/s", flush=True)
    print(f"{kind:5} weftfs / FUSE: {rows[1][2] / rows[0][2]:.2f}x", flush=True)
PY
