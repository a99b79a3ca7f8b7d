#!/usr/bin/env bash
# Metadata rates against directory size (issue 24: "cost flat in directory size"): MGS,
# MDS0, MDS1 and an OSS (4 OSTs) as separate processes on 127.0.0.1, a FUSE mount. For
# each directory kind (plain on MDT0, striped over MDT0 and MDT1) and each size in SIZES,
# the directory is filled with that many empty files, then PROCS processes create, stat
# (dentries and inodes dropped first) and unlink FILES files on top, through the mount.
# Then the same through the protocol, without the mount: `weft bench-mdt --prefill`
# (MDT0, one shared directory, 4 clients).
# Needs root, fuse and python3; `cargo build --release` first.
# Env: WEFT (binary), DATA, MNT, SIZES, FILES (per size), PROCS, KINDS (default "plain
# striped"), PARAMS (client settings for `weft set_param -P`, e.g.
# "llite.*.statahead_max=1048576"), PROTOCOL=0 to skip the bench-mdt part.
set -euo pipefail
W=${WEFT:-$(dirname "$0")/../../target/release/weft}
D=${DATA:-/srv/bigdir/data}; M=${MNT:-/srv/bigdir/mnt}
SIZES=${SIZES:-0 100000 1000000}
FILES=${FILES:-20000}
PROCS=${PROCS:-4}
KINDS=${KINDS:-plain striped}
PARAMS=${PARAMS:-}
PROTOCOL=${PROTOCOL:-1}
MGS=127.0.0.1:9520
cleanup() { umount -l "$M" 2>/dev/null || true; pkill -f "$D" || true; }
cleanup; rm -rf "$D"; mkdir -p "$D" "$M"
trap cleanup EXIT
$W mgs --data "$D/mgs" --listen $MGS --fsname weft > "$D/mgs.log" 2>&1 &
sleep 0.5
$W oss --mgs $MGS --listen 127.0.0.1:9523 --ost 0="$D/ost0" --ost 1="$D/ost1" \
    --ost 2="$D/ost2" --ost 3="$D/ost3" > "$D/oss.log" 2>&1 &
$W mds --mgs $MGS --listen 127.0.0.1:9521 --mdt 0="$D/mdt0" > "$D/mds0.log" 2>&1 &
$W mds --mgs $MGS --listen 127.0.0.1:9522 --mdt 1="$D/mdt1" > "$D/mds1.log" 2>&1 &
sleep 3
if [ -n "$PARAMS" ]; then
    # shellcheck disable=SC2086 # one or more NAME=VALUE words
    $W set_param --mgs $MGS -P $PARAMS
fi
$W mount $MGS:/weft "$M" --daemon
sleep 1
mkdir "$M/plain"
$W mkdir -c 2 "$M/striped"

echo "== through the mount: $PROCS processes, $FILES files per size (rates in operations/s)${PARAMS:+, with $PARAMS}"
printf "%-8s %10s %10s %10s %10s\n" dir entries create/s stat/s unlink/s
for kind in $KINDS; do
    filled=0
    for size in $SIZES; do
        python3 - "$M/$kind" "$filled" "$size" "$FILES" "$PROCS" "$kind" <<'PY'
import os, sys, time
from multiprocessing import Pool
d, filled, size, files, procs, kind = sys.argv[1], *map(int, sys.argv[2:6]), sys.argv[6]

def fill(k):
    for i in range(filled + k, size, procs):
        os.close(os.open(f"{d}/p{i}", os.O_CREAT | os.O_WRONLY, 0o644))

def create(k):
    for i in range(k, files, procs):
        os.close(os.open(f"{d}/f{i}", os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o644))

def stat(k):
    for i in range(k, files, procs):
        os.stat(f"{d}/f{i}")

def unlink(k):
    for i in range(k, files, procs):
        os.unlink(f"{d}/f{i}")

def rate(work):
    t = time.perf_counter()
    with Pool(procs) as p:
        p.map(work, range(procs))
    return files / (time.perf_counter() - t)

with Pool(procs) as p:
    p.map(fill, range(procs))
c = rate(create)
with open("/proc/sys/vm/drop_caches", "w") as f:
    f.write("2\n")
s = rate(stat)
u = rate(unlink)
print(f"{kind:<8} {size:>10} {c:>10.0f} {s:>10.0f} {u:>10.0f}", flush=True)
PY
        filled=$size
    done
done

[ "$PROTOCOL" = 0 ] && exit 0
echo "== through the protocol: weft bench-mdt --clients 4 --shared --prefill (MDT0)"
$W bench-mdt --mgs $MGS --clients 4 --shared --files $((FILES / 4)) \
    --prefill "$(echo $SIZES | tr ' ' ',')"
