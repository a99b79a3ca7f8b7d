#!/usr/bin/env bash
# Python reading weftfs three ways, side by side in one run (issue 26): N small files
# (default 20,000 x 128 KiB) and L large ones (default 4 x 1 GiB), read whole by 4 worker
# processes through (a) the weftfs Python package (client library in the process), (b)
# plain open() on a FUSE mount of the same file system (`weft mount`, a client process of
# its own), (c) the same files on local disk.
# Page caches are dropped before each pass (the servers' backing files too), so every
# pass reads from disk; the three ways take turns for ROUNDS rounds. The FUSE client
# keeps file data in its own memory (`llite.*.max_cached_mb`, 1 GiB by default), which
# the kernel's drop_caches does not reach: it is remounted before each of its passes, as
# (a)'s worker processes start with an empty cache each.
# Needs root, fuse, and a Python with weftfs installed (PYTHON; build the wheel with
# `maturin build -m crates/weft-py/Cargo.toml` and pip install it).
# Env: WEFT (binary; default target/release/weft), PYTHON, DATA, MNT, LOCAL, N, SMALL_KIB,
# L, LARGE_MIB, WORKERS, ROUNDS (default 3).
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
W=${WEFT:-$here/target/release/weft}
PY=${PYTHON:-$here/target/test-tools/pyvenv/bin/python}
D=${DATA:-/srv/pybench/data}; M=${MNT:-/srv/pybench/mnt}; LOC=${LOCAL:-/srv/pybench/local}
export N=${N:-20000} SMALL_KIB=${SMALL_KIB:-128} L=${L:-4} LARGE_MIB=${LARGE_MIB:-1024}
export WORKERS=${WORKERS:-4} ROUNDS=${ROUNDS:-3}
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
export WEFT_BIN="$W" WEFT_PORT="$PORT"
"$PY" - "127.0.0.1:$PORT:/weft" "$M" "$LOC" <<'PY'
import os, statistics, subprocess, sys, time
from multiprocessing import get_context
import weftfs

spec, mnt, loc = sys.argv[1:4]
n, small, nl, large = int(os.environ["N"]), int(os.environ["SMALL_KIB"]) << 10, int(os.environ["L"]), int(os.environ["LARGE_MIB"]) << 20
workers = int(os.environ["WORKERS"])
rounds = int(os.environ["ROUNDS"])
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

def drop_caches(remount):
    if remount:
        subprocess.run(["umount", mnt], check=True)
        subprocess.run([os.environ["WEFT_BIN"], "mount", f"127.0.0.1:{os.environ['WEFT_PORT']}:/weft",
                        mnt, "--daemon"], check=True, stdout=subprocess.DEVNULL)
        while not os.path.ismount(mnt):
            time.sleep(0.1)
        os.stat(mnt + "/small")
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")

def run(fn, paths, ctx):
    """Seconds for one pass over `paths`, sharded by worker as a DataLoader's iterable
    dataset would."""
    drop_caches(remount=paths[0].startswith(mnt))
    t = time.perf_counter()
    with get_context(ctx).Pool(workers) as p:
        total = sum(p.map(fn, [paths[w::workers] for w in range(workers)]))
    return total, time.perf_counter() - t

# The three ways take turns, round after round (this shared VM's disk and CPU drift by
# tens of percent within minutes; one way's passes in a row would each see another
# moment): the best and the median of each over the rounds.
for kind, count in (("small", n), ("large", nl)):
    rel = [f"{kind}/{i:06d}" for i in range(count)]
    ways = (
        ("(a) weftfs", read_weft, ["/" + r for r in rel]),
        ("(b) FUSE open()", read_posix, [f"{mnt}/{r}" for r in rel]),
        ("(c) local disk", read_posix, [f"{loc}/{r}" for r in rel]),
    )
    times = {name: [] for name, _, _ in ways}
    for _ in range(rounds):
        for name, fn, paths in ways:
            total, dt = run(fn, paths, "fork")
            times[name].append(dt)
    for name, _, _ in ways:
        best, med = min(times[name]), statistics.median(times[name])
        print(f"{kind:5} {name:16} {count:6} files {total / 2**20:9.0f} MiB  best {best:7.2f} s "
              f"{count / best:9.0f} files/s {total / 2**20 / best:8.0f} MiB/s  median {med:7.2f} s "
              f"({' '.join(f'{t:.2f}' for t in times[name])})", flush=True)
    a, b = times["(a) weftfs"], times["(b) FUSE open()"]
    print(f"{kind:5} weftfs / FUSE: {min(b) / min(a):.2f}x best, "
          f"{statistics.median(b) / statistics.median(a):.2f}x median", flush=True)
PY
