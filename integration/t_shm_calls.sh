#!/bin/bash
# t_shm_calls: socket calls whose results a program relies on, on an
# upgraded connection (integration/progs/calls_probe.c holds both ends in one
# process): a blocking recv interrupted by an SA_RESTART handler restarts;
# an SO_RCVTIMEO past 2^32 ms does not wrap to a short one; sendmsg with
# ancillary data puts the same bytes on the stream as the kernel does;
# recvmsg(MSG_ERRQUEUE) never consumes stream bytes; sendfile with a NULL
# offset moves the file position only by what was sent; poll over one fd
# returns 1. The output under the shim (RDMASHIM_TRANSPORTS=shm) must equal
# the output without it, and both ends must have upgraded (or the calls were
# made on TCP and prove nothing).
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
need_built "$PROGS/calls_probe"
need_cmd python3

port=$(free_port)
base=$(no_shim "$PROGS/calls_probe" "$port" 2>&1)
check "calls_probe without the shim ran to the end" grep -q '^poll_one: 1 ' <<<"$base"

dir=$WORK/shm
mkdir -p "$dir"
port=$(free_port)
got=$(with_shim RDMASHIM_PORTS="$port" RDMASHIM_TRANSPORTS=shm RDMASHIM_TRACE=info \
  RDMASHIM_TRACE_FILE="$dir/trace.%p.jsonl" "$PROGS/calls_probe" "$port" 2>&1)
same "calls_probe under the shim (shm) = without" "$base" "$got"
trace_py "$dir" <<'PY'
done = events("upgrade.done")
check(len(done) == 2 and all(r.get("transport") == "shm" for r in done),
      "both ends upgraded to shm before the calls (%d upgrade.done)" % len(done))
check(not events("conn.abort"), "no connection aborted")
PY
finish
