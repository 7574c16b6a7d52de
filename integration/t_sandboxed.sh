#!/bin/bash
# t_sandboxed: a server under the shim whose per-connection child installs a
# seccomp filter before its first read (no_new_privs, then a filter that
# kills the process on socket(2) and memfd_create(2)), as sshd's pre-auth
# child does. Clients with and without the shim. The shim must notice the
# sandbox (prctl) and start no side-channel work in that process: every
# child lives and echoes every byte (traced process.sandboxed, and the
# connections stay on TCP with reason sandboxed).
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
need_built "$PROGS/sandboxed_echo" "$PROGS/echo_client"

CONNS=3
for client in plain shim; do
  port=$(free_port)
  dir=$WORK/$client
  mkdir -p "$dir"
  vars=(RDMASHIM_PORTS="$port" RDMASHIM_TRANSPORTS=shm RDMASHIM_TRACE=info
    RDMASHIM_TRACE_FILE="$dir/trace.%p.jsonl")
  start_bg "srv-$client" shim "${vars[@]}" "$PROGS/sandboxed_echo" --port "$port" --conns "$CONNS"
  pid=$BG_PID
  wait_ready "srv-$client" >/dev/null || not_ok "$client client: server ready"
  if [[ $client == plain ]]; then
    got=$(no_shim "$PROGS/echo_client" --port "$port" --bytes 2M --conns "$CONNS" --seed 3 2>&1)
  else
    got=$(with_shim "${vars[@]}" "$PROGS/echo_client" --port "$port" --bytes 2M --conns "$CONNS" --seed 3 2>&1)
  fi
  rc=0; wait_bg "$pid" 30 || rc=$?
  check "$client client: every byte echoed ($got)" test "${got%% *}" = OK
  check "$client client: no sandboxed child was killed (server status $rc)" test "$rc" -eq 0
  n=$(cat "$dir"/trace.*.jsonl | grep -c '"event":"process.sandboxed"' || true)
  check "$client client: the children traced their sandbox ($n of $CONNS)" test "$n" -ge "$CONNS"
done
finish
