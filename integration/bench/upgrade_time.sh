#!/bin/bash
# upgrade_time.sh: how long one upgrade to shm takes, from the first data
# call to both directions switched.
#
# build/progs/conn_hold (client and server, both under the shim,
# RDMASHIM_UPGRADE_AFTER_MS=0 so the upgrade starts at the first data call)
# makes BENCH_UPG_CONNS connections one after the other, each doing
# BENCH_UPG_ROUNDS (default 100) one-byte ping-pong rounds, then closing
# (the traffic goes on over TCP meanwhile; a connection that closes before
# it switched both ways is counted apart). The times come from the shim's
# upgrade stamps (RDMASHIM_TEST_STAMPS=1, shim/core/stamps.h), kept in
# memory and written at exit, with the trace at warn: no trace line is
# written inside the span (at info several are, a few microseconds each;
# BENCH_UPG_TRACE=info puts them back, to see what they cost). Per
# connection, from both processes' stamps (CLOCK_MONOTONIC, one clock for
# the host):
#   start  the client's upgrade start (in its first data call)
#   end    the last of the four switches: tx and rx at the client and at
#          the server (matched by the 4-tuple, in order of occurrence)
# That span holds the program's own round trips (a switch happens inside a
# data call), so it also measures what the upgrade adds to the program:
# connections of one 1-byte round (conn_hold --seq --times: from connect()
# to the answer read), the upgrade starting at the first data call, against
# the same connections tracked only (RDMASHIM_TRANSPORTS=tcp: the shim
# loaded, no upgrade), BENCH_UPG_PAIRS alternated runs (default 4) of
# BENCH_UPG_FIRST_CONNS (default 300). Each run first holds one connection
# for 20 ms of round trips (conn_hold --warm): its named handshake makes the
# two processes' pair, which every counted connection then upgrades over.
# Without it the figure depended on the first connection: a one-round
# connection closes before a named handshake ends, so when the first one
# did not finish its handshake no pair was ever made and every connection
# of the run paid a named try that never finished (run medians of 140 us
# against 90 us in runs where the first one finished).
#   bench upgrade_first_rtt: connect to first answer, median of run medians: upgraded X us, tracked Y us, added Z us
# Environment: BENCH_UPG_CONNS (default 200), BENCH_UPG_ROUNDS, BENCH_UPG_TRACE, BENCH_SHIM_ENV
# (more words for both ends, e.g. RDMASHIM_SHM_PAIRS=0).
. "$(dirname "${BASH_SOURCE[0]}")/common.bash"
need python3 ss
CONNS=${BENCH_UPG_CONNS:-200}
ROUNDS=${BENCH_UPG_ROUNDS:-100}
[[ -x $PROGS/conn_hold ]] || die "$PROGS/conn_hold missing: run make first"

P=$(free_port)
vars=(LD_PRELOAD="$LIB" RDMASHIM_PORTS="$P" RDMASHIM_TRANSPORTS=shm RDMASHIM_UPGRADE_AFTER_MS=0
	RDMASHIM_TEST_STAMPS=1 RDMASHIM_TRACE="${BENCH_UPG_TRACE:-warn}" RDMASHIM_TRACE_FILE="$WORK/trace.%p.jsonl"
	${BENCH_SHIM_ENV:-})
start_bg "$WORK/server.log" env "${vars[@]}" timeout -k 5 300 "$PROGS/conn_hold" server --port "$P" --conns "$CONNS" --rounds "$ROUNDS" --seq
srv=$LAST_BG
wait_listen "$P"
env "${vars[@]}" timeout -k 5 300 "$PROGS/conn_hold" client --port "$P" --conns "$CONNS" --rounds "$ROUNDS" --seq >"$WORK/client.log" 2>&1 ||
	die "the client failed: $(tail -n 3 "$WORK/client.log")"
wait "$srv" || die "the server failed: $(tail -n 3 "$WORK/server.log")"

