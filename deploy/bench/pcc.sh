#!/usr/bin/env bash
# Figures of the persistent client cache (issue 27, item 4): epoch 2 of a dataset of N
# files of 128 KiB read with and without a read-only PCC, and a checkpoint of CKPT_MB
# MiB written with and without a read-write PCC (time until close returns, and until the
# copy is in the file system). MGS, OSS (2 OSTs) and MDS as separate processes on
# 127.0.0.1, one FUSE mount; the client is remounted (and page caches dropped) between
# epochs so that epoch 2 reads neither the kernel's nor the client's cached pages: the
# PCC's index is its directory, so the remount's `weft pcc add` finds the copies.
# Needs root, fuse and python3. Env: WEFT (binary), DATA, MNT, PCC (local directory),
# N (files, default 20000), CKPT_MB (default 4096), READERS (default 4).
set -euo pipefail
W=${WEFT:-$(dirname "$0")/../../target/release/weft}
D=${DATA:-/srv/pccbench/data}; M=${MNT:-/srv/pccbench/mnt}; P=${PCC:-/srv/pccbench/pcc}
N=${N:-20000}; CKPT_MB=${CKPT_MB:-4096}; READERS=${READERS:-4}
umount -l "$M" 2>/dev/null || true
[ -f "$D/pids" ] && kill $(cat "$D/pids") 2>/dev/null || true
rm -rf "$D" "$P"; mkdir -p "$D" "$M" "$P"
$W mgs --data $D/mgs --listen 127.0.0.1:9600 --fsname weft > $D/mgs.log 2>&1 & echo $! >> $D/pids
sleep 0.5
$W oss --mgs 127.0.0.1:9600 --listen 127.0.0.1:9603 --ost 0=$D/ost0 --ost 1=$D/ost1 > $D/oss.log 2>&1 & echo $! >> $D/pids
$W mds --mgs 127.0.0.1:9600 --listen 127.0.0.1:9601 --mdt 0=$D/mdt0 > $D/mds0.log 2>&1 & echo $! >> $D/pids
sleep 3
mnt() { $W mount 127.0.0.1:9600:/weft $M --daemon; sleep 1; }
umnt() { $W umount $M 2>/dev/null || umount -l $M; sleep 1; }
cold() { sync; echo 3 > /proc/sys/vm/drop_caches; }
epoch() { # prints the seconds to read every file of $M/data once
python3 - "$M/data" "$N" "$READERS" <<'PY'
import os, sys, time
from multiprocessing import Pool
d, n, r = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def read(k):
    b = 0
    for i in range(k, n, r):
        with open(f"{d}/f{i}", "rb", buffering=0) as f:
            while True:
                x = f.read(1 << 20)
                if not x: break
                b += len(x)
    return b
t = time.time()
with Pool(r) as p: total = sum(p.map(read, range(r)))
dt = time.time() - t
print(f"{dt:.2f} s, {total/dt/2**20:.0f} MiB/s, {n/dt:.0f} files/s")
PY
}
figure() { $W pcc state "$1" | awk -v k="$2" '$1==k {print $2}'; }

mnt
mkdir $M/data $M/ckpt
python3 - "$M/data" "$N" <<'PY'
import os, sys
from multiprocessing import Pool
d, n = sys.argv[1], int(sys.argv[2])
def make(k):
    buf = os.urandom(128 << 10)
    for i in range(k, n, 4):
        with open(f"{d}/f{i}", "wb") as f: f.write(buf)
with Pool(4) as p: p.map(make, range(4))
PY
echo "dataset: $N files of 128 KiB"

# Without PCC.
umnt; cold; mnt
echo "no PCC, epoch 1: $(epoch)"
umnt; cold; mnt
echo "no PCC, epoch 2: $(epoch)"

# With a read-only PCC (epoch 1 copies every file in, in the background).
umnt; cold; mnt
$W pcc add $M --dir $P/ro --mode ro --rule 'path=/data/*' > /dev/null
echo "RO-PCC, epoch 1: $(epoch)"
t0=$(date +%s.%N)
while [ "$(figure $M/data/f0 copy_ins)" -lt "$N" ]; do sleep 0.5; done
echo "RO-PCC: all $N copied in $(python3 -c "print(f'{$(date +%s.%N)-$t0:.1f}')") s after epoch 1"
umnt; cold; mnt
$W pcc add $M --dir $P/ro --mode ro --rule 'path=/data/*' > /dev/null
echo "RO-PCC, epoch 2: $(epoch)"
$W pcc state $M/data/f0 | grep -E '^(hits|misses|read_bytes) '

# A checkpoint, without and with a read-write PCC.
ckpt() { # writes $1 of CKPT_MB MiB; prints the seconds until close returned
python3 - "$1" "$CKPT_MB" <<'PY'
import os, sys, time
path, mb = sys.argv[1], int(sys.argv[2])
buf = os.urandom(16 << 20)
t = time.time()
fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
for _ in range(mb // 16): os.write(fd, buf)
os.fsync(fd)
os.close(fd)
print(f"{time.time()-t:.2f}")
PY
}
umnt; cold; mnt
echo "no PCC, checkpoint of $CKPT_MB MiB (write, fsync, close): $(ckpt $M/ckpt/a) s, in the file system at close"
$W pcc add $M --dir $P/rw --mode rw --rule 'path=/ckpt/*' > /dev/null
t0=$(date +%s.%N)
c=$(ckpt $M/ckpt/b)
echo "RW-PCC, checkpoint of $CKPT_MB MiB: close returned after $c s"
while ! $W pcc state $M/ckpt/b | grep -qx none; do sleep 0.2; done
echo "RW-PCC: in the file system $(python3 -c "print(f'{$(date +%s.%N)-$t0:.1f}')") s after the open"
ls -l $M/ckpt
umnt
kill $(cat $D/pids) 2>/dev/null || true
