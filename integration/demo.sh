#!/bin/bash
# demo.sh (make demo): unmodified programs, first on plain loopback TCP, then
# both ends under the shim on a whitelisted port, where the connections move
# to shared memory. Shows the trace of one upgrade and the figures side by
# side. About half a minute; cleans up after itself.
set -u
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
LIB=$ROOT/build/lib/librdmashim.so
TMP=$(mktemp -d "${TMPDIR:-/tmp}/rdmashim-demo.XXXXXX")
trap 'pkill -P $$ 2>/dev/null; sleep 0.2; rm -rf "$TMP"' EXIT
for c in redis-server redis-benchmark sockperf python3; do
	command -v "$c" >/dev/null || { echo "demo: $c is missing (make deps installs it)"; exit 1; }
done
[ -e "$LIB" ] || { echo "demo: $LIB is missing (run make)"; exit 1; }
while read -r v; do unset "$v"; done < <(compgen -e | grep '^RDMASHIM_' || true)
unset LD_PRELOAD

port() { timeout 10 python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# under MODE CMD...: MODE plain (no shim) or shim (whitelisted port $P, trace)
under() {
	local mode=$1; shift
	if [ "$mode" = shim ]; then
		env LD_PRELOAD="$LIB" RDMASHIM_PORTS="$P" RDMASHIM_TRACE=info \
			RDMASHIM_TRACE_FILE="$TMP/trace.%p.jsonl" "$@"
	else
		"$@"
	fi
}

redis_round() { # MODE -> "SET rps GET rps"
	P=$(port)
	under "$1" timeout 60 redis-server --port "$P" --bind 127.0.0.1 --save '' --appendonly no \
		--dir "$TMP" >/dev/null 2>&1 &
	local srv=$!
	for _ in $(seq 50); do timeout 2 redis-cli -p "$P" ping >/dev/null 2>&1 && break; sleep 0.1; done
	under "$1" timeout 60 redis-benchmark -p "$P" -c 50 -n 100000 -t set,get --csv 2>/dev/null |
		awk -F'"' 'NR>1 {printf "%s %s ", $2, $4}'
	kill $srv 2>/dev/null; wait $srv 2>/dev/null
}

# sockperf sizes its table of sequence numbers from --mps (default 600k/s);
# shared memory answers faster than that, so give it room.
sockperf_round() { # MODE -> median us
	P=$(port)
	under "$1" timeout 30 sockperf sr --tcp -i 127.0.0.1 -p "$P" >/dev/null 2>&1 &
	local srv=$!
	for _ in $(seq 50); do [ -n "$(ss -Hltn "sport = :$P" 2>/dev/null)" ] && break; sleep 0.1; done
	under "$1" timeout 30 sockperf ping-pong --tcp -i 127.0.0.1 -p "$P" -t 2 -m 64 --mps 20000000 2>&1 |
		sed -n 's/.*percentile 50.000 = *\([0-9.]*\).*/\1/p'
	kill $srv 2>/dev/null; wait $srv 2>/dev/null
}

echo "== rdmashim demo: unmodified redis-server/redis-benchmark and sockperf on 127.0.0.1"
echo "   1. plain TCP; 2. LD_PRELOAD=${LIB#"$ROOT"/} RDMASHIM_PORTS=<port> on both ends"
echo
read -r _ tcp_set _ tcp_get <<<"$(redis_round plain)"
read -r _ shm_set _ shm_get <<<"$(redis_round shim)"
echo "-- trace of one redis connection under the shim (server side, then client side):"
peer=$(grep -h '"event":"upgrade.done"' "$TMP"/trace.*.jsonl | grep '"role":"client"' | head -1 |
	sed 's/.*"local":"\([^"]*\)".*/\1/')
grep -h "\"$peer\"" "$TMP"/trace.*.jsonl | grep -v fd.close | sort | cut -c1-220 | head -10
echo
tcp_pp=$(sockperf_round plain)
shm_pp=$(sockperf_round shim)
upgrades=$(cat "$TMP"/trace.*.jsonl | grep -c '"event":"upgrade.done"')
python3 - "$tcp_set" "$shm_set" "$tcp_get" "$shm_get" "$tcp_pp" "$shm_pp" "$upgrades" <<'PY'
import sys
ts, ss, tg, sg, tp, sp, up = sys.argv[1:]
f = lambda x: float(x) if x else float("nan")
print("-- figures (this run, this machine):")
print(f"   redis-benchmark SET, 50 clients: {f(ts):10.0f} req/s on TCP, {f(ss):10.0f} over shm  ({f(ss)/f(ts):.2f}x)")
print(f"   redis-benchmark GET, 50 clients: {f(tg):10.0f} req/s on TCP, {f(sg):10.0f} over shm  ({f(sg)/f(tg):.2f}x)")
print(f"   sockperf ping-pong 64 B median : {f(tp):10.3f} us on TCP, {f(sp):10.3f} us over shm ({f(tp)/f(sp):.1f}x lower)")
print(f"   connection sides upgraded to shared memory (trace upgrade.done): {up}")
print()
print("What you saw: the same binaries, unchanged. Under the shim each whitelisted")
print("connection starts on TCP, the two shims meet on a rendezvous socket, check")
print("that they own the two ends of that TCP connection, and switch each direction")
print("to a shared-memory ring at a byte offset. A peer without the shim stays on TCP.")
PY
