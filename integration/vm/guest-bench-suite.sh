#!/bin/bash
# guest-bench-suite.sh — the guest side of the benchmark suite's vm part
# (integration/bench/suite.sh with BENCH_VM=1), in one VM: Soft-RoCE on
# dummy0 (192.168.77.1), server and client on that address.
#
# Transports, the same measure over each, at each size:
#   tcp         xfer (integration/bench/xfer.c) on plain TCP
#   rdma        xfer with the shim at both ends, RDMASHIM_TRANSPORTS=rdma
#               (both ends on one host still use RDMA), defaults
#   rdma_spin0  the same with RDMASHIM_SPIN_US=0 (ping-pong only)
#   verbs       perftest: ib_send_lat (t_typical as p50, its 99% as p99)
#               and ib_write_bw -D 1 (BW average): the device's limit
#   ucx         ucx_perftest tag_lat and tag_bw over UCX_TLS=rc_verbs,self;
#               its first failure is recorded and ends it
# VMB_ROUNDS rounds (3), the transports' order rotated each round; ping-pong
# first (all transports), then throughput. Every xfer client is one process
# per transport, round and measure, one connection per size: its first
# connection waits out the process's RDMA warm-up (--first-warm-ms).
#
# Prints one "rec: {JSON}" line per run (the host keeps those); never fails
# on a number. Settings (the host passes them in RXEVM_ENV, no spaces):
#   XFER (required) the xfer binary, VMB_ROUNDS, VMB_SECS (xfer seconds per
#   run, 1), VMB_SIZES (comma separated, 16,64,1024,16384,65536),
#   VMB_ITERS (ib_send_lat and tag_lat iterations, 2000), VMB_UCX_WAIT (s, 30)
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=guest-lib.sh
. "$here/guest-lib.sh"
: "${XFER:?}"
addr=192.168.77.1
ROUNDS=${VMB_ROUNDS:-3} SECS=${VMB_SECS:-1} N=${VMB_ITERS:-2000} UCX_WAIT=${VMB_UCX_WAIT:-30}
SIZES=${VMB_SIZES:-16,64,1024,16384,65536}
SIZES=${SIZES//,/ }
T=/tmp/vmb
mkdir -p "$T/trace"

# rec FIELDS...: one line for the host; FIELDS are JSON members.
rec() { local IFS=,; echo "rec: {$*}"; }
jstr() { python3 -c 'import json,sys; print(json.dumps(sys.argv[1]))' "$1"; }
err() { rec "\"part\":\"vm\"" "\"error\":$(jstr "$1")"; }

rec "\"part\":\"vm_guest\"" "\"kernel\":\"$(uname -r)\"" "\"cpus\":$(nproc)" \
  "\"rdma_core\":$(jstr "$(dpkg-query -W -f='${Version}' rdma-core 2>/dev/null)")"
rxe_up dummy0 "$addr/24" || { err "Soft-RoCE (rxe0 on dummy0) did not come up"; exit 1; }

tenv() {
  case $1 in
    tcp) echo env -u LD_PRELOAD ;;
    rdma) echo env LD_PRELOAD="$LIB" RDMASHIM_PORTS="$2" RDMASHIM_TRANSPORTS=rdma RDMASHIM_TRACE=info \
      RDMASHIM_TRACE_FILE="$T/trace/$1.%p" ;;
    rdma_spin0) echo env LD_PRELOAD="$LIB" RDMASHIM_PORTS="$2" RDMASHIM_TRANSPORTS=rdma RDMASHIM_SPIN_US=0 \
      RDMASHIM_TRACE=info RDMASHIM_TRACE_FILE="$T/trace/$1.%p" ;;
  esac
}
listening() {
  local i
  for ((i = 0; i < 150; i++)); do ss -Hltn "sport = :$1" 2>/dev/null | grep -q . && return 0; sleep 0.2; done
  return 1
}
declare -A port=()
pids=()
p=7600
for t in tcp rdma rdma_spin0; do
  port[$t]=$((p++))
  # shellcheck disable=SC2046
  $(tenv "$t" "${port[$t]}") "$XFER" server --addr "$addr" --port "${port[$t]}" --timeout 1500 >"$T/srv.$t" 2>&1 &
  pids+=($!)
done
for t in tcp rdma rdma_spin0; do listening "${port[$t]}" || err "xfer server $t does not listen"; done

