#!/bin/bash
# msg_breakdown.sh — issue 34: where a message's time goes, per phase, on
# both paths, from the shim's own per-message stamps
# (RDMASHIM_TEST_MSGSTAMPS=1, shim/core/msgstamps.h):
#
#   shm   sockperf ping-pong 64 B on loopback through the shim, at the
#         defaults and with RDMASHIM_SPIN_US=0 (and RDMASHIM_UNPAID_PERCENT=0,
#         so that the connection stays on shm to be measured: without busy
#         polling a ping-pong is judged unpaid and goes back to TCP)
#   rdma  the same over RDMA in one QEMU VM (rxe on dummy0,
#         integration/vm/guest-rdma-breakdown.sh), beside ib_send_lat -s 64
#
# For each, the sockperf p50 with the stamps off and on (what they cost),
# then integration/bench/msg_breakdown_report.py's tables: per side and
# direction, each phase's share of messages, p50, mean and mean per message
# (the phases add up to the total), and the one-way trip put together from
# both ends: sender to its post, post to data seen at the peer, data seen to
# recv()'s return.
#
#   flock /tmp/rdmashim-heavy.lock integration/bench/msg_breakdown.sh [shm] [rdma]
#
# Parts default to both (the VM part takes about 5 minutes). BENCH_SECS:
# sockperf -t in the VM (default 5), BENCH_SHM_SECS on shm (default 3);
# BENCH_ROUNDS: shm rounds (default 1), VM rounds (default 2);
# MSG_BREAKDOWN_RDMA_MODES: the VM's modes (default "default,spin0"; also
# spin1s, RDMASHIM_SPIN_US=1000000: a receiver that never sleeps). The traces stay in MSG_BREAKDOWN_OUT (default
# build/msg_breakdown; not under /tmp, which the VM does not share).
# Builds nothing: run `make` first. Exits 1 when a part gave no stamps.
# bench-timeout: 1200
set -u
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
LIB=${BENCH_LIB:-$ROOT/build/lib/librdmashim.so}
SECS=${BENCH_SECS:-5}
# On shm a message takes well under a microsecond: a few seconds give
# millions (and a longer sockperf run gave no report here).
SHM_SECS=${BENCH_SHM_SECS:-3}
OUT=${MSG_BREAKDOWN_OUT:-$ROOT/build/msg_breakdown}
REPORT=$ROOT/integration/bench/msg_breakdown_report.py
RDMA_MODES=${MSG_BREAKDOWN_RDMA_MODES:-default,spin0}
parts=${*:-shm rdma}
[ -f "$LIB" ] || { echo "msg_breakdown.sh: build first (make)" >&2; exit 2; }
for c in sockperf python3; do
	command -v "$c" >/dev/null || { echo "msg_breakdown.sh: $c is missing (make deps)" >&2; exit 2; }
done
rm -rf "$OUT"
mkdir -p "$OUT"
# A copy: a rebuild while the VM runs must not change the library under it.
cp "$LIB" "$OUT/librdmashim.so" && LIB=$OUT/librdmashim.so
trap 'pkill -P $$ 2>/dev/null' EXIT
status=0

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# pp STAMPS DIR VAR=VAL... -> sockperf p50 (us). The server ends with
# SIGINT, through exit(), so that the shim's destructor writes its stamps.
pp() {
	local stamps=$1 dir=$2 P srv p50
	shift 2
	P=$(port)
	mkdir -p "$dir"
	env LD_PRELOAD="$LIB" RDMASHIM_PORTS="$P" RDMASHIM_TEST_MSGSTAMPS="$stamps" RDMASHIM_TRACE=warn \
		RDMASHIM_TRACE_FILE="$dir/server.%p" "$@" timeout 90 sockperf sr --tcp -i 127.0.0.1 -p "$P" >/dev/null 2>&1 &
	srv=$!
	sleep 0.5
	env LD_PRELOAD="$LIB" RDMASHIM_PORTS="$P" RDMASHIM_TEST_MSGSTAMPS="$stamps" RDMASHIM_TRACE=warn \
		RDMASHIM_TRACE_FILE="$dir/client.%p" "$@" timeout 90 sockperf ping-pong --tcp -i 127.0.0.1 -p "$P" \
		-t "$SHM_SECS" -m 64 --mps 20000000 >"$dir/sockperf.$stamps.out" 2>&1
	p50=$(sed -n 's/.*percentile 50.000 = *\([0-9.]*\).*/\1/p' "$dir/sockperf.$stamps.out" | head -n 1)
	kill -INT "$srv" 2>/dev/null
	wait "$srv" 2>/dev/null
	echo "${p50:-failed}"
}

shm_part() {
	local rounds=${BENCH_ROUNDS:-1} r m
	local -a extra
	echo "== shm: sockperf ping-pong 64 B, ${SHM_SECS} s, $rounds round(s), $(nproc) cpu, load $(cut -d' ' -f1-3 /proc/loadavg)"
	for ((r = 1; r <= rounds; r++)); do
		for m in default spin0; do
			case $m in
			default) extra=() ;;
			spin0) extra=(RDMASHIM_SPIN_US=0 RDMASHIM_UNPAID_PERCENT=0) ;;
			esac
			echo "shm $m: stamps off p50 $(pp 0 "$OUT/shm-off" "${extra[@]}") us," \
				"on p50 $(pp 1 "$OUT/shm/$m.r$r" "${extra[@]}") us (round $r)"
		done
	done
	for m in default spin0; do
		python3 "$REPORT" "shm $m" "$OUT"/shm/"$m".r* || status=1
	done
}

rdma_part() {
	local m
	command -v qemu-system-x86_64 >/dev/null || { echo "== rdma: qemu-system-x86_64 missing: skipped"; return; }
	echo "== rdma: in one VM (TCG), sockperf ping-pong 64 B, ${SECS} s, ${BENCH_ROUNDS:-2} round(s)"
	RXEVM_ENV="SHIM_LIB=$LIB BREAKDOWN_OUT=$OUT/rdma BREAKDOWN_T=$SECS BREAKDOWN_ROUNDS=${BENCH_ROUNDS:-2} BREAKDOWN_MODES=$RDMA_MODES" \
		RXEVM_TIMEOUT=${RXEVM_TIMEOUT:-900} timeout 960 "$ROOT/integration/vm/rxe-vm.sh" \
		"$ROOT/integration/vm/guest-rdma-breakdown.sh" </dev/null 2>&1 | grep -E '^(breakdown|==)'
	[ -f "$OUT/rdma/p50.txt" ] || { echo "rdma: the VM left no figures"; status=1; return; }
	# p50.txt: MODE on|off|ib ROUND US
	python3 - "$OUT/rdma/p50.txt" <<-'PY'
	import statistics, sys
	v = {}
	for line in open(sys.argv[1]):
	    m, k, r, x = line.split()
	    try:
	        v.setdefault((m, k), []).append(float(x))
	    except ValueError:
	        pass
	for (m, k), xs in sorted(v.items()):
	    print(f"rdma {m} {k}: p50 median of {len(xs)} rounds {statistics.median(xs):.3f} us ({' '.join(map(str, xs))})")
	PY
	for m in ${RDMA_MODES//,/ }; do
		python3 "$REPORT" "rdma $m" "$OUT"/rdma/"$m".r* || status=1
	done
}

for p in $parts; do
	case $p in
	shm) shm_part ;;
	rdma) rdma_part ;;
	*) echo "msg_breakdown.sh: unknown part $p (shm, rdma)" >&2; exit 2 ;;
	esac
done
exit $status
