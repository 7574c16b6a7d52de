#!/bin/bash
# t_not_whitelisted: the shim loaded at both ends, but RDMASHIM_PORTS names
# another port. Nothing may be tracked: at debug level the only trace lines
# are process.start (plus the fork/exec notes of the server's own processes
# and the per-process process.stats, which may count only not_whitelisted);
# at trace level the skips are named with reason not_whitelisted; with
# RDMASHIM_PORTS unset the shim is inert and writes no trace at all. The
# client prints the same line as without the shim, in every case.
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
need_built "$PROGS/echo_server" "$PROGS/echo_client"
need_cmd python3

CONNS=3

# one_run LABEL SHAPE MODE [VAR=V...]: RESULT = the client's output line,
# LAST_PORT = the server port
one_run() {
  local label=$1 shape=$2 mode=$3 port pid out rc=0
  shift 3
  port=$(free_port)
  start_bg "$label-server" "$mode" "$@" "$PROGS/echo_server" --shape "$shape" --port "$port" \
    --max-conns "$CONNS"
  pid=$BG_PID
  if ! wait_ready "$label-server" >/dev/null; then
    stop_bg "$pid"
    RESULT="server not ready"
    return
  fi
  if [[ $mode == shim ]]; then
    out=$(with_shim "$@" "$PROGS/echo_client" --port "$port" --bytes 512K --conns "$CONNS" --seed 3 \
          --half-close 2>&1)
  else
    out=$(no_shim "$PROGS/echo_client" --port "$port" --bytes 512K --conns "$CONNS" --seed 3 \
          --half-close 2>&1)
  fi
  wait_bg "$pid" 30 || rc=$?
  [[ $rc -ne 0 ]] && out="$out (server status $rc)"
  RESULT=$out
  LAST_PORT=$port
}

one_run base epoll plain
base=$RESULT
check "baseline without shim: $base" test "${base%% *}" = OK

for shape in epoll prefork exec; do
  # Debug level, another port whitelisted.
  dir=$WORK/debug-$shape
  mkdir -p "$dir"
  other=$(free_port)
  vars=(RDMASHIM_PORTS="$other" RDMASHIM_TRANSPORTS=tcp RDMASHIM_TRACE=debug
        "RDMASHIM_TRACE_FILE=$dir/trace.%p.jsonl")
  one_run "debug-$shape" "$shape" shim "${vars[@]}"
  got=$RESULT
  same "$shape, debug, other port whitelisted: client output unchanged" "$base" "$got"
  trace_py "$dir" "$shape" <<'PY'
shape = ARGS[0]
names = sorted({r["event"] for r in T})
starts = events("process.start")
check(len(starts) >= 2, shape + ": process.start from server and client (%d)" % len(starts))
allowed = {"process.start", "process.fork", "process.exec", "process.stats"}
check(set(names) <= allowed, shape + ": no event but process.start/fork/exec/stats (got %s)" % names)
# process.stats counts decisions by reason: only "not ours" ones may appear.
bad = [r for r in events("process.stats")
       if not set(r.get("reasons", {})) <= {"not_whitelisted", "not_tcp", "none"}]
check(not bad, shape + ": process.stats counts no tracking decision (%s)" % [r.get("reasons") for r in bad])
check(not events("conn.track") and not events("listen.track"), shape + ": no conn.track, no listen.track")
check(not [r for r in T if "local" in r or "peer" in r], shape + ": no line names a socket")
PY

  # Trace level: the skips show, with their reason.
  dir=$WORK/trace-$shape
  mkdir -p "$dir"
  vars=(RDMASHIM_PORTS="$other" RDMASHIM_TRANSPORTS=tcp RDMASHIM_TRACE=trace
        "RDMASHIM_TRACE_FILE=$dir/trace.%p.jsonl")
  one_run "trace-$shape" "$shape" shim "${vars[@]}"
  got=$RESULT
  same "$shape, trace level: client output unchanged" "$base" "$got"
  trace_py "$dir" "$shape" "$LAST_PORT" "$CONNS" <<'PY'
shape, conns = ARGS[0], int(ARGS[2])
check(not events("conn.track") and not events("listen.track"), shape + ": nothing tracked at trace level")
ls = events("listen.skip")
check(len(ls) == 1 and ls[0]["reason"] == "not_whitelisted", shape + ": one listen.skip reason=not_whitelisted")
cs = events("conn.skip")
check(len(cs) == conns and all(r["reason"] == "not_whitelisted" for r in cs),
      shape + ": %d conn.skip reason=not_whitelisted (got %d)" % (conns, len(cs)))
PY
done

# RDMASHIM_PORTS unset: inert, not even a trace file.
dir=$WORK/unset
mkdir -p "$dir"
one_run unset exec shim RDMASHIM_TRANSPORTS=tcp RDMASHIM_TRACE=debug \
  "RDMASHIM_TRACE_FILE=$dir/trace.%p.jsonl"
got=$RESULT
got=$RESULT
same "RDMASHIM_PORTS unset: client output unchanged" "$base" "$got"
check "RDMASHIM_PORTS unset: no trace file written" \
  test -z "$(find "$dir" -name 'trace.*' -print -quit)"
check "RDMASHIM_PORTS unset: server stderr empty" test ! -s "$WORK/unset-server.err"

# RDMASHIM_PORTS empty: the same.
dir=$WORK/empty
mkdir -p "$dir"
one_run empty epoll shim RDMASHIM_PORTS= RDMASHIM_TRACE=debug "RDMASHIM_TRACE_FILE=$dir/trace.%p.jsonl"
got=$RESULT
same "RDMASHIM_PORTS empty: client output unchanged" "$base" "$got"
check "RDMASHIM_PORTS empty: no trace file written" \
  test -z "$(find "$dir" -name 'trace.*' -print -quit)"

finish
