#!/bin/bash
# suite.sh: the benchmark suite (`make bench`; `make bench-quick` is its
# short form): every same-host transport side by side in one run, written
# to one JSON file that integration/bench/report.py turns into
# bench/REPORT.md.
#
# Transports (the same programs over each):
#   tcp          plain loopback TCP, no LD_PRELOAD
#   unix         a Unix-domain stream socket, no LD_PRELOAD
#   shm          both ends under the shim, the port whitelisted, defaults
#                (busy polling, RDMASHIM_SPIN_US at its default)
#   shm_spin0    the same with RDMASHIM_SPIN_US=0 (a sleep at every wait)
#   passthrough  both ends under the shim, the port not whitelisted
# Parts (BENCH_PARTS, default all, in this order):
#   xfer     integration/bench/xfer.c: ping-pong latency p50 and p99 and
#            one-way throughput at each size, CPU time of both ends
#   sockperf sockperf ping-pong over the TCP transports (it has no Unix
#            sockets; its largest message is 65506 bytes, so sizes to 16 KiB)
#   qperf    qperf tcp_lat (64 B) and tcp_bw (64 KiB) over the TCP transports
#   ucx      ucx_perftest tag_lat and tag_bw over UCX's shared memory
#            (UCX_TLS=posix,self): the reference of a library built for it
#   limits   cacheline.c (a cache line passed between two processes) and
#            memcpy_bw.c (one core's copy rate): this machine's floor
#   redis    redis-benchmark GET and SET (50 clients) and a connection per
#            request (-k 0 -t ping_mbulk, 10 clients), requests/s and CPU
#            per request of server and client
#   vm       BENCH_VM=1 only (or BENCH_PARTS=vm): one QEMU VM with
#            Soft-RoCE (integration/vm/guest-bench-suite.sh, about 6
#            minutes): ping-pong p50 and p99 and throughput by size over
#            guest TCP, the shim over RDMA (and with RDMASHIM_SPIN_US=0),
#            ib_send_lat / ib_write_bw, and ucx_perftest over rc_verbs
#            where it runs; into a JSON of its own (below)
# Every part runs BENCH_ROUNDS rounds, the transports' order rotated round
# by round (common.bash: `order`); the JSON keeps every run, and the
# assembly (suite_json.py) takes medians, spreads and per-round ratios.
#
# Environment:
#   BENCH_QUICK=1       the short form (about 40 s on an idle 2-core machine)
#   BENCH_OUT=DIR       where the JSON goes (default bench/results):
#                       DIR/<UTC timestamp>-<host>.json and DIR/latest.json;
#                       the vm part's DIR/<UTC timestamp>-rdma-<host>.json
#                       and DIR/rdma-latest.json (suite_vm_json.py), so a
#                       run of either keeps the other's latest
#   BENCH_ROUNDS, BENCH_SECS (xfer seconds per run), BENCH_SIZES,
#   BENCH_PARTS         override the form's settings
#   BENCH_VM=1          add the VM part (the machine's heavy-run lock is
#                       the caller's business)
# Exit status 0 when the JSON was written (a part that could not run is
# recorded in it with the reason), 2 when something it needs is missing.
# bench-timeout: 3600
. "$(dirname "${BASH_SOURCE[0]}")/common.bash"
need ss taskset python3 sockperf redis-server redis-benchmark redis-cli

QUICK=${BENCH_QUICK:-0}
TRANSPORTS=(tcp unix shm shm_spin0 passthrough)
TCP_TRANSPORTS=(tcp shm shm_spin0 passthrough)
# The short form keeps every transport and size of xfer and redis, runs
# the third-party tools once at one size over tcp and shm (sockperf and
# qperf spend seconds of their own around each run; UCX at two sizes), and
# cuts each run to what proves it works.
if [[ $QUICK == 1 ]]; then
	ROUNDS=${BENCH_ROUNDS:-2} SECS=${BENCH_SECS:-0.02} WARM_MS=15
	SP_SECS=1 SP_SIZES="64" QP_SECS=1 UCX_N=2000 UCX_SIZES="64 65536" LIM_SECS=0.1
	REDIS_N=1000 REDIS_K0_N=300 REDIS_ROUNDS=1 TOOL_ROUNDS=1
	TOOL_TRANSPORTS=(tcp shm)
	VM_ROUNDS=1 VM_SECS=0.3 VM_SIZES="64 65536" VM_ITERS=500
