#!/bin/bash
# upgrade_time.sh: how long one upgrade to shm takes, from the first data
# call to both directions switched.
#
# build/progs/conn_hold (client and server, both under the shim, trace at
# info level (no line per data call), RDMASHIM_UPGRADE_AFTER_MS=0 so the upgrade starts at the
# first data call) makes BENCH_UPG_CONNS connections one after the other,
# each doing BENCH_UPG_ROUNDS (default 100) one-byte ping-pong rounds, then
# closing (the traffic goes on over TCP meanwhile; a connection that closes
# before it switched both ways is counted apart). Per connection, from the
# traces of both processes:
#   start  the client's upgrade.start (written in its first data call)
#   end    the last of the four switches: tx.switch and rx.switch at the
#          client and at the server (matched by the 4-tuple)
# Both timestamps come from the same clock (CLOCK_REALTIME, microseconds).
# The figure includes the time the program itself spends between its calls
# (a switch happens inside a data call), which with 1-byte ping-pong is a
# round trip or two.
#
# Prints
#   bench upgrade_shm: N upgrades, first data call to both directions switched: median X us p90 Y us
# Environment: BENCH_UPG_CONNS (default 200), BENCH_UPG_ROUNDS, BENCH_SHIM_ENV
# (more words for both ends, e.g. RDMASHIM_SHM_PAIRS=0).
. "$(dirname "${BASH_SOURCE[0]}")/common.bash"
need python3 ss
CONNS=${BENCH_UPG_CONNS:-200}
ROUNDS=${BENCH_UPG_ROUNDS:-100}
[[ -x $PROGS/conn_hold ]] || die "$PROGS/conn_hold missing: run make first"

P=$(free_port)
vars=(LD_PRELOAD="$LIB" RDMASHIM_PORTS="$P" RDMASHIM_TRANSPORTS=shm RDMASHIM_UPGRADE_AFTER_MS=0
	RDMASHIM_TRACE=info RDMASHIM_TRACE_FILE="$WORK/trace.%p.jsonl" ${BENCH_SHIM_ENV:-})
start_bg "$WORK/server.log" env "${vars[@]}" timeout -k 5 300 "$PROGS/conn_hold" server --port "$P" --conns "$CONNS" --rounds "$ROUNDS" --seq
srv=$LAST_BG
wait_listen "$P"
env "${vars[@]}" timeout -k 5 300 "$PROGS/conn_hold" client --port "$P" --conns "$CONNS" --rounds "$ROUNDS" --seq >"$WORK/client.log" 2>&1 ||
	die "the client failed: $(tail -n 3 "$WORK/client.log")"
wait "$srv" || die "the server failed: $(tail -n 3 "$WORK/server.log")"

python3 - "$CONNS" "$WORK"/trace.*.jsonl <<'PY'
import datetime, json, sys
n = int(sys.argv[1])
def us(ts):
    d = datetime.datetime.strptime(ts, "%Y-%m-%dT%H:%M:%S.%fZ")
    return (d - datetime.datetime(1970, 1, 1)).total_seconds() * 1e6
start, ends = {}, {}
for path in sys.argv[2:]:
    for line in open(path):
        try:
            e = json.loads(line)
        except ValueError:
            continue
        ev = e.get("event")
        if "local" not in e or "peer" not in e:
            continue
        if ev == "upgrade.start" and e.get("role") == "client":
            # a 4-tuple can come back (ports are reused): keep the first
            start.setdefault((e["local"], e["peer"]), us(e["ts"]))
        elif ev in ("tx.switch", "rx.switch"):
            ends.setdefault((e["local"], e["peer"]), []).append(us(e["ts"]))
times = []
for (cl, sv), t0 in start.items():
    mine = ends.get((cl, sv), [])
    theirs = ends.get((sv, cl), [])
    if len(mine) >= 2 and len(theirs) >= 2:
        times.append(max(mine + theirs) - t0)
times.sort()
if not times:
    print("bench upgrade_shm: no connection switched both ways (see the traces)")
    sys.exit(0)
med = times[len(times) // 2] if len(times) % 2 else (times[len(times) // 2 - 1] + times[len(times) // 2]) / 2
p90 = times[min(len(times) - 1, int(len(times) * 0.9))]
print("bench upgrade_shm: %d of %d connections switched both ways; first data call to both directions switched: median %.0f us p90 %.0f us (min %.0f max %.0f)"
      % (len(times), n, med, p90, times[0], times[-1]))
PY
exit 0
