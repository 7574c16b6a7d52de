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
# Last, a connection already on its channel when the server forks
# (integration/progs/fork_sandbox, both ends under the shim, then without
# it): the child sandboxes itself with an allow list that kills on any
# call it does not make itself (sendto, recvfrom, ioctl...), as sshd's
# pre-auth child, and serves the connection with read and write; the
# parent closes its copy at once, keeps it untouched, or serves the
# connection itself once the child exited. Every byte both ways, no
# SIGSYS; the child handed the connection back as it sandboxed itself
# (conn.handed_back), giving back the client's bytes it had to read to
# reach the client's SWITCH frame where they lay before it
# (conn.handback_return), and the parent that went on found it back on
# TCP (failover.elsewhere). Also with the client's direction never
# switched (half: its peer sends no RESUME).
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
need_built "$PROGS/sandboxed_echo" "$PROGS/echo_client" "$PROGS/echo_server" "$PROGS/seccomp_exec" \
  "$PROGS/fork_sandbox"

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
# Each case: parent:pending (see integration/progs/fork_sandbox.c).
for case in close:0 idle:0 resume:0 close:2000 idle:2000 resume:2000 resume:600000; do
  IFS=: read -r parent pending <<<"$case"
  for how in plain shim; do
    port=$(free_port)
    dir=$WORK/fork-$how-$parent-$pending
    mkdir -p "$dir"
    vars=(RDMASHIM_PORTS="$port" RDMASHIM_TRANSPORTS=shm RDMASHIM_TRACE=debug
      RDMASHIM_TRACE_FILE="$dir/trace.%p.jsonl")
    L="fork $parent, pending $pending, $how"
    start_bg "fsb-$how-$parent-$pending" "$how" "${vars[@]}" "$PROGS/fork_sandbox" server --port "$port" \
      --parent "$parent" --pending "$pending"
    pid=$BG_PID
    wait_ready "fsb-$how-$parent-$pending" >/dev/null || not_ok "$L: server ready"
    if [[ $how == plain ]]; then
      got=$(no_shim "$PROGS/fork_sandbox" client --port "$port" --parent "$parent" --pending "$pending" 2>&1)
    else
      got=$(with_shim "${vars[@]}" "$PROGS/fork_sandbox" client --port "$port" --parent "$parent" \
        --pending "$pending" 2>&1)
    fi
    rc=0; wait_bg "$pid" 30 || rc=$?
    check "$L: the client got every byte ($got)" test "$got" = OK
    check "$L: the server and its sandboxed child were right (status $rc: \
$(tr '\n' ' ' <"$WORK/fsb-$how-$parent-$pending.err" | head -c 300))" test "$rc" -eq 0
    [[ $how == shim ]] || continue
    n=$(cat "$dir"/trace.*.jsonl | grep -c '"event":"conn.handed_back"' || true)
    check "$L: the child handed the switched connection back ($n)" test "$n" -eq 1
    n=$(cat "$dir"/trace.*.jsonl | grep -c '"event":"conn.sandbox_kept"' || true)
    check "$L: no connection kept on its channel ($n)" test "$n" -eq 0
    n=$(cat "$dir"/trace.*.jsonl | grep -c '"event":"conn.handback_return"' || true)
    if ((pending > 0)); then
      check "$L: the bytes before the client's switch went back ($n)" test "$n" -eq 1
    else
      check "$L: nothing lay before the client's switch ($n returns)" test "$n" -eq 0
    fi
    n=$(cat "$dir"/trace.*.jsonl | grep -c '"event":"failover.elsewhere"' || true)
    if [[ $parent == resume ]]; then
      check "$L: the parent found the connection back on TCP ($n)" test "$n" -eq 1
    else
      check "$L: the parent never looked ($n failover.elsewhere)" test "$n" -eq 0
    fi
  done
done
# The client's direction never switches (it shuts its side early, so its
# SWITCH_AT says it stays on TCP) while the server's did: the child hands
# back a half-switched connection, whose peer sends no RESUME. Whether the
# client's shutdown comes before or after it took the server's offer is up
# to the scheduler: tried until one upgraded, every attempt checked.
for parent in close resume; do
  handed=0
  for attempt in 1 2 3 4 5 6 7 8; do
    port=$(free_port)
    dir=$WORK/half-$parent-$attempt
    mkdir -p "$dir"
    vars=(RDMASHIM_PORTS="$port" RDMASHIM_TRANSPORTS=shm RDMASHIM_TRACE=debug
      RDMASHIM_TRACE_FILE="$dir/trace.%p.jsonl")
    L="fork $parent, client half, attempt $attempt"
    start_bg "half-$parent-$attempt" shim "${vars[@]}" "$PROGS/fork_sandbox" server --port "$port" \
      --parent "$parent" --half 1
    pid=$BG_PID
    wait_ready "half-$parent-$attempt" >/dev/null || not_ok "$L: server ready"
    got=$(with_shim "${vars[@]}" "$PROGS/fork_sandbox" client --port "$port" --parent "$parent" --half 1 2>&1)
    rc=0; wait_bg "$pid" 30 || rc=$?
    check "$L: the client got every byte ($got)" test "$got" = OK
    check "$L: the server and its sandboxed child were right (status $rc: \
$(tr '\n' ' ' <"$WORK/half-$parent-$attempt.err" | head -c 300))" test "$rc" -eq 0
    if grep -q '"event":"upgrade.half"' "$dir"/trace.*.jsonl; then
      n=$(cat "$dir"/trace.*.jsonl | grep -c '"event":"conn.handed_back"' || true)
      check "$L: the child handed the half-switched connection back ($n)" test "$n" -eq 1
      handed=1
      break
    fi
  done
  check "fork $parent, client half: one attempt of $attempt had the server's direction alone switched" \
    test "$handed" -eq 1
done
finish