else
	ROUNDS=${BENCH_ROUNDS:-3} SECS=${BENCH_SECS:-1} WARM_MS=40
	SP_SECS=1 SP_SIZES="16 64 256 1024 4096 16384" QP_SECS=2 UCX_N=100000 LIM_SECS=1
	REDIS_N=100000 REDIS_K0_N=20000 REDIS_ROUNDS=$ROUNDS TOOL_ROUNDS=$ROUNDS
	TOOL_TRANSPORTS=("${TCP_TRANSPORTS[@]}")
	VM_ROUNDS=$ROUNDS VM_SECS=1 VM_SIZES="16 64 1024 16384 65536" VM_ITERS=2000
fi
SIZES=${BENCH_SIZES:-16 64 256 1024 4096 16384 65536}
UCX_SIZES=${UCX_SIZES:-$SIZES}
PARTS=${BENCH_PARTS:-xfer sockperf qperf ucx limits redis}
[[ ${BENCH_VM:-0} == 1 && $PARTS != *vm* ]] && PARTS+=" vm"
OUT=${BENCH_OUT:-$ROOT/bench/results}
RAW=$WORK/raw.jsonl RAW_VM=$WORK/raw-vm.jsonl
BIN=$ROOT/build/bench
mkdir -p "$BIN" "$WORK/trace" "$OUT"
: >"$RAW"
: >"$RAW_VM"

for p in xfer cacheline memcpy_bw cpu_of; do
	[[ $BIN/$p -nt $ROOT/integration/bench/$p.c ]] && continue
	cc -std=gnu11 -O2 -Wall -Wextra -Werror -D_GNU_SOURCE -o "$BIN/$p" "$ROOT/integration/bench/$p.c" ||
		die "$p.c does not build"
done

# tenv TRANSPORT PORT: the `env` words for one end. A pass-through run
# whitelists port 1, which nothing here uses, so the shim is loaded and
# configured but leaves the connection alone.
tenv() {
	case $1 in
	tcp | unix) echo env -u LD_PRELOAD ;;
	shm) echo env LD_PRELOAD="$LIB" RDMASHIM_PORTS="$2" RDMASHIM_TRACE=info \
		RDMASHIM_TRACE_FILE="$WORK/trace/$1.%p" ;;
	shm_spin0) echo env LD_PRELOAD="$LIB" RDMASHIM_PORTS="$2" RDMASHIM_SPIN_US=0 RDMASHIM_TRACE=info \
		RDMASHIM_TRACE_FILE="$WORK/trace/$1.%p" ;;
	passthrough) echo env LD_PRELOAD="$LIB" RDMASHIM_PORTS=1 ;;
	*) die "unknown transport $1" ;;
	esac
}

# record PART FIELDS...: one raw line; FIELDS are JSON members ("a":1)
record() {
	local part=$1 IFS=,
	shift
	echo "{\"part\":\"$part\",$*}" >>"$RAW"
}
# note PART TEXT: why (part of) a part could not run
note() { record "$1" "\"error\":$(python3 -c 'import json,sys; print(json.dumps(sys.argv[1]))' "$2")"; say "$1: $2"; }

wait_unix() {
	local i
	for ((i = 0; i < 200; i++)); do
		[[ -S $1 ]] && return 0
		sleep 0.05
	done
	die "nothing listens on $1 after 10 s"
}

cpu_busy() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8, $2 + $3 + $4 + $5 + $6 + $7 + $8 }' /proc/stat; }
read -r BUSY0 TOTAL0 < <(cpu_busy)
LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)
STARTED=$(date -u +%Y-%m-%dT%H:%M:%SZ)
T_START=$EPOCHREALTIME

