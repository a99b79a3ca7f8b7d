#!/usr/bin/env bash
# A multi-host weftfs lab on one machine (root, iproute2): each host is a network namespace
# with its own address on one virtual switch, optionally with a rate-limited link.
#
#   deploy/lab/lab.sh up [--oss N] [--osts-per-oss K] [--clients N] [--mbit M]
#   deploy/lab/lab.sh run HOST CMD...     # e.g. run c1 weft df 10.77.0.1:9400:/weft
#   deploy/lab/lab.sh cut HOST | heal HOST  # pull / restore a host's cable
#   deploy/lab/lab.sh down
#
# Hosts: srv (MGS + MDS), oss1..N, c1..N (each mounts at /tmp/weft-lab/mnt-cI). Logs and
# data under /tmp/weft-lab. WEFT=path/to/weft (default target/release/weft). The tests use
# the same topology through weft-testkit's `lab` module (crates/weft-cli/tests/it/lab.rs).
# This kernel has no sch_netem: links get a rate (tbf), not an added delay.
set -euo pipefail
cd "$(dirname "$0")/../.."
WEFT=${WEFT:-$PWD/target/release/weft}
LAB=/tmp/weft-lab
SW=weftlab-switch
ns() { echo "weftlab-$1"; }

hosts() { ip netns list | awk '{print $1}' | grep '^weftlab-' | grep -v switch | sed 's/^weftlab-//'; }

add_host() { # name index mbit
    local h=$1 i=$2 mbit=$3
    ip netns add "$(ns "$h")"
    ip link add eth0 netns "$(ns "$h")" type veth peer name "h$i" netns $SW
    ip -n $SW link set "h$i" master br0 up
    ip -n "$(ns "$h")" addr add "10.77.0.$((i + 1))/24" dev eth0
    ip -n "$(ns "$h")" link set eth0 up
    ip -n "$(ns "$h")" link set lo up
    if [ "$mbit" -gt 0 ]; then
        local burst=$(( mbit * 1000000 / 8 / 250 )); [ $burst -ge 65536 ] || burst=65536
        tc -n "$(ns "$h")" qdisc replace dev eth0 root tbf rate "${mbit}mbit" burst $burst latency 50ms
        tc -n $SW qdisc replace dev "h$i" root tbf rate "${mbit}mbit" burst $burst latency 50ms
    fi
    echo "$i" > "$LAB/$h.port"
}

on() { local h=$1; shift; nsenter --net=/var/run/netns/"$(ns "$h")" -- "$@"; }

start() { # host name args...
    local h=$1 name=$2; shift 2
    # nsenter executes weft in its place: the pid recorded is the server's.
    nsenter --net=/var/run/netns/"$(ns "$h")" -- "$WEFT" "$@" > "$LAB/$name.log" 2>&1 &
    echo $! > "$LAB/$name.pid"
}

case ${1:-} in
up)
    shift
    oss=2 per=2 clients=2 mbit=0
    while [ $# -gt 0 ]; do
        case $1 in
        --oss) oss=$2; shift 2 ;;
        --osts-per-oss) per=$2; shift 2 ;;
        --clients) clients=$2; shift 2 ;;
        --mbit) mbit=$2; shift 2 ;;
        *) echo "lab.sh: unknown flag $1" >&2; exit 2 ;;
        esac
    done
    [ -x "$WEFT" ] || { echo "lab.sh: $WEFT missing (cargo build --release, or set WEFT)" >&2; exit 1; }
    mkdir -p $LAB
    ip netns add $SW
    ip -n $SW link add br0 type bridge
    ip -n $SW link set br0 up
    i=0
    add_host srv $i "$mbit"; i=$((i + 1))
    mgs=10.77.0.1:9400
    start srv mgs mgs --data $LAB/srv/mgs --listen $mgs --fsname weft
    start srv mds mds --mgs $mgs --listen 10.77.0.1:9401 --mdt 0=$LAB/srv/mdt0
    ost=0
    for o in $(seq 1 "$oss"); do
        add_host "oss$o" $i "$mbit"
        args=(oss --mgs $mgs --listen "10.77.0.$((i + 1)):9402")
        for _ in $(seq 1 "$per"); do args+=(--ost "$ost=$LAB/oss$o/ost$ost"); ost=$((ost + 1)); done
        start "oss$o" "oss$o" "${args[@]}"
        i=$((i + 1))
    done
    # Mounts once MDT0 and every OST are online (`weft mount` does not wait for targets).
    for _ in $(seq 1 300); do
        n=$(on srv "$WEFT" df --json $mgs:/weft 2>/dev/null | tr -d ' \n' | grep -o '"online":true' | wc -l)
        [ "$n" -ge $((ost + 1)) ] && break
        sleep 0.2
    done
    for c in $(seq 1 "$clients"); do
        add_host "c$c" $i "$mbit"
        mkdir -p "$LAB/mnt-c$c"
        start "c$c" "mount-c$c" mount $mgs:/weft "$LAB/mnt-c$c"
        i=$((i + 1))
    done
    echo "lab up: MGS $mgs; mounts $LAB/mnt-c1..c$clients; logs in $LAB"
    ;;
run) shift; h=$1; shift; on "$h" "$@" ;;
cut) ip -n $SW link set "h$(cat $LAB/"$2".port)" down ;;
heal) ip -n $SW link set "h$(cat $LAB/"$2".port)" up ;;
down)
    for m in $LAB/mnt-*; do [ -d "$m" ] && umount -l "$m" 2>/dev/null || true; done
    for p in $LAB/*.pid; do [ -f "$p" ] && kill -9 "$(cat "$p")" 2>/dev/null || true; done
    for h in $(hosts); do ip netns del "$(ns "$h")"; done
    ip netns del $SW 2>/dev/null || true
    rm -rf $LAB
    ;;
*) sed -n 2,13p "$0"; exit 2 ;;
esac
