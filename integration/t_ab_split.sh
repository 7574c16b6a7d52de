#!/bin/bash
# t_ab_split: RDMASHIM_AB_PERCENT splits whitelisted connections by a hash of
# the 4-tuple. With 50 % and 40 connections the trace must hold both
# decisions (eligible=true reason=whitelisted, eligible=false
# reason=ab_excluded), and the client and the server end of every connection
# (matched by 4-tuple) must have made the same decision on their own. 0 % and
# 100 % must give all-excluded and all-eligible. The transports are "shm"
# (the A/B test only applies when an upgrade is possible at all); whatever the
# shim does with eligible connections, the client's bytes must match the run
# without the shim.
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
need_built "$PROGS/echo_server" "$PROGS/echo_client"
need_cmd python3

# ab_run PERCENT CONNS SHAPE BIND HOST FLAGS...
ab_run() {
  local pct=$1 conns=$2 shape=$3 bind=$4 host=$5 port pid base got rc dir label
  shift 5
  label="AB=$pct% $conns conns $shape $bind<-$host ${*:-blocking}"
  dir=$WORK/ab$pct-$shape-$RANDOM
  mkdir -p "$dir"
  port=$(free_port)
  local cli=("$PROGS/echo_client" --host "$host" --port "$port" --bytes 64K --conns "$conns" --seed "$pct" "$@")
  local srv=("$PROGS/echo_server" --shape "$shape" --bind "$bind" --port "$port" --max-conns "$conns")

  start_bg "${dir##*/}-plain" plain "${srv[@]}"
  pid=$BG_PID
  wait_ready "${dir##*/}-plain" >/dev/null || { not_ok "$label: baseline server ready"; stop_bg "$pid"; return; }
  base=$(no_shim "${cli[@]}" 2>&1)
  wait_bg "$pid" 30
  check "$label: baseline without shim: $base" test "${base%% *}" = OK

  local vars=(RDMASHIM_PORTS="$port" RDMASHIM_TRANSPORTS=shm RDMASHIM_AB_PERCENT="$pct"
              RDMASHIM_TRACE=debug "RDMASHIM_TRACE_FILE=$dir/trace.%p.jsonl")
  start_bg "${dir##*/}-shim" shim "${vars[@]}" "${srv[@]}"
  pid=$BG_PID
  wait_ready "${dir##*/}-shim" >/dev/null || { not_ok "$label: server ready"; stop_bg "$pid"; return; }
  got=$(with_shim "${vars[@]}" "${cli[@]}" 2>&1)
  rc=0; wait_bg "$pid" 30 || rc=$?
  same "$label: client output with shim = without" "$base" "$got"
  check "$label: server exit status 0 (got $rc)" test "$rc" -eq 0
  no_output "$label: nothing on server stderr" "$WORK/${dir##*/}-shim.err"

  trace_py "$dir" "$label" "$port" "$conns" "$pct" <<'PY'
label, port, conns, pct = ARGS[0], int(ARGS[1]), int(ARGS[2]), int(ARGS[3])
L = label + ": "
srv = [r for r in tracks("server", port) if r["how"] in ("accept", "inherited")]
cli = tracks("client", port)
# One decision per connection and side (an exec'd server adopts it again).
sd, cd = {}, {}
for side, recs in (("server", srv), ("client", cli)):
    d = sd if side == "server" else cd
    for r in recs:
        d.setdefault(conn_key(r), set()).add((r["eligible"], r["reason"]))
check(len(sd) == conns and len(cd) == conns and set(sd) == set(cd),
      L + "both ends tracked the same %d connections (server %d, client %d)" % (conns, len(sd), len(cd)))
check(all(len(v) == 1 for v in list(sd.values()) + list(cd.values())),
      L + "one decision per connection per side, even across processes")
agree = [k for k in sd if k in cd and sd[k] == cd[k]]
check(len(agree) == conns, L + "client and server agree on every connection (%d of %d)" % (len(agree), conns))
for k in [k for k in sd if k in cd and sd[k] != cd[k]][:5]:
    print("    disagree %s: server %s client %s" % (k, sd[k], cd[k]))
decisions = [next(iter(v)) for v in sd.values()]
valid = {(True, "whitelisted"), (False, "ab_excluded")}
check(set(decisions) <= valid, L + "decisions are eligible/whitelisted or excluded/ab_excluded (%s)" % set(decisions))
n_in = sum(1 for e, _ in decisions if e)
if pct == 0:
    check(n_in == 0, L + "0%%: all excluded (%d eligible)" % n_in)
elif pct == 100:
    check(n_in == conns, L + "100%%: all eligible (%d)" % n_in)
else:
    check(0 < n_in < conns, L + "both decisions present: %d eligible, %d ab_excluded" % (n_in, conns - n_in))
PY
}

ab_run 50 40 epoll 127.0.0.1 127.0.0.1 --nonblock
ab_run 50 40 exec 127.0.0.1 127.0.0.1 --half-close
# The hash must not depend on the address family a side happens to use.
ab_run 50 40 threads ::ffff:127.0.0.1 127.0.0.1
ab_run 50 40 prefork ::1 ::1 --nonblock
ab_run 0 10 threads 127.0.0.1 127.0.0.1
ab_run 100 10 epoll 127.0.0.1 127.0.0.1 --half-close

finish
