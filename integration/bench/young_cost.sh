#!/bin/bash
# young_cost.sh: user-space instructions per request of a connection per
# request (redis-benchmark -k 0 -t ping_mbulk -c 10), server and client,
# counted by callgrind: repeatable where the request rate of redis_k0.sh
# moves by several percent from one run to the next on a shared machine.
#
# Three sides, each a redis-server and a redis-benchmark of
# BENCH_YOUNG_REQUESTS (default 3000) requests, both under callgrind:
#   tcp      no LD_PRELOAD
#   tracked  both ends under the shim, RDMASHIM_TRANSPORTS=tcp (every
#            connection tracked, none intercepted)
#   shim     both ends under the shim with the defaults: every connection
#            intercepted while young; none lives to RDMASHIM_UPGRADE_AFTER_MS
# Prints per side the instructions per request of each process (its whole
# run, start-up included, divided by the requests), and
#   bench young_cost: shim +S (tracked +T) instructions per request over tcp, both ends
# callgrind slows each program some 50 times: a request takes about 1 ms.
. "$(dirname "${BASH_SOURCE[0]}")/common.bash"
need redis-server redis-benchmark redis-cli valgrind callgrind_annotate ss

REQS=${BENCH_YOUNG_REQUESTS:-3000}

# total OUT: the program's instruction count from a callgrind output file
total() {
	callgrind_annotate --auto=no --threshold=100 "$1" 2>/dev/null |
		awk '/PROGRAM TOTALS/ { gsub(",", "", $1); print $1; exit }'
}

# side NAME ENV...: runs one side; sets SRV and CLI (instructions per request)
side() {
	local name=$1 port srv_pid i
	shift
	port=$(free_port)
	env "$@" RDMASHIM_PORTS="$port" valgrind --tool=callgrind --callgrind-out-file="$WORK/$name.srv" \
		redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no >"$WORK/$name.srv.log" 2>&1 &
	srv_pid=$!
	BG_PIDS+=("$srv_pid")
	for ((i = 0; i < 300; i++)); do
		redis-cli -p "$port" ping >/dev/null 2>&1 && break
		sleep 0.1
	done
	env "$@" RDMASHIM_PORTS="$port" timeout -k 5 600 valgrind --tool=callgrind \
		--callgrind-out-file="$WORK/$name.cli" redis-benchmark -p "$port" -k 0 -t ping_mbulk -c 10 \
		-n "$REQS" -q >"$WORK/$name.cli.log" 2>&1 || die "$name: redis-benchmark failed"
	kill -INT "$srv_pid"
	wait "$srv_pid" 2>/dev/null
	SRV=$(($(total "$WORK/$name.srv") / REQS))
	CLI=$(($(total "$WORK/$name.cli") / REQS))
	say "$name: server $SRV, client $CLI instructions per request"
}

say "redis-benchmark -k 0 -t ping_mbulk -c 10 -n $REQS under callgrind, library $LIB"
side tcp X=1
T_SRV=$SRV T_CLI=$CLI
side tracked LD_PRELOAD="$LIB" RDMASHIM_TRANSPORTS=tcp
K_SRV=$SRV K_CLI=$CLI
side shim LD_PRELOAD="$LIB"
echo "bench young_cost: shim +$((SRV + CLI - T_SRV - T_CLI)) (tracked +$((K_SRV + K_CLI - T_SRV - T_CLI)))" \
	"instructions per request over tcp, both ends"
exit 0
