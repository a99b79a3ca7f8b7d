#!/usr/bin/env bash
# The scale figure of issue 25: aggregate streaming bandwidth of 4 client hosts against 1, 2
# and 4 OSS hosts (one OST each), every host's link limited to the same rate, on a lab of
# network namespaces (deploy/lab/lab.sh). Per OSS count: 4 files, one per client, written
# (dd, fsynced) and read back by another client (so no client reads its own cache), then
# one file written by all 4 clients at once in disjoint quarters (N-to-1, a checkpoint)
# and read back the same way. Files are striped over every OST (`setstripe -c -1 -S 4M`).
#
#   deploy/lab/scale.sh [--mbit 250] [--mib 1024] [--oss "1 2 4"]
#
# --mib: MiB per client and phase. Root, iproute2, a release build (WEFT=... as lab.sh).
# Prints a Markdown table: MB/s per phase and the ratio to (OSS hosts × link rate).
set -euo pipefail
cd "$(dirname "$0")/../.."
mbit=250 mib=1024 osses="1 2 4"
while [ $# -gt 0 ]; do
    case $1 in
    --mbit) mbit=$2; shift 2 ;;
    --mib) mib=$2; shift 2 ;;
    --oss) osses=$2; shift 2 ;;
    *) sed -n 2,12p "$0"; exit 2 ;;
    esac
done
LAB=/tmp/weft-lab
WEFT=${WEFT:-$PWD/target/release/weft}
export WEFT
lab=deploy/lab/lab.sh
clients=4
bs=4M
count=$((mib / 4))

now() { date +%s.%N; }
mbps() { python3 -c "print(f'{$1 * 1048576 / 1e6 / ($3 - $2):.1f}')"; }

wait_mounts() {
    for _ in $(seq 1 300); do
        local n=0
        for c in $(seq 1 $clients); do mountpoint -q "$LAB/mnt-c$c" && n=$((n + 1)); done
        [ $n -eq $clients ] && return 0
        sleep 0.2
    done
    echo "scale.sh: mounts did not come up; logs in $LAB" >&2
    exit 1
}

drop_caches() { sync; echo 3 > /proc/sys/vm/drop_caches; }

# Runs "$@" once per client c (1..4) at once, with C set; waits for all.
each_client() {
    local pids=()
    for c in $(seq 1 $clients); do
        C=$c "$@" &
        pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p"; done
}

write_own() { dd if=/dev/zero of="$LAB/mnt-c$C/scale/f$C" bs=$bs count=$count conv=fsync status=none; }
read_other() {
    local o=$((C % clients + 1))
    dd if="$LAB/mnt-c$C/scale/f$o" of=/dev/null bs=$bs status=none
}
write_quarter() {
    dd if=/dev/zero of="$LAB/mnt-c$C/scale/shared" bs=$bs count=$count \
        seek=$(((C - 1) * count)) conv=notrunc,fsync status=none
}
read_quarter() {
    local o=$((C % clients + 1))
    dd if="$LAB/mnt-c$o/scale/shared" of=/dev/null bs=$bs count=$count \
        skip=$(((C - 1) * count)) status=none
}

phase() { # name fn
    local t0 t1
    t0=$(now)
    each_client "$2"
    t1=$(now)
    mbps $((clients * mib)) "$t0" "$t1"
}

echo "| OSS hosts | link | file per process write MB/s | read MB/s | N-to-1 write MB/s | read MB/s | goal (0.8 × OSS × link) MB/s |"
echo "|---|---|---|---|---|---|---|"
for n in $osses; do
    $lab down > /dev/null 2>&1 || true
    $lab up --oss "$n" --osts-per-oss 1 --clients $clients --mbit "$mbit" > /dev/null
    wait_mounts
    mkdir "$LAB/mnt-c1/scale"
    $lab run c1 "$WEFT" setstripe -c -1 -S 4M "$LAB/mnt-c1/scale" > /dev/null
    w=$(phase write write_own)
    drop_caches
    r=$(phase read read_other)
    n1w=$(phase write write_quarter)
    drop_caches
    n1r=$(phase read read_quarter)
    goal=$(python3 -c "print(f'{0.8 * $n * $mbit / 8:.1f}')")
    echo "| $n | $mbit Mbit/s | $w | $r | $n1w | $n1r | $goal |"
done
$lab down > /dev/null 2>&1 || true
