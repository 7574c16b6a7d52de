#!/bin/bash
# t_stat: `rdmashim stat` over live processes. redis-server under the shim
# (shm) on a whitelisted port; a client of our own under the shim holds
# three connections: to redis (upgraded: path shm, its bytes exactly what
# it sent and read), to a server on a port not whitelisted (no record, the
# reason counted) and to a plain redis-server on a whitelisted port (its
# reason shown). redis-benchmark's live connections show as shm. --json
# parses, --prom passes integration/promcheck.py, --prom-file is written.
# Another user sees none of root's connections and "permission denied".
# A client SIGKILLed mid-traffic leaves an area that still reads
# (--keep-dead), and the next stat removes it; so does one that kills
# itself in the middle of a record's update (RDMASHIM_TEST_FAULTS=
# stat_kill), that record then read as inconsistent.
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
TOOL=$ROOT/build/bin/rdmashim
need_built "$TOOL"
need_cmd redis-server redis-benchmark python3
[[ $(id -u) -eq 0 ]] || skip "needs root: another user reads the areas"

export SHIM_TRANSPORTS=shm
# Kept on shm whatever the load: an exchange judged unpaid would send a
# connection back to the kernel, where the shim no longer counts it.
export RDMASHIM_UNPAID_PERCENT=0
STATS=$(mktemp -d /tmp/rdmashim-tstat.XXXXXX)
chmod 1777 "$STATS"
export RDMASHIM_STATS_DIR=$STATS
trap 'rm -rf "$STATS"; _cleanup' EXIT

P_REDIS=$(free_port)
P_PLAIN=$(free_port)
P_OTHER=$(free_port)
N=500

start_bg redis shim RDMASHIM_PORTS="$P_REDIS" RDMASHIM_TRANSPORTS=shm redis-server --save '' --appendonly no \
  --port "$P_REDIS" --bind 127.0.0.1 --dir "$WORK" --daemonize no --logfile '' --unixsocket ''
REDIS_PID=$BG_PID
start_bg plain plain redis-server --save '' --appendonly no --port "$P_PLAIN" --bind 127.0.0.1 --dir "$WORK" \
  --daemonize no --logfile '' --unixsocket ''
start_bg other shim RDMASHIM_PORTS="$P_REDIS" "$PYTHON" -c '
import socket, sys, threading
def echo(a):
    while True:
        d = a.recv(4096)
        if not d: break
        a.sendall(d)
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(8)
while True:
    threading.Thread(target=echo, args=(s.accept()[0],), daemon=True).start()' "$P_OTHER"
wait_listen "$P_REDIS" || not_ok "redis-server listening"
wait_listen "$P_PLAIN" || not_ok "plain redis-server listening"
wait_listen "$P_OTHER" || not_ok "echo server listening"

# The client: N PINGs (6 bytes out, 7 back) on each connection, then holds
# them open until killed. LOOP=1: pings redis forever instead.
CLIENT='
import os, socket, sys, time
def conn(port, n):
    c = socket.create_connection(("127.0.0.1", port))
    for _ in range(n):
        c.sendall(b"PING\r\n")
        got = b""
        while len(got) < 7:
            got += c.recv(7 - len(got))
    return c
r = conn(int(sys.argv[1]), int(sys.argv[4]))
o = socket.create_connection(("127.0.0.1", int(sys.argv[3])))
o.sendall(b"hello"); o.recv(5)
p = conn(int(sys.argv[2]), 20)
print("READY", os.getpid(), flush=True)
while os.environ.get("LOOP") == "1":
    r.sendall(b"PING\r\n"); r.recv(7)
time.sleep(600)'
start_bg client shim RDMASHIM_PORTS="$P_REDIS,$P_PLAIN" RDMASHIM_TRANSPORTS=shm "$PYTHON" -c "$CLIENT" \
  "$P_REDIS" "$P_PLAIN" "$P_OTHER" "$N"
CLIENT_BG=$BG_PID
CLIENT_PID=$(wait_ready client) || not_ok "client ready"
sleep 0.3