# order R T...: T rotated left by R
order() { local r=$1; shift; local a=("$@") n=$#; for ((i = 0; i < n; i++)); do echo "${a[(i + r) % n]}"; done; }

conns=0
run_xfer() { # TRANSPORT OP ROUND
  local t=$1 op=$2 r=$3 line args=() s
  for s in $SIZES; do args+=(--size "$s"); done
  # shellcheck disable=SC2046
  $(tenv "$t" "${port[$t]}") timeout -k 5 300 "$XFER" client --addr "$addr" --port "${port[$t]}" --op "$op" \
    "${args[@]}" --secs "$SECS" --warm-ms 200 --first-warm-ms 4000 >"$T/x.out" 2>"$T/x.err"
  while read -r line; do
    [[ $line == "{"* ]] && rec "\"part\":\"vm_xfer\"" "\"transport\":\"$t\"" "\"round\":$r" "${line:1:${#line}-2}"
  done <"$T/x.out"
  [[ $(grep -c '^{' "$T/x.out") == $(wc -w <<<"$SIZES") ]] ||
    err "xfer $t $op round $r: $(tail -n 1 "$T/x.err")"
}

# perftest: the server side in the background, the client retried until it
# connects (the server's start is not visible to ss in time).
perftest() { # TOOL SIZE ARGS... -> the client's output in $T/pt.out
  local tool=$1 s=$2 sp; shift 2
  timeout 60 "$tool" -d rxe0 -s "$s" -F "$@" >"$T/pt.srv" 2>&1 &
  sp=$!
  rxe_retry 30 timeout 60 "$tool" -d rxe0 -s "$s" -F "$@" "$addr" >"$T/pt.out" 2>&1
  wait "$sp" 2>/dev/null
}
run_verbs() { # OP ROUND
  local op=$1 r=$2 s v
  for s in $SIZES; do
    if [[ $op == pp ]]; then
      perftest ib_send_lat "$s" -n "$N"
      read -r v <<<"$(awk -v s="$s" '$1 == s { print "\"p50_us\":" $5 ",\"p99_us\":" $8 }' "$T/pt.out")"
    else
      perftest ib_write_bw "$s" -D 1
      read -r v <<<"$(awk -v s="$s" '$1 == s { print "\"mb_per_sec\":" $4 }' "$T/pt.out")"
    fi
    if [[ -n $v ]]; then rec "\"part\":\"vm_verbs\"" "\"op\":\"$op\"" "\"round\":$r" "\"size\":$s" "$v"
    else err "$( [[ $op == pp ]] && echo ib_send_lat || echo ib_write_bw) -s $s round $r: $(grep -iE 'err|fail|unable|couldn' "$T/pt.out" | head -n 1)"
    fi
  done
}
ucx_broken=''
run_ucx() { # OP ROUND
  local op=$1 r=$2 s test=tag_lat fin sp rc
  [[ $op == bw ]] && test=tag_bw
  for s in $SIZES; do
    [[ -n $ucx_broken ]] && return
    export UCX_TLS=rc_verbs,self UCX_NET_DEVICES=rxe0:1
    timeout "$UCX_WAIT" ucx_perftest -p 7700 >"$T/ucx.srv" 2>&1 &
    sp=$!
    listening 7700
    rc=0
    timeout "$UCX_WAIT" ucx_perftest "$addr" -p 7700 -t "$test" -s "$s" -n "$N" >"$T/ucx.out" 2>&1 || rc=$?
    kill "$sp" 2>/dev/null; wait "$sp" 2>/dev/null
    unset UCX_TLS UCX_NET_DEVICES
    fin=$(awk '$1 == "Final:" { print $2, $3, $4, $6, $8 }' "$T/ucx.out")
    if [[ -n $fin ]]; then
      local it p50 avg mbs
      read -r it p50 avg mbs _ <<<"$fin"
      rec "\"part\":\"vm_ucx\"" "\"op\":\"$op\"" "\"round\":$r" "\"size\":$s" "\"iters\":$it" "\"p50_us\":$p50" \
        "\"mean_us\":$avg" "\"mib_per_sec\":$mbs"
    else
      ucx_broken=1
      local why="status $rc"
      [[ $rc == 124 ]] && why="no result within $UCX_WAIT s"
      err "ucx_perftest $test -s $s over UCX_TLS=rc_verbs,self on rxe0: $why$(grep -m1 -iE 'error|fail' "$T/ucx.out" | sed -E 's/.*UCX +ERROR +//; s/^/: /')"
    fi
  done
}

for op in pp bw; do
  ts=(tcp rdma verbs ucx)
  [[ $op == pp ]] && ts=(tcp rdma rdma_spin0 verbs ucx)
  for ((r = 0; r < ROUNDS; r++)); do
    for t in $(order "$r" "${ts[@]}"); do
      case $t in
        verbs) run_verbs "$op" "$r" ;;
        ucx) run_ucx "$op" "$r" ;;
        *) run_xfer "$t" "$op" "$r"; [[ $t == rdma ]] && conns=$((conns + $(wc -w <<<"$SIZES"))) ;;
      esac
    done
    echo "== vm bench: $op round $((r + 1)) of $ROUNDS done at ${SECONDS}s"
  done
done
kill "${pids[@]}" 2>/dev/null
wait 2>/dev/null
# Each connection of the rdma transport should have reached RDMA: its
# client's upgrade.done, against the connections made.
n=$(cat "$T"/trace/rdma.* 2>/dev/null | grep '"event":"upgrade.done"' | grep '"role":"client"' | grep -c '"transport":"rdma"')
rec "\"part\":\"vm_upgraded\"" "\"transport\":\"rdma\"" "\"upgraded\":$n" "\"connections\":$conns"
echo "== vm bench done at ${SECONDS}s"
