#!/bin/bash
# guest-rdma-breakdown.sh — the RDMA half of integration/bench/msg_breakdown.sh
# (issue 34: where a message's time goes): in one VM (rxe on dummy0),
# sockperf ping-pong 64 B through the shim over RDMA with the per-message
# stamps on (RDMASHIM_TEST_MSGSTAMPS=1, shim/core/msgstamps.h), at the
# defaults and with RDMASHIM_SPIN_US=0; each also with the stamps off, so
# that their cost shows; and ib_send_lat -s 64 (t_typical) beside them.
#
# BREAKDOWN_OUT: a directory on the host (not under /tmp, which is the
# guest's own), where each stamped run leaves its trace files in
# MODE.rROUND/ and every p50 goes to p50.txt as "MODE on|off|ib ROUND US".
# BREAKDOWN_T (sockperf -t, default 5 s), BREAKDOWN_ROUNDS (default 2),
# BREAKDOWN_MODES (default "default,spin0"; spin1s: RDMASHIM_SPIN_US=1000000,
# a receiver that never sleeps). Prints "breakdown:" lines;
# never fails on a number.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=guest-lib.sh
. "$here/guest-lib.sh"
addr=192.168.77.1
out=${BREAKDOWN_OUT:?BREAKDOWN_OUT: a directory on the host}
secs=${BREAKDOWN_T:-5}
rounds=${BREAKDOWN_ROUNDS:-2}
modes=${BREAKDOWN_MODES:-default,spin0}
modes=${modes//,/ }
T=/tmp/breakdown
port=7600
mkdir -p "$T" "$out"

echo "== guest: $(uname -r), $(nproc) cpu"
rxe_up dummy0 "$addr/24" || exit 1

listening() {
  local i
  for ((i = 0; i < 100; i++)); do ss -Hltn "sport = :$1" 2>/dev/null | grep -q . && return 0; sleep 0.2; done
  return 1
}
strip() { sed 's/\x1b\[[0-9;]*m//g' "$@"; }

# pp STAMPS(0|1) TRACEDIR [VAR=VAL...] -> sockperf p50 in us, or "failed".
# The server ends with SIGINT: it exits through exit(), so the shim's
# destructor writes its stamps.
pp() {
  local stamps=$1 dir=$2 sp rc=0 p50
  shift 2
  port=$((port + 1))
  mkdir -p "$dir"
  local pre=(env RDMASHIM_PORTS="$port" RDMASHIM_TRANSPORTS=rdma RDMASHIM_TEST_MSGSTAMPS="$stamps"
             RDMASHIM_TRACE=warn "$@" LD_PRELOAD="$LIB")
  "${pre[@]}" RDMASHIM_TRACE_FILE="$dir/server.%p" timeout 90 sockperf sr --tcp -i "$addr" -p "$port" > "$T/server" 2>&1 &
  sp=$!
  listening "$port" || { kill "$sp" 2>/dev/null; echo failed; return; }
  # --pre-warmup-wait: the first connection of a process runs on TCP while
  # its RDMA warm-up runs; the figure is of the switched stream.
  "${pre[@]}" RDMASHIM_TRACE_FILE="$dir/client.%p" timeout 90 sockperf ping-pong --tcp -i "$addr" -p "$port" -t "$secs" -m 64 --pre-warmup-wait 2 \
    > "$T/client" 2>&1 || rc=$?
  kill -INT "$sp" 2>/dev/null
  wait "$sp" 2>/dev/null
  p50=$(strip "$T/client" | sed -n 's/.*percentile 50.000 = *\([0-9.]*\).*/\1/p' | head -n 1)
  if [[ $rc -eq 0 && -n $p50 ]]; then echo "$p50"; else echo failed; fi
}

lat() {
  timeout 60 ib_send_lat -d rxe0 -s 64 -F -n 2000 > "$T/lat.server" 2>&1 &
  local sp=$!
  rxe_retry 30 timeout 60 ib_send_lat -d rxe0 -s 64 -F -n 2000 "$addr" > "$T/lat.client" 2>&1
  wait "$sp"
  awk '$1 == 64 {print $5}' "$T/lat.client" | head -n 1
}

note() { echo "$1 $2 $3 $4" >> "$out/p50.txt"; echo "breakdown: round $3: $1 $2 p50 $4 us"; }
for ((r = 1; r <= rounds; r++)); do
  note ib_send_lat ib "$r" "$(lat)"
  for m in $modes; do
    case $m in
      default) extra=() ;;
      spin0) extra=(RDMASHIM_SPIN_US=0) ;;
      spin1s) extra=(RDMASHIM_SPIN_US=1000000) ;;
      *) echo "breakdown: unknown mode $m"; continue ;;
    esac
    # Off, then on: drift within a round hits both alike.
    note "$m" off "$r" "$(pp 0 "$T/off" "${extra[@]}")"
    note "$m" on "$r" "$(pp 1 "$out/$m.r$r" "${extra[@]}")"
  done
done
echo "breakdown: done"
