#!/bin/bash
# break_even.sh: from how long a connection does an upgrade pay? The
# measurements behind the default of RDMASHIM_UPGRADE_AFTER_MS.
#
# build/progs/conn_hold --seq: connections one after the other, each
# connect, K one-byte ping-pong rounds, close, for K in BENCH_BE_ROUNDS
# (default "1 3 10 30 100 300 1000"); fewer connections for larger K
# (2000/K, 10 to 500). Three modes, rotated round by round (BENCH_ROUNDS,
# default 3):
#   tcp      no LD_PRELOAD
#   always   both ends under the shim, RDMASHIM_UPGRADE_AFTER_MS=0: every
#            connection upgrades to shm at its first data call
#   default  both ends under the shim with the defaults (the policy)
# Per mode and K: the client's wall time per connection (connect to close),
# and the CPU time of both processes per connection (CLOCK_PROCESS_CPUTIME_ID,
# each process its own). Prints per K
#   bench break_even K=k: tcp W us (lifetime), always W us (xR wall, xC cpu), default W us (xR, xC)
# and last the smallest K from which an upgrade at once no longer loses
# wall time to TCP (ratio <= 1.0), with the TCP lifetime of such a
# connection: the break-even.
. "$(dirname "${BASH_SOURCE[0]}")/common.bash"
need ss
ROUNDS=${BENCH_ROUNDS:-3}
KS=${BENCH_BE_ROUNDS:-1 3 10 30 100 300 1000}
[[ -x $PROGS/conn_hold ]] || die "$PROGS/conn_hold missing: run make first"
VARIANT_ENV[shim_always]="RDMASHIM_TRANSPORTS=shm RDMASHIM_UPGRADE_AFTER_MS=0"
VARIANT_ENV[shim_default]=""

field() { sed -n "s/^DONE .*$2=\([0-9.]*\).*/\1/p" "$1"; }
declare -A WALL=() CPU=()
# one MODE K CONNS: appends us per connection to WALL[MODE] and CPU[MODE]
one() {
	local mode=$1 k=$2 n=$3
	seq_pair "$mode" "$n" "$k"
	WALL[$mode]+="$(calc %.2f "$(field "$WORK/client.log" ms) * 1000 / $n") "
	CPU[$mode]+="$(calc %.2f "($(field "$WORK/client.log" cpu_us) + $(field "$WORK/server.log" cpu_us)) / $n") "
}

even=""
for k in $KS; do
	n=$((2000 / k))
	((n > 500)) && n=500
	((n < 10)) && n=10
	WALL=() CPU=()
	for ((r = 0; r < ROUNDS; r++)); do
		for mode in $(order "$r" tcp shim_always shim_default); do
			one "$mode" "$k" "$n"
		done
	done
	# shellcheck disable=SC2086
	tw=$(median ${WALL[tcp]})
	aw=$(paired_ratio "${WALL[shim_always]}" "${WALL[tcp]}")
	ac=$(paired_ratio "${CPU[shim_always]}" "${CPU[tcp]}")
	dw=$(paired_ratio "${WALL[shim_default]}" "${WALL[tcp]}")
	dc=$(paired_ratio "${CPU[shim_default]}" "${CPU[tcp]}")
	# shellcheck disable=SC2086
	echo "bench break_even K=$k ($n conns): tcp $tw us/conn;" \
		"always $(median ${WALL[shim_always]}) us (${aw}x wall, ${ac}x cpu);" \
		"default $(median ${WALL[shim_default]}) us (${dw}x wall, ${dc}x cpu)"
	if [[ -z $even && $aw != nan ]] && awk "BEGIN { exit !($aw <= 1.0) }"; then
		even="K=$k rounds (a TCP lifetime of $tw us)"
	fi
done
echo "bench break_even: an upgrade at the first data call stops losing wall time to TCP from ${even:-none of the K measured}"
