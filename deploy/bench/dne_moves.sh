#!/usr/bin/env bash
# Figures of directory moves and migrations across MDTs (session note of 2026-11-24):
# MGS, OSS (2 OSTs), MDS0 and MDS1 as separate processes on 127.0.0.1, a FUSE mount, N
# files made in /m (MDT0), `weft migrate -m 1` of /m timed, then 500 directory renames
# within MDT0 and across MDTs and 500 file renames across MDTs. Needs root, fuse, python3
# and bc; `cargo build --release` first. Env: WEFT (binary), DATA, MNT, N (files).
set -euo pipefail
W=${WEFT:-$(dirname "$0")/../../target/release/weft}
D=${DATA:-/srv/dnebench/data}; M=${MNT:-/srv/dnebench/mnt}
N=${N:-100000}
pkill -f "$D" || true; umount -l $M 2>/dev/null || true; rm -rf $D; mkdir -p $D $M
$W mgs --data $D/mgs --listen 127.0.0.1:9500 --fsname weft > $D/mgs.log 2>&1 &
sleep 0.5
$W oss --mgs 127.0.0.1:9500 --listen 127.0.0.1:9503 --ost 0=$D/ost0 --ost 1=$D/ost1 > $D/oss.log 2>&1 &
$W mds --mgs 127.0.0.1:9500 --listen 127.0.0.1:9501 --mdt 0=$D/mdt0 > $D/mds0.log 2>&1 &
$W mds --mgs 127.0.0.1:9500 --listen 127.0.0.1:9502 --mdt 1=$D/mdt1 > $D/mds1.log 2>&1 &
sleep 3
$W mount 127.0.0.1:9500:/weft $M --daemon
sleep 1
mkdir $M/m
python3 - "$M/m" "$N" <<'PY'
import os, sys, time
from multiprocessing import Pool
d, n = sys.argv[1], int(sys.argv[2])
def make(k):
    for i in range(k, n, 4):
        os.close(os.open(f"{d}/f{i}", os.O_CREAT | os.O_WRONLY, 0o644))
t = time.time()
with Pool(4) as p: p.map(make, range(4))
print(f"created {n} files in {time.time()-t:.1f} s")
PY
sync
echo "mdt0 inodes before: $($W df -i 127.0.0.1:9500:/weft | grep MDT0000 | awk '{print $3}')"
t0=$(date +%s.%N)
$W migrate -m 1 $M/m
t1=$(date +%s.%N)
echo "migrate -m 1 of $N entries: $(echo "$t1 - $t0" | bc) s"
$W getdirstripe -i $M/m
ls $M/m | wc -l
$W df -i 127.0.0.1:9500:/weft
# Directory moves across MDTs vs within one MDT (both under the rename lock).
$W mkdir -i 0 $M/a0; $W mkdir -i 0 $M/b0; $W mkdir -i 1 $M/b1
for i in $(seq 0 499); do mkdir $M/a0/d$i; done
python3 - "$M" <<'PY'
import os, sys, time
m = sys.argv[1]
for dst in ("b0", "b1"):
    t = time.time()
    for i in range(500):
        os.rename(f"{m}/a0/d{i}", f"{m}/{dst}/d{i}")
    dt = time.time() - t
    print(f"500 directory renames a0 (MDT0) -> {dst}: {500/dt:.0f}/s ({dt*1e3/500:.2f} ms each)")
    for i in range(500):
        os.rename(f"{m}/{dst}/d{i}", f"{m}/a0/d{i}")
# A file rename across MDTs for comparison.
open(f"{m}/a0/f", "w").close()
t = time.time()
for i in range(500):
    os.rename(f"{m}/a0/f" if i % 2 == 0 else f"{m}/b1/f", f"{m}/b1/f" if i % 2 == 0 else f"{m}/a0/f")
dt = time.time() - t
print(f"500 file renames between MDT0 and MDT1: {500/dt:.0f}/s")
PY
$W fsck --dry-run 127.0.0.1:9500:/weft | tail -3
umount $M; pkill -f "$D" || true