python3 - "$CONNS" "$WORK"/trace.*.jsonl <<'PY'
import json, sys
n = int(sys.argv[1])
# (client endpoint, server endpoint) -> that end's stamps, in order
client, server = {}, {}
for path in sys.argv[2:]:
    for line in open(path):
        try:
            e = json.loads(line)
        except ValueError:
            continue
        if e.get("event") != "upgrade.stamps":
            continue
        if e["role"] == "client":
            client.setdefault((e["local"], e["peer"]), []).append(e)
        else:
            server.setdefault((e["peer"], e["local"]), []).append(e)
times = []
for key, cs in client.items():
    for c, s in zip(cs, server.get(key, [])):
        ends = [c["tx_ns"], c["rx_ns"], s["tx_ns"], s["rx_ns"]]
        if all(ends):
            times.append((max(ends) - c["start_ns"]) / 1000)
times.sort()
if not times:
    print("bench upgrade_shm: no connection switched both ways (see the traces)")
    sys.exit(0)
med = times[len(times) // 2] if len(times) % 2 else (times[len(times) // 2 - 1] + times[len(times) // 2]) / 2
p90 = times[min(len(times) - 1, int(len(times) * 0.9))]
print("bench upgrade_shm: %d of %d connections switched both ways; first data call to both directions switched: median %.0f us p90 %.0f us (min %.0f max %.0f)"
      % (len(times), n, med, p90, times[0], times[-1]))
PY
# What the upgrade adds to the first round trip (see the head).
first_median() { # TRANSPORTS -> the median first_us of one run
	local p log=$WORK/first.$1.log
	p=$(free_port)
	start_bg "$WORK/first-server.log" env LD_PRELOAD="$LIB" RDMASHIM_PORTS="$p" RDMASHIM_TRANSPORTS="$1" \
		RDMASHIM_UPGRADE_AFTER_MS=0 ${BENCH_SHIM_ENV:-} timeout -k 5 300 "$PROGS/conn_hold" server --port "$p" \
		--conns "$FIRST_CONNS" --rounds 1 --seq --warm 20
	wait_listen "$p"
	env LD_PRELOAD="$LIB" RDMASHIM_PORTS="$p" RDMASHIM_TRANSPORTS="$1" RDMASHIM_UPGRADE_AFTER_MS=0 ${BENCH_SHIM_ENV:-} \
		timeout -k 5 300 "$PROGS/conn_hold" client --port "$p" --conns "$FIRST_CONNS" --rounds 1 --seq --times --warm 20 >"$log" 2>&1 ||
		die "the client failed: $(tail -n 3 "$log")"
	wait "$LAST_BG" || die "the server failed"
	python3 -c 'import sys, statistics
v = [int(l.split("first_us=")[1].split()[0]) for l in open(sys.argv[1]) if l.startswith("CONN ")]
print(int(statistics.median(v)))' "$log"
}
FIRST_CONNS=${BENCH_UPG_FIRST_CONNS:-300}
up=() tr=()
for ((r = 0; r < ${BENCH_UPG_PAIRS:-4}; r++)); do
	if ((r % 2 == 0)); then
		up+=("$(first_median shm)") tr+=("$(first_median tcp)")
	else
		tr+=("$(first_median tcp)") up+=("$(first_median shm)")
	fi
done
((${#up[@]} > 0)) || exit 0
python3 -c 'import sys, statistics
up = [int(x) for x in sys.argv[1].split()]; tr = [int(x) for x in sys.argv[2].split()]
u, t = statistics.median(up), statistics.median(tr)
print("bench upgrade_first_rtt: connect to first answer, median of run medians: upgraded %.0f us, tracked %.0f us, added %.0f us (runs: %s / %s)" % (u, t, u - t, sys.argv[1], sys.argv[2]))' "${up[*]}" "${tr[*]}"
exit 0
