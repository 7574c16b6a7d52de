#!/bin/bash
# t_sandboxed: a server under the shim whose per-connection child installs a
# seccomp filter before its first read (no_new_privs, then a filter that
# kills the process on socket(2) and memfd_create(2)), as sshd's pre-auth
# child does. Clients with and without the shim. The shim must notice the
# sandbox (prctl) and start no side-channel work in that process: every
# child lives and echoes every byte (traced process.sandboxed, and the
# connections stay on TCP with reason sandboxed).
# Then a filter the server inherits at start, as from a container runtime
# or systemd's SystemCallFilter= (integration/progs/seccomp_exec), with a
# shimmed client: one that kills on socket(AF_UNIX) (the shim's rendezvous;
# the server never makes one) leaves the server pass-through by default (process.sandboxed how
# inherited, its connections not eligible, reason sandboxed), and it lives
# and echoes every byte; one the operator vouches for
# (RDMASHIM_SECCOMP_TRUST=1, a filter that kills only on acct) upgrades.
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
need_built "$PROGS/sandboxed_echo" "$PROGS/echo_client" "$PROGS/echo_server" "$PROGS/seccomp_exec"

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

for mode in unix:0 acct:1; do
  kill=${mode%%:*} trust=${mode##*:}
  port=$(free_port)
  dir=$WORK/inherited-$kill
  mkdir -p "$dir"
  vars=(RDMASHIM_PORTS="$port" RDMASHIM_TRANSPORTS=shm RDMASHIM_TRACE=info RDMASHIM_SECCOMP_TRUST="$trust"
    RDMASHIM_TRACE_FILE="$dir/trace.%p.jsonl")
  start_bg "srv-inherited-$kill" shim "${vars[@]}" "$PROGS/seccomp_exec" "$kill" "$PROGS/echo_server" --port "$port" \
    --max-conns "$CONNS"
  pid=$BG_PID
  wait_ready "srv-inherited-$kill" >/dev/null || not_ok "inherited $kill: server ready"
  got=$(with_shim "${vars[@]}" "$PROGS/echo_client" --port "$port" --bytes 2M --conns "$CONNS" --seed 5 2>&1)
  rc=0; wait_bg "$pid" 30 || rc=$?
  L="inherited filter on $kill, trust $trust"
  check "$L: every byte echoed ($got)" test "${got%% *}" = OK
  check "$L: the server lived (status $rc)" test "$rc" -eq 0
  srv=$(grep -l '"role":"server"' "$dir"/trace.*.jsonl | head -n 1)
  sandboxed=$(grep -c '"event":"process.sandboxed".*"how":"inherited"' "$srv")
  switched=$(grep -c '"event":"tx.switch"' "$srv")
  if [[ $kill == unix ]]; then
    check "$L: the server traced its inherited sandbox" test "$sandboxed" -eq 1
    check "$L: its connections were not eligible, reason sandboxed" \
      test "$(grep -c '"event":"conn.track".*"reason":"sandboxed".*"eligible":false' "$srv")" -eq "$CONNS"
    check "$L: nothing switched ($switched)" test "$switched" -eq 0
  else
    check "$L: the operator's word keeps it upgrading (no process.sandboxed)" test "$sandboxed" -eq 0
    check "$L: every connection upgraded ($switched of $CONNS tx.switch)" test "$switched" -eq "$CONNS"
  fi
done
finish
