#!/bin/bash
# track_cost.sh: what the shim costs a connection that never upgrades, over
# its whole life (issue: at most 2 us).
#
# build/progs/conn_hold --seq makes BENCH_TRACK_CONNS (default 2000)
# connections one after the other, each connect, one 1-byte round trip,
# close (the server reads EOF and closes). Three modes, rotated round by
# round (BENCH_ROUNDS, default 5):
#   tcp      no LD_PRELOAD
#   tracked  both ends under the shim, RDMASHIM_TRANSPORTS=tcp: every
#            connection tracked (tuple, eligibility, fd table, trace
#            decisions, close), none upgrades
#   short    both ends under the shim with the defaults: a connection this
#            short ends before RDMASHIM_UPGRADE_AFTER_MS and never pays a
#            handshake
# Per mode: the CPU time (user + system) of both processes per connection,
# as each measures its own (CLOCK_PROCESS_CPUTIME_ID: less noisy than the
# wall clock on a shared machine, and the bookkeeping is CPU work), and the
# wall time per connection. Prints
#   bench track_cost: MODE: cpu X us/conn (min..max), wall Y us/conn
#   bench track_cost: tracked - tcp: cpu +D us/conn per connection (both ends)
. "$(dirname "${BASH_SOURCE[0]}")/common.bash"
need ss
CONNS=${BENCH_TRACK_CONNS:-2000}
ROUNDS=${BENCH_ROUNDS:-5}
[[ -x $PROGS/conn_hold ]] || die "$PROGS/conn_hold missing: run make first"
VARIANT_ENV[shim_tracked]="RDMASHIM_TRANSPORTS=tcp"
VARIANT_ENV[shim_short]=""

# one MODE: appends its CPU and wall time per connection to CPU[MODE], WALL[MODE]
declare -A CPU=() WALL=()
cpu_of() { sed -n 's/^DONE .*cpu_us=\([0-9.]*\).*/\1/p' "$1"; }
one() {
	local mode=$1
	seq_pair "$mode" "$CONNS" 1
	CPU[$mode]+="$(calc %.3f "($(cpu_of "$WORK/client.log") + $(cpu_of "$WORK/server.log")) / $CONNS") "
	WALL[$mode]+="$(calc %.3f "$(sed -n 's/^DONE ms=\([0-9.]*\).*/\1/p' "$WORK/client.log") * 1000 / $CONNS") "
}

for ((r = 0; r < ROUNDS; r++)); do
	for mode in $(order "$r" tcp shim_tracked shim_short); do
		one "$mode"
	done
done
for mode in tcp shim_tracked shim_short; do
	read -r lo hi < <(minmax ${CPU[$mode]})
	# shellcheck disable=SC2086
	say "${mode#shim_}: cpu $(median ${CPU[$mode]}) us/conn ($lo..$hi), wall $(median ${WALL[$mode]}) us/conn"
done
diffs=()
read -ra a <<<"${CPU[shim_tracked]}"
read -ra b <<<"${CPU[tcp]}"
for ((i = 0; i < ${#a[@]}; i++)); do diffs+=("$(calc %.3f "${a[i]} - ${b[i]}")"); done
say "tracked - tcp: cpu $(median "${diffs[@]}") us/conn, both ends together (per round: ${diffs[*]})"
