#!/bin/bash
# t_ready_rules: the readiness rules hold under free-running traffic on many
# connections at once, in the shapes real servers use: two worker
# processes sharing a listener (level), EPOLLET (et), EPOLLONESHOT shared
# by two threads (oneshot), EPOLL_CTL_MOD between EPOLLIN and EPOLLOUT per
# request (modtoggle), a process per connection (forkconn), and poll()
# with every fd twice plus select() (poll); integration/progs/ready_rules/main.c
# states the rules R1-R6 and checks them at every wait of both ends.
# Each mode runs without the shim (the kernel must give no violation, or
# the checker is wrong), then with both ends under the shim on shm: no
# violation either, and the connections upgraded (upgrade.done in the
# trace, one per end). The only timing bound is the checker's generous
# stall bound (a report late by more than 1 s), so a loaded machine passes.
#
# READY_MODES="level et" picks modes; READY_SECONDS sets each run's traffic
# time (default 2.5).
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
need_built "$PROGS/ready_rules"

modes=${READY_MODES:-level et oneshot modtoggle forkconn poll}
secs=${READY_SECONDS:-2.5}
conns=32

for m in $modes; do
  port=$(free_port)
  out=$(no_shim "$PROGS/ready_rules" --mode "$m" --port "$port" --conns "$conns" --seconds "$secs" 2>&1)
  rc=$?
  check "$m, no shim: $(tail -n 1 <<<"$out") (status $rc)" test "$rc" -eq 0 -a "$(tail -n 1 <<<"$out" | cut -d' ' -f1)" = OK
  ((rc == 0)) || grep -E '^(VIOLATION|ERROR)' <<<"$out" | head -n 20 | sed 's/^/    | /'

  port=$(free_port)
  dir=$WORK/$m
  mkdir -p "$dir"
  out=$(with_shim RDMASHIM_PORTS="$port" RDMASHIM_TRANSPORTS=shm RDMASHIM_TRACE=info \
        "RDMASHIM_TRACE_FILE=$dir/trace.%p.jsonl" \
        "$PROGS/ready_rules" --mode "$m" --port "$port" --conns "$conns" --seconds "$secs" 2>&1)
  rc=$?
  echo "$out" >"$dir/out.txt"
  check "$m, shim: $(tail -n 1 <<<"$out") (status $rc)" test "$rc" -eq 0 -a "$(tail -n 1 <<<"$out" | cut -d' ' -f1)" = OK
  if ((rc != 0)); then
    grep -E '^(VIOLATION|ERROR)' <<<"$out" | head -n 20 | sed 's/^/    | /'
    log "$m: output in $dir/out.txt, traces in $dir/"
    trace_digest "$dir"
  fi
  done_n=$(cat "$dir"/trace.*.jsonl 2>/dev/null | grep -c '"event":"upgrade.done"' || true)
  # Two ends per connection. Most, not all: the shim may keep or send a
  # connection back to TCP by its own rules (a writer far ahead of its
  # reader, a connection that does not pay), which is no readiness matter.
  check "$m: the connections upgraded ($done_n upgrade.done, want >= $((conns * 3 / 2)) of $((2 * conns)))" \
    test "$done_n" -ge $((conns * 3 / 2))
done

finish
