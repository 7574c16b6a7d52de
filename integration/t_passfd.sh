#!/bin/bash
# t_passfd: connected sockets handed to another process with SCM_RIGHTS.
#   server side: `passfd serve` accepts and passes every connection to a
#     separate (forked and exec'd) receiver that echoes it;
#   client side: `passfd connect` connects and passes the socket to a child
#     that receives it and execs echo_client --fd N on it.
# Under the shim (whitelisted port, transports=tcp) the receiving process must
# trace conn.track how=scm_rights for each socket, with the same 4-tuple as
# the end that accepted or connected it, and the bytes must come back intact:
# echo_client prints the same line as in the run without the shim.
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
need_built "$PROGS/passfd" "$PROGS/echo_server" "$PROGS/echo_client"
need_cmd python3

CONNS=3

# Server side passes.
port=$(free_port)
cli=("$PROGS/echo_client" --port "$port" --bytes 1M --conns "$CONNS" --seed 11 --half-close)
start_bg serve-plain plain "$PROGS/passfd" serve --port "$port" --max-conns "$CONNS"
pid=$BG_PID
wait_ready serve-plain >/dev/null || not_ok "passfd serve (no shim) ready"
base=$(no_shim "${cli[@]}" 2>&1)
rc=0; wait_bg "$pid" 30 || rc=$?
check "serve, no shim: $base, passfd status $rc" test "${base%% *}" = OK -a "$rc" -eq 0

dir=$WORK/serve
mkdir -p "$dir"
shim_vars "$dir" "$port"
start_bg serve-shim shim "${SHIM_VARS[@]}" "$PROGS/passfd" serve --port "$port" --max-conns "$CONNS"
pid=$BG_PID
wait_ready serve-shim >/dev/null || not_ok "passfd serve (shim) ready"
got=$(with_shim "${SHIM_VARS[@]}" "${cli[@]}" 2>&1)
rc=0; wait_bg "$pid" 30 || rc=$?
same "serve: client output with shim = without" "$base" "$got"
check "serve: passfd exit status 0 under shim (got $rc)" test "$rc" -eq 0
no_output "serve: passfd stderr empty" "$WORK/serve-shim.err"
trace_py "$dir" "$port" "$CONNS" <<'PY'
port, conns = int(ARGS[0]), int(ARGS[1])
lis = events("listen.track")
check(len(lis) == 1, "one listen.track")
acceptor = lis[0]["pid"] if lis else None
acc = [r for r in tracks("server", port) if r["how"] == "accept"]
rcv = [r for r in tracks("server", port) if r["how"] == "scm_rights"]
check(len(acc) == conns and all(r["pid"] == acceptor for r in acc), "acceptor tracked %d accepts" % conns)
check(len(rcv) == conns, "receiver traced %d conn.track how=scm_rights role=server (got %d)" % (conns, len(rcv)))
check(all(r["pid"] != acceptor for r in rcv) and len({r["pid"] for r in rcv}) == 1,
      "... all in one receiving process, not the acceptor")
check({conn_key(r) for r in rcv} == {conn_key(r) for r in acc}, "received sockets = accepted 4-tuples")
check({conn_key(r) for r in tracks("client", port)} == {conn_key(r) for r in acc}, "= the client's 4-tuples")
rpid = rcv[0]["pid"] if rcv else None
check(len([r for r in events("fd.close", role="server", pid=acceptor)]) == conns,
      "acceptor closed its %d copies after passing them" % conns)
sh = [r for r in events("conn.shutdown", pid=rpid) if port_of(r["local"]) == port]
check(len(sh) == conns, "receiver traced the %d server shutdowns (got %d)" % (conns, len(sh)))
check(all(decided(r) for r in rcv), "received: " + DECISION)
PY

# Client side passes.
for flags in "--half-close" "--nonblock"; do
  port=$(free_port)
  label="connect $flags"
  read -ra fl <<<"$flags"
  start_bg "conn$port-plain" plain "$PROGS/echo_server" --port "$port" --max-conns 1
  pid=$BG_PID
  wait_ready "conn$port-plain" >/dev/null || not_ok "$label: echo_server (no shim) ready"
  base=$(no_shim "$PROGS/echo_client" --port "$port" --bytes 2M --seed 12 "${fl[@]}" 2>&1)
  wait_bg "$pid" 30
  check "$label, no shim: $base" test "${base%% *}" = OK

  dir=$WORK/connect$port
  mkdir -p "$dir"
  shim_vars "$dir" "$port"
  start_bg "conn$port-shim" shim "${SHIM_VARS[@]}" "$PROGS/echo_server" --port "$port" --max-conns 1
  pid=$BG_PID
  wait_ready "conn$port-shim" >/dev/null || not_ok "$label: echo_server (shim) ready"
  got=$(with_shim "${SHIM_VARS[@]}" "$PROGS/passfd" connect --host 127.0.0.1 --port "$port" -- \
        "$PROGS/echo_client" --bytes 2M --seed 12 "${fl[@]}" 2>&1)
  rc=0; wait_bg "$pid" 30 || rc=$?
  same "$label: echo_client on the passed socket prints the same line" "$base" "$got"
  check "$label: echo_server exit status 0 (got $rc)" test "$rc" -eq 0
  trace_py "$dir" "$port" "$label" <<'PY'
port, L = int(ARGS[0]), ARGS[1] + ": "
con = [r for r in tracks("client", port) if r["how"] == "connect"]
rcv = [r for r in tracks("client", port) if r["how"] == "scm_rights"]
inh = [r for r in tracks("client", port) if r["how"] == "inherited"]
srv = tracks("server", port)
check(len(con) == 1 and len(srv) == 1, L + "one connect, one accept")
check(len(rcv) == 1 and rcv[0]["pid"] != con[0]["pid"], L + "the child traced conn.track how=scm_rights role=client")
check(len(inh) == 1 and inh[0]["pid"] == rcv[0]["pid"], L + "after its exec, the same pid adopted it (how=inherited)")
check(len({conn_key(r) for r in con + rcv + inh + srv}) == 1, L + "all four name the same 4-tuple")
fk = events("process.fork", parent=con[0]["pid"] if con else -1)
check(len(fk) == 1 and fk[0]["pid"] == (rcv[0]["pid"] if rcv else None), L + "the receiver is the connector's child")
PY
done

finish
