#!/usr/bin/env python3
"""Issue 24's goal table from one sitting of ../shared/bench/run-all.sh.

Usage: deploy/bench/goal-table.py SINCE [RESULTS]
  SINCE: the sitting's first timestamp (e.g. 2026-11-26T22:29); records before it are
  ignored. RESULTS: the suite's results file (default ../shared/bench/results/results.jsonl
  from the project's root).

Prints one Markdown table: each figure for weft-tcp, weft-up, bindfs-bigwrites, moosefs
and glusterfs (every run of the sitting, "a / b"), then the ratios the issue's goals are
stated in, taken on the runs' medians: weft-tcp against the better of MooseFS and
GlusterFS (goal 1: at least 2), weft-tcp's streaming against weft-up's, and weft-up
against bindfs (goal 3: at least 1 for small-file reads and random 4 KiB reads).
"""
import json
import statistics
import sys

FIGURES = [
    ("seq-write-1x-bs1M", "MBps", "write 1x bs1M MB/s"),
    ("seq-read-1x-bs1M", "MBps", "read 1x bs1M MB/s"),
    ("seq-write-1x-bs4M", "MBps", "write 1x bs4M MB/s"),
    ("seq-read-1x-bs4M", "MBps", "read 1x bs4M MB/s"),
    ("seq-write-4x-bs1M", "MBps", "write 4x bs1M MB/s"),
    ("seq-read-4x-bs1M", "MBps", "read 4x bs1M MB/s"),
    ("n1-write-4x-bs1M", "MBps", "N-to-1 write MB/s"),
    ("n1-read-4x-bs1M", "MBps", "N-to-1 read MB/s"),
    ("md-1p", "create_ops", "1p create/s"),
    ("md-1p", "stat_ops", "1p stat/s"),
    ("md-1p", "readdir_ops", "1p readdir entries/s"),
    ("md-1p", "unlink_ops", "1p unlink/s"),
    ("md-4p", "create_ops", "4p create/s"),
    ("md-4p", "stat_ops", "4p stat/s"),
    ("md-4p", "readdir_ops", "4p readdir entries/s"),
    ("md-4p", "unlink_ops", "4p unlink/s"),
    ("smallfile-write", "files_per_s", "small-file write files/s"),
    ("smallfile-read", "files_per_s", "small-file read files/s"),
    ("smallfile-unlink", "files_per_s", "small-file unlink files/s"),
    ("randread-4k", "iops", "4 KiB random read IOPS"),
]
LABELS = ["weft-tcp", "weft-up", "bindfs-bigwrites", "moosefs", "glusterfs"]
# Goal 1 covers every metadata and small-file figure; streaming is held to weft-up's.
STREAMING = {w for w, _, _ in FIGURES[:8]}
# Goal 3: weft-up against bindfs on these.
GOAL3 = {("smallfile-read", "files_per_s"), ("randread-4k", "iops")}


def fmt(v):
    return f"{v:,.0f}" if v >= 100 else f"{v:.1f}"


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    since = sys.argv[1]
    path = sys.argv[2] if len(sys.argv) > 2 else "../shared/bench/results/results.jsonl"
    runs = {}
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            if r.get("ts", "") < since or r.get("label") not in LABELS:
                continue
            for key, value in r.get("figures", {}).items():
                runs.setdefault((r["label"], r["workload"], key), []).append(value)
    head = ["figure"] + LABELS + ["tcp / best peer", "tcp / up", "up / bindfs"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for workload, key, name in FIGURES:
        cells, med = [name], {}
        for label in LABELS:
            vals = runs.get((label, workload, key), [])
            cells.append(" / ".join(fmt(v) for v in vals) or "-")
            if vals:
                med[label] = statistics.median(vals)
        peers = [med[p] for p in ("moosefs", "glusterfs") if p in med]
        tcp, up, bindfs = med.get("weft-tcp"), med.get("weft-up"), med.get("bindfs-bigwrites")
        vs_peer = "" if workload in STREAMING or not (tcp and peers) else f"{tcp / max(peers):.2f}"
        vs_up = f"{tcp / up:.2f}" if workload in STREAMING and tcp and up else ""
        vs_bindfs = f"{up / bindfs:.2f}" if (workload, key) in GOAL3 and up and bindfs else ""
        print("| " + " | ".join(cells + [vs_peer, vs_up, vs_bindfs]) + " |")


if __name__ == "__main__":
    main()
