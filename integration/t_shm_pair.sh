#!/bin/bash
# t_shm_pair: connections between two processes that already upgraded one
# take the pair channel (shim/PROTOCOL.md, "Pair channel"), and a HINT that
# reaches the wrong process of a prefork server falls back to the named
# rendezvous without a byte lost.
#   (a) one client and one server process, 30 connections one after the
#       other (conn_hold --seq), 6 one-byte rounds each, upgrade at the first
#       data call: every connection switches both ways at both ends, and
#       after the first they all upgraded over the pair ("pair":true in the
#       client's upgrade.done; the first, with no pair yet, is named), their
#       rings slots of one arena per pair, used again as connections end.
#   (b) a prefork server (conn_hold --fork 2: two processes accept on one
#       listener), 40 connections of 30 rounds: every byte comes back,
#       nothing is refused or reset, and HINTs that went to the process
#       that did not accept the connection were stopped and fell back
#       (upgrade.hint_missed), after which connections still upgrade.
#   (c) a decoy: a process of the server's user (build/progs/hostile_shm,
#       which speaks the protocol itself) upgrades a connection of its own
#       honestly, so the server keeps that rendezvous as a pair, then sends
#       on it a HINT for another client's connection, which it does not
#       hold, with a socketpair and ring of its own. The server must refuse
#       it (rv.refused; the decoy's socketpair closes, no COMMIT), and the
#       real client's connection still upgrades, by the named way, every
#       byte exact.
#   (d) a short connection closed right after its HINT went (its server
#       had not looked yet) is no sign of a prefork server: the pair is
#       not paused for it, and the next connection still upgrades over the
#       pair (it took the named way, with a ring memfd of its own, for 10 s).
#       The close comes well within the 50 ms grace (shm_pair_neg.c).
#   (e) a HINT that reaches a process that reads none holds nothing open:
#       the server's first process upgrades the first connection (the
#       pair is its), forks a second and stops itself (SIGSTOP). The
#       second connection's HINT goes to the stopped process; the second
#       process serves the connection, and the client's close reaches it
#       as an end of file at once (a HINT that carried the client's socket
#       would keep the connection open until the stopped process read it).
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
need_built "$PROGS/conn_hold" "$PROGS/echo_server" "$PROGS/hostile_shm"

count() { cat "$1"/trace.*.jsonl 2>/dev/null | grep "$2" | grep -c "${3:-}" || true; }

port=$(free_port)
dir=$WORK/seq
mkdir -p "$dir"
vars=(RDMASHIM_PORTS="$port" RDMASHIM_TRANSPORTS=shm RDMASHIM_UPGRADE_AFTER_MS=0 RDMASHIM_TRACE=debug
  RDMASHIM_TRACE_FILE="$dir/trace.%p.jsonl")
hold_seq seq 30 6
n=$(count "$dir" '"event":"rx.switch"')
check "(a) 30 connections switched both ways at both ends (rx.switch $n of 60)" test "$n" -eq 60
n=$(count "$dir" '"event":"upgrade.done"' '"role":"client".*"pair":true')
check "(a) 29 of them upgraded over the pair ($n)" test "$n" -eq 29
n=$(count "$dir" '"event":"upgrade.offer"')
check "(a) one named handshake, the first ($n upgrade.offer)" test "$n" -eq 1
# Their rings came from the pair's arena (PROTOCOL.md, "Ring arena"): one
# arena mapped at each end, every HINT a slot of it, and the slots used
# again (one connection at a time: S gives each back as its channel ends).
n=$(count "$dir" '"event":"upgrade.hint"' '"slot":[0-9]')
check "(a) every HINT named an arena slot ($n of 29)" test "$n" -eq 29
n=$(count "$dir" '"event":"pair.arena"')
check "(a) one arena, mapped once at each end ($n pair.arena)" test "$n" -eq 2
n=$(cat "$dir"/trace.*.jsonl | grep '"event":"upgrade.hint"' | grep -o '"slot":[0-9]*' | sort -u | wc -l)
check "(a) slots were used again ($n distinct for 29 connections)" test "$n" -ge 1 -a "$n" -le 4

port=$(free_port)
dir=$WORK/prefork
mkdir -p "$dir"
vars=(RDMASHIM_PORTS="$port" RDMASHIM_TRANSPORTS=shm RDMASHIM_UPGRADE_AFTER_MS=0 RDMASHIM_TRACE=debug
  RDMASHIM_TRACE_FILE="$dir/trace.%p.jsonl" RDMASHIM_PLAIN_PEER_MS=5)
