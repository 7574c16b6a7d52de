#!/bin/bash
# shm_zc.sh: one copy against two on shared memory (docs/ZEROCOPY.md), with
# loopback TCP and a Unix-domain stream socket beside them in the same run
# (ratios only mean something within one run).
#
# For each message size (BENCH_SIZES, default 256K 1M 4M 16M): xfer's
# one-way throughput (integration/bench/xfer.c, --op bw: the client writes
# N-byte messages, the server reads into an N-byte buffer) for BENCH_SECS
# seconds (default 3), BENCH_ROUNDS rounds (default 3, transports in a
# rotated order each round), over
#   tcp     loopback TCP, no shim
#   unix    a Unix-domain stream socket, no shim
#   shm2    the shim's shm rings, RDMASHIM_ZEROCOPY=off (two copies)
#   shm1    the same, RDMASHIM_ZEROCOPY=on (one copy where an offer is taken)
# and prints per transport and size the median GiB/s and the median CPU
# seconds per GiB moved (both processes, all threads, from getrusage), and
# for shm1 the share of bytes that moved with one copy (zc_bytes over bytes).
# Then integration/bench/pvm_cost.c at each size: process_vm_writev's own
# cost per GiB against two memcpys through a 1 MiB ring and one memcpy.
# Raw lines (one JSON object per run) go to BENCH_RAW if set. BENCH_RING_KB
# sets RDMASHIM_RING_KB for both shm transports (default: the shim's).
# Heavy: run it under flock /tmp/rdmashim-heavy.lock.
set -u
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
LIB=${BENCH_LIB:-$ROOT/build/lib/librdmashim.so}
SECS=${BENCH_SECS:-3}
ROUNDS=${BENCH_ROUNDS:-3}
SIZES=${BENCH_SIZES:-256K 1M 4M 16M}
BIN=$ROOT/build/bench
WORK=$(mktemp -d)
RAW=${BENCH_RAW:-$WORK/raw.jsonl}
SPID=()
cleanup() {
	local p
	for p in "${SPID[@]}"; do kill "$p" 2>/dev/null; done
	wait 2>/dev/null
	rm -rf "$WORK"
}
trap cleanup EXIT
[ -f "$LIB" ] || { echo "shm_zc.sh: build first (make)" >&2; exit 2; }
mkdir -p "$BIN"
for p in xfer pvm_cost; do
	[[ $BIN/$p -nt $ROOT/integration/bench/$p.c ]] && continue
	cc -std=gnu11 -O2 -Wall -Wextra -Werror -D_GNU_SOURCE -o "$BIN/$p" "$ROOT/integration/bench/$p.c" || exit 2
done
: >"$RAW"

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
bytes_of() { numfmt --from=iec "$1"; }

# tenv T PORT: the env words for one end of transport T.
tenv() {
	case $1 in
	tcp | unix) echo env -u LD_PRELOAD ;;
	shm2) echo env ${BENCH_RING_KB:+RDMASHIM_RING_KB=$BENCH_RING_KB} LD_PRELOAD="$LIB" RDMASHIM_PORTS="$2" RDMASHIM_TRANSPORTS=shm RDMASHIM_ZEROCOPY=off \
		RDMASHIM_TRACE=info RDMASHIM_TRACE_FILE="$WORK/trace/$1.%p" ;;
	shm1) echo env ${BENCH_RING_KB:+RDMASHIM_RING_KB=$BENCH_RING_KB} LD_PRELOAD="$LIB" RDMASHIM_PORTS="$2" RDMASHIM_TRANSPORTS=shm RDMASHIM_ZEROCOPY=on \
		RDMASHIM_TRACE=info RDMASHIM_TRACE_FILE="$WORK/trace/$1.%p" ;;
	esac
}

TRANSPORTS=(tcp unix shm2 shm1)
declare -A P=()
mkdir -p "$WORK/trace"
for t in "${TRANSPORTS[@]}"; do
	if [[ $t == unix ]]; then
		$(tenv "$t" 0) timeout 900 "$BIN/xfer" server --unix "$WORK/xfer.sock" >"$WORK/srv-$t.log" 2>&1 &
	else
		P[$t]=$(port)
		# shellcheck disable=SC2046
		$(tenv "$t" "${P[$t]}") timeout 900 "$BIN/xfer" server --port "${P[$t]}" >"$WORK/srv-$t.log" 2>&1 &
	fi
	SPID+=($!)