part_xfer() {
	local t r s op line
	declare -A port=() pid=()
	for t in "${TRANSPORTS[@]}"; do
		if [[ $t == unix ]]; then
			# shellcheck disable=SC2046
			start_bg "$WORK/xfer-$t.log" $(tenv "$t" 0) "${SERVER_CPU[@]}" "$BIN/xfer" server --unix "$WORK/xfer.sock"
			pid[$t]=$LAST_BG
			wait_unix "$WORK/xfer.sock"
		else
			port[$t]=$(free_port)
			# shellcheck disable=SC2046
			start_bg "$WORK/xfer-$t.log" $(tenv "$t" "${port[$t]}") "${SERVER_CPU[@]}" "$BIN/xfer" server --port "${port[$t]}"
			pid[$t]=$LAST_BG
			wait_listen "${port[$t]}"
		fi
	done
	for ((r = 0; r < ROUNDS; r++)); do
		for op in pp bw; do
			for s in $SIZES; do
				for t in $(order "$r" "${TRANSPORTS[@]}"); do
					local where=(--port "${port[$t]:-0}")
					[[ $t == unix ]] && where=(--unix "$WORK/xfer.sock")
					# shellcheck disable=SC2046
					if line=$($(tenv "$t" "${port[$t]:-0}") "${CLIENT_CPU[@]}" timeout -k 5 60 "$BIN/xfer" client \
						"${where[@]}" --op "$op" --size "$s" --secs "$SECS" --warm-ms "$WARM_MS" 2>"$WORK/xfer.err"); then
						record xfer "\"transport\":\"$t\"" "\"round\":$r" "${line:1:${#line}-2}"
					else
						note xfer "$t $op $s: $(tail -n 1 "$WORK/xfer.err")"
					fi
				done
			done
		done
		say "xfer: round $((r + 1)) of $ROUNDS done"
	done
	for t in "${TRANSPORTS[@]}"; do stop_bg "${pid[$t]}"; done
	# Each connection of a shim transport should have reached shm: its
	# client's upgrade.done, counted against the connections made.
	for t in shm shm_spin0; do
		local n
		n=$(cat "$WORK"/trace/"$t".* 2>/dev/null | grep '"event":"upgrade.done"' | grep -c '"role":"client"')
		record upgraded "\"transport\":\"$t\"" "\"upgraded\":$n" \
			"\"connections\":$((ROUNDS * 2 * $(wc -w <<<"$SIZES")))"
	done
}

part_sockperf() {
	local r s t P srv out
	for ((r = 0; r < TOOL_ROUNDS; r++)); do
		for s in $SP_SIZES; do
			for t in $(order "$r" "${TOOL_TRANSPORTS[@]}"); do
				P=$(free_port)
				# shellcheck disable=SC2046
				start_bg "$WORK/sp-srv.log" $(tenv "$t" "$P") "${SERVER_CPU[@]}" timeout -k 5 60 \
					sockperf sr --tcp -i 127.0.0.1 -p "$P"
				srv=$LAST_BG
				wait_listen "$P"
				# An explicit rate, not "max": sockperf bounds the sequence
				# numbers it expects by the rate, and with "max" a pinned,
				# busy-polling shm pair outruns that bound and sockperf stops
				# ("_seqN > m_maxSequenceNo"); shm.sh passes the same rate.
				# shellcheck disable=SC2046
				out=$($(tenv "$t" "$P") "${CLIENT_CPU[@]}" timeout -k 5 60 sockperf ping-pong --tcp -i 127.0.0.1 \
					-p "$P" -t "$SP_SECS" -m "$s" --mps 20000000 2>&1)
				stop_bg "$srv"
				local p50 p99
				p50=$(sed -n 's/.*percentile 50.000 = *\([0-9.]*\).*/\1/p' <<<"$out")
				p99=$(sed -n 's/.*percentile 99.000 = *\([0-9.]*\).*/\1/p' <<<"$out")
				if [[ -n $p50 && -n $p99 ]]; then
					record sockperf "\"transport\":\"$t\"" "\"round\":$r" "\"size\":$s" "\"p50_us\":$p50" "\"p99_us\":$p99"
				else
					note sockperf "$t $s: $(grep -m1 -i error <<<"$out")"
				fi
			done
		done
	done
}

