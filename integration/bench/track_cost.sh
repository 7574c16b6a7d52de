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
	local mode=$1 P srv t0 t1
	P=$(free_port)
	# shellcheck disable=SC2046
	start_bg "$WORK/server.log" $(mode_env "$mode" "$P") timeout -k 5 300 \
		"$PROGS/conn_hold" server --port "$P" --conns "$CONNS" --rounds 1 --seq
	srv=$LAST_BG
	wait_listen "$P"
	t0=$(date +%s%N)
	# shellcheck disable=SC2046
	$(mode_env "$mode" "$P") timeout -k 5 300 "$PROGS/conn_hold" client --port "$P" --conns "$CONNS" \
		--rounds 1 --seq >"$WORK/client.log" 2>&1 || die "$mode: the client failed: $(tail -n 2 "$WORK/client.log")"
	t1=$(date +%s%N)
	wait "$srv" || die "$mode: the server failed: $(tail -n 2 "$WORK/server.log")"
	CPU[$mode]+="$(calc %.3f "($(cpu_of "$WORK/client.log") + $(cpu_of "$WORK/server.log")) / $CONNS") "
	WALL[$mode]+="$(calc %.3f "($t1 - $t0) / 1000 / $CONNS") "
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
