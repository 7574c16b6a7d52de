#!/bin/bash
# t_shm_loop_handshake: an event-loop server moves its handshake on when the
# handshake's message comes, not at the program's next event.
#
# A handshake message that comes with no TCP byte behind it (on the named
# rendezvous, C's ACCEPT: C sends it from the call in which it read S's
# OFFER, and then has nothing more to say) used to wait for the server's
# next event or for its wait's slice: an epoll server with nothing else to
# do committed 200 ms later. Now the wait watches the handshake too: epoll
# sets through an epoll fd of the connection's own (conn/upgrade_wake.c),
# poll and select the handshake's fd itself (io/wait.c).
#
# For each server (an edge-triggered epoll loop in C, a level-triggered
# epoll loop and a poll loop in Python, so the young connection's take-over
# and the poll path are in), both ends under the shim, RDMASHIM_SHM_PAIRS=0
# (the named way, whose OFFER and ACCEPT carry no TCP byte) and a start
# after one round and 50 ms (RDMASHIM_UPGRADE_AFTER_MS=50: the first echo
# must end before it, also in a sanitizer build, where at 2 ms both ends
# once started in the first exchange together, S's named try came before
# C listened, and C gave up): the client echoes one byte, sleeps 100 ms,
# echoes another (the upgrade starts in that exchange), then
# waits in a blocking read for 1 s with nothing coming, then echoes once
# more. Before, the server committed at that last echo (or its slice).
#
# Then the server speaks unasked (py-epoll-tick, py-poll-tick): after the
# first echo it sends a byte 60 ms on, and its handshake starts in that
# call (RDMASHIM_UPGRADE_AFTER_ROUNDS=0: by age alone), before the client's: its named try finds no rendezvous and waits a
# back-off (SHM_S_RETRY). The client reads that byte 100 ms on (it starts
# and listens then) and waits 1 s in a blocking read with nothing coming.
# With no pairs, nothing woke the server's loop for its next try: it
# waited for its slice (200 ms) or the program's next event, while a client
# whose peer answers over TCP meanwhile takes it for one without the shim
# (RDMASHIM_PLAIN_PEER_MS). Now the wait ends when the try is due
# (transport.h, due_ns). Checked: the server's commit came within 100 ms of
# the client's upgrade.start (161-163 ms before, with the old library).
# Checks:
#   - every echo came back, and both ends upgraded (upgrade.done at each);
#   - the server's commit (its tx.switch) came within 100 ms of its OFFER
#     (the slice it used to wait is 200 ms; this takes well under 1 ms);
#   - the server did not spin meanwhile: its CPU time over the whole run,
#     1 s of it quiet, stays under 0.5 s (a wake-up on a fd that stays
#     ready would burn the quiet second).
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
need_built "$PROGS/echo_server"
need_cmd "$PYTHON"

cat >"$WORK/client.py" <<'PYEOF'
import socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
tick = len(sys.argv) > 2
def echo(b):
    s.sendall(b)
    got = b""
    while len(got) < len(b):
        d = s.recv(100)
        if not d:
            sys.exit("EOF after %r" % got)
        got += d
    if got != b:
        sys.exit("sent %r, got %r" % (b, got))
echo(b"a"); time.sleep(0.1)
if tick:
    got = s.recv(1)
    if got != b"t":
        sys.exit("tick %r" % got)
else:
    echo(b"b")
s.settimeout(1.0)
try:
    d = s.recv(100)
    sys.exit("the server sent %r unasked" % d)
except socket.timeout:
    pass
s.settimeout(None)
echo(b"c")
s.close()
print("DONE")
PYEOF

# loop_server.py epoll|poll [tick] PORT: one connection, echoed by a
# selectors loop (level-triggered epoll, or poll); tick: 60 ms after the
# first echo, one byte ("t") unasked; prints its CPU seconds at the end.
cat >"$WORK/loop_server.py" <<'PYEOF'
import resource, selectors, socket, sys, time
sel = selectors.EpollSelector() if sys.argv[1] == "epoll" else selectors.PollSelector()
l = socket.socket()
l.bind(("127.0.0.1", int(sys.argv[-1])))
l.listen(4)
print("READY", sys.argv[-1], flush=True)
c, _ = l.accept()
tick = len(sys.argv) > 3
c.setblocking(False)
sel.register(c, selectors.EVENT_READ)
done = False
while not done:
    for key, ev in sel.select():
        try:
            d = c.recv(100)
        except BlockingIOError:
            continue
        if not d:
            done = True
            break
        c.sendall(d)
        if tick:
            time.sleep(0.06)
            c.sendall(b"t")
            tick = False
