#!/usr/bin/env bash
# Data repository benchmark of issue 23: an S3 server (s3s-fs, buckets are directories)
# and `weft up` with a mount, both on this machine, then `weft bench-repo`: import, epoch 1
# (lazy restores) and epoch 2 reads through the mount, the same bytes written straight into
# weftfs, copy-then-read and a direct ranged-GET reader; then everything is torn down.
#
# Needs root (FUSE, dropping the page cache) and s3s-fs (./test.sh installs it in
# target/test-tools; or S3S_FS=PATH). Space: the bucket, the loaded files, the straight copy
# and one dataset's download at a time, about 4 x the data (4 x 6.6 GB by default).
#
# Env (defaults in brackets): WEFT [target/release/weft, else target/debug/weft],
# S3S_FS, DATA [/var/tmp/weft-bench-repo], SMALL_COUNT [20000], SMALL_SIZE [128K],
# LARGE_COUNT [4], LARGE_SIZE [1G], WORKERS [4], RESTORE_AHEAD [64: the mount's
# llite.*.restore_ahead; 0 turns it off], SHAPE [up: `weft up`, every role in one process
# with its mount; tcp: the deployment shape, `weft mgs`, `weft mds` (MDT0, the restore
# coordinator), `weft oss` (4 OSTs and the data mover that copies their restores) and
# `weft mount` as separate processes over TCP on 127.0.0.1 ports WEFT_PORT to
# WEFT_PORT+2], OSSES [1; 2: with SHAPE=tcp, OSTs 0-1 and 2-3 in two OSS processes, the
# second on WEFT_PORT+3], ROOT_STRIPE [the root's default layout, as `weft setstripe`
# flags, e.g. "-c -1 -S 1M": files not over the repository's chunk size take it],
# S3_PORT [9470], WEFT_PORT [9460],
# BUCKET [weft-bench], PARAMS ["NAME=VALUE ...": stored with `weft set_param -P` before
# the runs, e.g. obdfilter.*.writethrough_max_io_mb=64], KEEP=1 (keep DATA), CPU=1 (a
# table of the CPU seconds each process spent in each phase). Extra arguments go to `weft bench-repo`
# (e.g. --json; --rounds 5: the first epoch and the direct reader five times in turn,
# goals on medians). Credentials: AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY if set, else made up
# for this run; never printed.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)

if [ -n "${WEFT:-}" ]; then
    W=$WEFT
elif [ -x "$root/target/release/weft" ]; then
    W=$root/target/release/weft
else
    W=$root/target/debug/weft
fi
[ -x "$W" ] || { echo "repo.sh: no weft binary at $W (cargo build --release -p weft-cli, or set WEFT)" >&2; exit 1; }
S3=${S3S_FS:-}
if [ -z "$S3" ]; then
    for c in "$root/target/test-tools/bin/s3s-fs" /tmp/s3tools/bin/s3s-fs "$(command -v s3s-fs || true)"; do
        if [ -n "$c" ] && [ -x "$c" ]; then S3=$c; break; fi
    done
