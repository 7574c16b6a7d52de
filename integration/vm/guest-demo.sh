#!/bin/bash
# guest-demo.sh — the RDMA part of `make demo` (integration/demo.sh), run
# by two-hosts.sh in two Soft-RoCE VMs. Host A (192.168.79.1) runs the
# servers, host B (192.168.79.2) the clients: the same unmodified sockperf
# and redis programs, first on plain TCP, then with the shim preloaded at
# both ends and their ports whitelisted (default transports: the peer is on
# another host, so the shim picks RDMA).
#
# DEMO_X is a directory on the host that both VMs see (not under /tmp):
# the shim's traces go there (DEMO_X/trace.<role>.<pid>.jsonl) for the host
# to read; B writes its figures to DEMO_X/figures and touches DEMO_X/done
# when it is through, which ends A's servers. B prints "demo: " lines.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=guest-lib.sh
. "$here/guest-lib.sh"
: "${ROLE:?} ${IFACE:?} ${ADDR:?} ${PREFIX:?} ${PEER:?} ${DEMO_X:?}"
SP=7401 SP_SHIM=7402 RD=7403 RD_SHIM=7404
T=/tmp/demo
mkdir -p "$T"

# shim PORT CMD...: CMD with the shim preloaded, PORT whitelisted.
shim() {
  local port=$1; shift
  env LD_PRELOAD="$LIB" RDMASHIM_PORTS="$port" RDMASHIM_TRACE=info \
    RDMASHIM_TRACE_FILE="$DEMO_X/trace.$ROLE.%p.jsonl" "$@"
}
strip() { sed 's/\x1b\[[0-9;]*m//g' "$@"; }

rxe_up "$IFACE" "$ADDR/$PREFIX" || { echo "demo: host $ROLE: Soft-RoCE did not come up"; exit 1; }

if [[ $ROLE == a ]]; then
  pids=()
  timeout 300 ib_send_lat -d rxe0 -s 64 -F -n 2000 >"$T/lat" 2>&1 & pids+=($!)
  timeout 300 sockperf sr --tcp -i "$ADDR" -p "$SP" >"$T/sp" 2>&1 & pids+=($!)
  shim "$SP_SHIM" timeout 300 sockperf sr --tcp -i "$ADDR" -p "$SP_SHIM" >"$T/sp.shim" 2>&1 & pids+=($!)
  for p in "$RD" "$RD_SHIM"; do
    w=(); [[ $p == "$RD_SHIM" ]] && w=(shim "$p")
    "${w[@]}" timeout 300 redis-server --bind "$ADDR" --port "$p" --save '' --appendonly no \
      --protected-mode no --dir "$T" >"$T/rd.$p" 2>&1 &
    pids+=($!)
  done
  # B touches done when its clients are through (or gives up).
  for ((i = 0; i < 2400; i++)); do [[ -e $DEMO_X/done ]] && break; sleep 0.1; done
  kill "${pids[@]}" 2>/dev/null
  wait 2>/dev/null
  exit 0
fi

trap 'touch "$DEMO_X/done"' EXIT
fig() { echo "$*" >>"$DEMO_X/figures"; echo "demo: $*"; }

# sp_once PORT [shim PORT]: ping-pong 64 B for 3 s. sockperf exits 0 even
# when its connect is refused: done only when it has a summary (A's servers
# may not listen yet). Under the shim a process's RDMA warm-up (device,
# memory) runs beside its first connection, which moves to RDMA once it is
# done: --pre-warmup-wait leaves it that time.
sp_once() {
  local port=$1; shift
  "$@" timeout 60 sockperf ping-pong --tcp -i "$PEER" -p "$port" -t 3 -m 64 --pre-warmup-wait 2 \
    >"$T/sp.$port" 2>&1 && grep -q 'Summary: Latency' "$T/sp.$port"
}
# sockperf_pp PORT [shim PORT]: sp_once, retried; its median in us.
sockperf_pp() {
  rxe_retry 120 sp_once "$@" >/dev/null 2>&1
  strip "$T/sp.$1" | sed -n 's/.*percentile 50.000 = *\([0-9.]*\).*/\1/p' | head -n 1
}
# redis_b PORT [shim PORT]: redis-benchmark SET and GET, 10 clients.
redis_b() {
  local port=$1; shift
  rxe_retry 60 timeout 10 redis-cli -h "$PEER" -p "$port" ping >/dev/null 2>&1
  "$@" timeout 120 redis-benchmark -h "$PEER" -p "$port" -c 10 -n 4000 -t set,get --csv 2>/dev/null |
    awk -F'"' 'NR > 1 { printf "%s %s ", $2, $4 }'
}

t0=$SECONDS
# The device's own latency between the two VMs: raw verbs, no sockets.
rxe_retry 60 timeout 60 ib_send_lat -d rxe0 -s 64 -F -n 2000 "$PEER" >"$T/lat" 2>&1
verbs=$(awk '$1 == 64 { print $5 }' "$T/lat")
tcp_pp=$(sockperf_pp "$SP")
rdma_pp=$(sockperf_pp "$SP_SHIM" shim "$SP_SHIM")
read -r _ tcp_set _ tcp_get <<<"$(redis_b "$RD")"
read -r _ rdma_set _ rdma_get <<<"$(redis_b "$RD_SHIM" shim "$RD_SHIM")"
fig "sockperf_tcp_us=${tcp_pp:-none} sockperf_rdma_us=${rdma_pp:-none} ib_send_lat_us=${verbs:-none}"
fig "redis_tcp_set=${tcp_set:-none} redis_tcp_get=${tcp_get:-none} redis_rdma_set=${rdma_set:-none} redis_rdma_get=${rdma_get:-none}"
fig "client_secs=$((SECONDS - t0))"
