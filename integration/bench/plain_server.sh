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
# Prints per client count
#   bench plain_server_c10: shim N req/s tcp M req/s ratio R   (bar >= 0.98)
# Environment: BENCH_PLAIN_ROUNDS (default 4), BENCH_PLAIN_REQUESTS
# (per run, default 100000: a few seconds).
. "$(dirname "${BASH_SOURCE[0]}")/common.bash"
need redis-server redis-benchmark ss taskset
ROUNDS=${BENCH_PLAIN_ROUNDS:-${BENCH_ROUNDS:-4}}
REQS=${BENCH_PLAIN_REQUESTS:-100000}
SERVER_CPU=() CLIENT_CPU=()
if [[ ${BENCH_PLAIN_PIN:-1} != 0 ]] && (($(nproc) >= 2)); then
	SERVER_CPU=(taskset -c 0) CLIENT_CPU=(taskset -c 1)
fi

P=$(free_port)
start_bg "$WORK/redis.log" env -u LD_PRELOAD "${SERVER_CPU[@]}" timeout -k 5 3600 redis-server --port "$P" --bind 127.0.0.1 \
	--save '' --appendonly no
wait_listen "$P"
redis-cli -p "$P" set key:__rand_int__ xxx >/dev/null 2>&1

# run MODE CLIENTS: wall seconds of one redis-benchmark run (nan: it failed)
run() {
	local t0 t1 out
	t0=$EPOCHREALTIME
	# shellcheck disable=SC2046
	out=$($(mode_env "$1" "$P") "${CLIENT_CPU[@]}" timeout -k 5 300 redis-benchmark -h 127.0.0.1 -p "$P" -c "$2" -n "$REQS" \
		-t get --csv 2>/dev/null) || { echo nan; return; }
	t1=$EPOCHREALTIME
	grep -q '"GET"' <<<"$out" || { echo nan; return; }
	calc %.4f "$t1 - $t0"
}

for c in 10 50; do
	declare -A SUM=([shim]=0 [tcp]=0) CNT=([shim]=0 [tcp]=0)
	say "redis-benchmark GET -c $c -n $REQS, plain server, $ROUNDS rounds per side, alternated"
	for ((r = 0; r < ROUNDS; r++)); do
		line="round $((r + 1)):"
		for mode in $(order "$r"); do
			s=$(run "$mode" "$c")
			[[ $s == nan ]] || { SUM[$mode]=$(calc %.4f "${SUM[$mode]} + $s"); CNT[$mode]=$((CNT[$mode] + 1)); }
			line+=" $mode ${s}s ($( [[ $s == nan ]] && echo failed || calc %.0f "$REQS / $s") req/s)"
		done
		say "$line"
	done
	if ((CNT[shim] && CNT[tcp])); then
		S=$(calc %.0f "${CNT[shim]} * $REQS / ${SUM[shim]}") T=$(calc %.0f "${CNT[tcp]} * $REQS / ${SUM[tcp]}")
		R=$(calc %.3f "$S / $T")
	else
		S=nan T=nan R=nan
	fi
	echo "bench plain_server_c$c: shim $S req/s tcp $T req/s ratio $R $(verdict "$R" 0.98)"
done
exit 0
