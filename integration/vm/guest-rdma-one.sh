#!/bin/bash
# guest-rdma-one.sh — guest script for rxe-vm.sh (integration/t_rdma_vm.sh):
# Soft-RoCE on dummy0 (192.168.77.1) in one VM, then real programs with both
# ends under the shim and RDMASHIM_TRANSPORTS=rdma, so that the RDMA
# transport carries them even though both ends share the host:
#   stress (4 connections, mixed modes, half-close), redis-server +
#   redis-benchmark, iperf3, sockperf ping-pong; then a plain client (no
#   shim) against a shim server, which must stay on TCP byte for byte.
# Prints TAP-like "ok - " / "not ok - " lines; exits 1 if any check failed.
#
# RDMA_ONLY=stress|redis|iperf3|sockperf|plain (space-separated) runs a subset.
# RDMA_TRACE=debug for the whole handshake in the dumped traces.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=guest-lib.sh
. "$here/guest-lib.sh"
ROOT=$(cd "$here/../.." && pwd)
LIB=$ROOT/build/lib/librdmashim.so
PROGS=$ROOT/build/progs
addr=192.168.77.1
only=${RDMA_ONLY:-stress redis iperf3 sockperf plain}
T=/tmp/rdma-one
n_ok=0 n_fail=0
mkdir -p "$T"

ok() { n_ok=$((n_ok + 1)); echo "ok - $*"; }
not_ok() { n_fail=$((n_fail + 1)); echo "not ok - $*"; }
check() { local m=$1; shift; if "$@"; then ok "$m"; else not_ok "$m"; fi; }
wanted() { [[ " $only " == *" $1 "* ]]; }

# shim NAME PORT CMD...: CMD under the shim, tracing into $T/NAME/.
shim() {
  local name=$1 port=$2; shift 2
  mkdir -p "$T/$name"
  env RDMASHIM_PORTS="$port" RDMASHIM_TRANSPORTS=rdma RDMASHIM_TRACE="${RDMA_TRACE:-info}" \
      RDMASHIM_TRACE_FILE="$T/$name/trace.%p.jsonl" LD_PRELOAD="$LIB" "$@"
}

# upgraded NAME: both roles traced upgrade.done with transport rdma.
upgraded() {
  local name=$1 c s
  c=$(cat "$T/$name"/trace.*.jsonl 2>/dev/null | grep '"upgrade.done"' | grep '"transport":"rdma"' | grep -c '"role":"client"')
  s=$(cat "$T/$name"/trace.*.jsonl 2>/dev/null | grep '"upgrade.done"' | grep '"transport":"rdma"' | grep -c '"role":"server"')
  if [[ $c -ge 1 && $s -ge 1 ]]; then
    ok "$name: upgrade.done transport rdma on both sides (client $c, server $s)"
  else
    not_ok "$name: upgrade.done transport rdma on both sides (client $c, server $s)"
    dump "$name"
  fi
}

dump() {
  echo "-- trace of $1 (handshake events):"
  cat "$T/$1"/trace.*.jsonl 2>/dev/null | grep -E '"(warn|error)"|upgrade\.|rdma\.|qp\.|rv\.|switch' | head -n ${DUMP_LINES:-40}
}

# listening PORT: wait (bounded) until something listens on PORT, without
# connecting (a probe connection would count as a client).
listening() {
  local i
  for ((i = 0; i < 100; i++)); do
    ss -Hltn "sport = :$1" 2>/dev/null | grep -q . && return 0
    sleep 0.2
  done
  echo "nothing listens on $1"; return 1
}

echo "== guest: $(uname -r), $(nproc) cpu, hugepages $(cat /proc/sys/vm/nr_hugepages)"
rxe_up dummy0 "$addr/24" || { echo "not ok - rxe up"; exit 1; }

port=7100
if wanted stress; then
  port=$((port + 1))
  shim stress "$port" timeout 300 "$PROGS/stress" server --bind "$addr" --port "$port" --exit-after 4 \
    --timeout 120 > "$T/stress.server" 2>&1 &
  spid=$!
  listening "$port"
  t0=$SECONDS
  rc=0
  shim stress $port timeout 240 "$PROGS/stress" client --host "$addr" --port "$port" --conns 4 --bytes 64M \
    --mode mixed --half-close --timeout 200 > "$T/stress.client" 2>&1 || rc=$?
  src=0; wait "$spid" || src=$?
  cat "$T/stress.client"
  check "stress 64M 4 conns mixed half-close over rdma: client ok (status $rc, $((SECONDS - t0)) s)" \
    grep -q '^stress: OK' "$T/stress.client"
  check "stress server: every connection ok (status $src)" grep -q 'stress-server: OK conns=4 failed=0' "$T/stress.server"
  [[ $src -eq 0 ]] || tail -n 5 "$T/stress.server"
  upgraded stress
fi