r = resource.getrusage(resource.RUSAGE_SELF)
print("CPU %.3f" % (r.ru_utime + r.ru_stime), flush=True)
PYEOF

# run_case NAME SERVER-COMMAND...: the server in the background (it prints
# READY), the client, then the checks. NAME *-tick: the server speaks
# unasked, and starts before the client.
run_case() {
  local name=$1 port dir spid out cpu tick=()
  shift
  port=$(free_port)
  dir=$WORK/$name
  mkdir -p "$dir"
  local vars=(RDMASHIM_PORTS="$port" RDMASHIM_TRANSPORTS=shm RDMASHIM_SHM_PAIRS=0 RDMASHIM_UPGRADE_AFTER_MS=50 RDMASHIM_TRACE=debug
    "RDMASHIM_TRACE_FILE=$dir/trace.%p.jsonl")
  # By age alone: the tick is no round of the server's, nor its read one
  # of the client's.
  [[ $name == *-tick ]] && tick=(tick) vars+=(RDMASHIM_UPGRADE_AFTER_ROUNDS=0)
  start_bg "$name-server" shim "${vars[@]}" /usr/bin/time -f "CPU %U %S" "$@" "$port"
  spid=$BG_PID
  if ! wait_ready "$name-server" >/dev/null; then
    not_ok "$name: server ready"
    stop_bg "$spid"
    return
  fi
  out=$(with_shim "${vars[@]}" "$PYTHON" "$WORK/client.py" "$port" ${tick[@]+"${tick[@]}"} 2>&1)
  check "$name: every echo came back ($(tail -n 1 <<<"$out"))" test "$(tail -n 1 <<<"$out")" = DONE
  wait_bg "$spid" 20 || not_ok "$name: server exit"
  # /usr/bin/time's line: user and system seconds of the whole server.
  cpu=$(awk '$1 == "CPU" && NF == 3 { print $2 + $3 }' "$WORK/$name-server.err" | tail -n 1)
  check "$name: the server's CPU over the run, 1 s of it quiet, under 0.5 s (${cpu:-?} s)" \
    awk -v c="${cpu:-9}" 'BEGIN { exit !(c < 0.5) }'
  trace_py "$dir" "$name" <<'PY'
import datetime
name = ARGS[0]
def ms(r):
    return datetime.datetime.strptime(r["ts"], "%Y-%m-%dT%H:%M:%S.%fZ").timestamp() * 1e3
done = events("upgrade.done", reason="upgraded", transport="shm")
check(sorted(r.get("role") for r in done) == ["client", "server"],
      name + ": upgrade.done at both ends (%s)" % sorted(r.get("role") for r in done))
offer = events("upgrade.offer")
commit = [r for r in events("tx.switch") if r["_file"] == (offer[0]["_file"] if offer else None)]
if check(len(offer) == 1 and len(commit) == 1, name + ": one OFFER and one commit at the server (%d, %d)"
         % (len(offer), len(commit))):
    gap = ms(commit[0]) - ms(offer[0])
    check(gap < 100, name + ": the server committed %.2f ms after its OFFER (bar 100 ms; the slice was 200)" % gap)
    if name.endswith("-tick"):
        start = [r for r in events("upgrade.start") if r.get("role") == "client"]
        if check(len(start) == 1, name + ": one upgrade.start at the client (%d)" % len(start)):
            gap = ms(commit[0]) - ms(start[0])
            check(gap < 100, name + ": the server, in its back-off when the client began, committed %.2f ms"
                  " after that (bar 100 ms; its next event or slice, 200 ms, before)" % gap)
PY
}

run_case epoll-et "$PROGS/echo_server" --shape epoll --max-conns 1 --port
run_case py-epoll "$PYTHON" "$WORK/loop_server.py" epoll
run_case py-poll "$PYTHON" "$WORK/loop_server.py" poll
run_case py-epoll-tick "$PYTHON" "$WORK/loop_server.py" epoll tick
run_case py-poll-tick "$PYTHON" "$WORK/loop_server.py" poll tick
finish
