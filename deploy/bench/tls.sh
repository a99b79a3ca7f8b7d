#!/usr/bin/env bash
# TLS's cost on streaming I/O (issue 25): weftfs in its deployment shape (the shared
# bench's weft-tcp: separate `weft mgs`, `weft mds`, `weft oss` with 4 OSTs and `weft
# mount`, over loopback TCP) measured with the bench suite's streaming workloads, once in
# plain TCP and once with TLS on every connection (a CA and one node certificate for
# 127.0.0.1, made here with openssl; every process gets them through WEFT_TLS_*).
#
#   deploy/bench/tls.sh        (root; release build or WEFT=...; the suite in ../shared/bench)
#
# RUNS (default 2) runs per mode; ONLY (default: the streaming workloads) the suite's
# workloads. Prints the suite's summary table of both labels.
set -euo pipefail
cd "$(dirname "$0")/../.."
bench=${BENCH:-../shared/bench}
runs=${RUNS:-2}
only=${ONLY:-seq-1x-bs1M,seq-4x-bs1M,n1-4x-bs1M}
mnt=/mnt/weft-tls-bench
work=$(mktemp -d)
trap 'bash "$bench/peers/weft-tcp-teardown.sh" "$mnt" > /dev/null 2>&1 || true; rm -rf "$work"' EXIT

# The cluster CA, and one certificate for every node (all on 127.0.0.1).
key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2> /dev/null; }
key "$work/ca-key.pem"
openssl req -x509 -new -key "$work/ca-key.pem" -out "$work/ca.pem" -days 2 \
    -subj /CN=weft-bench-ca 2> /dev/null
key "$work/key.pem"
openssl req -new -key "$work/key.pem" -out "$work/node.csr" -subj /CN=weft-node 2> /dev/null
printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n' > "$work/ext"
openssl x509 -req -in "$work/node.csr" -CA "$work/ca.pem" -CAkey "$work/ca-key.pem" \
    -CAcreateserial -out "$work/cert.pem" -days 2 -extfile "$work/ext" 2> /dev/null

results=$work/results.jsonl
for mode in plain tls; do
    if [ $mode = tls ]; then
        export WEFT_TLS_CA=$work/ca.pem WEFT_TLS_CERT=$work/cert.pem WEFT_TLS_KEY=$work/key.pem
    fi
    bash "$bench/peers/weft-tcp-setup.sh" "$mnt"
    for _ in $(seq 1 "$runs"); do
        "$bench/run-suite" --target "$mnt" --label "weft-tcp-$mode" --only "$only" \
            --results "$results"
    done
    bash "$bench/peers/weft-tcp-teardown.sh" "$mnt"
done
"$bench/summarize" --results "$results" --labels weft-tcp-plain,weft-tcp-tls