# qperf's figures come with their own units: kept as printed, converted by
# suite_json.py.
part_qperf() {
	command -v qperf >/dev/null || { note qperf "qperf is not installed (make deps)"; return; }
	local r t LP P srv out
	for ((r = 0; r < TOOL_ROUNDS; r++)); do
		for t in $(order "$r" "${TOOL_TRANSPORTS[@]}"); do
			LP=$(free_port) P=$(free_port)
			# shellcheck disable=SC2046
			start_bg "$WORK/qp-srv.log" $(tenv "$t" "$P") "${SERVER_CPU[@]}" timeout -k 5 60 qperf -lp "$LP"
			srv=$LAST_BG
			wait_listen "$LP"
			# shellcheck disable=SC2046
			out=$($(tenv "$t" "$P") "${CLIENT_CPU[@]}" timeout -k 5 60 qperf 127.0.0.1 -lp "$LP" -ip "$P" \
				-t "$QP_SECS" -m 64 tcp_lat -m 65536 tcp_bw 2>&1)
			stop_bg "$srv"
			local lat bw
			lat=$(sed -n 's/^ *latency *= *\([0-9.]* [a-z]*\).*/\1/p' <<<"$out")
			bw=$(sed -n 's/^ *bw *= *\([0-9.]* [A-Za-z]*\/sec\).*/\1/p' <<<"$out")
			if [[ -n $lat && -n $bw ]]; then
				record qperf "\"transport\":\"$t\"" "\"round\":$r" "\"tcp_lat\":\"$lat\"" "\"tcp_bw\":\"$bw\""
			else
				note qperf "$t: $(tr '\n' ' ' <<<"$out" | cut -c1-200)"
			fi
		done
	done
}

part_ucx() {
	command -v ucx_perftest >/dev/null || { note ucx "ucx_perftest is not installed (make deps: ucx-utils)"; return; }
	local r s test P srv out fin
	for ((r = 0; r < TOOL_ROUNDS; r++)); do
		for test in tag_lat tag_bw; do
			for s in $UCX_SIZES; do
				P=$(free_port)
				start_bg "$WORK/ucx-srv.log" env UCX_TLS=posix,self "${SERVER_CPU[@]}" \
					"$BIN/cpu_of" "$WORK/ucx-srv.cpu" timeout -k 5 60 ucx_perftest -p "$P"
				srv=$LAST_BG
				wait_listen "$P"
				out=$(env UCX_TLS=posix,self "${CLIENT_CPU[@]}" "$BIN/cpu_of" "$WORK/ucx-cli.cpu" timeout -k 5 60 \
					ucx_perftest 127.0.0.1 -p "$P" -t "$test" -s "$s" -n "$UCX_N" 2>&1)
				wait "$srv" 2>/dev/null
				fin=$(awk '$1 == "Final:" { print $2, $3, $4, $6, $8 }' <<<"$out")
				if [[ -n $fin ]]; then
					local it p50 avg mbs rate
					read -r it p50 avg mbs rate <<<"$fin"
					record ucx "\"test\":\"$test\"" "\"round\":$r" "\"size\":$s" "\"iters\":$it" "\"p50_us\":$p50" \
						"\"mean_us\":$avg" "\"mib_per_sec\":$mbs" "\"msgs_per_sec\":$rate" \
						"\"cpu_client_us\":$(sed -n 's/.*cpu_us=\([0-9]*\).*/\1/p' "$WORK/ucx-cli.cpu")" \
						"\"cpu_server_us\":$(sed -n 's/.*cpu_us=\([0-9]*\).*/\1/p' "$WORK/ucx-srv.cpu")"
				else
					note ucx "$test $s: $(grep -m1 -iE 'error|fail' <<<"$out" || tail -n 1 <<<"$out")"
					return
				fi
			done
		done
	done
}

part_limits() {
	local r out
	for ((r = 0; r < TOOL_ROUNDS; r++)); do
		if out=$(timeout -k 5 60 "$BIN/cacheline" --secs "$LIM_SECS"); then
			record cacheline "\"round\":$r" "${out:1:${#out}-2}"
		else
			note cacheline "cacheline failed"
		fi
		# shellcheck disable=SC2086
		if out=$(timeout -k 5 60 "${CLIENT_CPU[@]}" "$BIN/memcpy_bw" --secs "$LIM_SECS" $SIZES); then
			record memcpy "\"round\":$r" "${out:1:${#out}-2}"
		else
			note memcpy "memcpy_bw failed"
		fi
	done
}

