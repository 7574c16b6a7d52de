#!/bin/bash
# t_shm_shapes: every echo_server shape (epoll, threads, prefork, forkconn,
# exec) against echo_client (blocking and --nonblock connect, with and
# without half-close, several connections at once), both ends under the shim
# with RDMASHIM_TRANSPORTS=shm. Each case runs once without the shim as the
# baseline; with the shim the client must print the very same line (every
# byte of every connection is checked by the client), the server must exit 0
# with an empty stderr, and the trace must show:
#   epoll, threads   upgrade.done (upgraded, transport shm) for every
#                    connection at both ends, the server's in its one process
#   prefork          the same, the server's in the worker processes; up to
#                    half may end on TCP when their stream ended before the
#                    handshake (client "shutdown" or "peer_closed" only,
#                    and the server's "peer_closed" for such a one)
#   forkconn         the same, the server's in the forked child that does the
#                    I/O (not in the acceptor)
#   exec             either upgraded in the exec'd program, or the connection
#                    stays on TCP; the data must be exact either way
# and no upgrade.fail for the shapes that must upgrade.
# Last, two deterministic cases (one process holds both ends, under the shim;
# the same script without the shim is the baseline):
#   eof after switch   the client switches its direction to the ring right
#                      after its last TCP byte and closes; the server's next
#                      read must be EOF (b""), not a byte (the echo shapes hit
#                      this only now and then)
#   close under a sleeping reader   one thread sleeps in recv() on an
#                      upgraded connection while another closes that socket
#                      (as sockperf does at exit); the peer then writes. As
#                      without the shim, the process must survive and the
#                      reader get the bytes.
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
need_built "$PROGS/echo_server" "$PROGS/echo_client"
need_cmd python3

CONNS=${SHAPES_CONNS:-6}
# 16 MiB per connection: enough that the client is still writing when the
# handshake completes (with 2 MiB a half-closing client may shut its write side
# first, and then the shim rightly keeps the connection on TCP: "shutdown").
BYTES=${SHAPES_BYTES:-16M}
CASE=0

