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

for ((r = 0; r < ROUNDS; r++)); do
	for mode in $(order "$r" tcp shim_tracked shim_short); do
		seq_cost "$mode" "$CONNS" 1
	done
done
seq_cost_report tcp shim_tracked shim_short
say "tracked - tcp: $(seq_cost_delta shim_tracked tcp), both ends together"