fi
[ -n "$S3" ] && [ -x "$S3" ] || { echo "repo.sh: no s3s-fs (./test.sh installs it, or set S3S_FS)" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || echo "repo.sh: not root: the mount may fail and caches cannot be dropped" >&2

D=${DATA:-/var/tmp/weft-bench-repo}
S3_PORT=${S3_PORT:-9470}; WEFT_PORT=${WEFT_PORT:-9460}; BUCKET=${BUCKET:-weft-bench}
: "${AWS_ACCESS_KEY_ID:=bench-$(head -c 6 /dev/urandom | od -An -tx1 | tr -d ' \n')}"
: "${AWS_SECRET_ACCESS_KEY:=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')}"
export AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY
export AWS_REGION=${AWS_REGION:-us-east-1} AWS_ALLOW_HTTP=true AWS_EC2_METADATA_DISABLED=true

echo "== machine"
echo "date:    $(date -u +%Y-%m-%dT%H:%M:%SZ)"
echo "host:    $(hostname)"
echo "nproc:   $(nproc)"
echo "cpu:     $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
echo "memory:  $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo)"
echo "kernel:  $(uname -r)"
echo "disk:    $(df -h --output=source,size,avail "$(dirname "$D")" | tail -1)"
echo "commit:  $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)"
echo "weft:    $W"
echo "s3s-fs:  $S3 ($("$S3" --version 2>/dev/null | head -1 || echo 'version unknown'))"
echo "loadavg: $(cut -d' ' -f1-3 /proc/loadavg)"

rm -rf "$D"
mkdir -p "$D/s3/$BUCKET" "$D/fs" "$D/mnt" "$D/local"
s3_pid=; fs_pids=()
teardown() {
    set +e
    # The mount (last started) first, then the servers.
    for ((i = ${#fs_pids[@]} - 1; i >= 0; i--)); do
        pid=${fs_pids[$i]}
        kill -INT "$pid" 2>/dev/null
        for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$pid" 2>/dev/null
        wait "$pid" 2>/dev/null
    done
    grep -qs " $D/mnt " /proc/mounts && { fusermount3 -u "$D/mnt" 2>/dev/null || umount -l "$D/mnt"; }
    if [ -n "$s3_pid" ]; then kill "$s3_pid" 2>/dev/null; wait "$s3_pid" 2>/dev/null; fi
    if [ "${KEEP:-0}" = 1 ]; then echo "repo.sh: kept $D"; else rm -rf "$D"; fi
}
trap teardown EXIT

"$S3" --host 127.0.0.1 --port "$S3_PORT" --access-key "$AWS_ACCESS_KEY_ID" \
    --secret-key "$AWS_SECRET_ACCESS_KEY" "$D/s3" > "$D/s3.log" 2>&1 &
s3_pid=$!
for i in $(seq 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$S3_PORT") 2>/dev/null && break
    kill -0 "$s3_pid" 2>/dev/null || { echo "repo.sh: s3s-fs exited:" >&2; cat "$D/s3.log" >&2; exit 1; }
    [ "$i" = 100 ] && { echo "repo.sh: s3s-fs does not answer on port $S3_PORT" >&2; exit 1; }
    sleep 0.1
done

# The MDS's data mover reaches the bucket with the credentials in this environment.
SHAPE=${SHAPE:-up}
echo "shape:   $SHAPE"
case "$SHAPE" in
    up)
        "$W" up --data "$D/fs" --mount "$D/mnt" --listen "127.0.0.1:$WEFT_PORT" > "$D/up.log" 2>&1 &
        fs_pids+=($!)
        ;;
    tcp)
        mgs=127.0.0.1:$WEFT_PORT
        mkdir -p "$D/fs"/{mgs,mdt0,ost0,ost1,ost2,ost3}
        "$W" mgs --data "$D/fs/mgs" --listen "$mgs" > "$D/mgs.log" 2>&1 &
        fs_pids+=($!)
        "$W" mds --mgs "$mgs" --listen "127.0.0.1:$((WEFT_PORT + 1))" --mdt 0="$D/fs/mdt0" > "$D/mds.log" 2>&1 &
        fs_pids+=($!)
        if [ "${OSSES:-1}" = 2 ]; then
            "$W" oss --mgs "$mgs" --listen "127.0.0.1:$((WEFT_PORT + 2))" --ost 0="$D/fs/ost0" \
                --ost 1="$D/fs/ost1" > "$D/oss.log" 2>&1 &
            fs_pids+=($!)
            "$W" oss --mgs "$mgs" --listen "127.0.0.1:$((WEFT_PORT + 3))" --ost 2="$D/fs/ost2" \
                --ost 3="$D/fs/ost3" > "$D/oss2.log" 2>&1 &
            fs_pids+=($!)
        else
            "$W" oss --mgs "$mgs" --listen "127.0.0.1:$((WEFT_PORT + 2))" --ost 0="$D/fs/ost0" \
                --ost 1="$D/fs/ost1" --ost 2="$D/fs/ost2" --ost 3="$D/fs/ost3" > "$D/oss.log" 2>&1 &
            fs_pids+=($!)
        fi
        # The mount waits for the MGS to know every target.
        for i in $(seq 100); do
            [ "$("$W" get_param --mgs "$mgs" 'obdfilter.*.kbytestotal' 2>/dev/null | grep -c =)" -ge 4 ] && break
            sleep 0.1
        done
        "$W" mount "$mgs:/weft" "$D/mnt" > "$D/up.log" 2>&1 &
        fs_pids+=($!)
        ;;
    *) echo "repo.sh: SHAPE is up or tcp, not $SHAPE" >&2; exit 1 ;;
esac
for i in $(seq 300); do
    grep -qs " $D/mnt fuse" /proc/mounts && break
    for pid in "${fs_pids[@]}"; do
        kill -0 "$pid" 2>/dev/null || { echo "repo.sh: a weft process exited:" >&2; tail -20 "$D"/*.log >&2; exit 1; }
    done
    [ "$i" = 300 ] && { echo "repo.sh: the mount did not appear at $D/mnt" >&2; tail -20 "$D"/*.log >&2; exit 1; }
    sleep 0.1
done

# Restore-ahead (llite.*.restore_ahead, 64 by default) for the mount's first epoch.
"$W" set_param "llite.*.restore_ahead=${RESTORE_AHEAD:-64}" > /dev/null
echo "restore-ahead: ${RESTORE_AHEAD:-64}"
# The root's default layout (new directories' files inherit it: the linked directory's).
if [ -n "${ROOT_STRIPE:-}" ]; then
    read -ra stripe <<< "$ROOT_STRIPE"
    "$W" setstripe "${stripe[@]}" "$D/mnt"
    echo "root stripe: $ROOT_STRIPE"
fi
# Other parameters, stored on the MGS for every node (`set_param -P`).
read -ra params <<< "${PARAMS:-}"
for p in "${params[@]}"; do
    "$W" set_param --mgs "127.0.0.1:$WEFT_PORT" -P "$p" > /dev/null
    echo "param:   $p"
done

# CPU seconds (user + system) of one process so far; 0 once it is gone.
cpu_of() { awk -v hz="$(getconf CLK_TCK)" '{printf "%.2f", ($14 + $15) / hz}' "/proc/$1/stat" 2>/dev/null || echo 0; }

echo "== weft bench-repo"
status=0
"$W" bench-repo --endpoint "http://127.0.0.1:$S3_PORT" --bucket "$BUCKET" \
    --mount "$D/mnt" --fs "127.0.0.1:$WEFT_PORT:/weft" --local-dir "$D/local" \
    --small-count "${SMALL_COUNT:-20000}" --small-size "${SMALL_SIZE:-128K}" \
    --large-count "${LARGE_COUNT:-4}" --large-size "${LARGE_SIZE:-1G}" \
    --workers "${WORKERS:-4}" "$@" 2> "$D/phases" &
bench_pid=$!
# Its progress lines as they come (the CPU table below reads them from the file).
tail -n +1 -f --pid="$bench_pid" "$D/phases" >&2 &
tail_pid=$!
# CPU=1: the CPU seconds every process spent in each phase, read from /proc when the
# bench prints the phase's line (wall-clock ratios on a 2-CPU machine swing with the S3
# server's own CPU; CPU seconds per phase show which process a change moved).
if [ "${CPU:-0}" = 1 ]; then
    names=(s3s-fs)
    if [ "$SHAPE" = up ]; then
        names+=(weft-up)
    elif [ "${OSSES:-1}" = 2 ]; then
        names+=(mgs mds oss oss2 mount)
    else
        names+=(mgs mds oss mount)
    fi
    names+=(bench)
    # The bench's own figure is the last one read while it ran (it exits right after its
    # last phase, before this loop sees the line).
    bench_cpu=0
    snap() { local v=(); for p in "$s3_pid" "${fs_pids[@]}"; do v+=("$(cpu_of "$p")"); done; echo "${v[*]} $bench_cpu"; }
    lines() { grep -E '^bench-repo: (small|large|import)' "$D/phases" 2>/dev/null || true; }
    last=$(snap); seen=0; cpu_table="phase ${names[*]}"
    while :; do
        alive=0; kill -0 "$bench_pid" 2>/dev/null && { alive=1; c=$(cpu_of "$bench_pid"); [ "$c" = 0 ] || bench_cpu=$c; }
        n=$(lines | wc -l)
        if [ "$n" -gt "$seen" ]; then
            now=$(snap)
            # Named after the last phase that ended since the last look: copy-download and
            # copy-read end together with copy-then-read, which covers both.
            phase=$(lines | sed -n "${n}p" | awk '{print ($2 == "import") ? "import" : $2 "/" $3}')
            cpu_table+=$'\n'"$phase $(paste -d' ' <(tr ' ' '\n' <<< "$now") <(tr ' ' '\n' <<< "$last") | awk '{printf "%.2f ", $1 - $2}')"
            last=$now; seen=$n
        fi
        [ "$alive" = 1 ] || break
        sleep 0.05
    done
fi
wait "$bench_pid" || status=$?
wait "$tail_pid" || true
if [ "${CPU:-0}" = 1 ]; then
    echo "== CPU seconds per phase (user + system, from the end of the previous phase)"
    column -t <<< "$cpu_table"
fi
if [ "$status" -ne 0 ]; then
    echo "repo.sh: weft bench-repo failed ($status); the last lines of the logs:" >&2
    for log in "$D"/up.log "$D"/mgs.log "$D"/mds.log "$D"/oss.log "$D"/oss2.log; do
        [ -f "$log" ] && { echo "-- $(basename "$log")" >&2; tail -20 "$log" >&2; }
    done
    echo "-- s3s-fs" >&2; tail -5 "$D/s3.log" >&2
fi
echo "loadavg at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
exit "$status"