# run_case SHAPE [CLIENT-FLAG...]
run_case() {
  local shape=$1
  shift
  local flags=("$@") label port dir base got pid rc t0 t1
  CASE=$((CASE + 1))
  label="#$CASE $shape ${flags[*]:-blocking}"
  dir=$WORK/case$CASE
  mkdir -p "$dir"
  port=$(free_port) || { not_ok "$label: no free port"; return; }
  local srv=("$PROGS/echo_server" --shape "$shape" --bind 127.0.0.1 --port "$port" --max-conns "$CONNS"
             --timeout 60)
  local cli=("$PROGS/echo_client" --host 127.0.0.1 --port "$port" --bytes "$BYTES" --conns "$CONNS"
             --seed "$CASE" --timeout 50 "${flags[@]}")

  start_bg "case$CASE-plain-server" plain "${srv[@]}"
  pid=$BG_PID
  if ! wait_ready "case$CASE-plain-server" >/dev/null; then
    not_ok "$label: server (no shim) ready"
    stop_bg "$pid"
    return
  fi
  base=$(no_shim "${cli[@]}" 2>&1)
  rc=0; wait_bg "$pid" 30 || rc=$?
  if [[ $base != OK* || $rc -ne 0 ]]; then
    not_ok "$label: baseline without shim: client '$base', server status $rc"
    return
  fi

  local vars=(RDMASHIM_PORTS="$port" RDMASHIM_TRANSPORTS=shm RDMASHIM_TRACE=debug
              "RDMASHIM_TRACE_FILE=$dir/trace.%p.jsonl")
  start_bg "case$CASE-shim-server" shim "${vars[@]}" "${srv[@]}"
  pid=$BG_PID
  if ! wait_ready "case$CASE-shim-server" >/dev/null; then
    not_ok "$label: server (shim) ready"
    stop_bg "$pid"
    return
  fi
  t0=$(date +%s%N)
  got=$(with_shim "${vars[@]}" "${cli[@]}" 2>"$dir/client.err")
  t1=$(date +%s%N)
  rc=0; wait_bg "$pid" 30 || rc=$?
  log "$label: $got ($(( (t1 - t0) / 1000000 )) ms with the shim)"
  same "$label: client output with shim = without" "$base" "$got"
  check "$label: server exit status 0 under shim (got $rc)" test "$rc" -eq 0
  check "$label: nothing on client stderr" test ! -s "$dir/client.err"
  if [[ -s $WORK/case$CASE-shim-server.err ]]; then
    not_ok "$label: nothing on server stderr"
    head -n 5 "$WORK/case$CASE-shim-server.err" | sed 's/^/    /'
  else
    ok "$label: nothing on server stderr"
  fi

  trace_py "$dir" "$label" "$shape" "$port" "$CONNS" <<'PY'
label, shape, port, conns = ARGS[0], ARGS[1], int(ARGS[2]), int(ARGS[3])
L = label + ": "
lis = events("listen.track")
parent = lis[0]["pid"] if lis else None
srv = [r for r in tracks("server", port) if r["how"] == "accept"]
cli = [r for r in tracks("client", port) if r["how"] == "connect"]
keys = {conn_key(r) for r in cli}
check(len(srv) == conns and len(cli) == conns and {conn_key(r) for r in srv} == keys,
      L + "%d connections tracked at both ends (server %d, client %d)" % (conns, len(srv), len(cli)))
done = events("upgrade.done", reason="upgraded", transport="shm")
dsrv = [r for r in done if r.get("role") == "server"]
dcli = [r for r in done if r.get("role") == "client"]
fails = events("upgrade.fail")
kids = {r["pid"] for r in events("process.fork", parent=parent)}
print("    upgrade.done: server %d, client %d; upgrade.fail %d %s" % (
    len(dsrv), len(dcli), len(fails), sorted({r.get("reason") for r in fails})))
if shape == "prefork":
    # A prefork connection waits in the accept queue while the client
    # fills the kernel's buffers, and its HINT may sit with a worker blocked
    # in another connection's read: loaded (CI, ASan) the stream can end
    # before the handshake does, and the shim then rightly keeps it on TCP
    # (the client's "shutdown", or "peer_closed" after a HINT nobody took).
    # Those two only, at the client, each for a connection that did not
    # upgrade, and at most half the connections; at the server, only its
    # "peer_closed" for one of those.
    late = [r for r in fails if r.get("role") == "client" and r.get("reason") in ("shutdown", "peer_closed")]
    # The server of such a connection may find the client gone first
    # (its "peer_closed": the HINT's socketpair closed), for that very
    # connection only.
    late_keys = {conn_key(r) for r in late}
    fails = [r for r in fails if r not in late and not (r.get("role") == "server" and
             r.get("reason") == "peer_closed" and conn_key(r) in late_keys)]
    expect = keys - {conn_key(r) for r in late}
    print("    prefork: %d connection(s) ended before their upgrade could" % len(late))
    check(len(late) <= conns // 2 and len(expect) == conns - len(late),
          L + "at most half the connections ended on TCP before their upgrade (%d)" % len(late))
else:
    expect = keys
if shape in ("epoll", "threads", "prefork", "forkconn"):
    check({conn_key(r) for r in dsrv} == expect and len(dsrv) == len(expect),
          L + "upgrade.done transport=shm at the server for every connection (%d of %d)" % (len(dsrv), len(expect)))
    check({conn_key(r) for r in dcli} == expect and len(dcli) == len(expect),
          L + "upgrade.done transport=shm at the client for every connection (%d of %d)" % (len(dcli), len(expect)))
    check(not fails, L + "no upgrade.fail (%s)" % [(r.get("role"), r.get("reason")) for r in fails][:4])
    if shape in ("epoll", "threads"):
        check(all(r["pid"] == parent for r in dsrv), L + "server upgrades in the server process")
    elif shape == "prefork":
        check(kids and all(r["pid"] in kids for r in dsrv), L + "server upgrades in the worker processes")
    else:
        check(all(r["pid"] == parent for r in srv), L + "accepts traced in the acceptor")
        check(len(kids) == conns and all(r["pid"] in kids for r in dsrv)
              and len({r["pid"] for r in dsrv}) == conns,
              L + "each server-side upgrade.done is in the forked child doing the I/O (one per child)")
else:  # exec: upgraded in the exec'd program, or stays TCP
    inh = [r for r in tracks("server", port) if r["how"] == "inherited"]
    check(len(inh) == conns and {r["pid"] for r in inh} <= kids,
          L + "each exec'd child adopted its connection (%d conn.track how=inherited)" % len(inh))
    check(all(r["pid"] in kids for r in dsrv),
          L + "any server-side upgrade.done is in an exec'd child, not the acceptor")
    up = {conn_key(r) for r in dsrv}
    check(up == {conn_key(r) for r in dcli}, L + "the two ends agree on which connections upgraded (%d)" % len(up))
    print("    exec: %d of %d connections upgraded in the exec'd program, %d stayed on TCP" % (
        len(up), conns, conns - len(up)))
PY
}