timeout 20 "$TOOL" stat >"$WORK/stat.txt" 2>&1
check "stat (table) exits 0" test $? -eq 0
timeout 20 "$TOOL" stat --json >"$WORK/stat.json" 2>&1
check "stat --json exits 0" test $? -eq 0
check "stat --json is valid JSON" "$PYTHON" -m json.tool "$WORK/stat.json" /dev/null
timeout 20 "$TOOL" stat --json --pid "$CLIENT_PID" >"$WORK/client.json" 2>&1

"$PYTHON" - "$WORK/client.json" "$WORK/stat.json" "$CLIENT_PID" "$REDIS_PID" "$P_REDIS" "$P_PLAIN" "$P_OTHER" \
  "$N" <<'PY'
import json, sys
cj, sj = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
cpid, rport, pport, oport, n = int(sys.argv[3]), int(sys.argv[5]), int(sys.argv[6]), int(sys.argv[7]), int(sys.argv[8])
fails = 0
def check(c, msg):
    global fails
    print(("ok - " if c else "not ok - ") + msg)
    fails += not c
def port(ep): return int(ep.rsplit(":", 1)[1])
conns = cj["connections"]
check(all(c["pid"] == cpid for c in conns), "--pid shows only that process")
r = [c for c in conns if port(c["peer"]) == rport]
check(len(r) == 1, "client's redis connection listed once")
if r:
    r = r[0]
    check(r["path"] == "shm" and r["state"] == "switched" and r["reason"] == "upgraded",
          "redis connection on shm, switched, upgraded (%s %s %s)" % (r["path"], r["state"], r["reason"]))
    check(r["tx_bytes"] == 6 * n and r["rx_bytes"] == 7 * n,
          "its bytes agree with the traffic: %d/%d sent/received, want %d/%d" % (r["tx_bytes"], r["rx_bytes"], 6 * n, 7 * n))
    check(r["tx_msgs"] == n and r["rtt_samples"] > 0 and r["rtt_p50_us"] > 0,
          "messages %d, round trips sampled %d, p50 %.1f us" % (r["tx_msgs"], r["rtt_samples"], r["rtt_p50_us"]))
    check(r["fd"] > 2 and r["qpn"] == 0 and r["age_s"] > 0, "fd, qpn 0 on shm, age")
check(not [c for c in conns if port(c["peer"]) == oport], "the port not whitelisted has no record")
procs = [p for p in cj["processes"] if p["pid"] == cpid]
check(len(procs) == 1 and procs[0]["reasons"].get("not_whitelisted", 0) >= 1,
      "its not_whitelisted decision is counted (%s)" % (procs[0]["reasons"] if procs else None))
p = [c for c in conns if port(c["peer"]) == pport]
check(len(p) == 1 and p[0]["path"] == "tcp" and p[0]["reason"] in ("peer_no_shim", "timeout") and p[0]["reason_code"] > 0,
      "plain peer: on tcp with its reason (%s)" % ([(c["path"], c["state"], c["reason"]) for c in p]))
# The server's end of the same connection, in redis-server's area.
srv = [c for c in sj["connections"] if c["program"] == "redis-server" and r and c["peer"] == r["local"]]
check(len(srv) == 1 and srv[0]["path"] == "shm" and srv[0]["rx_bytes"] == 6 * n and srv[0]["tx_bytes"] == 7 * n,
      "redis-server's end agrees: %s" % ([(c["path"], c["rx_bytes"], c["tx_bytes"]) for c in srv]))
sys.exit(1 if fails else 0)
PY
[[ $? -eq 0 ]] && ok "client checks" || not_ok "client checks"