if wanted redis; then
  port=$((port + 1))
  shim redis $port timeout 240 redis-server --bind "$addr" --port "$port" --save '' --appendonly no \
    --protected-mode no --daemonize no > "$T/redis.server" 2>&1 &
  spid=$!
  listening "$port"
  rc=0
  shim redis $port timeout 240 redis-benchmark -h "$addr" -p "$port" -n 20000 -c 20 -t get,set -q \
    > "$T/redis.client" 2>&1 || rc=$?
  tr '\r' '\n' < "$T/redis.client" | grep -E 'requests per second' | sed 's/^ *//'
  check "redis-benchmark -n 20000 -c 20 -t get,set: exit 0 (got $rc)" test "$rc" -eq 0
  if [ "$rc" -ne 0 ]; then
    tr '\r' '\n' < "$T/redis.client" | tail -n 5 | sed 's/^/    client: /'
    tail -n 5 "$T/redis.server" | sed 's/^/    server: /'
  fi
  check "redis-benchmark: SET and GET results" bash -c \
    "tr '\r' '\n' < '$T/redis.client' | grep -q '^SET: .*requests per second' && tr '\r' '\n' < '$T/redis.client' | grep -q '^GET: .*requests per second'"
  kill "$spid" 2>/dev/null; wait "$spid" 2>/dev/null
  upgraded redis
fi

if wanted iperf3; then
  port=$((port + 1))
  shim iperf3 $port timeout 120 iperf3 -s -B "$addr" -p "$port" -1 > "$T/iperf3.server" 2>&1 &
  spid=$!
  listening "$port"
  rc=0
  shim iperf3 $port timeout 100 iperf3 -c "$addr" -p "$port" -t 3 > "$T/iperf3.client" 2>&1 || rc=$?
  grep -E 'sender|receiver' "$T/iperf3.client"
  check "iperf3 -t 3: exit 0 (got $rc)" test "$rc" -eq 0
  check "iperf3: sender and receiver summaries" bash -c "grep -q receiver '$T/iperf3.client' && grep -q sender '$T/iperf3.client'"
  [[ $rc -eq 0 ]] || cat "$T/iperf3.client"
  wait "$spid" 2>/dev/null
  upgraded iperf3
fi

if wanted sockperf; then
  port=$((port + 1))
  shim sockperf $port timeout 120 sockperf sr --tcp -i "$addr" -p "$port" > "$T/sockperf.server" 2>&1 &
  spid=$!
  listening "$port"
  rc=0
  shim sockperf $port timeout 100 sockperf ping-pong --tcp -i "$addr" -p "$port" -t 3 -m 64 \
    > "$T/sockperf.client" 2>&1 || rc=$?
  sed 's/\x1b\[[0-9;]*m//g' "$T/sockperf.client" | grep -E 'Summary|observations|percentile 50.000|dropped'
  check "sockperf ping-pong -t 3: exit 0 (got $rc)" test "$rc" -eq 0
  check "sockperf: no drops, duplicates or reordering" \
    grep -q '# dropped messages = 0; # duplicated messages = 0; # out-of-order messages = 0' "$T/sockperf.client"
  check "sockperf: no ERROR" bash -c "! grep -qi error '$T/sockperf.client'"
  kill "$spid" 2>/dev/null; wait "$spid" 2>/dev/null
  upgraded sockperf
fi

if wanted plain; then
  port=$((port + 1))
  shim plain $port timeout 120 "$PROGS/stress" server --bind "$addr" --port "$port" --exit-after 2 --timeout 60 \
    > "$T/plain.server" 2>&1 &
  spid=$!
  listening "$port"
  rc=0
  # Longer than the upgrade timeout (3 s), so the server's verdict is traced.
  timeout 100 "$PROGS/stress" client --host "$addr" --port "$port" --conns 2 --duration 4 --mode mixed \
    --half-close --timeout 60 > "$T/plain.client" 2>&1 || rc=$?
  src=0; wait "$spid" || src=$?
  check "plain client (no shim) against a shim server: byte-exact (status $rc)" grep -q '^stress: OK' "$T/plain.client"
  check "plain: server ok (status $src)" grep -q 'stress-server: OK' "$T/plain.server"
  n=$(cat "$T/plain"/trace.*.jsonl | grep '"upgrade.done"' | grep -c rdma || true)
  check "plain: no upgrade with a plain peer (got $n)" test "$n" -eq 0
  n=$(cat "$T/plain"/trace.*.jsonl | grep '"upgrade.fail"' | grep -c '"reason":"peer_no_shim"' || true)
  check "plain: the server gave up with peer_no_shim, on TCP all along ($n of 2)" test "$n" -eq 2
  echo "   plain: server outcomes: $(cat "$T/plain"/trace.*.jsonl | grep -o '"event":"upgrade.fail"[^}]*"reason":"[a-z_]*"' | grep -o '"reason":"[a-z_]*"' | sort | uniq -c | tr '\n' ' ')"
fi

if [[ -n ${RDMA_EVENTS:-} ]]; then
  echo "-- trace events by name:"
  cat "$T"/*/trace.*.jsonl | grep -o '"event":"[a-z_.]*"' | sort | uniq -c | sort -rn | head -n 30
  cat "$T"/*/trace.*.jsonl | grep -E "$RDMA_EVENTS" | head -n 40
fi
# RDMA_KEEP=DIR: copy the traces and outputs out of the VM's private /tmp.
if [[ -n ${RDMA_KEEP:-} ]]; then rm -rf "$RDMA_KEEP"; mkdir -p "$RDMA_KEEP" && cp -r "$T"/. "$RDMA_KEEP"/; fi
echo "== $n_ok ok, $n_fail failed"
[[ $n_fail -eq 0 ]]
