#!/bin/bash
# t_epoll_dup: an epoll registration whose number is closed while a dup keeps
# the file open stays in the set, reported with the program's data, until
# the file's last fd goes; a new file that gets the old number is a
# registration of its own (integration/progs/epoll_dup.c has the steps).
# The program runs without the shim (the kernel's answers, which it
# checks), then with both ends under the shim on shm: the connections
# upgrade (upgrade.done in the trace), so the registrations are the shim's.
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
need_built "$PROGS/epoll_dup"

port=$(free_port)
out=$(no_shim "$PROGS/epoll_dup" --port "$port" 2>&1)
rc=$?
check "no shim: $out (status $rc)" test "$rc" -eq 0 -a "${out%% *}" = OK

port=$(free_port)
out=$(with_shim RDMASHIM_PORTS="$port" RDMASHIM_TRANSPORTS=shm RDMASHIM_TRACE=info \
      "RDMASHIM_TRACE_FILE=$WORK/trace.%p.jsonl" "$PROGS/epoll_dup" --port "$port" 2>&1)
rc=$?
check "shim: $out (status $rc)" test "$rc" -eq 0 -a "${out%% *}" = OK
done=$(cat "$WORK"/trace.*.jsonl 2>/dev/null | grep -c '"event":"upgrade.done"' || true)
# Four connections, both ends in the one process.
check "the connections upgraded ($done upgrade.done, want 8)" test "$done" -eq 8

finish