# --path, --port filters.
n_shm=$(timeout 20 "$TOOL" stat --json --path tcp --port "$P_REDIS" | "$PYTHON" -c '
import json, sys; print(len(json.load(sys.stdin)["connections"]))')
same "--path tcp --port redis: no connection (all on shm)" 0 "$n_shm"

# redis-benchmark while it runs.
start_bg bench shim RDMASHIM_PORTS="$P_REDIS" RDMASHIM_TRANSPORTS=shm redis-benchmark -h 127.0.0.1 -p "$P_REDIS" \
  -n 2000000 -c 4 -t ping -q
BENCH=$BG_PID
seen=0
for _ in $(seq 30); do
  sleep 0.2
  timeout 20 "$TOOL" stat --json --path shm >"$WORK/bench.json" 2>/dev/null || continue
  seen=$("$PYTHON" -c '
import json, sys
j = json.load(open(sys.argv[1]))
print(sum(1 for c in j["connections"] if c["program"].startswith("redis-benchmark") and c["tx_bytes"] > 0))' \
    "$WORK/bench.json")
  [[ $seen -ge 4 ]] && break
done
check "redis-benchmark's 4 live connections show on shm with bytes (saw $seen)" test "$seen" -ge 4
timeout 20 "$TOOL" stat --prom >"$WORK/stat.prom" 2>&1
check "stat --prom passes the exposition checker" "$PYTHON" "$ROOT/integration/promcheck.py" "$WORK/stat.prom"
check "--prom has shm bytes" grep -qE '^rdmashim_sent_bytes_total\{path="shm"\} [1-9]' "$WORK/stat.prom"
mkdir -p "$WORK/prom"
timeout 20 "$TOOL" stat --prom-file "$WORK/prom"
check "--prom-file writes DIR/rdmashim.prom, nothing else" test "$(ls -A "$WORK/prom")" = rdmashim.prom
stop_bg "$BENCH"

# Another user: no connection of root's, and "permission denied".
OTHER=rdmashim-hostile
if ! id -u "$OTHER" >/dev/null 2>&1; then
  timeout 20 useradd -r -M -s /usr/sbin/nologin "$OTHER" >/dev/null 2>&1 || timeout 20 useradd -M "$OTHER" >/dev/null 2>&1
fi
if id -u "$OTHER" >/dev/null 2>&1 && command -v runuser >/dev/null 2>&1; then
  timeout 20 runuser -u "$OTHER" -- env RDMASHIM_STATS_DIR="$STATS" "$TOOL" stat --json >"$WORK/other.json" 2>&1
  check "as $OTHER: stat exits 0" test $? -eq 0
  check "as $OTHER: no connection of root's, uid 0 permission denied" "$PYTHON" -c '
import json, sys
j = json.load(open(sys.argv[1]))
assert not j["connections"], j["connections"][:2]
assert any(p["uid"] == 0 and p["error"] == "permission denied" for p in j["processes"]), j["processes"]' \
    "$WORK/other.json"
  timeout 20 runuser -u "$OTHER" -- env RDMASHIM_STATS_DIR="$STATS" "$TOOL" stat --pid "$REDIS_PID" \
    >"$WORK/other.txt" 2>&1
  check "as $OTHER: --pid of root's redis says permission denied, not not found" \
    grep -q "process $REDIS_PID (uid 0): permission denied" "$WORK/other.txt"
else
  not_ok "could not run as $OTHER"
fi

# SIGKILL mid-traffic: the area still reads, then stat removes it.
start_bg looper shim RDMASHIM_PORTS="$P_REDIS,$P_PLAIN" RDMASHIM_TRANSPORTS=shm LOOP=1 "$PYTHON" -c "$CLIENT" \
  "$P_REDIS" "$P_PLAIN" "$P_OTHER" 50
LOOPER_PID=$(wait_ready looper) || not_ok "looping client ready"
sleep 0.5
timeout 20 "$TOOL" stat --watch -i 0.3 -n 2 --json --pid "$LOOPER_PID" >"$WORK/watch.json" 2>&1
check "--watch --json: two documents with per-interval deltas" "$PYTHON" -c '
import json, sys
docs = [json.loads(l) for l in open(sys.argv[1])]
assert len(docs) == 2, len(docs)
moved = [c["delta"]["tx_bytes"] for c in docs[1]["connections"] if c["pid"] == int(sys.argv[2])]
assert moved and max(moved) > 0, moved
assert all(c["delta"]["tx_bytes"] <= c["tx_bytes"] for c in docs[1]["connections"])' "$WORK/watch.json" "$LOOPER_PID"
kill -KILL "$LOOPER_PID"
sleep 0.2
check "the killed client left its area" compgen -G "$STATS/0/$LOOPER_PID-*.stat"
timeout 20 "$TOOL" stat --json --keep-dead --pid "$LOOPER_PID" >"$WORK/dead.json" 2>&1
check "its area still reads: dead, its redis connection with bytes" "$PYTHON" -c '
import json, sys
j = json.load(open(sys.argv[1]))
p = j["processes"]
assert len(p) == 1 and p[0]["dead"], p
assert any(c["tx_bytes"] > 300 and c["path"] == "shm" for c in j["connections"]), j["connections"]' "$WORK/dead.json"
timeout 20 "$TOOL" stat --json >"$WORK/after.json" 2>&1
check "stat removed the dead process's file" test -z "$(compgen -G "$STATS/0/$LOOPER_PID-*.stat")"
check "and said so" "$PYTHON" -c 'import json,sys; assert json.load(open(sys.argv[1]))["removed_dead"] >= 1' \
  "$WORK/after.json"

# Killed in the middle of an update (RDMASHIM_TEST_FAULTS=stat_kill: the
# process SIGKILLs itself with a record's sequence count odd): the area
# still reads, that record marked inconsistent and the rest whole.
rc=0
with_shim RDMASHIM_PORTS="$P_REDIS" RDMASHIM_TRANSPORTS=shm RDMASHIM_TEST_FAULTS=stat_kill@3 "$PYTHON" -c '
import os, socket, sys
print(os.getpid(), flush=True)
c = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
for _ in range(2000):
    c.sendall(b"PING\r\n"); c.recv(7)' "$P_REDIS" >"$WORK/killed.pid" 2>"$WORK/killed.err" || rc=$?
KILLED=$(head -1 "$WORK/killed.pid")
check "stat_kill: the client died of SIGKILL mid-update (status $rc, pid $KILLED)" test "$rc" -eq 137
timeout 20 "$TOOL" stat --json --keep-dead --pid "${KILLED:-1}" >"$WORK/killed.json" 2>&1
check "stat_kill: its area still reads: dead, its record inconsistent with its last values" "$PYTHON" -c '
import json, sys
j = json.load(open(sys.argv[1]))
p = j["processes"]
assert len(p) == 1 and p[0]["dead"] and p[0]["error"] is None, p
c = j["connections"]
print("    killed mid-update: %s" % [(x["state"], x["consistent"], x["tx_bytes"], x["rx_bytes"]) for x in c])
assert len(c) == 1 and not c[0]["consistent"] and c[0]["tx_bytes"] > 0, c' "$WORK/killed.json"
timeout 20 "$TOOL" stat --pid "${KILLED:-1}" --keep-dead >"$WORK/killed.txt" 2>&1
check "stat_kill: the table says inconsistent" grep -q "inconsistent" "$WORK/killed.txt"
timeout 20 "$TOOL" stat --json >/dev/null 2>&1
check "stat_kill: the next stat removed its file" test -z "$(compgen -G "$STATS/0/${KILLED:-1}-*.stat")"

# A normal exit removes the file.
stop_bg "$CLIENT_BG"
kill -TERM "$REDIS_PID" 2>/dev/null
wait_bg "$REDIS_PID" 20
check "redis-server's file gone at its normal exit" test -z "$(ls "$STATS/0" | grep -v "^$CLIENT_PID-")"

# RDMASHIM_STATS=0: no file.
with_shim RDMASHIM_PORTS="$P_PLAIN" RDMASHIM_STATS=0 "$PYTHON" -c '
import os, socket, sys
c = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
c.sendall(b"PING\r\n"); c.recv(7)
d = os.path.join(sys.argv[2], "0")
sys.exit(any(f.startswith("%d-" % os.getpid()) for f in os.listdir(d)) if os.path.isdir(d) else 0)' \
  "$P_PLAIN" "$STATS"
check "RDMASHIM_STATS=0: no area" test $? -eq 0

finish