# redis_info_cpu SOCKET: the server's CPU seconds so far (its own getrusage)
redis_info_cpu() {
	redis-cli -s "$1" info cpu | tr -d '\r' |
		awk -F: '$1 == "used_cpu_user" || $1 == "used_cpu_sys" { s += $2 } END { printf "%.6f\n", s }'
}

part_redis() {
	local t r test P c0 c1 out rps
	declare -A port=() pid=()
	for t in "${TRANSPORTS[@]}"; do
		port[$t]=$(free_port)
		# shellcheck disable=SC2046
		start_bg "$WORK/redis-$t.log" $(tenv "$t" "${port[$t]}") "${SERVER_CPU[@]}" timeout -k 5 3000 redis-server \
			--port "${port[$t]}" --bind 127.0.0.1 --unixsocket "$WORK/redis-$t.sock" --unixsocketperm 700 \
			--save '' --appendonly no
		pid[$t]=$LAST_BG
	done
	for t in "${TRANSPORTS[@]}"; do wait_listen "${port[$t]}"; wait_unix "$WORK/redis-$t.sock"; done
	for ((r = 0; r < REDIS_ROUNDS; r++)); do
		for test in get set k0; do
			for t in $(order "$r" "${TRANSPORTS[@]}"); do
				local where=(-h 127.0.0.1 -p "${port[$t]}") args=(-c 50 -n "$REDIS_N" -t "$test") n=$REDIS_N
				[[ $t == unix ]] && where=(-s "$WORK/redis-$t.sock")
				[[ $test == k0 ]] && args=(-k 0 -c 10 -n "$REDIS_K0_N" -t ping_mbulk) n=$REDIS_K0_N
				c0=$(redis_info_cpu "$WORK/redis-$t.sock")
				# shellcheck disable=SC2046
				out=$($(tenv "$t" "${port[$t]}") "${CLIENT_CPU[@]}" "$BIN/cpu_of" "$WORK/redis-cli.cpu" \
					timeout -k 5 300 redis-benchmark "${where[@]}" "${args[@]}" --csv 2>/dev/null)
				c1=$(redis_info_cpu "$WORK/redis-$t.sock")
				rps=$(awk -F'"' 'NR == 2 { print $4 }' <<<"$out")
				if [[ -n $rps ]]; then
					record redis "\"transport\":\"$t\"" "\"round\":$r" "\"test\":\"$test\"" "\"requests\":$n" \
						"\"rps\":$rps" "\"cpu_server_us\":$(calc %.0f "($c1 - $c0) * 1000000")" \
						"\"cpu_client_us\":$(sed -n 's/.*cpu_us=\([0-9]*\).*/\1/p' "$WORK/redis-cli.cpu")"
				else
					note redis "$t $test: no figure from redis-benchmark"
				fi
			done
		done
		say "redis: round $((r + 1)) of $REDIS_ROUNDS done"
	done
	for t in "${TRANSPORTS[@]}"; do stop_bg "${pid[$t]}"; done
}

