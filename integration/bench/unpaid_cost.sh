#!/bin/bash
# unpaid_cost.sh: what a request/answer costs on a connection whose
# exchanges keep waking sleeping receivers with bells (shim/io/io_tx.c,
# RDMASHIM_UNPAID_PERCENT), once it went back to TCP, beside the same
# connection kept on shm and beside plain TCP.
#
# One connection of ROUNDS one-byte request/answers (conn_hold --seq), each
# end waiting THINK us before each write (--think: requests far apart, a
# slow server), RDMASHIM_SPIN_US=0 so that every receiver sleeps; the
# client under `strace -c`. Modes, alternated round by round:
#   shim       defaults: the connection goes back to TCP after 128 exchanges
#   shim_kept  RDMASHIM_UNPAID_PERCENT=0: it stays on shm, every message
#              woken by a bell
#   tcp        no shim
# Prints per mode the client's system calls per round (counted, not timed:
# the same on a busy machine) and both ends' CPU per round (median), then
#   bench unpaid_cost: syscalls/round shim S kept K tcp T; cpu us/round ...
# BENCH_LIB=other/librdmashim.so measures another build the same way.
#
# Environment: BENCH_UNPAID_ROUNDS (default 3 alternated rounds),
# BENCH_UNPAID_EXCHANGES (default 2000), BENCH_UNPAID_THINK_US (default 50).
. "$(dirname "${BASH_SOURCE[0]}")/common.bash"
need strace ss

ROUNDS=${BENCH_UNPAID_ROUNDS:-3}
EXCHANGES=${BENCH_UNPAID_EXCHANGES:-2000}
THINK=${BENCH_UNPAID_THINK_US:-50}
BENCH_SHIM_ENV="RDMASHIM_TRANSPORTS=shm RDMASHIM_UPGRADE_AFTER_MS=0 RDMASHIM_SPIN_US=0"
VARIANT_ENV[shim_kept]=RDMASHIM_UNPAID_PERCENT=0
declare -A CALLS=() CPUR=()

one_run() {
	local mode=$1 calls c s
	SEQ_CLIENT_WRAP="strace -c -o $WORK/strace.txt" seq_pair "$mode" 1 "$EXCHANGES" --think "$THINK"
	# The data path's calls: every call but the think time's sleeps.
	calls=$(awk '$1 ~ /^[0-9.]+$/ && NF >= 5 && $NF != "clock_nanosleep" && $NF != "total" { n += $4 }
		END { print n + 0 }' "$WORK/strace.txt")
	c=$(sed -n 's/^DONE .*cpu_us=\([0-9.]*\).*/\1/p' "$WORK/client.log")
	s=$(sed -n 's/^DONE .*cpu_us=\([0-9.]*\).*/\1/p' "$WORK/server.log")
	CALLS[$mode]+="$(calc %.2f "$calls / $EXCHANGES") "
	CPUR[$mode]+="$(calc %.2f "($c + $s) / $EXCHANGES") "
}

say "one connection, $EXCHANGES request/answers, --think $THINK us, $ROUNDS rounds per mode, alternated"
for ((r = 0; r < ROUNDS; r++)); do
	for m in $(order "$r" shim shim_kept tcp); do one_run "$m"; done
done
line=""
for m in shim shim_kept tcp; do
	# shellcheck disable=SC2086
	say "$m: client syscalls/round ${CALLS[$m]% }; cpu us/round (both ends) ${CPUR[$m]% }"
	# shellcheck disable=SC2086
	line+=" ${m#shim_}: syscalls $(median ${CALLS[$m]}) cpu $(median ${CPUR[$m]})"
done
echo "bench unpaid_cost:$line (per request/answer; client syscalls, both ends' cpu us)"
