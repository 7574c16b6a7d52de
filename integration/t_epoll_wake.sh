#!/bin/bash
# t_epoll_wake: a thread asleep in epoll_wait wakes when another thread adds,
# or re-arms with MOD, a connection that is already readable
# (integration/progs/wake_on_add.c has the shapes). Without the shim the
# kernel wakes it at the change; under the shim, on shm, the connection's
# readiness is its ring's, and the set's kick must do it. The program fails
# by itself when a sleeper is not woken within its 5 s; the times are
# compared with the run without the shim, in the same run, with a margin
# far below the shim's longest sleep slice (200 ms), which is what a
# missed wake-up costs once the set holds other connections.
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
need_built "$PROGS/wake_on_add"

port=$(free_port)
plain=$(no_shim "$PROGS/wake_on_add" --port "$port" --rounds 3 2>&1)
rc=$?
check "no shim: $plain (status $rc)" test "$rc" -eq 0 -a "${plain%% *}" = OK

port=$(free_port)
shim=$(with_shim RDMASHIM_PORTS="$port" RDMASHIM_TRANSPORTS=shm RDMASHIM_TRACE=info \
       "RDMASHIM_TRACE_FILE=$WORK/trace.%p.jsonl" "$PROGS/wake_on_add" --port "$port" --rounds 3 2>&1)
rc=$?
check "shim: $shim (status $rc)" test "$rc" -eq 0 -a "${shim%% *}" = OK
done=$(cat "$WORK"/trace.*.jsonl 2>/dev/null | grep -c '"event":"upgrade.done"' || true)
# Two connections, both ends in the one process.
check "the connections upgraded ($done upgrade.done, want 4)" test "$done" -eq 4

# field NAME LINE: the figure of one shape.
field() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p" <<<"$2"; }
for shape in empty busy rearm; do
  p=$(field "$shape" "$plain")
  s=$(field "$shape" "$shim")
  check "$shape: woken ${s:-?} ms after the change (plain TCP ${p:-?} ms; at most 100 ms more)" \
    awk -v p="${p:-0}" -v s="${s:-1e9}" 'BEGIN { exit !(s <= p + 100) }'
done

finish
