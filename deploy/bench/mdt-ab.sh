#!/bin/bash
# An A/B of MDT metadata rates between two `weft` binaries (release builds): for each of
# RUNS rounds, binary A then binary B each get a fresh `weft up --no-mount` (data in
# $DATA, default /var/tmp/mdtab-data) and one `weft bench-mdt --clients 4 --shared
# --files 5000 --json`. The second run of a round tends to be slower: run it again with
# the binaries swapped and compare balanced pairs (docs/perf.md, session 30).
#
# Usage: deploy/bench/mdt-ab.sh BIN_A BIN_B [RUNS]
set -euo pipefail
A=$1
B=$2
RUNS=${3:-3}
DATA=${DATA:-/var/tmp/mdtab-data}
ADDR=${ADDR:-127.0.0.1:9480}
for i in $(seq 1 "$RUNS"); do
  for pair in "A:$A" "B:$B"; do
    name=${pair%%:*}
    bin=${pair#*:}
    rm -rf "$DATA"
    mkdir -p "$DATA"
    "$bin" up --no-mount --data "$DATA" --listen "$ADDR" > "$DATA.up.log" 2>&1 &
    pid=$!
    for _ in $(seq 1 100); do
      "$bin" df "$ADDR" > /dev/null 2>&1 && break
      sleep 0.2
    done
    echo "== run $i $name"
    "$bin" bench-mdt --mgs "$ADDR" --clients 4 --shared --files 5000 --json
    kill "$pid"
    wait "$pid" 2> /dev/null || true
  done
done
