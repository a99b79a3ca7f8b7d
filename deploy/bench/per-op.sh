#!/usr/bin/env bash
# CPU and context switches per operation of weftfs's processes, with the top symbols of
# each workload (issue 24's profiles; docs/perf.md, session 24). Runs the suite's loops
# (one-process creates, unlinks and listings; 4-process small-file writes, reads and
# unlinks of 128 KiB; fio's random 4 KiB reads) against a mounted weftfs, one at a time,
# with `perf stat` and `perf record` attached to every `weft mount|mds|oss|up` process.
# Run it on an idle machine: the figures include nothing else, but the rates are lower
# than the suite's (perf record runs beside them).
# Usage: deploy/bench/per-op.sh MNT   (e.g. after ../shared/bench/peers/weft-tcp-setup.sh)
# Needs root (cache drops), perf, python3 and fio.
set -euo pipefail
M=${1:?usage: per-op.sh MOUNTPOINT}
W=$M/per-op.$$
out=$(mktemp -d)
pids=$(pgrep -f "weft (mount|mds|oss|up)( |$)" | paste -sd,)
[ -n "$pids" ] || { echo "no weft processes running" >&2; exit 1; }
mkdir -p "$W"

drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }

# measure NAME OPS CMD...: runs CMD with perf attached; prints per-operation figures.
measure() {
    local name=$1 ops=$2; shift 2
    perf stat -x, -e context-switches,cpu-clock -p "$pids" -o "$out/$name.stat" &
    local ps=$!
    perf record -q -e cpu-clock -F 999 -p "$pids" -o "$out/$name.data" 2>/dev/null &
    local pr=$!
    sleep 0.3
    "$@"
    kill -INT $ps $pr
    wait $ps $pr || true
    awk -F, -v name="$name" -v ops="$ops" '
        $3 == "context-switches" { cs = $1 } $3 == "cpu-clock" { ms = $1 }
        END { printf "%s: %.1f context switches and %.1f us of CPU per operation\n",
              name, cs / ops, ms * 1000 / ops }' "$out/$name.stat"
    # `head` closes the pipe early: perf's SIGPIPE is not a failure.
    { perf report -i "$out/$name.data" --no-children --sort comm,sym -q 2>/dev/null |
        head -6 | sed 's/^/    /'; } || true
}

md() { # md PHASE DIR N
    python3 - "$@" <<'PY'
import os, sys
phase, d, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
if phase == "create":
    os.makedirs(d, exist_ok=True)
    for i in range(n):
        os.close(os.open(f"{d}/f{i:07d}", os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o644))
elif phase == "unlink":
    for i in range(n):
        os.unlink(f"{d}/f{i:07d}")
elif phase == "readdir":
    for _ in range(10):
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        with os.scandir(d) as it:
            for _ in it:
                pass
PY
}

smallfiles() { # smallfiles PHASE DIR N: 4 processes, files of 128 KiB in 25 directories
    python3 - "$@" <<'PY'
import os, sys
from multiprocessing import Pool
phase, base, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
paths = [f"{base}/d{i % 25:03d}/f{i:06d}" for i in range(n)]
def write(ps):
    buf = os.urandom(128 << 10)
    for p in ps:
        fd = os.open(p, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
        os.write(fd, buf)
        os.close(fd)
def read(ps):
    for p in ps:
        fd = os.open(p, os.O_RDONLY)
        while os.read(fd, 1 << 20):
            pass
        os.close(fd)
def unlink(ps):
    for p in ps:
        os.unlink(p)
if phase == "write":
    for i in range(25):
        os.makedirs(f"{base}/d{i:03d}", exist_ok=True)
with Pool(4) as pool:
    pool.map({"write": write, "read": read, "unlink": unlink}[phase], [paths[i::4] for i in range(4)])
PY
}

measure create-1p 5000 md create "$W/c" 5000
measure unlink-1p 5000 md unlink "$W/c" 5000
md create "$W/r" 20000
measure readdir-1p-entries 200000 md readdir "$W/r" 20000
md unlink "$W/r" 20000
measure smallfile-write 8000 smallfiles write "$W/sf" 8000
drop
measure smallfile-read 8000 smallfiles read "$W/sf" 8000
measure smallfile-unlink 8000 smallfiles unlink "$W/sf" 8000
dd if=/dev/urandom of="$W/rand" bs=4M count=512 status=none
drop
measure randread-4k 100000 fio --name=rr --filename="$W/rand" --rw=randread --bs=4k \
    --numjobs=4 --size=512m --offset_increment=512m --number_ios=25000 --randrepeat=1 \
    --ioengine=psync --group_reporting --output-format=terse --output="$out/rr.fio"
rm -rf "$W" "$out"
