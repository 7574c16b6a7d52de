#!/bin/bash
# shm.sh: same-host speed of upgraded connections against loopback TCP, both
# measured in this run (ratios only mean something within one run).
#
#   sockperf ping-pong 64 B: median half round trip, TCP vs shm with busy
#     polling (RDMASHIM_SPIN_US, default 50) vs shm without (SPIN_US=0)
#   iperf3, one stream, 3 s: Gbit/s, TCP vs shm
#   redis-benchmark GET and SET, 50 clients: requests/s, TCP vs shm
#
# "TCP" runs have no LD_PRELOAD at all; "shm" runs load the shim on both ends
# with the port whitelisted, and the script checks the trace for upgrade.done.
# Builds nothing: run `make` first. Loopback only, everything under timeout.
set -u
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
LIB=${BENCH_LIB:-$ROOT/build/lib/librdmashim.so}
SECS=${BENCH_SECS:-3}
ROUNDS=${BENCH_ROUNDS:-3}
WORK=$(mktemp -d)
trap 'pkill -P $$ 2>/dev/null; rm -rf "$WORK"' EXIT
[ -f "$LIB" ] || { echo "shm.sh: build first (make)" >&2; exit 2; }
for c in sockperf iperf3 redis-server redis-benchmark python3; do
	command -v "$c" >/dev/null || { echo "shm.sh: $c is missing (make deps)" >&2; exit 2; }
done

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# run MODE CMD...: MODE tcp (no shim), shm, shm0 (shm without busy polling)
run() {
	local mode=$1; shift
	case $mode in
	tcp) env -u LD_PRELOAD "$@" ;;
	shm) env LD_PRELOAD="$LIB" RDMASHIM_PORTS="$P" RDMASHIM_TRACE=info \
		RDMASHIM_TRACE_FILE="$WORK/trace.%p" "$@" ;;
	shm0) env LD_PRELOAD="$LIB" RDMASHIM_PORTS="$P" RDMASHIM_SPIN_US=0 RDMASHIM_TRACE=info \
		RDMASHIM_TRACE_FILE="$WORK/trace.%p" "$@" ;;
	esac
}

median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

sockperf_pp() { # MODE -> median usec
	P=$(port)
	run "$1" timeout 60 sockperf sr --tcp -i 127.0.0.1 -p "$P" >/dev/null 2>&1 &
	local srv=$!
	sleep 0.5
	run "$1" timeout 60 sockperf ping-pong --tcp -i 127.0.0.1 -p "$P" -t "$SECS" -m 64 --mps 20000000 2>&1 |
		sed -n 's/.*percentile 50.000 = *\([0-9.]*\).*/\1/p'
	kill $srv 2>/dev/null; wait $srv 2>/dev/null
}

iperf_one() { # MODE -> Gbit/s
	P=$(port)
	run "$1" timeout 60 iperf3 -s -1 -p "$P" >/dev/null 2>&1 &
	local srv=$!
	sleep 0.5
	run "$1" timeout 60 iperf3 -c 127.0.0.1 -p "$P" -t "$SECS" -J 2>/dev/null |
		python3 -c 'import json,sys; print(json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"]/1e9)'
	wait $srv 2>/dev/null
}

redis_rps() { # MODE TEST -> requests/s
	P=$(port)
	run "$1" timeout 120 redis-server --port "$P" --save '' --appendonly no >/dev/null 2>&1 &
	local srv=$!
	sleep 0.5
	run "$1" timeout 120 redis-benchmark -p "$P" -c 50 -n 100000 -t "$2" --csv 2>/dev/null |
		awk -F'"' 'NR==2 {print $4}'
	kill $srv 2>/dev/null; wait $srv 2>/dev/null
}

collect() { # NAME FN ARGS... : ROUNDS alternated runs per mode, prints medians
	local name=$1 fn=$2; shift 2
	local -A vals=()
	for ((r = 0; r < ROUNDS; r++)); do
		for mode in "$@"; do
			v=$($fn "$mode" ${EXTRA:-})
			vals[$mode]+="${v:-nan} "
		done
	done
	for mode in "$@"; do
		printf '%s %s %s\n' "$name" "$mode" "$(echo "${vals[$mode]}" | tr ' ' '\n' | grep -v '^$' | median)"
	done
}

{
	collect sockperf_pp_us sockperf_pp tcp shm shm0
	collect iperf3_gbps iperf_one tcp shm
	EXTRA=get collect redis_get_rps redis_rps tcp shm
	EXTRA=set collect redis_set_rps redis_rps tcp shm
} | tee "$WORK/figures"
upgraded=$(cat "$WORK"/trace.* 2>/dev/null | grep -c '"upgrade.done".*"transport":"shm"')
echo "upgraded connections seen in traces: $upgraded"
python3 - "$WORK/figures" <<'PY'
import sys
f = {}
for line in open(sys.argv[1]):
    name, mode, v = line.split()
    f[(name, mode)] = float(v) if v != "nan" else float("nan")
def r(a, b): return a / b if b else float("nan")
pp_t, pp_s, pp_s0 = f[("sockperf_pp_us","tcp")], f[("sockperf_pp_us","shm")], f[("sockperf_pp_us","shm0")]
print()
print("| figure | TCP | shm | ratio | goal |")
print("|---|---|---|---|---|")
print(f"| sockperf ping-pong 64 B median, busy polling (us) | {pp_t:.3f} | {pp_s:.3f} | {r(pp_t,pp_s):.1f}x lower | >= 10x |")
print(f"| sockperf ping-pong 64 B median, no busy polling (us) | {pp_t:.3f} | {pp_s0:.3f} | {r(pp_t,pp_s0):.2f}x lower | >= 1x |")
for name, label, goal in (("iperf3_gbps", "iperf3 one stream (Gbit/s)", ">= 1.6x"),
                          ("redis_get_rps", "redis-benchmark GET, 50 clients (req/s)", ">= 1.3x"),
                          ("redis_set_rps", "redis-benchmark SET, 50 clients (req/s)", ">= 1.3x")):
    t, s = f[(name,"tcp")], f[(name,"shm")]
    print(f"| {label} | {t:.4g} | {s:.4g} | {r(s,t):.2f}x | {goal} |")
PY