for shape in epoll threads prefork forkconn exec; do
  run_case "$shape"
  run_case "$shape" --nonblock
  run_case "$shape" --half-close
  run_case "$shape" --nonblock --half-close
done

# The EOF right after an rx switch.
eof_case() {
  local port dir out base
  dir=$WORK/eof
  mkdir -p "$dir"
  cat >"$dir/eof.py" <<'PYEOF'
import socket, sys, time
port = int(sys.argv[1])
l = socket.socket()
l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(("127.0.0.1", port))
l.listen(1)
c = socket.create_connection(("127.0.0.1", port))
s, _ = l.accept()
c.sendall(b"hello")                   # on TCP: the server has not offered yet
first = s.recv(100)                   # the server offers, reads b"hello"
def nudge(sock):                      # a data call: the handshake moves on
    try:
        sock.recv(100, socket.MSG_DONTWAIT)
    except BlockingIOError:
        pass
time.sleep(0.05)
nudge(c)                              # the client takes the offer (ACCEPT)
time.sleep(0.05)
nudge(s)                              # the server maps the ring, commits
time.sleep(0.05)
nudge(c)                              # the client learns it, switches its tx
c.close()
time.sleep(0.05)
then = s.recv(100)
print("first=%r then=%r" % (first, then))
PYEOF
  port=$(free_port)
  base=$(no_shim "$PYTHON" "$dir/eof.py" "$port" 2>&1)
  port=$(free_port)
  out=$(with_shim RDMASHIM_PORTS="$port" RDMASHIM_TRANSPORTS=shm RDMASHIM_TRACE=debug \
        "RDMASHIM_TRACE_FILE=$dir/trace.%p.jsonl" "$PYTHON" "$dir/eof.py" "$port" 2>&1)
  same "eof after switch: baseline reads EOF" "first=b'hello' then=b''" "$base"
  same "eof after switch: with the shim the read after the switch frame is EOF, no phantom byte" "$base" "$out"
  trace_py "$dir" "$port" <<'PY'
port = int(ARGS[0])
srv = [r for r in events("rx.switch") if port_of(r["local"]) == port]
check(len(srv) == 1, "eof after switch: the server did switch its rx (rx.switch traced)")
PY
}
eof_case

