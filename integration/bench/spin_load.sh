#!/bin/bash
# spin_load.sh: short connections on a full machine (shim/core/spin.h: the
# contention and prior rules), shim vs TCP, alternated round by round.
#
# BENCH_HOGS (default: one per online CPU) busy loops run for the whole
# benchmark, so that every core has a thread that competes and never
# answers. build/progs/conn_hold --seq makes BENCH_SPIN_CONNS (default 30)
# connections one after the other, each BENCH_SPIN_ROUNDS (default 100)
# one-byte ping-pongs (both ends upgraded to shm: RDMASHIM_UPGRADE_AFTER_MS=0),
# then close. A spin here costs the spinner its turn on the core: the peer's
# answer then waits a scheduler slice (milliseconds).
#
# Prints each round's time (ms) and then
#   bench spin_load: shim X ms tcp Y ms ratio R (time: lower is better)
# Environment: BENCH_ROUNDS (default 5), BENCH_HOGS, BENCH_SPIN_CONNS,
# BENCH_SPIN_ROUNDS, BENCH_SHIM_ENV (e.g. RDMASHIM_SPIN_US=0).
. "$(dirname "${BASH_SOURCE[0]}")/common.bash"
need ss
ROUNDS=${BENCH_ROUNDS:-5}
HOGS=${BENCH_HOGS:-$(getconf _NPROCESSORS_ONLN)}
CONNS=${BENCH_SPIN_CONNS:-30}
PINGS=${BENCH_SPIN_ROUNDS:-100}
[[ -x $PROGS/conn_hold ]] || die "$PROGS/conn_hold missing: run make first"
BENCH_SHIM_ENV="RDMASHIM_TRANSPORTS=shm RDMASHIM_UPGRADE_AFTER_MS=0 ${BENCH_SHIM_ENV:-}"

hogs=()
bench_stop() { local h; for h in "${hogs[@]}"; do kill "$h" 2>/dev/null; done; }
for ((i = 0; i < HOGS; i++)); do
	(while :; do :; done) &
	hogs+=("$!")
done

# one MODE -> the client's time in ms
one() {
	seq_pair "$1" "$CONNS" "$PINGS"
	sed -n 's/^DONE ms=\([0-9.]*\).*/\1/p' "$WORK/client.log"
}

alternate one
# shellcheck disable=SC2086
shim=$(median ${VALS[shim]}) tcp=$(median ${VALS[tcp]})
echo "bench spin_load: shim $shim ms tcp $tcp ms ratio $(paired_ratio "${VALS[shim]}" "${VALS[tcp]}") (time: lower is better; $HOGS hogs)"
