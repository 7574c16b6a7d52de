#!/bin/bash
# plain_server.sh: a shim client against a server WITHOUT the shim.
#
# The server (redis-server) runs plain; the client (redis-benchmark GET, 10
# and then 50 clients) runs once under the shim with the server's port
# whitelisted (its connections offer an upgrade nobody answers and must go
# on over TCP at full speed) and once plain, alternated round by round. The
# figure is over the whole run: all requests of a side divided by the wall
# time of its runs (process start, connects and the failed offers included).
# The server is pinned to CPU 0 and the client to CPU 1 (taskset) when there
# are two CPUs or more, which keeps the scheduler's placement out of the
# ratio (BENCH_PLAIN_PIN=0: not pinned).
#
# A run lasts about a second and its rate moves by 5% from one to the next
# on this kind of machine, whatever the library: 10 rounds keep the whole-
# run ratio within about 2%, and the median of the rounds' paired ratios
# (tcp seconds / shim seconds, the two runs of one round side by side) is
# printed beside it, as one slow run moves it less.
#
# Prints per client count
#   bench plain_server_c10: shim N req/s tcp M req/s ratio R (paired median P)   (bar >= 0.98)
# Environment: BENCH_PLAIN_ROUNDS (default 10), BENCH_PLAIN_REQUESTS
# (per run, default 100000: a few seconds).
. "$(dirname "${BASH_SOURCE[0]}")/common.bash"
need redis-server redis-benchmark ss taskset
ROUNDS=${BENCH_PLAIN_ROUNDS:-${BENCH_ROUNDS:-10}}
REQS=${BENCH_PLAIN_REQUESTS:-100000}
P=$(free_port)
start_bg "$WORK/redis.log" env -u LD_PRELOAD "${SERVER_CPU[@]}" timeout -k 5 3600 redis-server --port "$P" --bind 127.0.0.1 \
	--save '' --appendonly no
wait_listen "$P"
redis-cli -p "$P" set key:__rand_int__ xxx >/dev/null 2>&1

# run MODE: wall seconds of one run with $C clients, the client as MODE says
run() {
	# shellcheck disable=SC2046
	redis_get_secs "$P" "$C" $(mode_env "$1" "$P") "${CLIENT_CPU[@]}"
}

for C in 10 50; do
	VALS=()
	say "redis-benchmark GET -c $C -n $REQS, plain server, $ROUNDS rounds per side, alternated (wall seconds)"
	alternate run
	rates_ratio "$REQS"
	echo "bench plain_server_c$C: shim $S req/s tcp $T req/s ratio $R (paired median $(paired_ratio "${VALS[tcp]}" "${VALS[shim]}")) $(verdict "$R" 0.98)"
done
exit 0
