#!/bin/bash
# t_bench_quick: the benchmark suite works, end to end, in its short form
# (`make bench-quick`: integration/bench/suite.sh with BENCH_QUICK=1) into a
# directory of this scenario's own. It judges no figure, only that the run
# made them:
# (a) the suite exits 0 and writes <timestamp>-<host>.json and latest.json;
# (b) the JSON is complete: the machine, kernel, versions, commit, settings
#     and load; for every transport (tcp, unix, shm, shm_spin0, passthrough)
#     and every size, the ping-pong's p50 and p99 and the throughput, each
#     positive, with CPU per request and per GiB, and the speed-up against
#     TCP; redis GET, SET and -k 0 over every transport; sockperf and qperf
#     over the transports of the short form; UCX at its sizes, or the
#     reason it could not run; the cache line and memcpy limits; and on the
#     shm transports, connections that reached shm;
# (c) integration/bench/report.py renders it: REPORT.md with its sections
#     and six PNG plots.
# Must pass on a loaded machine (two CPU hogs beside it) in about a minute.
# scenario-timeout: 240
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
need_built
need_cmd python3 gnuplot sockperf redis-server redis-benchmark redis-cli ss taskset cc

out=$WORK/results
t0=$EPOCHREALTIME
rc=0
BENCH_QUICK=1 BENCH_OUT=$out timeout -k 10 200 bash "$ROOT/integration/bench/suite.sh" >"$WORK/suite.log" 2>&1 || rc=$?
log "suite: status $rc after $(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }') s"
same "the short suite exits 0" 0 "$rc"
((rc == 0)) || tail -n 15 "$WORK/suite.log" | sed 's/^/    | /'
check "latest.json written" test -s "$out/latest.json"
check "a <timestamp>-<host>.json beside it" compgen -G "$out/[0-9]*T[0-9]*Z-*.json"

problems=$(python3 - "$out/latest.json" <<'PY'
import json, sys
try:
    d = json.load(open(sys.argv[1]))
except Exception as e:
    print("no JSON: %s" % e)
    sys.exit()
bad = []
T = ["tcp", "unix", "shm", "shm_spin0", "passthrough"]
sizes = [str(s) for s in d.get("sizes", [])]
if sorted(map(int, sizes)) != [16, 64, 256, 1024, 4096, 16384, 65536]:
    bad.append("sizes are %s" % sizes)

def get(*path):
    v = d
    for p in path:
        if not isinstance(v, dict) or v.get(p) is None:
            return None
        v = v[p]
    return v

def positive(*path, zero=False):
    v = get(*path)
    if isinstance(v, dict):
        v = v.get("median")
    if not isinstance(v, (int, float)) or v < 0 or (v == 0 and not zero):
        bad.append("/".join(path) + " = %r" % (v,))

for p in (("host", "cpu_model"), ("host", "cores"), ("host", "kernel"), ("versions", "gcc"),
          ("versions", "rdma-core"), ("versions", "sockperf"), ("versions", "redis"), ("git", "commit"),
          ("settings", "rounds"), ("started",)):
    if not get(*p):
        bad.append("missing " + "/".join(p))
if len(get("load", "loadavg_start") or []) != 3:
    bad.append("no load average")
for t in T:
    for s in sizes:
        for m in ("p50", "p99"):
            positive("xfer", "latency_us", t, s, m)
        positive("xfer", "latency_us", t, s, "cpu_us_per_req", zero=True)
        positive("xfer", "throughput", t, s, "bytes_per_sec")
        positive("xfer", "throughput", t, s, "cpu_s_per_gib", zero=True)
        if t != "tcp":
            for k in ("p50", "p99", "throughput"):
                positive("xfer", "speedup_vs_tcp", k, t, s)
    for test in ("get", "set", "k0"):
        positive("redis", "results", test, t, "rps")
        positive("redis", "results", test, t, "cpu_us_per_req", zero=True)
for t in (get("settings", "tool_transports") or "").split() or ["(none)"]:
    positive("sockperf", "latency_us", t, "64", "p50")
    positive("qperf", "results", t, "tcp_lat_us")
    positive("qperf", "results", t, "tcp_bw_bytes_per_sec")
if not get("ucx", "error"):
    for s in (get("settings", "ucx_sizes") or "(none)").split():
        positive("ucx", "tag_lat", s, "p50_us")
        positive("ucx", "tag_bw", s, "bytes_per_sec")
positive("limits", "cacheline_ns", "p50")
positive("limits", "memcpy_large_bytes_per_sec")
for s in sizes:
    positive("limits", "memcpy_bytes_per_sec", s)
for t in ("shm", "shm_spin0"):
    if not (get("xfer", "upgraded", t, "upgraded") or 0) > 0:
        bad.append("no %s connection reached shm: %r" % (t, get("xfer", "upgraded", t)))
for e in d.get("errors", []):
    if e["part"] != "ucx":
        bad.append("%s could not run: %s" % (e["part"], e["error"]))
print("\n".join(bad))
PY
)
printf '%s' "$problems" >"$WORK/problems"
no_output "the JSON is complete: every transport and size, every part, numbers positive" "$WORK/problems"
log "ucx: $(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["ucx"]["error"] or "ran")' "$out/latest.json" 2>&1)"
log "seconds per part: $(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["timing_s"])' "$out/latest.json" 2>&1)"
log "upgraded: $(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["xfer"]["upgraded"])' "$out/latest.json" 2>&1)"

rc=0
timeout 60 python3 "$ROOT/integration/bench/report.py" --json "$out/latest.json" --out "$WORK/report" \
  >"$WORK/report.log" 2>&1 || rc=$?
same "report.py renders the JSON" 0 "$rc"
((rc == 0)) || tail -n 5 "$WORK/report.log" | sed 's/^/    | /'
for sec in "## Latency" "## Throughput" "## Speed-up against loopback TCP" "## CPU" "## redis-benchmark" \
  "## This machine's limits"; do
  check "REPORT.md has \"$sec\"" grep -qxF "$sec" "$WORK/report/REPORT.md"
done
for p in latency_p50 latency_p99 throughput speedup cpu redis; do
  check "plot $p.png is a PNG" bash -c "head -c 4 '$WORK/report/plots/$p.png' | grep -q PNG"
done
finish