hold_seq prefork 40 30 --fork 2
n=$(count "$dir" '"event":"upgrade.hint_missed"')
check "(b) HINTs that reached the other process fell back ($n upgrade.hint_missed)" test "$n" -gt 0
n=$(count "$dir" '"reason":"\(verify_failed\|peer_violation\|fd_limit\|handshake_malformed\)"')
check "(b) nothing refused or reset ($n)" test "$n" -eq 0
n=$(count "$dir" '"event":"upgrade.done"' '"role":"client"')
check "(b) connections still upgraded ($n upgrade.done at the client)" test "$n" -gt 10

port=$(free_port)
dir=$WORK/decoy
mkdir -p "$dir"
vars=(RDMASHIM_PORTS="$port" RDMASHIM_TRANSPORTS=shm RDMASHIM_UPGRADE_AFTER_MS=0 RDMASHIM_TRACE=debug
  RDMASHIM_TRACE_FILE="$dir/trace.%p.jsonl")
start_bg decoy-server shim "${vars[@]}" "$PROGS/echo_server" --shape epoll --bind 127.0.0.1 --port "$port" --timeout 60
spid=$BG_PID
wait_ready decoy-server >/dev/null || not_ok "(c) server ready"
start_bg decoy-client shim "${vars[@]}" "$PROGS/conn_hold" client --port "$port" --conns 1 --rounds 20 --seq \
  --pause "$dir/go"
cpid=$BG_PID
for ((i = 0; i < 200; i++)); do
  cport=$(awk '$1 == "CONNECTED" { print $2 }' "$WORK/decoy-client.out" 2>/dev/null)
  [[ -n $cport ]] && break
  sleep 0.05
done
start_bg decoy-attacker plain "$PROGS/hostile_shm" --role client --connect "127.0.0.1:$port" --mode pair_decoy \
  --decoy "${cport:-0}" --wait-ms 3000
apid=$BG_PID
for ((i = 0; i < 200; i++)); do
  grep -q '^DECOY_SENT' "$WORK/decoy-attacker.out" 2>/dev/null && break
  kill -0 "$apid" 2>/dev/null || break
  sleep 0.05
done
check "(c) the decoy HINT went out on a kept pair" grep -q '^DECOY_SENT' "$WORK/decoy-attacker.out"
touch "$dir/go"
wait_bg "$cpid" 30
check "(c) the real client's bytes came back ($(tail -n 1 "$WORK/decoy-client.out"))" grep -q '^DONE' "$WORK/decoy-client.out"
wait_bg "$apid" 30
verdict=$(sed -n 's/^DECOY decoy=//p' "$WORK/decoy-attacker.out")
check "(c) the server refused the decoy (decoy=$verdict)" test "$verdict" = refused
n=$(count "$dir" '"event":"rv.refused"' '"side":"server"')
check "(c) traced as a refusal ($n rv.refused)" test "$n" -ge 1
n=$(count "$dir" '"event":"rx.switch"' "\"peer\":\"127.0.0.1:$cport\"")
check "(c) the real client's connection still upgraded (rx.switch at the server: $n)" test "$n" -ge 1
stop_bg "$spid"

# The head of the Python servers below: a listener on port argv[1], READY.
py_listener() {
  cat <<'PYEOF'
import os, signal, socket, sys, time
l = socket.socket()
l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(("127.0.0.1", int(sys.argv[1])))
l.listen(8)
print("READY %s" % sys.argv[1], flush=True)
PYEOF
}

# Runs $dir/server.py under the shim in the background as NAME, then
# $dir/client.py against it, and checks (LABEL) that the client's bytes
# came back. Leaves the server's pid in spid; 1 when it never got ready.
py_pair_run() {
  local name=$1 label=$2 out port
  local vars=(RDMASHIM_TRANSPORTS=shm RDMASHIM_UPGRADE_AFTER_MS=0 RDMASHIM_TRACE=debug
    "RDMASHIM_TRACE_FILE=$dir/trace.%p.jsonl")
  port=$(free_port)
  start_bg "$name" shim RDMASHIM_PORTS="$port" "${vars[@]}" "$PYTHON" "$dir/server.py" "$port"
  spid=$BG_PID
  if ! wait_ready "$name" >/dev/null; then
    not_ok "($label) server ready"
    stop_bg "$spid"
    return 1
  fi
  out=$(with_shim RDMASHIM_PORTS="$port" "${vars[@]}" "$PYTHON" "$dir/client.py" "$port" 2>&1)
  check "($label) the client's bytes came back ($out)" test "$out" = "CLIENT DONE"
}

