#!/bin/bash
# t_shm_exit_handshake: a server that exits with a connection open right
# after reading its first request (redis-server on SHUTDOWN NOSAVE), both
# ends under the shim, 20 times. The server's OFFER is out; the client then
# checks the fd the server named and finds it gone while the server's
# rendezvous is not closed yet (the kernel closes an exiting process's fds
# in their order). That is a peer that went away, not a spoofer: no
# rv.refused, no verify_failed (7 of 30 were refused before).
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
need_built
need_cmd redis-server redis-cli

dir=$WORK/trace
mkdir -p "$dir"
bad=0
for i in $(seq 20); do
  port=$(free_port)
  vars=(RDMASHIM_PORTS="$port" RDMASHIM_TRANSPORTS=shm RDMASHIM_TRACE=info "RDMASHIM_TRACE_FILE=$dir/trace.%p.jsonl")
  start_bg "redis-$i" shim "${vars[@]}" redis-server --save '' --appendonly no --port "$port" --bind 127.0.0.1 \
    --dir "$WORK" --logfile '' --unixsocket ''
  pid=$BG_PID
  wait_listen "$port" || { bad=$((bad + 1)); stop_bg "$pid"; continue; }
  with_shim "${vars[@]}" redis-cli -h 127.0.0.1 -p "$port" SHUTDOWN NOSAVE >/dev/null 2>&1
  rc=0
  wait_bg "$pid" 20 || rc=$?
  ((rc == 0)) || bad=$((bad + 1))
done
check "20 redis-servers exited 0 after SHUTDOWN ($bad did not)" test "$bad" -eq 0
trace_py "$dir" <<'PY'
refused = events("rv.refused")
vf = [r for r in events("upgrade.fail") if r.get("reason") == "verify_failed"]
check(not refused and not vf, "no rv.refused (%d) and no upgrade.fail verify_failed (%d)" % (len(refused), len(vf)))
print("    upgrade.fail reasons: %s" % sorted({r.get("reason") for r in events("upgrade.fail")}))
PY
finish
