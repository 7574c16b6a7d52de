#!/usr/bin/env python3
"""failover_time.py — failover time from the shim's traces (docs/BENCHMARKS.md).

usage: failover_time.py LABEL TRACE_FILE...

Both ends of each connection must have traced into the given files, on one
clock (one host, or one VM: guest-rdma-faults.sh). For each connection
(its two endpoints, either end's view) that failed over:

  detection  the first of either end's rdma.broken, failover.start and
             failover.peer_resume: the moment the failure was known;
  first TCP  the first failover.tx_tcp of either end: its replay (the bytes
             the channel never delivered) goes on TCP at once behind it,
             or, with nothing to replay, the next bytes the program writes.

Prints one line: LABEL n=N p50_ms=... p99_ms=... max_ms=... (nearest-rank
percentiles), and one "conn" line per connection with -v. Exits 1 when no
connection failed over.
"""
import json
import sys
from datetime import datetime

DETECT = ("rdma.broken", "failover.start", "failover.peer_resume")


def when(ts):
    return datetime.strptime(ts, "%Y-%m-%dT%H:%M:%S.%fZ").timestamp()


def pct(xs, p):
    xs = sorted(xs)
    k = max(0, min(len(xs) - 1, -(-len(xs) * p // 100) - 1))
    return xs[k]


def main(argv):
    verbose = "-v" in argv
    argv = [a for a in argv if a != "-v"]
    if len(argv) < 3:
        sys.stderr.write(__doc__)
        return 2
    label, files = argv[1], argv[2:]
    detect, first = {}, {}
    for f in files:
        with open(f, errors="replace") as fh:
            for line in fh:
                try:
                    r = json.loads(line)
                except ValueError:
                    continue
                ev = r.get("event")
                if ev not in DETECT and ev != "failover.tx_tcp":
                    continue
                if "local" not in r or "peer" not in r:
                    continue
                key = tuple(sorted((r["local"], r["peer"])))
                t = when(r["ts"])
                d = detect if ev in DETECT else first
                d[key] = min(d.get(key, t), t)
    times = []
    for key, t0 in sorted(detect.items()):
        if key not in first:
            continue
        ms = (first[key] - t0) * 1000.0
        times.append(max(ms, 0.0))
        if verbose:
            print("conn %s %s %.3f ms" % (key[0], key[1], ms))
    if not times:
        print("%s n=0 (no connection failed over)" % label)
        return 1
    print("%s n=%d p50_ms=%.2f p99_ms=%.2f max_ms=%.2f" %
          (label, len(times), pct(times, 50), pct(times, 99), max(times)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