# ---- (d) a HINT stopped by an early close ----
dir=$WORK/early
mkdir -p "$dir"
{ py_listener; cat <<'PYEOF'; } >"$dir/server.py"
def echo_rounds(c, n):
    for _ in range(n):
        c.sendall(c.recv(1))
a, _ = l.accept(); echo_rounds(a, 6)           # 1: upgrades, makes the pair
b, _ = l.accept(); time.sleep(0.3)             # 2: not looked at until its client closed
print("second: %r" % b.recv(10), flush=True)
c, _ = l.accept(); echo_rounds(c, 6)           # 3
for x in (a, b, c):
    x.close()
PYEOF
cat >"$dir/client.py" <<'PYEOF'
import socket, sys, time
port = int(sys.argv[1])
def rounds(s, n):
    for i in range(n):
        s.sendall(b"x")
        assert s.recv(1) == b"x"
a = socket.create_connection(("127.0.0.1", port)); rounds(a, 6)
b = socket.create_connection(("127.0.0.1", port)); b.sendall(b"y"); b.close()
c = socket.create_connection(("127.0.0.1", port)); rounds(c, 6)
print("CLIENT DONE", flush=True)
a.close(); c.close()
PYEOF
if py_pair_run early-server d; then
  wait_bg "$spid" 20
  check "(d) the second connection's byte reached the server on TCP" grep -q "second: b'y'" "$WORK/early-server.out"
  n=$(count "$dir" '"event":"upgrade.hint_missed"')
  check "(d) the second connection's HINT was stopped by its close (hint_missed $n)" test "$n" -ge 1
  n=$(count "$dir" '"event":"upgrade.done"' '"role":"client".*"pair":true')
  check "(d) the third connection still upgraded over the pair ($n client upgrade.done with pair:true)" test "$n" -eq 1
fi

# ---- (e) a HINT to a process that reads none ----
dir=$WORK/stopped
mkdir -p "$dir"
{ py_listener; cat <<'PYEOF'; } >"$dir/server.py"
a, _ = l.accept()
for _ in range(6):                               # 1: upgrades, makes the pair
    a.sendall(a.recv(1))
if os.fork() == 0:                               # the second process
    b, _ = l.accept()
    b.sendall(b.recv(1))
    b.settimeout(5)
    t0 = time.monotonic()
    try:
        got = b.recv(10)
        print("second: %s after %.3f s" % ("EOF" if got == b"" else repr(got), time.monotonic() - t0), flush=True)
    except socket.timeout:
        print("second: no EOF in 5 s", flush=True)
    os._exit(0)
print("STOPPING", flush=True)
os.kill(os.getpid(), signal.SIGSTOP)             # reads no pair from here on
a.close()
PYEOF
cat >"$dir/client.py" <<'PYEOF'
import socket, sys, time
port = int(sys.argv[1])
a = socket.create_connection(("127.0.0.1", port))
for _ in range(6):
    a.sendall(b"x")
    assert a.recv(1) == b"x"
time.sleep(0.3)                                  # the first process stopped
b = socket.create_connection(("127.0.0.1", port))
b.sendall(b"y")
assert b.recv(1) == b"y"
b.close()
print("CLIENT DONE", flush=True)
time.sleep(0.5)
a.close()
PYEOF
if py_pair_run stopped-server e; then
  for ((i = 0; i < 120; i++)); do
    grep -q '^second:' "$WORK/stopped-server.out" 2>/dev/null && break
    sleep 0.05
  done
  n=$(count "$dir" '"event":"upgrade.hint"' '"peer_pid"')
  check "(e) the second connection's HINT went to the stopped process ($n upgrade.hint)" test "$n" -ge 1
  line=$(grep '^second:' "$WORK/stopped-server.out")
  check "(e) its server saw the client's close at once ($line)" \
    awk '$2 == "EOF" && $4 < 1 { ok = 1 } END { exit !ok }' <<<"$line"
  pkill -CONT -f "$dir/server.py"
  stop_bg "$spid"
fi
finish
