#!/usr/bin/env bash
# Library throughput figures of issue 3 (session note of 2026-11-24, seventh session):
# `weft up --no-mount` (MGS, 1 MDT, 4 OSTs in one process, data in $DATA), then `weft bench`
# through the client library: one task writing and reading a 4 GiB file striped over the
# 4 OSTs in 4 MiB stripes, and 4 tasks with a 1 GiB file each; RUNS times each. In the same
# minutes: one-stream loopback TCP (iperf3) and the raw disk with O_DIRECT (fio), the two
# ceilings the figures are compared with. Needs root, iperf3 and fio; `cargo build
# --release` first. Env: WEFT (binary), DATA, RUNS.
set -euo pipefail
W=${WEFT:-$(cd "$(dirname "$0")/../.." && pwd)/target/release/weft}
D=${DATA:-/srv/weftbench/libio}; RUNS=${RUNS:-3}
pkill -f "weft up --no-mount --data $D" || true
rm -rf "$D"; mkdir -p "$D"
"$W" up --no-mount --data "$D/fs" --listen 127.0.0.1:9410 > "$D/up.log" 2>&1 &
up=$!
trap 'kill -INT $up 2>/dev/null || true' EXIT
sleep 3
for _ in $(seq "$RUNS"); do
  "$W" bench 127.0.0.1:9410:/weft --mode ior -t 1 -b 4G --transfer 4M -c 4 -S 4M | tail -1
done
for _ in $(seq "$RUNS"); do
  "$W" bench 127.0.0.1:9410:/weft --mode ior -t 4 -b 1G --transfer 4M -c 4 -S 4M | tail -1
done
iperf3 -s -1 -D -p 5299; sleep 0.5
iperf3 -c 127.0.0.1 -p 5299 -t 8 | grep receiver
fio --name=dw --filename="$D/raw" --rw=write --bs=4M --direct=1 --ioengine=libaio --iodepth=16 --size=4G | grep WRITE:
fio --name=dr --filename="$D/raw" --rw=read --bs=4M --direct=1 --ioengine=libaio --iodepth=16 --size=4G | grep READ:
rm -f "$D/raw"
