#!/bin/bash
# upgrade_cost.sh: the CPU one shm upgrade costs, both processes together.
#
# build/progs/conn_hold --seq makes BENCH_UPGRADE_CONNS (default 500)
# connections one after the other, BENCH_UPGRADE_ROUNDS (default 5)
# one-byte round trips each, both ends under the shim, the handshake at the
# first data call (RDMASHIM_UPGRADE_AFTER_MS=0) and no busy polling
# (RDMASHIM_SPIN_US=0: a spin would count as CPU). Three modes, rotated
# round by round (BENCH_ROUNDS, default 3):
#   tracked  RDMASHIM_TRANSPORTS=tcp: tracked, never upgraded
#   named    every connection takes its own named rendezvous and ring
#            memfd (RDMASHIM_SHM_PAIRS=0)
#   pair     after the first, over the pair channel, rings from the pair's
#            arena (the default)
# Per mode: CPU (user + system, CLOCK_PROCESS_CPUTIME_ID of each process)
# per connection, wall per connection; then named - tracked and pair -
# tracked, round by round: what one upgrade costs. BENCH_LIB compares
# another build of the library.
. "$(dirname "${BASH_SOURCE[0]}")/common.bash"
need ss
CONNS=${BENCH_UPGRADE_CONNS:-500}
K=${BENCH_UPGRADE_ROUNDS:-5}
ROUNDS=${BENCH_ROUNDS:-3}
[[ -x $PROGS/conn_hold ]] || die "$PROGS/conn_hold missing: run make first"
common="RDMASHIM_UPGRADE_AFTER_MS=0 RDMASHIM_SPIN_US=0"
VARIANT_ENV[shim_tracked]="$common RDMASHIM_TRANSPORTS=tcp"
VARIANT_ENV[shim_named]="$common RDMASHIM_TRANSPORTS=shm RDMASHIM_SHM_PAIRS=0"
VARIANT_ENV[shim_pair]="$common RDMASHIM_TRANSPORTS=shm RDMASHIM_SHM_PAIRS=1"

for ((r = 0; r < ROUNDS; r++)); do
	for mode in $(order "$r" shim_tracked shim_named shim_pair); do
		seq_cost "$mode" "$CONNS" "$K"
	done
done
seq_cost_report shim_tracked shim_named shim_pair
for mode in shim_named shim_pair; do
	say "${mode#shim_} - tracked, one upgrade, both ends together: $(seq_cost_delta "$mode" shim_tracked)"
done
