#!/bin/bash
# t_passthrough_shapes: every echo_server shape (epoll, threads, prefork,
# forkconn, exec) against echo_client (blocking or nonblocking connect, with
# and without half-close) over IPv4, IPv6 and v4-mapped IPv6, plus a server
# that speaks first. Each case runs once without the shim and once with both
# ends under it on a whitelisted port (RDMASHIM_TRANSPORTS=tcp: tracked,
# never upgraded); the client must print the same OK line both times and the
# trace must show each connection from both ends, in the process that owns it.
# SHIM_TRANSPORTS=shm runs the same matrix with same-host upgrades allowed.
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
need_built "$PROGS/echo_server" "$PROGS/echo_client" "$PROGS/serverfirst"
need_cmd python3

CONNS=4
BYTES=1M
CASE=0
BANNER=$'HELLO rdmashim\r\n'

# run_case SERVER-KIND SHAPE BIND CLIENT-HOST [CLIENT-FLAG...]
# SERVER-KIND is echo (echo_server --shape SHAPE) or first (serverfirst).
run_case() {
  local kind=$1 shape=$2 bind=$3 host=$4
  shift 4
  local flags=("$@") label port dir base got srv pid rc half=0
  CASE=$((CASE + 1))
  label="#$CASE $kind/$shape bind=$bind host=$host ${flags[*]:-blocking}"
  dir=$WORK/case$CASE
  mkdir -p "$dir"
  port=$(free_port) || { not_ok "$label: no free port"; return; }
  [[ " ${flags[*]} " == *" --half-close "* ]] && half=1
  if [[ $kind == echo ]]; then
    srv=("$PROGS/echo_server" --shape "$shape" --bind "$bind" --port "$port" --max-conns "$CONNS")
  else
    srv=("$PROGS/serverfirst" --bind "$bind" --port "$port" --max-conns "$CONNS")
    flags+=(--expect-banner "$BANNER")
  fi
  local cli=("$PROGS/echo_client" --host "$host" --port "$port" --bytes "$BYTES" --conns "$CONNS"
             --seed "$CASE" "${flags[@]}")

  # Without the shim.
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

  # With the shim at both ends.
  shim_vars "$dir" "$port"
  start_bg "case$CASE-shim-server" shim "${SHIM_VARS[@]}" "${srv[@]}"
  pid=$BG_PID
  if ! wait_ready "case$CASE-shim-server" >/dev/null; then
    not_ok "$label: server (shim) ready"
    stop_bg "$pid"
    return
  fi
  got=$(with_shim "${SHIM_VARS[@]}" "${cli[@]}" 2>"$dir/client.err")
  rc=0; wait_bg "$pid" 30 || rc=$?
  same "$label: client output with shim = without" "$base" "$got"
  check "$label: server exit status 0 under shim (got $rc)" test "$rc" -eq 0
  no_output "$label: nothing on client stderr" "$dir/client.err"
  no_output "$label: nothing on server stderr" "$WORK/case$CASE-shim-server.err"

  trace_py "$dir" "$label" "$shape" "$port" "$CONNS" "$half" "$kind" <<'PY'
label, shape, port, conns, half, kind = ARGS[0], ARGS[1], int(ARGS[2]), int(ARGS[3]), ARGS[4] == "1", ARGS[5]
L = label + ": "
lis = events("listen.track")
check(len(lis) == 1 and port_of(lis[0]["local"]) == port, L + "one listen.track on port %d" % port)
parent = lis[0]["pid"] if lis else None
srv = [r for r in tracks("server", port) if r["how"] == "accept"]
cli = [r for r in tracks("client", port) if r["how"] == "connect"]
check(len(srv) == conns, L + "%d conn.track role=server how=accept (got %d)" % (conns, len(srv)))
check(len(cli) == conns, L + "%d conn.track role=client how=connect (got %d)" % (conns, len(cli)))
check(all(port_of(r["local"]) == port for r in srv), L + "server tracks: local port %d" % port)
check(all(port_of(r["peer"]) == port for r in cli), L + "client tracks: peer port %d" % port)
check({conn_key(r) for r in srv} == {conn_key(r) for r in cli} and len({conn_key(r) for r in cli}) == conns,
      L + "client and server tracks name the same %d 4-tuples" % conns)
allt = tracks()
check(all(decided(r) for r in allt), L + "every track: " + DECISION)
check({r["state"] for r in allt} <= {"tcp", "connecting"}, L + "track states tcp/connecting")
forks = events("process.fork", parent=parent)
kids = {r["pid"] for r in forks}
shut_srv = [r for r in events("conn.shutdown") if port_of(r["local"]) == port]
check(len(shut_srv) == conns, L + "%d server-side conn.shutdown (got %d)" % (conns, len(shut_srv)))
if half:
    shut_cli = [r for r in events("conn.shutdown") if port_of(r["peer"]) == port]
    check(len(shut_cli) == conns and all(r["how"] == 1 for r in shut_cli),
          L + "%d client-side conn.shutdown how=1 (got %d)" % (conns, len(shut_cli)))
if kind == "first" or shape in ("epoll", "threads"):
    check(not forks, L + "no process.fork")
    check(all(r["pid"] == parent for r in srv), L + "accepts traced in the server process")
elif shape == "prefork":
    check(len(forks) == 4, L + "4 workers traced process.fork from %s (got %d)" % (parent, len(forks)))
    check(all(r["pid"] in kids for r in srv), L + "accepts traced in worker pids, not the parent")
elif shape == "forkconn":
    check(len(forks) == conns, L + "%d process.fork from the acceptor (got %d)" % (conns, len(forks)))
    check(all(r["pid"] == parent for r in srv), L + "accepts traced in the acceptor")
    check({r["pid"] for r in shut_srv} <= kids and len({r["pid"] for r in shut_srv}) == conns,
          L + "each child traced its connection's shutdown")
    pclose = [r for r in events("fd.close", role="server", pid=parent)]
    check(len(pclose) == conns, L + "acceptor traced fd.close of its %d copies (got %d)" % (conns, len(pclose)))
elif shape == "exec":
    check(len(forks) == conns, L + "%d process.fork from the acceptor (got %d)" % (conns, len(forks)))
    execs = [r for r in events("process.exec") if r["pid"] in kids]
    check(len(execs) == conns, L + "each child traced process.exec (got %d)" % len(execs))
    inh = [r for r in tracks("server", port) if r["how"] == "inherited"]
    check(len(inh) == conns and {r["pid"] for r in inh} == kids,
          L + "each exec'd child adopted its connection: conn.track how=inherited (got %d)" % len(inh))
    check({conn_key(r) for r in inh} == {conn_key(r) for r in srv}, L + "inherited tracks = accepted 4-tuples")
    check(len({r["pid"] for r in shut_srv} & kids) == conns, L + "the exec'd children traced the shutdowns")
PY
}

for shape in epoll threads prefork forkconn exec; do
  run_case echo "$shape" 127.0.0.1 127.0.0.1
  run_case echo "$shape" 127.0.0.1 127.0.0.1 --nonblock
  run_case echo "$shape" 127.0.0.1 127.0.0.1 --half-close
  run_case echo "$shape" 127.0.0.1 127.0.0.1 --nonblock --half-close
  run_case echo "$shape" ::1 ::1
  run_case echo "$shape" ::1 ::1 --nonblock --half-close
  # A dual-stack listener on the v4-mapped address: plain IPv4 clients and
  # IPv6 clients naming the mapped address must give the same tuples.
  run_case echo "$shape" ::ffff:127.0.0.1 127.0.0.1
  run_case echo "$shape" ::ffff:127.0.0.1 ::ffff:127.0.0.1 --nonblock --half-close
done
run_case first - 127.0.0.1 127.0.0.1
run_case first - ::1 ::1 --nonblock
run_case first - ::ffff:127.0.0.1 ::ffff:127.0.0.1 --half-close

finish
