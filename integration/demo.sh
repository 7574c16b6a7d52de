#!/bin/bash
# demo.sh (make demo): unmodified programs, first on plain loopback TCP, then
# both ends under the shim on a whitelisted port, where the connections move
# to shared memory: the trace of one upgrade and the figures side by side
# (about half a minute). Then the same programs between two hosts: two QEMU
# VMs with Soft-RoCE (integration/vm/two-hosts.sh, guest-demo.sh), plain TCP
# and then the shim over RDMA, with the trace of one connection from both
# hosts (about 2 minutes more). Without qemu or a kernel with rdma_rxe the
# RDMA part says why and the demo ends after shared memory, successfully.
#
#   integration/demo.sh [--shm-only]     (make demo; make demo-shm)
#
# Exit status 0, or 1 when a part that could run failed. Cleans up after
# itself.
set -u
only_shm=0
case ${1:-} in
	--shm-only) only_shm=1 ;;
	'') ;;
	*) echo "usage: demo.sh [--shm-only]"; exit 2 ;;
esac
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
LIB=$ROOT/build/lib/librdmashim.so
TMP=$(mktemp -d "${TMPDIR:-/tmp}/rdmashim-demo.XXXXXX")
X=''
trap 'pkill -P $$ 2>/dev/null; sleep 0.2; rm -rf "$TMP" ${X:+"$X"}' EXIT
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
[ "$only_shm" = 1 ] && exit 0

echo
echo "== 3. the same programs between two hosts over RDMA: two QEMU VMs with Soft-RoCE,"
echo "   host A runs the servers, host B the clients; plain TCP, then both ends under the shim"
why=''
if ! command -v qemu-system-x86_64 >/dev/null; then why="qemu-system-x86_64 is not installed (make deps installs it)"
elif ! compgen -G '/boot/vmlinuz-*' >/dev/null; then why="no kernel in /boot to boot the VMs with (make deps: linux-image-amd64)"
elif ! find /lib/modules -name 'rdma_rxe.ko*' 2>/dev/null | grep -q .; then why="no kernel module rdma_rxe (Soft-RoCE) in /lib/modules"
fi
if [ -n "$why" ]; then
	echo "   skipped: $why."
	echo "   The shared-memory part above is the demo on this machine."
	exit 0
fi
# The VMs see this machine's files at the same paths, but a /tmp of their
# own: the directory they share with this script is under build/.
X=$(mktemp -d "$ROOT/build/demo-rdma.XXXXXX")
t0=$SECONDS
rc=0
RXEVM_ENV="DEMO_X=$X" RXEVM_TIMEOUT=300 timeout 330 "$ROOT/integration/vm/two-hosts.sh" \
	"$ROOT/integration/vm/guest-demo.sh" </dev/null >"$X/vms.out" 2>&1 || rc=$?
secs=$((SECONDS - t0))
if [ "$rc" != 0 ] || ! grep -q '^client_secs=' "$X/figures" 2>/dev/null; then
	echo "   the VMs failed (status $rc after $secs s); their output:"
	grep -vE '^\[[AB]\] \[ *[0-9]+\.[0-9]+\] ' "$X/vms.out" | tail -n 30
	exit 1
fi
ep=$(cat "$X"/trace.b.*.jsonl | grep '"event":"upgrade.done"' | grep ':7402"' | head -1 |
	sed 's/.*"local":"\([^"]*\)".*/\1/')
echo "-- trace of one sockperf connection over RDMA, both hosts' views (rdmashim trace --conn $ep):"
"$ROOT/build/bin/rdmashim" trace --conn "$ep" "$X"/trace.*.jsonl | sed 's/^/   /'
echo
upgrades=$(cat "$X"/trace.*.jsonl | grep '"event":"upgrade.done"' | grep -c '"transport":"rdma"')
python3 - "$X/figures" "$upgrades" "$secs" <<'PY'
import sys
kv = {}
for line in open(sys.argv[1]):
    for w in line.split():
        k, _, v = w.partition("=")
        kv[k] = v
up, secs = sys.argv[2], sys.argv[3]
def f(k):
    try:
        return float(kv.get(k, ""))
    except ValueError:
        return float("nan")
print("-- figures between the two VMs (this run; one virtual CPU each, emulated):")
print(f"   ib_send_lat 64 B, raw verbs (the device) : {f('ib_send_lat_us'):8.1f} us")
print(f"   sockperf ping-pong 64 B median         : {f('sockperf_tcp_us'):8.1f} us on TCP, {f('sockperf_rdma_us'):8.1f} us over RDMA")
print(f"   redis-benchmark SET, 10 clients        : {f('redis_tcp_set'):8.0f} req/s on TCP, {f('redis_rdma_set'):8.0f} over RDMA")
print(f"   redis-benchmark GET, 10 clients        : {f('redis_tcp_get'):8.0f} req/s on TCP, {f('redis_rdma_get'):8.0f} over RDMA")
print(f"   connection sides upgraded to RDMA (trace upgrade.done): {up}; the VMs took {secs} s")
print()
print("What you saw: the same binaries again, now on two hosts. Each whitelisted")
print("connection started on TCP; the shims found that the peer is on another host,")
print("set up an RDMA queue pair through rdma_cm and moved each direction to a ring")
print("written with one-sided RDMA writes. These VMs have no RDMA hardware: Soft-RoCE")
print("runs in their emulated kernels on one virtual CPU each, where the shim cannot")
print("busy-poll beside the program, so the times say that it runs, not how fast RDMA")
print("is (docs/BENCHMARKS.md). Without the shim at one end, it stays on TCP.")
PY