# The VM sees this machine's files at the same paths (its /tmp is its own):
# the xfer binary and the library are passed by path.
part_vm() {
	local rc=0 vm_t0=$EPOCHREALTIME limit=$((VM_ROUNDS * 150 + 120))
	if ! command -v qemu-system-x86_64 >/dev/null; then
		echo '{"part":"vm","error":"qemu-system-x86_64 is not installed (make deps)"}' >>"$RAW_VM"
		return
	fi
	local sizes=${VM_SIZES// /,}
	RXEVM_ENV="XFER=$BIN/xfer SHIM_LIB=$LIB VMB_ROUNDS=$VM_ROUNDS VMB_SECS=$VM_SECS VMB_SIZES=$sizes VMB_ITERS=$VM_ITERS" \
		RXEVM_TIMEOUT=$limit timeout -k 10 $((limit + 30)) "$ROOT/integration/vm/rxe-vm.sh" \
		"$ROOT/integration/vm/guest-bench-suite.sh" </dev/null >"$WORK/vm.log" 2>&1 || rc=$?
	sed -n 's/^rec: //p' "$WORK/vm.log" >>"$RAW_VM"
	grep '^== vm bench' "$WORK/vm.log" | while read -r l; do say "$l"; done
	if ! grep -q '"part":"vm_xfer"' "$RAW_VM"; then
		python3 -c 'import json,sys; print(json.dumps({"part": "vm", "error": sys.argv[1]}))' \
			"the VM gave no figures (status $rc): $(grep -vE '^\[ *[0-9]+\.[0-9]+\] ' "$WORK/vm.log" | tail -n 3 | tr '\n' ' ')" >>"$RAW_VM"
	fi
	echo "{\"part\":\"timing\",\"name\":\"vm\",\"secs\":$(calc %.2f "$EPOCHREALTIME - $vm_t0")}" >>"$RAW_VM"
}

for part in $PARTS; do
	declare -F "part_$part" >/dev/null || die "unknown part $part"
	t0=$EPOCHREALTIME
	say "part $part"
	"part_$part"
	[[ $part == vm ]] && continue
	record timing "\"name\":\"$part\"" "\"secs\":$(calc %.2f "$EPOCHREALTIME - $t0")"
done

read -r BUSY1 TOTAL1 < <(cpu_busy)
HOST=$(hostname -s)
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
FILE=$OUT/$STAMP-$HOST.json
COMMON=(root="$ROOT" started="$STARTED" secs="$(calc %.1f "$EPOCHREALTIME - $T_START")"
	load_start="$LOAD0" load_end="$(cut -d' ' -f1-3 /proc/loadavg)"
	busy="$(calc %.3f "($BUSY1 - $BUSY0) / ($TOTAL1 - $TOTAL0)")" lib="$LIB")
if [[ " $PARTS " == *" vm "* ]]; then
	python3 "$ROOT/integration/bench/suite_vm_json.py" "$RAW_VM" "${COMMON[@]}" quick="$QUICK" \
		rounds="$VM_ROUNDS" secs_per_run="$VM_SECS" sizes="$VM_SIZES" iters="$VM_ITERS" >"$WORK/out-vm.json" ||
		die "the VM results could not be assembled (raw lines kept: BENCH_KEEP=1)"
	cp "$WORK/out-vm.json" "$OUT/$STAMP-rdma-$HOST.json"
	cp "$WORK/out-vm.json" "$OUT/rdma-latest.json"
	say "VM results: $OUT/$STAMP-rdma-$HOST.json (and $OUT/rdma-latest.json)"
fi
[[ " $PARTS " == " vm " ]] && exit 0
python3 "$ROOT/integration/bench/suite_json.py" "$RAW" >"$WORK/out.json" \
	root="$ROOT" quick="$QUICK" started="$STARTED" secs="$(calc %.1f "$EPOCHREALTIME - $T_START")" \
	load_start="$LOAD0" load_end="$(cut -d' ' -f1-3 /proc/loadavg)" \
	busy="$(calc %.3f "($BUSY1 - $BUSY0) / ($TOTAL1 - $TOTAL0)")" \
	rounds="$ROUNDS" secs_per_run="$SECS" warm_ms="$WARM_MS" sizes="$SIZES" parts="$PARTS" \
	sockperf_secs="$SP_SECS" sockperf_sizes="$SP_SIZES" qperf_secs="$QP_SECS" ucx_iters="$UCX_N" ucx_sizes="$UCX_SIZES" \
	limits_secs="$LIM_SECS" redis_requests="$REDIS_N" redis_k0_requests="$REDIS_K0_N" \
	redis_rounds="$REDIS_ROUNDS" tool_rounds="$TOOL_ROUNDS" tool_transports="${TOOL_TRANSPORTS[*]}" \
	pinned="${SERVER_CPU[*]:+server on CPU 0, client on CPU 1}" lib="$LIB" ||
	die "the results could not be assembled (raw lines kept: BENCH_KEEP=1)"
cp "$WORK/out.json" "$FILE"
cp "$WORK/out.json" "$OUT/latest.json"
say "results: $FILE (and $OUT/latest.json)"
