#!/bin/bash
# t_shm_fd_limit: a process near its fd limit keeps its connections on TCP
# and says why. The server runs with `ulimit -n 64`; the shim leaves the
# last 1/32 of the limit (16 fds at least) to the program, so once the
# server holds about 48 fds its handshakes can not have a rendezvous socket.
# 36 connections, 5 one-byte rounds over each in turn (conn_hold), both ends
# under the shim with the upgrade at the first data call: every byte comes
# back, the server's refused upgrades carry reason fd_limit (not
# internal_error, as before), and some connections still upgraded.
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
need_built "$PROGS/conn_hold"

port=$(free_port)
dir=$WORK/fdlimit
mkdir -p "$dir"
vars=(RDMASHIM_PORTS="$port" RDMASHIM_TRANSPORTS=shm RDMASHIM_UPGRADE_AFTER_MS=0 RDMASHIM_TRACE=info
  RDMASHIM_TRACE_FILE="$dir/trace.%p.jsonl")
start_bg server shim "${vars[@]}" bash -c "ulimit -n 64 && exec $PROGS/conn_hold server --port $port --conns 36 --rounds 5 --hold $dir/hold"
pid=$BG_PID
wait_ready server >/dev/null || not_ok "server ready"
start_bg client shim "${vars[@]}" "$PROGS/conn_hold" client --port "$port" --conns 36 --rounds 5 --hold "$dir/hold"
cpid=$BG_PID
for ((i = 0; i < 600; i++)); do
  grep -q '^UP' "$WORK/client.out" 2>/dev/null && break
  kill -0 "$cpid" 2>/dev/null || break
  sleep 0.05
done
check "client: every byte of 36 connections came back ($(tail -n 1 "$WORK/client.out"))" grep -q '^UP' "$WORK/client.out"
touch "$dir/hold"
wait_bg "$cpid" 30 || not_ok "client exit"
wait_bg "$pid" 30 || not_ok "server exit"
fails() { cat "$dir"/trace.*.jsonl | grep '"event":"upgrade.fail"' | grep -c "\"reason\":\"$1\"" || true; }
n_limit=$(fails fd_limit)
n_internal=$(fails internal_error)
n_done=$(cat "$dir"/trace.*.jsonl | grep -c '"event":"upgrade.done"' || true)
check "upgrades refused for the fd limit say so (fd_limit: $n_limit)" test "$n_limit" -gt 0
check "none says internal_error ($n_internal)" test "$n_internal" -eq 0
check "connections below the limit still upgraded ($n_done upgrade.done)" test "$n_done" -gt 0
finish
