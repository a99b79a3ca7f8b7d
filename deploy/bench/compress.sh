#!/usr/bin/env bash
# LZ4 compression of OST data (issue 23 item 7): a text-like dataset (JSON log lines,
# SIZE_MB MiB) written through a FUSE mount to a plain directory and, after
# `set_param -P obdfilter.*.compress=lz4`, to a compressed one; prints the bytes each
# copy takes on the OSTs (du of the object files), `weft df`'s compression lines, and
# sequential read throughput of each copy with cold caches (the OST object files evicted
# from the page cache with posix_fadvise(DONTNEED), the client remounted), RUNS times.
# MGS, OSS (2 OSTs) and MDS as separate processes on 127.0.0.1. Needs root, fuse and
# python3. Env: WEFT (binary; default target/release/weft), DATA, MNT, SIZE_MB, RUNS.
set -euo pipefail
W=${WEFT:-$(dirname "$0")/../../target/release/weft}
D=${DATA:-/srv/lz4bench/data}; M=${MNT:-/srv/lz4bench/mnt}
SIZE_MB=${SIZE_MB:-384}; RUNS=${RUNS:-3}
MGS=127.0.0.1:9600; FS=$MGS:/weft
PIDS=()
cleanup() {
    umount -l "$M" 2>/dev/null || true
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
}
trap cleanup EXIT
umount -l "$M" 2>/dev/null || true
rm -rf "$D"; mkdir -p "$D" "$M"
$W mgs --data "$D/mgs" --listen $MGS --fsname weft > "$D/mgs.log" 2>&1 & PIDS+=($!)
sleep 0.5
$W oss --mgs $MGS --listen 127.0.0.1:9603 --ost 0="$D/ost0" --ost 1="$D/ost1" > "$D/oss.log" 2>&1 & PIDS+=($!)
$W mds --mgs $MGS --listen 127.0.0.1:9601 --mdt 0="$D/mdt0" > "$D/mds.log" 2>&1 & PIDS+=($!)
sleep 3
mount_fs() { $W mount $FS "$M" --daemon; sleep 1; }
mount_fs

echo "generating $SIZE_MB MiB of JSON log lines"
python3 - "$D/dataset" "$SIZE_MB" <<'PY'
import random, sys
path, mb = sys.argv[1], int(sys.argv[2])
rnd = random.Random(1)
levels = ["info", "info", "info", "warn", "debug", "error"]
paths = ["/api/items", "/api/users", "/api/orders", "/healthz", "/static/app.js"]
agents = ["curl/8.5.0", "Mozilla/5.0 (X11; Linux x86_64)", "python-requests/2.31", "Go-http-client/1.1"]
ts = 1_763_000_000_000
with open(path, "w") as f:
    written = 0
    while written < mb << 20:
        lines = []
        for _ in range(1000):
            ts += rnd.randrange(1, 400)
            lines.append(
                '{"ts":%d,"level":"%s","host":"web-%02d","req":"%08x","method":"GET","path":"%s/%d",'
                '"status":%d,"bytes":%d,"ms":%d,"agent":"%s"}\n'
                % (ts, rnd.choice(levels), rnd.randrange(16), rnd.getrandbits(32), rnd.choice(paths),
                   rnd.randrange(100000), rnd.choice([200, 200, 200, 200, 304, 404, 500]),
                   rnd.randrange(100, 90000), rnd.randrange(1, 900), rnd.choice(agents)))
        s = "".join(lines)
        f.write(s)
        written += len(s)
PY
SIZE=$(stat -c %s "$D/dataset")

stored() { du -s --block-size=1 "$D"/ost*/O | awk '{s += $1} END {print s}'; }
evict() {
    python3 - "$D" <<'PY'
import os, sys
for root, _, files in os.walk(sys.argv[1]):
    if "/O/" not in root + "/":
        continue
    for name in files:
        fd = os.open(os.path.join(root, name), os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
PY
}
write_copy() { # DIR
    mkdir -p "$M/$1"; $W setstripe -c 2 -S 1M "$M/$1"
    local before; before=$(stored)
    local t0 t1; t0=$(date +%s.%N)
    dd if="$D/dataset" of="$M/$1/data" bs=4M conv=fsync status=none
    t1=$(date +%s.%N)
    local after; after=$(stored)
    python3 -c "import sys; b,a,s,t=map(float,sys.argv[1:]); print(f'$1: {s/2**20:.0f} MiB written in {t:.1f} s ({s/2**20/t:.0f} MiB/s), stored {(a-b)/2**20:.1f} MiB on the OSTs (ratio {s/(a-b):.2f})')" "$before" "$after" "$SIZE" "$(echo "$t1 - $t0" | bc)"
}
read_copy() { # DIR
    umount "$M"; evict; mount_fs
    local t0 t1; t0=$(date +%s.%N)
    dd if="$M/$1/data" of=/dev/null bs=4M status=none
    t1=$(date +%s.%N)
    python3 -c "import sys; s,t=map(float,sys.argv[1:]); print(f'  cold sequential read of $1: {s/2**20/t:.0f} MiB/s ({t:.2f} s)')" "$SIZE" "$(echo "$t1 - $t0" | bc)"
}

$W set_param --mgs $MGS -P obdfilter.*.compress=none > /dev/null
write_copy plain
$W set_param --mgs $MGS -P obdfilter.*.compress=lz4 > /dev/null
until [ "$($W get_param --mgs $MGS 'obdfilter.*.compress' | grep -c -- '-OST.*=lz4')" = 2 ]; do sleep 0.2; done
write_copy lz4
cmp "$D/dataset" "$M/lz4/data" && echo "lz4 copy reads back byte-exact"
$W df $FS | sed -n '/^compressed/,$p'
$W get_param --mgs $MGS 'obdfilter.*.compress_ratio'
for _ in $(seq "$RUNS"); do read_copy plain; read_copy lz4; done
