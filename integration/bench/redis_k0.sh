#!/bin/bash
# redis_k0.sh: short connections, a new TCP connection per request.
#
#   redis-benchmark -k 0 -t ping_mbulk -c 10: each of the 10 clients connects,
#   sends one PING, reads the answer and closes, over and over. The shim side
#   has both ends under the shim (RDMASHIM_PORTS = the server's port, every
#   connection whitelisted, default settings: such a connection is done before
#   RDMASHIM_UPGRADE_AFTER_MS and never pays for a handshake); the TCP side
#   has no LD_PRELOAD. One server per side stays up for the whole run;
#   clients alternate shim/TCP round by round.
#
# Prints each round's req/s and then
#   bench redis_k0: shim N req/s tcp M req/s ratio R
# (medians over the rounds; R is the median of per-round ratios; bar >= 0.95).
#
# Environment:
#   BENCH_K0_ROUNDS    rounds per side (default 6)
#   BENCH_K0_REQUESTS  requests per client run (default 20000)
#   BENCH_K0_LONG_S    also run a long variant, one run per side of about this
#                      many seconds each (e.g. 60); unset: not run
. "$(dirname "${BASH_SOURCE[0]}")/common.bash"
need redis-server redis-benchmark ss

ROUNDS=${BENCH_K0_ROUNDS:-${BENCH_ROUNDS:-6}}
REQS=${BENCH_K0_REQUESTS:-20000}

declare -A PORT=() SRV=()
for mode in shim tcp; do
	PORT[$mode]=$(free_port)
	# shellcheck disable=SC2046
	start_bg "$WORK/redis-$mode.log" $(mode_env "$mode" "${PORT[$mode]}") \
		timeout -k 5 3600 redis-server --port "${PORT[$mode]}" --bind 127.0.0.1 --save '' --appendonly no
	SRV[$mode]=$LAST_BG
done
for mode in shim tcp; do wait_listen "${PORT[$mode]}"; done

# k0_rps MODE N: req/s of one client run (nan when it gave no figure)
k0_rps() {
	local v
	# shellcheck disable=SC2046
	v=$($(mode_env "$1" "${PORT[$1]}") timeout -k 5 600 redis-benchmark -h 127.0.0.1 -p "${PORT[$1]}" \
		-k 0 -t ping_mbulk -c 10 -n "$2" --csv 2>/dev/null | awk -F'"' '$2 == "PING_MBULK" { print $4 }')
	echo "${v:-nan}"
}

say "redis-benchmark -k 0 -t ping_mbulk -c 10 -n $REQS, $ROUNDS rounds per side, alternated"
k0_round() { k0_rps "$1" "$REQS"; }
alternate k0_round
# shellcheck disable=SC2086
S=$(median ${VALS[shim]}) T=$(median ${VALS[tcp]})
R=$(paired_ratio "${VALS[shim]}" "${VALS[tcp]}")
echo "bench redis_k0: shim $S req/s tcp $T req/s ratio $R $(verdict "$R" 0.95)"

if [[ -n ${BENCH_K0_LONG_S:-} ]]; then
	n=$(calc %.0f "$T * $BENCH_K0_LONG_S")
	((n > 0)) || n=$((REQS * 10))
	say "long variant: about ${BENCH_K0_LONG_S} s per side (-n $n), tcp then shim then tcp"
	a=$(k0_rps tcp "$n") b=$(k0_rps shim "$n") c=$(k0_rps tcp "$n")
	TL=$(calc %.2f "($a + $c) / 2")
	echo "bench redis_k0_long: shim $b req/s tcp $TL req/s (runs $a, $c) ratio $(calc %.3f "$b / $TL")"
fi

# Both servers must have stayed up the whole time, or the figures mean little.
for mode in shim tcp; do
	kill -0 "${SRV[$mode]}" 2>/dev/null || say "warning: the $mode server died (log: $(tail -n 3 "$WORK/redis-$mode.log"))"
done
exit 0
