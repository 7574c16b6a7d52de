#!/bin/bash
# plain_client.sh: a client WITHOUT the shim against a server under it.
#
# Two redis-servers run side by side, one under the shim with its port
# whitelisted (its connections start an upgrade their client never answers
# and must go on over TCP at full speed: the server takes the client for one
# without the shim, shim/PROTOCOL.md "Peers without the shim"), one plain. A
# plain redis-benchmark GET (50 clients) runs against each in turn,
# alternated round by round. The figure is over the whole run: all requests
# of a side divided by the wall time of its runs. The servers are pinned to
# CPU 0 and the client to CPU 1 (taskset) when there are two CPUs or more,
# which keeps the scheduler's placement out of the ratio (BENCH_PLAIN_PIN=0:
# not pinned).
#
# Prints
#   bench plain_client_c50: shim-server N req/s plain-server M req/s ratio R   (bar >= 0.98)
# Environment: BENCH_PLAIN_ROUNDS (default 4), BENCH_PLAIN_REQUESTS (per run,
# default 100000), BENCH_PLAIN_CLIENTS (default 50).
. "$(dirname "${BASH_SOURCE[0]}")/common.bash"
need redis-server redis-benchmark ss taskset
ROUNDS=${BENCH_PLAIN_ROUNDS:-${BENCH_ROUNDS:-4}}
REQS=${BENCH_PLAIN_REQUESTS:-100000}
C=${BENCH_PLAIN_CLIENTS:-50}
declare -A PORT
for mode in shim tcp; do
	PORT[$mode]=$(free_port)
	# shellcheck disable=SC2046
	start_bg "$WORK/redis-$mode.log" $(mode_env "$mode" "${PORT[$mode]}") "${SERVER_CPU[@]}" \
		timeout -k 5 3600 redis-server --port "${PORT[$mode]}" --bind 127.0.0.1 --save '' --appendonly no
	wait_listen "${PORT[$mode]}"
	redis-cli -p "${PORT[$mode]}" set key:__rand_int__ xxx >/dev/null 2>&1
done

# run MODE: wall seconds of one run against MODE's server, a plain client
run() {
	redis_get_secs "${PORT[$1]}" "$C" env -u LD_PRELOAD "${CLIENT_CPU[@]}"
}

say "plain redis-benchmark GET -c $C -n $REQS against a shim server and a plain one, $ROUNDS rounds per side, alternated (wall seconds)"
alternate run
rates_ratio "$REQS"
echo "bench plain_client_c$C: shim-server $S req/s plain-server $T req/s ratio $R $(verdict "$R" 0.98)"
exit 0