close_case() {
  local port dir out base rc=0 brc=0
  dir=$WORK/close
  mkdir -p "$dir"
  cat >"$dir/close.py" <<'PYEOF'
import os, socket, sys, threading, time
port = int(sys.argv[1])
l = socket.socket()
l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(("127.0.0.1", port))
l.listen(1)
c = socket.create_connection(("127.0.0.1", port))
s, _ = l.accept()
for i in range(20):                 # a few round trips: both ends upgrade
    c.sendall(b"ping")
    assert s.recv(4) == b"ping"
    s.sendall(b"pong")
    assert c.recv(4) == b"pong"
def reader():
    try:
        print("reader got %r" % c.recv(100), flush=True)
    except OSError as e:
        print("reader: %s" % e, flush=True)
t = threading.Thread(target=reader, daemon=True)
t.start()
time.sleep(0.3)                     # the reader sleeps in recv now
os.close(c.detach())                # close the fd under it
time.sleep(0.5)                     # its sleep slice runs out
s.sendall(b"late")
time.sleep(0.3)
print("survived", flush=True)
PYEOF
  port=$(free_port)
  base=$(no_shim "$PYTHON" "$dir/close.py" "$port" 2>&1) || brc=$?
  port=$(free_port)
  out=$(with_shim RDMASHIM_PORTS="$port" RDMASHIM_TRANSPORTS=shm RDMASHIM_TRACE=info \
        "RDMASHIM_TRACE_FILE=$dir/trace.%p.jsonl" "$PYTHON" "$dir/close.py" "$port" 2>&1) || rc=$?
  same "close under a sleeping reader: baseline" "reader got b'late'
survived (status 0)" "$base (status $brc)"
  same "close under a sleeping reader: with the shim the process survives as without it" \
    "$base (status $brc)" "$out (status $rc)"
  trace_py "$dir" <<'PY'
done = events("upgrade.done")
check(len(done) == 2, "close under a sleeping reader: the connection was upgraded at both ends (%d upgrade.done)" % len(done))
PY
}
close_case

# idle client: the server waits in recv from accept on, the client connects
# and says nothing for longer than the upgrade timeout (a pool, a pause), then
# talks. The server's first attempt times out on the idle client; since the
# connection had carried no byte, it tries once more when the first byte
# moves, and the connection upgrades at both ends.
idle_case() {
  local port dir out base
  dir=$WORK/idle
  mkdir -p "$dir"
  cat >"$dir/idle.py" <<'PYEOF'
import socket, sys, threading, time
port = int(sys.argv[1])
l = socket.socket()
l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(("127.0.0.1", port))
l.listen(1)
def server():
    s, _ = l.accept()
    while True:
        m = s.recv(4)                 # waits here from accept on
        if not m:
            break
        s.sendall(m)
t = threading.Thread(target=server)
t.start()
c = socket.create_connection(("127.0.0.1", port))
time.sleep(1.5)                       # idle past RDMASHIM_UPGRADE_TIMEOUT_MS=1000
ok = 0
for i in range(200):
    c.sendall(b"p%03d" % (i % 1000))
    ok += c.recv(4) == b"p%03d" % (i % 1000)
    time.sleep(0.002)
c.close()
t.join()
print("echoed %d of 200" % ok)
PYEOF
  port=$(free_port)
  base=$(no_shim "$PYTHON" "$dir/idle.py" "$port" 2>&1)
  port=$(free_port)
  out=$(with_shim RDMASHIM_PORTS="$port" RDMASHIM_TRANSPORTS=shm RDMASHIM_UPGRADE_TIMEOUT_MS=1000 RDMASHIM_TRACE=info \
        "RDMASHIM_TRACE_FILE=$dir/trace.%p.jsonl" "$PYTHON" "$dir/idle.py" "$port" 2>&1)
  same "idle client: baseline" "echoed 200 of 200" "$base"
  same "idle client: with the shim every message is echoed" "$base" "$out"
  trace_py "$dir" <<'PY'
done = events("upgrade.done")
check(len(done) == 2, "idle client: upgraded at both ends after an idle start longer than the timeout (%d upgrade.done)" % len(done))
PY
}
idle_case

finish