done
for t in "${TRANSPORTS[@]}"; do
	for i in $(seq 100); do grep -q READY "$WORK/srv-$t.log" 2>/dev/null && break; sleep 0.05; done
done

for ((r = 0; r < ROUNDS; r++)); do
	for s in $SIZES; do
		n=$(bytes_of "$s")
		ts=("${TRANSPORTS[@]:r % 4}" "${TRANSPORTS[@]:0:r % 4}")
		for t in "${ts[@]}"; do
			where=(--port "${P[$t]:-0}")
			[[ $t == unix ]] && where=(--unix "$WORK/xfer.sock")
			# The client's trace of this run alone: its zc_bytes at exit.
			rm -rf "$WORK/ctrace"; mkdir -p "$WORK/ctrace"
			# shellcheck disable=SC2046
			if line=$($(tenv "$t" "${P[$t]:-0}") RDMASHIM_TRACE_FILE="$WORK/ctrace/c.%p" timeout -k 5 120 "$BIN/xfer" client "${where[@]}" --op bw \
				--size "$n" --secs "$SECS" 2>"$WORK/err"); then
				zc=0
				if [[ $t == shm1 ]]; then
					zc=$(python3 -c 'import json,sys
z=0
for f in sys.argv[1:]:
    for l in open(f):
        e=json.loads(l)
        if e.get("event")=="process.stats": z+=e.get("zc",{}).get("zc_bytes",0)
print(z)' "$WORK"/ctrace/c.*)
				fi
				echo "{\"transport\":\"$t\",\"round\":$r,\"zc_bytes\":$zc,${line:1}" >>"$RAW"
			else
				echo "shm_zc.sh: $t $s: $(tail -n 1 "$WORK/err")" >&2
			fi
		done
	done
	echo "shm_zc.sh: round $((r + 1)) of $ROUNDS done" >&2
done

python3 - "$RAW" <<'PYEOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
sizes = sorted({r["size"] for r in rows})
ts = ["tcp", "unix", "shm2", "shm1"]
def fmt(n):
    return "%d KiB" % (n >> 10) if n < (1 << 20) else "%d MiB" % (n >> 20)
print("| size | " + " | ".join("%s GiB/s" % t for t in ts) + " | " + " | ".join("%s CPU s/GiB" % t for t in ts) +
      " | shm1 one-copy share |")
print("|---" * (2 * len(ts) + 2) + "|")
for s in sizes:
    gbs, cpu = [], []
    share = "-"
    for t in ts:
        rs = [r for r in rows if r["size"] == s and r["transport"] == t]
        if not rs:
            gbs.append("-"); cpu.append("-"); continue
        gbs.append("%.2f" % statistics.median(r["bytes_per_sec"] / 2**30 for r in rs))
        cpu.append("%.3f" % statistics.median((r["cpu_client_us"] + r["cpu_server_us"]) / 1e6 / (r["bytes"] / 2**30)
                                              for r in rs if r["bytes"]))
        if t == "shm1":
            share = "%.0f%%" % (100 * statistics.median(min(1.0, r["zc_bytes"] / r["bytes"]) for r in rs if r["bytes"]))
    print("| %s | %s | %s | %s |" % (fmt(s), " | ".join(gbs), " | ".join(cpu), share))
PYEOF
echo
echo "| size | process_vm_writev s/GiB | two memcpy (1 MiB ring) s/GiB | one memcpy s/GiB |"
echo "|---|---|---|---|"
for s in $SIZES; do
	"$BIN/pvm_cost" $(($(bytes_of "$s") >> 10)) | python3 -c 'import json,sys
r=json.loads(sys.stdin.read())
k=r["size_kib"]
print("| %s | %.3f | %.3f | %.3f |" % ("%d KiB" % k if k < 1024 else "%d MiB" % (k >> 10), r["pvm_writev_s_per_gib"], r["two_memcpy_s_per_gib"], r["one_memcpy_s_per_gib"]))'
done
